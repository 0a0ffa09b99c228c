"""The benchmarks stay a distribution of their own (bench/, mmgate-bench): the product's package
holds none of their code, imports none of it, and its wheel brings none of their libraries. Only
``mmgate bench`` reaches them, by module name at run time (mmgate/cli.py)."""

from __future__ import annotations

import ast
import re
import tomllib
from pathlib import Path

from support.processes import REPO

PRODUCT = REPO / "src" / "mmgate"


def _name(requirement: str) -> str:
    """A requirement's distribution name, normalised as pip compares them (PEP 503)."""
    return re.sub(r"[-_.]+", "-", re.split(r"[<>=!~;\[ @]", requirement, maxsplit=1)[0]).lower()


def _imports(source: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(source.read_text(), filename=str(source))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module)
    return names


def test_the_product_package_holds_no_benchmark_code() -> None:
    assert not (PRODUCT / "bench").exists()
    assert (REPO / "bench" / "src" / "mmgate_bench" / "cli.py").is_file()


def _reaching_the_benchmarks(folder: Path) -> dict[str, list[str]]:
    found = {
        str(path.relative_to(REPO)): sorted(n for n in _imports(path) if n.split(".")[0] == "mmgate_bench")
        for path in folder.rglob("*.py")
    }
    return {path: names for path, names in found.items() if names}


def test_no_product_module_imports_the_benchmarks() -> None:
    assert _reaching_the_benchmarks(PRODUCT) == {}


def test_the_products_tests_run_without_the_benchmarks() -> None:
    """Tests of the benchmarks live in bench/tests; those of the product need no mmgate-bench."""
    assert _reaching_the_benchmarks(REPO / "tests") == {}


def test_the_product_installs_no_benchmark_dependency() -> None:
    product = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    bench = tomllib.loads((REPO / "bench" / "pyproject.toml").read_text())["project"]
    bench_only = {_name(r) for r in bench["dependencies"]} - {"mmgate"}
    assert {"matplotlib", "blake3", "imagesize"} <= bench_only
    assert bench_only.isdisjoint(_name(r) for r in product["dependencies"])
    assert "bench" not in product.get("optional-dependencies", {})
    assert _name(bench["name"]) == "mmgate-bench" and "mmgate" in {_name(r) for r in bench["dependencies"]}
