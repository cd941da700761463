"""plugins/module_utils is a set of packages by domain (docs/development.md, "Where each kind of change
belongs"): every module in one, the Spark-side one on the standard library alone, no cycle between them."""

import sys

from module_utils_graph import MODULE_UTILS, imports, modules, path_of

# The modules copied onto each Spark (roles' _ds4_host_modules, _ds4_gate_modules) and run there by the
# host scripts, outside Ansible and outside any package.
SPARK = "_spark"


def package_graph() -> dict[str, set[str]]:
    """{package: the other packages its modules import}."""
    graph: dict[str, set[str]] = {}
    for name in modules():
        package = name.split(".")[0]
        graph.setdefault(package, set())
        graph[package] |= {used.split(".")[0] for used in imports(path_of(name))[0]} - {package}
    return graph


def cycle(graph: dict[str, set[str]]) -> list[str]:
    """One cycle of `graph` as the packages along it, first repeated at the end; [] when there is none."""
    done: set[str] = set()

    def walk(node: str, path: list[str]) -> list[str]:
        if node in path:
            return [*path[path.index(node) :], node]
        if node in done:
            return []
        for following in sorted(graph.get(node, ())):
            found = walk(following, [*path, node])
            if found:
                return found
        done.add(node)
        return []

    for start in sorted(graph):
        found = walk(start, [])
        if found:
            return found
    return []


def test_every_module_lives_in_a_private_package_under_its_own_name():
    assert modules()
    for name in modules():
        package, _, module = name.rpartition(".")
        assert package.startswith("_") and "." not in package, f"{name}: not in one _<domain> package"
        assert not module.startswith("ds4_"), f"{name}: the package says what the ds4_ prefix said"
    for package in {name.split(".")[0] for name in modules()}:
        # Empty, as ansible-test's sanity asks of a module_utils __init__.py.
        assert (MODULE_UTILS / package / "__init__.py").read_text() == ""


def test_the_spark_package_imports_only_the_standard_library():
    # On a Spark these files lie side by side in /usr/local/lib/ds4, outside any package and without
    # Ansible: neither ansible_collections.* nor a relative import resolves there, and a bare sibling
    # import would not resolve in the collection. So the standard library only.
    spark = [name for name in modules() if name.startswith(SPARK + ".")]
    assert len(spark) >= 8
    for name in spark:
        ours, others = imports(path_of(name))
        assert ours == set(), f"{name} imports {sorted(ours)}: a Spark has no collection"
        outside = sorted(others - set(sys.stdlib_module_names) - {"__future__"})
        assert outside == [], f"{name} imports {outside}, which a Spark's python3 does not have"


def test_the_import_graph_between_packages_has_no_cycle():
    graph = package_graph()
    assert graph[SPARK] == set() and graph["_fleet"], graph
    assert cycle(graph) == [], f"packages import each other in a cycle: {cycle(graph)}"


def test_a_cycle_is_found():
    assert cycle({"_a": {"_b"}, "_b": {"_c"}, "_c": {"_a"}, "_d": set()}) == ["_a", "_b", "_c", "_a"]
    assert cycle({"_a": {"_b"}, "_b": set()}) == []
