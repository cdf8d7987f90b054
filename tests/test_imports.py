"""hfpolicy's import graph has no cycle, counting every import of a file (inside functions and under TYPE_CHECKING too,
and the modules a package's PEP 562 table loads), and an hfpolicy import below a file's top level says why on its line:
`# lazy: optional heavy dependency (zarr, gym-pusht)`, `# lazy: registry load of a policy type`, or `# lazy: torch,
not imported by --help` (the command line reads its flags without torch). A lazy import is never a way around a
cycle: the graph counts it."""

import ast
import functools
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "hfpolicy"


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


@functools.cache
def parse_package() -> dict[str, tuple[Path, str, ast.Module]]:
    """module -> (its file, its text, its syntax tree), for every hfpolicy module (parsed once for all tests)."""
    parsed = {}
    for path in PACKAGE.rglob("*.py"):
        text = path.read_text()
        parsed[module_name(path)] = (path, text, ast.parse(text, str(path)))
    return parsed


@functools.cache
def import_nodes(tree: ast.Module) -> list[ast.Import | ast.ImportFrom]:
    """Every import statement of a file, wherever it is (in functions, classes, `if` blocks)."""
    return [node for node in ast.walk(tree) if isinstance(node, ast.Import | ast.ImportFrom)]


@functools.cache
def package_exports() -> dict[str, dict[str, str]]:
    """package -> its lazy export table (`lazy_exports`)."""
    parsed = parse_package()
    return {
        name: lazy_exports(name, tree, parsed) for name, (path, _, tree) in parsed.items() if path.stem == "__init__"
    }


def lazy_exports(package: str, tree: ast.Module, modules) -> dict[str, str]:
    """name -> module of a package's PEP 562 table (`_EXPORTS = {"train": "loop"}`, or full module names), which its
    `__getattr__` imports on first use: `from package import train` loads that module."""
    table = {}
    for node in tree.body:
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Dict):
            for key, value in zip(node.value.keys, node.value.values, strict=True):
                if isinstance(key, ast.Constant) and isinstance(value, ast.Constant) and isinstance(value.value, str):
                    for module in (value.value, f"{package}.{value.value}"):
                        if module in modules:
                            table[key.value] = module
    return table


def imported_modules(name: str, path: Path, node: ast.Import | ast.ImportFrom, modules, exports) -> set[str]:
    """The hfpolicy modules one import statement loads: `from a.b import c` is a.b.c when that is a module, else a.b
    (and the module a.b's lazy table names for c); relative imports are resolved against the file's package (a
    package's __init__ is its package)."""
    if isinstance(node, ast.Import):
        return {alias.name for alias in node.names if alias.name in modules}
    base = node.module or ""
    if node.level:
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        for _ in range(node.level - 1):
            package = package.rpartition(".")[0]
        base = f"{package}.{base}" if base else package
    if base not in modules:
        return set()
    found = set()
    for alias in node.names:
        found.add(f"{base}.{alias.name}" if f"{base}.{alias.name}" in modules else base)
        found |= {exports[base][alias.name]} if alias.name in exports.get(base, {}) else set()
    return found


def import_graph(parsed, exports) -> dict[str, set[str]]:
    """module -> the hfpolicy modules it imports anywhere in its file. A child importing its own package counts: the
    package's __init__ runs first, and it may import the child."""
    graph = {}
    for name, (path, _, tree) in parsed.items():
        edges = set(exports.get(name, {}).values())
        for node in import_nodes(tree):
            edges |= imported_modules(name, path, node, parsed, exports)
        graph[name] = edges - {name}
    return graph


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One cycle of the graph as [a, b, ..., a], or None (iterative depth-first search)."""
    state = {}  # 1: on the current path, 2: done
    for start in sorted(graph):
        if start in state:
            continue
        path, stack = [start], [iter(sorted(graph[start]))]
        state[start] = 1
        while stack:
            child = next(stack[-1], None)
            if child is None:
                state[path.pop()] = 2
                stack.pop()
            elif state.get(child) == 1:
                return path[path.index(child) :] + [child]
            elif child not in state:
                state[child] = 1
                path.append(child)
                stack.append(iter(sorted(graph[child])))
    return None


def top_level_nodes(tree: ast.Module) -> set[int]:
    """ids of the import nodes run when the module is imported: the module body, and `if`/`try` blocks at its top
    (an `if TYPE_CHECKING:` block is not run, so its imports are not top level)."""
    found, todo = set(), list(tree.body)
    while todo:
        node = todo.pop()
        if isinstance(node, ast.Import | ast.ImportFrom):
            found.add(id(node))
        elif isinstance(node, ast.If) and not (isinstance(node.test, ast.Name) and node.test.id == "TYPE_CHECKING"):
            todo += node.body + node.orelse
        elif isinstance(node, ast.Try):
            todo += node.body + node.orelse + node.finalbody + [n for h in node.handlers for n in h.body]
    return found


def test_find_cycle_reports_the_modules_of_a_cycle():
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b", "c"}, "b": {"c"}, "c": set()}) is None


def test_a_child_importing_its_package_counts():
    sources = {"p/__init__.py": "from hfpolicy.p.child import X", "p/child.py": "from . import Y"}
    parsed = {module_name(PACKAGE / f): (PACKAGE / f, text, ast.parse(text)) for f, text in sources.items()}
    assert find_cycle(import_graph(parsed, {})) == ["hfpolicy.p", "hfpolicy.p.child", "hfpolicy.p"]


def test_a_lazy_export_counts_as_an_import_of_its_module():
    sources = {"q/__init__.py": '_EXPORTS = {"run": "runner"}', "q/runner.py": "from hfpolicy.q import run"}
    parsed = {module_name(PACKAGE / f): (PACKAGE / f, text, ast.parse(text)) for f, text in sources.items()}
    exports = {"hfpolicy.q": lazy_exports("hfpolicy.q", parsed["hfpolicy.q"][2], parsed)}
    assert exports == {"hfpolicy.q": {"run": "hfpolicy.q.runner"}}
    assert find_cycle(import_graph(parsed, exports)) == ["hfpolicy.q", "hfpolicy.q.runner", "hfpolicy.q"]


def test_no_import_cycle():
    cycle = find_cycle(import_graph(parse_package(), package_exports()))
    assert cycle is None, f"import cycle: {' -> '.join(cycle)}; move the shared code to a module below both"


def unexplained_lazy_imports(parsed, exports) -> list[str]:
    """file:line of each hfpolicy import below its file's top level without a `# lazy: <reason>` comment on its line."""
    unexplained = []
    for name, (path, text, tree) in parsed.items():
        lines, top = text.splitlines(), top_level_nodes(tree)
        for node in import_nodes(tree):
            if id(node) in top or not imported_modules(name, path, node, parsed, exports):
                continue
            if "# lazy:" not in lines[node.lineno - 1]:
                unexplained.append(f"{path.relative_to(ROOT)}:{node.lineno}")
    return unexplained


def test_a_lazy_import_needs_its_reason():
    text = (
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from hfpolicy.b import X\n"
        "def f():\n    from hfpolicy.b import Y  # lazy: optional heavy dependency (zarr)\n    import json\n"
    )
    sources = {"a.py": text, "b.py": ""}
    parsed = {module_name(PACKAGE / f): (PACKAGE / f, t, ast.parse(t)) for f, t in sources.items()}
    assert unexplained_lazy_imports(parsed, {}) == ["hfpolicy/a.py:3"]


def test_hfpolicy_imports_below_top_level_say_why():
    """Each hfpolicy import inside a function (or under TYPE_CHECKING) names its reason with `# lazy:` on its line."""
    unexplained = unexplained_lazy_imports(parse_package(), package_exports())
    assert not unexplained, f"hfpolicy imports inside a function without a `# lazy: <reason>` comment: {unexplained}"
