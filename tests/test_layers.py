"""The import rules docs/architecture.md states, held against the code.

Every package of ``src/mmgate`` sits on one layer; a module may import from its own package and from
packages on lower layers, never from a package on its own layer or above. Lazy imports inside
functions count (they are dependencies all the same); imports under ``if TYPE_CHECKING:`` do not
(they exist for the type checker only). Modules may not import each other in a loop, inside a
package or across packages, and the product never imports the benchmark distribution.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src"
BENCH_SRC = SRC.parent / "bench" / "src"

# Bottom first. Keep in step with the table in docs/architecture.md ("What may import what").
LAYERS: tuple[frozenset[str], ...] = (
    frozenset({"compiled"}),  # the build check runs before anything of mmgate is imported
    frozenset({"mmgate", "errors", "process", "logs", "arguments", "tables"}),
    frozenset({"config", "http"}),
    frozenset({"tls", "vllm", "request"}),
    frozenset({"tokens", "datalayer"}),
    frozenset({"modelserver", "scheduling"}),
    frozenset({"control"}),
    frozenset({"disagg"}),
    frozenset({"gateway", "sim", "refengine"}),
    frozenset({"demo"}),
    frozenset({"cli"}),
    frozenset({"__main__"}),
)


def _module_name(src: Path, path: Path) -> str:
    parts = path.relative_to(src).with_suffix("").parts
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _imports(src: Path, path: Path) -> Iterator[str]:
    """Every module ``path`` imports at run time (absolute names; relative ones resolved).
    ``from package import module`` counts as importing the module alone: a package's
    ``__init__`` that hands its modules' names on is no loop with them."""
    module = _module_name(src, path)
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]

    def visit(node: ast.AST) -> Iterator[str]:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.If) and _is_type_checking(child.test):
                yield from (name for stmt in child.orelse for name in visit(stmt))
                continue
            if isinstance(child, ast.Import):
                yield from (alias.name for alias in child.names)
            elif isinstance(child, ast.ImportFrom):
                if child.level:
                    base = package.split(".")[: len(package.split(".")) - (child.level - 1)]
                    target = ".".join(base + ([child.module] if child.module else []))
                else:
                    target = child.module or ""
                for alias in child.names:
                    sub = f"{target}.{alias.name}"
                    is_module = src.joinpath(*sub.split(".")).with_suffix(".py").is_file() or (
                        src.joinpath(*sub.split("."), "__init__.py").is_file()
                    )
                    yield sub if is_module else target
            yield from visit(child)

    yield from visit(ast.parse(path.read_text(encoding="utf-8")))


def graph_of(src: Path, package: str = "mmgate") -> dict[str, set[str]]:
    """Module -> the modules of ``package`` it imports."""
    modules = {_module_name(src, p): p for p in src.rglob("*.py") if p.relative_to(src).parts[0] == package}
    return {
        name: {m for m in _imports(src, path) if m in modules and m != name} for name, path in modules.items()
    }


def _package(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "mmgate"


def layer_of(package: str) -> int:
    for i, layer in enumerate(LAYERS):
        if package in layer:
            return i
    raise AssertionError(f"package mmgate.{package} is on no layer: add it to LAYERS and the docs' table")


def upward(graph: dict[str, set[str]]) -> list[str]:
    """Imports of a package on the same layer or above (within a package anything goes)."""
    wrong = []
    for module, targets in sorted(graph.items()):
        mine = _package(module)
        for target in sorted(targets):
            theirs = _package(target)
            if theirs != mine and target != "mmgate" and layer_of(theirs) >= layer_of(mine):
                wrong.append(f"{module} -> {target}")
    return wrong


def first_loop(graph: dict[str, set[str]]) -> list[str]:
    """A loop of imports, as the modules it passes through (empty: none)."""
    state: dict[str, int] = {}  # 1 = on the current path, 2 = done
    path: list[str] = []

    def walk(module: str) -> list[str]:
        state[module] = 1
        path.append(module)
        for target in sorted(graph[module]):
            if state.get(target) == 1:
                return [*path[path.index(target) :], target]
            if target not in state and (loop := walk(target)):
                return loop
        path.pop()
        state[module] = 2
        return []

    for module in sorted(graph):
        if module not in state and (loop := walk(module)):
            return loop
    return []


GRAPH = graph_of(SRC)


def test_every_package_has_a_layer() -> None:
    for module in GRAPH:
        layer_of(_package(module))


def test_imports_point_down_only() -> None:
    wrong = upward(GRAPH)
    assert wrong == [], "imports that point sideways or up:\n" + "\n".join(wrong)


def test_no_module_imports_itself_through_others() -> None:
    loop = first_loop(GRAPH)
    assert loop == [], "modules import each other in a loop: " + " -> ".join(loop)


def test_no_benchmark_module_imports_itself_through_others() -> None:
    loop = first_loop(graph_of(BENCH_SRC, "mmgate_bench"))
    assert loop == [], "benchmark modules import each other in a loop: " + " -> ".join(loop)


def test_the_product_never_imports_the_benchmarks() -> None:
    offenders = [
        str(p.relative_to(SRC))
        for p in (SRC / "mmgate").rglob("*.py")
        if any(m == "mmgate_bench" or m.startswith("mmgate_bench.") for m in _imports(SRC, p))
    ]
    assert offenders == []


def test_the_checker_sees_an_upward_import_a_loop_and_skips_type_checking(tmp_path: Path) -> None:
    def write(module: str, text: str) -> None:
        path = tmp_path.joinpath(*module.split(".")).with_suffix(".py")
        path.parent.mkdir(parents=True, exist_ok=True)
        for parent in path.parents:
            if parent == tmp_path:
                break
            (parent / "__init__.py").touch()
        path.write_text(text)

    write("mmgate.config.schema", "def f():\n    from mmgate.scheduling import build\n")
    write("mmgate.scheduling.build", "from mmgate.scheduling import profile\n")
    write("mmgate.scheduling.profile", "from . import build\n")
    write(
        "mmgate.request.view",
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import mmgate.gateway.app\n",
    )
    write("mmgate.gateway.app", "")
    graph = graph_of(tmp_path)
    assert upward(graph) == ["mmgate.config.schema -> mmgate.scheduling.build"]
    assert first_loop(graph) == [
        "mmgate.scheduling.build",
        "mmgate.scheduling.profile",
        "mmgate.scheduling.build",
    ]
