"""The mypyc build of the scheduler's hot modules: what loads, when a build is stale, same picks.

``make test`` builds the extensions first and sets ``MMGATE_EXPECT_COMPILED``; the tests that need
a build to mean anything check that it is the one loaded, and say so when it is not there (a plain
``pytest`` on an unbuilt tree runs everything as pure Python).
"""

from __future__ import annotations

import ast
import importlib.metadata
import os
import re
import subprocess
import sys
import textwrap
import tomllib
from pathlib import Path

import pytest

from mmgate import compiled
from support.processes import subprocess_env

ROOT = Path(__file__).resolve().parent.parent
EXPECT = bool(os.environ.get("MMGATE_EXPECT_COMPILED")) and not os.environ.get(compiled.PURE_ENV)


def _tree(tmp_path: Path, names: list[str], built: list[str], newer_source: list[str]) -> Path:
    """A package ``pkg`` with one module per name; ``built`` ones get a (fake) extension file."""
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    library = tmp_path / f"{compiled.GROUP}__mypyc{compiled.extension_suffix()}"
    if built:
        library.write_bytes(b"not an ELF file either")
        os.utime(library, (1_500_000, 1_500_000))  # between a stale source and a fresh one
    (pkg / "__init__.py").write_text("")
    for name in names:
        source = pkg / f"{name}.py"
        source.write_text(f"WHERE = 'source of {name}'\n")
        if name in built:
            ext = pkg / f"{name}{compiled.extension_suffix()}"
            ext.write_bytes(b"not an ELF file")  # importing it would fail: proves it was not loaded
            older, newer = (ext, source) if name in newer_source else (source, ext)
            os.utime(older, (1_000_000, 1_000_000))
            os.utime(newer, (2_000_000, 2_000_000))
    return tmp_path


def test_no_extensions_is_pure_python(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(compiled.PURE_ENV, raising=False)
    root = _tree(tmp_path, ["a", "b"], built=[], newer_source=[])
    assert compiled.build_state(["pkg.a", "pkg.b"], root) == (False, "pure Python (not compiled)")


def test_a_fresh_complete_build_loads(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(compiled.PURE_ENV, raising=False)
    root = _tree(tmp_path, ["a", "b"], built=["a", "b"], newer_source=[])
    ok, state = compiled.build_state(["pkg.a", "pkg.b"], root)
    assert ok and state == "compiled with mypyc (2 modules)"


def test_a_source_edited_after_the_build_makes_it_stale(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(compiled.PURE_ENV, raising=False)
    root = _tree(tmp_path, ["a", "b"], built=["a", "b"], newer_source=["b"])
    ok, state = compiled.build_state(["pkg.a", "pkg.b"], root)
    assert not ok and "stale build" in state and "pkg.b" in state and "pkg.a" not in state


def test_a_partial_build_is_stale(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(compiled.PURE_ENV, raising=False)
    root = _tree(tmp_path, ["a", "b"], built=["a"], newer_source=[])
    ok, state = compiled.build_state(["pkg.a", "pkg.b"], root)
    assert not ok and state == "pure Python (stale build: no extension for pkg.b)"


def test_pure_python_when_asked(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(compiled.PURE_ENV, "1")
    root = _tree(tmp_path, ["a"], built=["a"], newer_source=[])
    assert compiled.build_state(["pkg.a"], root) == (False, "pure Python (MMGATE_PURE_PYTHON is set)")


def test_a_stale_extension_is_never_imported_and_the_rebuild_is_named(tmp_path: Path) -> None:
    """The real import machinery, in a fresh interpreter: with the finder installed the stale
    (here: unloadable) extension beside each source is passed over for the source."""
    root = _tree(tmp_path, ["a", "b"], built=["a", "b"], newer_source=["a"])
    script = textwrap.dedent(
        f"""
        import warnings
        from pathlib import Path
        from mmgate import compiled
        root = Path({str(root)!r})
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            compiled.install(["pkg.a", "pkg.b"], root)
        import pkg.a, pkg.b
        print(pkg.a.WHERE, "|", pkg.b.WHERE, "|", compiled.status())
        print("|".join(str(w.message) for w in caught))
        """
    )
    env = {k: v for k, v in subprocess_env().items() if k != compiled.PURE_ENV}
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(root), env.get("PYTHONPATH", "")) if p)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env)
    assert done.returncode == 0, done.stderr
    out = done.stdout.splitlines()
    assert (
        out[0] == "source of a | source of b | pure Python (stale build: pkg.a changed since it was compiled)"
    )
    assert "rebuild with make build" in out[1]


def test_the_suite_runs_the_compiled_build() -> None:
    if not EXPECT:
        pytest.skip("not a `make test` run: the tree may be unbuilt (make build compiles it)")
    assert compiled.status() == f"compiled with mypyc ({len(compiled.MODULES)} modules)"
    for name in compiled.MODULES:
        module = sys.modules.get(name) or __import__(name, fromlist=["_"])
        assert module.__file__ is not None and not module.__file__.endswith(".py"), name


def _picks(pure: bool) -> str:
    env = {k: v for k, v in subprocess_env().items() if k != compiled.PURE_ENV}
    if pure:
        env[compiled.PURE_ENV] = "1"
    done = subprocess.run(
        [sys.executable, str(ROOT / "bench" / "scripts" / "decision_picks.py"), "--decisions", "300"],
        capture_output=True,
        text=True,
        env=env,
        check=True,
    )
    return done.stdout


def test_compiled_and_pure_python_pick_the_same_endpoints() -> None:
    """Seeded decisions of every example config, compiled and as plain Python: the same digest
    of every pick (bench/scripts/decision_picks.py prints one per config and one for all)."""
    if not EXPECT:
        pytest.skip("not a `make test` run: without a build both runs would be pure Python")
    compiled_run, pure_run = _picks(pure=False), _picks(pure=True)
    assert "all" in compiled_run and compiled_run == pure_run


def test_shims_without_the_shared_library_are_stale(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(compiled.PURE_ENV, raising=False)
    root = _tree(tmp_path, ["a"], built=["a"], newer_source=[])
    (root / f"{compiled.GROUP}__mypyc{compiled.extension_suffix()}").unlink()
    ok, state = compiled.build_state(["pkg.a"], root)
    assert not ok and state.startswith("pure Python (stale build: no mmgate_compiled__mypyc")


def test_the_isolated_build_has_every_library_the_compiled_modules_import() -> None:
    """pip builds in an environment holding only ``build-system.requires``: a typed library a
    compiled module imports but that list lacks is typed ``Any`` there, and mypyc's strict check
    refuses the build (a reused development environment has the library and hides the mistake).
    A library without types (no ``py.typed``, no stubs: PEP 561), such as the protobuf runtime
    and the generated Envoy messages, is ``Any`` in both environments, so it need not be listed."""
    requires = tomllib.loads((ROOT / "pyproject.toml").read_text())["build-system"]["requires"]
    declared = {re.split(r"[<>=!~; \[]", req, maxsplit=1)[0].lower().replace("_", "-") for req in requires}
    distributions = importlib.metadata.packages_distributions()
    needed: dict[str, str] = {}
    for name in compiled.MODULES:
        source = ROOT / "src" / Path(*name.split(".")).with_suffix(".py")
        for node in ast.walk(ast.parse(source.read_text())):
            if isinstance(node, ast.Import):
                imported = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                imported = [node.module]
            else:
                continue
            for module in imported:
                top = module.split(".")[0]
                if top in sys.stdlib_module_names or top in ("mmgate", "__future__"):
                    continue
                for dist in _providers(module, distributions.get(top, [top])):
                    if _typed(dist):
                        needed[dist.lower().replace("_", "-")] = name
    missing = {dist: module for dist, module in needed.items() if dist not in declared}
    assert needed, "the compiled modules import no third-party library: the scan found nothing"
    assert not missing, f"add to [build-system] requires in pyproject.toml: {missing}"


def _typed(distribution: str) -> bool:
    """Whether mypy reads types from ``distribution`` (PEP 561: it ships ``py.typed`` or stubs,
    or is a stubs-only ``types-`` package); one not installed counts as typed, to be listed."""
    try:
        files = importlib.metadata.distribution(distribution).files or []
    except importlib.metadata.PackageNotFoundError:
        return True
    return distribution.lower().startswith("types-") or any(
        f.name == "py.typed" or f.suffix == ".pyi" for f in files
    )


def _providers(module: str, candidates: list[str]) -> list[str]:
    """Of the distributions installing ``module``'s top-level package, those that hold the module
    itself (several share a namespace such as ``google``); all of them when none is found."""
    prefix = module.replace(".", "/")
    holding = []
    for dist in candidates:
        try:
            files = importlib.metadata.distribution(dist).files or []
        except importlib.metadata.PackageNotFoundError:
            continue
        if any(str(f).startswith((prefix + "/", prefix + ".py", prefix + ".pyi")) for f in files):
            holding.append(dist)
    return holding or candidates
