"""The imports of plugins/module_utils, read from the source (never by importing it): which of the
collection's modules a file imports ("<package>.<name>", such as "_weights.hub"), and which other
top-level modules."""

import ast
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
MODULE_UTILS = REPO / "plugins" / "module_utils"
PREFIX = "ansible_collections.ds4.fleet.plugins.module_utils"


def path_of(name: str) -> Path:
    """The file of a module named "<package>.<name>"."""
    return MODULE_UTILS.joinpath(*name.split(".")).with_suffix(".py")


def modules() -> list[str]:
    """Every module of module_utils, as "<package>.<name>" (a package's __init__ left out)."""
    return sorted(
        ".".join(path.relative_to(MODULE_UTILS).with_suffix("").parts)
        for path in MODULE_UTILS.rglob("*.py")
        if path.name != "__init__.py"
    )


def imports(path: Path) -> tuple[set[str], set[str]]:
    """(the collection's module_utils modules, other top-level modules) that `path` imports, anywhere in it
    (inside a function or a try too). A relative import counts as ours, resolved from the file's folder."""
    ours, others = set(), set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                folder = path.parent.relative_to(MODULE_UTILS).parts
                base = folder[: len(folder) - node.level + 1]
                module = ".".join((*base, *(node.module.split(".") if node.module else ())))
            elif node.module and (node.module == PREFIX or node.module.startswith(PREFIX + ".")):
                module = node.module[len(PREFIX) + 1 :]
            else:
                others.add(node.module.split(".")[0])
                continue
            for alias in node.names:
                # `from <package> import <module>`, or `from <package>.<module> import <name>`.
                named = f"{module}.{alias.name}" if module else alias.name
                ours.add(named if path_of(named).is_file() else module)
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.startswith(PREFIX + "."):
                    ours.add(alias.name[len(PREFIX) + 1 :])
                else:
                    others.add(alias.name.split(".")[0])
    return ours, others
