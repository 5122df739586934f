"""Dependencies inside `nvllm/` point one way: no import cycle, and no layer imports one it serves. Read from
the source with `ast`, so that every import counts — at the top of a module, inside a function, and under
`TYPE_CHECKING` (an annotation that names a module above is as much a dependency as a call into it)."""

import ast
import functools
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "nvllm"


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imported_names(tree: ast.AST) -> set[str]:
    """Every name an import statement of the module takes: `import a.b` gives `a.b`; `from a import b` gives
    `a.b` too (a submodule or a name of `a`, told apart by `imports`)."""
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.update(f"{node.module}.{alias.name}" for alias in node.names)
    return names


@functools.cache
def imports() -> dict[str, set[str]]:
    """Each module of nvllm and what it imports: the module of nvllm a name is in (the longest module path
    that is a prefix of it), and outside nvllm the name itself."""
    sources = {module_name(path): path for path in PACKAGE.rglob("*.py")}

    def owner(name: str) -> str:
        module = name
        while module and module not in sources:
            module = module.rpartition(".")[0]
        return module or name

    return {
        module: {owner(name) for name in imported_names(ast.parse(path.read_text()))} - {module}
        for module, path in sources.items()
    }


def within(module: str, package: str) -> bool:
    return module == package or module.startswith(package + ".")


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found = []
    for root in graph:
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root] & graph.keys())))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is None:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    component = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        component.append(member)
                        if member == node:
                            break
                    if len(component) > 1:
                        found.append(sorted(component))
            elif child not in index:
                index[child] = low[child] = len(index)
                stack.append(child)
                on_stack.add(child)
                work.append((child, iter(sorted(graph[child] & graph.keys()))))
            elif child in on_stack:
                low[node] = min(low[node], index[child])
    return found


def violations(importer: str, imported: str) -> list[str]:
    """`module -> module` for every import from a module in `importer` of one in `imported`."""
    return sorted(
        f"{module} -> {name}"
        for module, names in imports().items()
        if within(module, importer)
        for name in names
        if within(name, imported)
    )


def test_cycles_finds_a_cycle_and_only_it():
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}, "e": set()}
    assert cycles(graph) == [["a", "b", "c"]]
    assert cycles({"a": {"b"}, "b": set()}) == []


def test_no_import_cycle_inside_nvllm():
    assert cycles(imports()) == []


@pytest.mark.parametrize(
    "importer, imported",
    [
        ("nvllm.ops", "nvllm.layers"),  # kernels and their references know nothing of the model's layers
        ("nvllm.runner", "nvllm.scheduler"),  # the runner takes plain step inputs, built on the engine's side
        ("nvllm.attention", "nvllm.runner"),  # backends make metadata from any step inputs' fields
        ("nvllm.config", "nvllm.attention"),  # backends are resolved by the engine, not the config schema
        ("nvllm.engine", "experiments"),  # the library runs without the experiment harness
        ("nvllm.engine", "ray"),  # Ray is nvllm.batch's, imported there only where it is used
        ("nvllm.scheduler", "nvllm.profiling"),  # the scheduler emits records, which the profiler consumes
    ],
)
def test_dependency_points_one_way(importer, imported):
    assert violations(importer, imported) == []
