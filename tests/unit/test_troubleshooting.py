"""docs/troubleshooting.md is complete: every refusal and failure message the roles, playbooks and plugins can
print is in it, so that an operator who reads one finds its cause and what to do.

A message is found where the code makes it: a task that fails or asserts (by its name, which the operator sees
as `TASK [role : name]`), and in the plugins each message given to an exception, to `fail_json`, to the
preflight's `refuse` or to a list of errors. A message is looked up by its words up to its first value
(`not enough space in {dir} to fetch ...` by "not enough space in"), or, where it opens with a value, by its
longest stretch of words.
"""

import ast
import re
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
DOC = REPO / "docs" / "troubleshooting.md"
# A stretch of words shorter than this ("exited", "{path}: {error}") names no message of its own.
SHORTEST = 12
FAILING_MODULES = {"ansible.builtin.fail", "ansible.builtin.assert", "fail", "assert"}
HOLE = "\0"


def plain(text: str) -> str:
    """TEXT as the doc is compared with: no backticks, whitespace collapsed."""
    return " ".join(text.replace("`", "").split())


def lookup_key(text: str) -> str | None:
    """The words a message is looked up by (HOLE marks each value put into it); None when it has too few."""
    chunks = [plain(chunk).strip(" '\":;,.()") for chunk in text.split(HOLE)]
    if len(chunks[0]) >= SHORTEST:
        return chunks[0]
    longest = max(chunks, key=len)
    return longest if len(longest) >= SHORTEST else None


def literal(node: ast.AST) -> str | None:
    """A message's text with HOLE for each value: a string, an f-string, or strings joined with +."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.JoinedStr):
        return "".join(part.value if isinstance(part, ast.Constant) else HOLE for part in node.values)
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        left, right = literal(node.left), literal(node.right)
        if left is None and right is None:
            return None
        return (left if left is not None else HOLE) + (right if right is not None else HOLE)
    return None


def is_errors(node: ast.AST) -> bool:
    """Whether NODE is `<something>.errors`, a list of error messages."""
    return isinstance(node, ast.Attribute) and node.attr == "errors"


def code_messages(tree: ast.AST):
    """Each message made in one Python file."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Raise) and isinstance(node.exc, ast.Call) and node.exc.args:
            # OSError(errno, text, path) and the like carry their text after the number.
            texts = [literal(arg) for arg in node.exc.args]
            yield next((text for text in texts if text is not None), None)
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            name, target = node.func.attr, node.func.value
            if name == "fail_json":
                yield next((literal(kw.value) for kw in node.keywords if kw.arg == "msg"), None)
            elif node.args and (name == "refuse" or (name == "append" and is_errors(target))):
                yield literal(node.args[0])


def failing_tasks(node):
    """The name of each task that fails or asserts, in a parsed task file or playbook."""
    if isinstance(node, list):
        for item in node:
            yield from failing_tasks(item)
    elif isinstance(node, dict):
        if FAILING_MODULES & node.keys() and node.get("name"):
            yield node["name"]
        for value in node.values():
            if isinstance(value, (list, dict)):
                yield from failing_tasks(value)


def messages():
    """(where, the words it is looked up by) for every message of the collection."""
    found = []
    for path in sorted((REPO / "plugins").rglob("*.py")):
        for text in code_messages(ast.parse(path.read_text())):
            key = lookup_key(text) if text is not None else None
            if key:
                found.append((str(path.relative_to(REPO)), key))
    playbooks = [*sorted((REPO / "roles").glob("*/tasks/*.yml")), *sorted((REPO / "playbooks").glob("*.yml"))]
    for path in playbooks:
        for name in failing_tasks(yaml.safe_load(path.read_text())):
            found.append((str(path.relative_to(REPO)), plain(name)))
    return found


def test_the_collection_has_messages_to_look_up():
    found = messages()
    # The scan itself: a change that made it find nothing would make the test below pass on any doc.
    assert len(found) > 150
    assert ("plugins/module_utils/_weights/hub.py", "not enough space in") in found
    assert ("roles/ds4_weights/tasks/cleanup.yml", plain(
        "Refuse to remove the other generation while the new one is incomplete"
    )) in found  # fmt: skip


@pytest.mark.parametrize(
    ("source", "key"),
    [
        ('raise HubError(f"not enough space in {d} to fetch {n}: it needs {b}")', "not enough space in"),
        ('raise OSError(errno.ENOENT, "no such directory here", shown)', "no such directory here"),
        ('module.fail_json(msg=f"{name} {path} does not exist on this host")', "does not exist on this host"),
        ('verdict.refuse(f"CPU architecture is {arch}; wanted one", "x")', "CPU architecture is"),
        ('self.errors.append("the " + what + " is missing from the catalog")', "is missing from the catalog"),
        ('raise StatusError(f"{a}: {b}")', None),
    ],
)
def test_a_message_is_looked_up_by_its_words(source, key):
    keys = [lookup_key(text) for text in code_messages(ast.parse(source)) if text is not None]
    assert keys == [key]


def test_every_message_is_in_the_troubleshooting_page():
    doc = plain(DOC.read_text())
    missing = [f"{where}: {key}" for where, key in messages() if key not in doc]
    assert not missing, "docs/troubleshooting.md lacks these messages:\n" + "\n".join(missing)


def test_the_page_names_no_message_twice_under_different_causes():
    # Each row of the page's tables is one message (or several with one cause): a message listed in two
    # rows would give an operator two answers.
    rows = [line for line in DOC.read_text().splitlines() if line.startswith("| `")]
    firsts = [re.match(r"\| `([^`]+)`", row)[1] for row in rows]
    assert len(firsts) == len(set(firsts))
