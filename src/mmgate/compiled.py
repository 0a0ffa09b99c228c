"""Which modules mypyc compiles, and the import rule that keeps a stale build from running.

Why compile: a scheduling decision is a few hundred thousand CPython instructions of float
arithmetic, dict reads and loops over the candidates (docs/benchmarks/decision.md), and the
gateway makes one per request. mypyc, the compiler that ships with mypy (mypy and black are
distributed compiled by it), turns these typed modules into C extensions with no change to
their source: the predicted-TTFT producer runs about 40% fewer instructions that way, the parse's
walk of a large chat body (:mod:`mmgate.request.layout`) about 25% fewer, and compiling the
per-part media steps beside it (:mod:`mmgate.request.assets`, :mod:`~mmgate.request.payload` and
the container probes) took 7-13% off a request with three inline photos
(docs/benchmarks/hotpath.md). The
endpoint picker's transport (:mod:`mmgate.http.h2`, :mod:`~mmgate.http.hpack`,
:mod:`mmgate.gateway.extproc.lean` and its hand-written messages, :mod:`~mmgate.gateway.extproc.wire`)
and its per-request steps (:mod:`~mmgate.gateway.extproc.stream`, :mod:`~mmgate.gateway.extproc.messages`)
run once per HTTP/2 frame and per ext_proc message: compiled, a replayed text request costs
less than half the instructions it costs as Python source (docs/benchmarks/extproc.md). The
source stays the truth: every module listed runs as plain Python too (``MMGATE_PURE_PYTHON=1``
at install or at run time), and the test suite passes both ways.

A module can be listed when mypyc accepts it: it defines no ``msgspec.Struct`` (mypyc builds
classes itself and drops msgspec's class keywords, so such classes live in uncompiled modules,
e.g. :mod:`mmgate.scheduling.plugins._schemas`), and nothing outside it patches its attributes.

Why the import rule: an editable install builds the extensions in place, beside the sources,
and Python looks for an extension before a source in each folder. Edit, pull or check out a
listed module afterwards and the old extension would keep running. :func:`install` (run when
:mod:`mmgate` is imported) therefore checks the build: if any listed source is newer than the
build's shared library (:func:`build_state`), or some are built and others not, or
``MMGATE_PURE_PYTHON`` is set, a finder placed
first on ``sys.meta_path`` loads every listed module from its source — all of them, since the
modules of one build call into each other directly — and a stale build is reported once with
the command that rebuilds it. This module imports nothing of mmgate: setup.py reads
:data:`MODULES` from it.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import importlib.util
import os
import sys
import warnings
from collections.abc import Sequence
from pathlib import Path
from types import ModuleType

MODULES: tuple[str, ...] = (
    "mmgate.datalayer.index.memory",
    "mmgate.gateway.extproc.lean",
    "mmgate.gateway.extproc.messages",
    "mmgate.gateway.extproc.stream",
    "mmgate.gateway.extproc.wire",
    "mmgate.http.h2",
    "mmgate.http.hpack",
    "mmgate.request.assets",
    "mmgate.request.layout",
    "mmgate.request.payload",
    "mmgate.request.probe.ebml",
    "mmgate.request.probe.image",
    "mmgate.request.probe.isobmff",
    "mmgate.request.probe.reader",
    "mmgate.request.probe.sniff",
    "mmgate.scheduling._weights",
    "mmgate.scheduling.plugins._block_chain",
    "mmgate.scheduling.plugins._min_max",
    "mmgate.scheduling.plugins.adaptive_encode_decider",
    "mmgate.scheduling.plugins.approx_prefix_cache_producer",
    "mmgate.scheduling.plugins.max_score_picker",
    "mmgate.scheduling.plugins.mm_embeddings_cache_producer",
    "mmgate.scheduling.plugins.predicted_ttft_producer",
    "mmgate.scheduling.plugins.predicted_ttft_scorer",
    "mmgate.scheduling.ttft._frontend",
    "mmgate.tokens.sequence",
)
GROUP = "mmgate_compiled"  # mypyc's shared library of them all: GROUP + "__mypyc" beside the package
PURE_ENV = "MMGATE_PURE_PYTHON"
REBUILD = "make build (or: pip install -e . again)"

_ROOT = Path(__file__).resolve().parent.parent  # the folder that holds the mmgate package
_state = ["pure Python (not checked yet)"]


def source_path(module: str, root: Path = _ROOT) -> Path:
    """The ``.py`` file of a listed module under ``root`` (the folder holding ``mmgate``)."""
    return root.joinpath(*module.split(".")).with_suffix(".py")


def extension_suffix() -> str:
    """The file ending this interpreter gives a compiled module (e.g. ``.cpython-311-...so``)."""
    return importlib.machinery.EXTENSION_SUFFIXES[0]


def extension_path(module: str, root: Path = _ROOT) -> Path | None:
    """The built extension of ``module`` beside its source, if there is one."""
    source = source_path(module, root)
    for suffix in importlib.machinery.EXTENSION_SUFFIXES:
        candidate = source.with_suffix(suffix)
        if candidate.exists():
            return candidate
    return None


def build_state(modules: Sequence[str] = MODULES, root: Path = _ROOT) -> tuple[bool, str]:
    """Whether the listed modules may load as built extensions, and the build's state in words.

    Each module's own extension is a small shim that a rebuild leaves untouched when it did not
    change; the compiled code is in the group's shared library, so the sources are compared with
    that library's time."""
    if os.environ.get(PURE_ENV):
        return False, f"pure Python ({PURE_ENV} is set)"
    built = {module: extension_path(module, root) for module in modules}
    present = [module for module, ext in built.items() if ext is not None]
    if not present:
        return False, "pure Python (not compiled)"
    if len(present) < len(modules):
        missing = ", ".join(m for m in modules if built[m] is None)
        return False, f"pure Python (stale build: no extension for {missing})"
    library = root / f"{GROUP}__mypyc{extension_suffix()}"
    if not library.exists():
        return False, f"pure Python (stale build: no {library.name})"
    built_at = library.stat().st_mtime
    stale = [module for module in modules if source_path(module, root).stat().st_mtime > built_at]
    if stale:
        return False, f"pure Python (stale build: {', '.join(stale)} changed since it was compiled)"
    return True, f"compiled with mypyc ({len(modules)} modules)"


class _FromSource(importlib.abc.MetaPathFinder):
    """Finds the listed modules' ``.py`` files ahead of any extension built beside them."""

    def __init__(self, sources: dict[str, Path]) -> None:
        self._sources = sources

    def find_spec(
        self,
        fullname: str,
        path: Sequence[str] | None,
        target: ModuleType | None = None,
    ) -> importlib.machinery.ModuleSpec | None:
        source = self._sources.get(fullname)
        if source is None:
            return None
        return importlib.util.spec_from_file_location(fullname, source)


def install(modules: Sequence[str] = MODULES, root: Path = _ROOT) -> None:
    """Decide once per process whether the listed modules load compiled (see the module doc).

    Call it before any of them is imported; :mod:`mmgate` does, for :data:`MODULES`, once."""
    compiled, state = build_state(modules, root)
    _state[0] = state
    if compiled:
        return
    sys.meta_path.insert(0, _FromSource({module: source_path(module, root) for module in modules}))
    if "stale build" in state:
        warnings.warn(f"mmgate: running {state}; rebuild with {REBUILD}", RuntimeWarning, stacklevel=2)


def status() -> str:
    """How the listed modules run in this process, for ``mmgate --version`` and benchmark records."""
    return _state[0]


def needs_build() -> bool:
    """Whether ``make build`` has work to do: extensions missing or stale, and none refused."""
    return not os.environ.get(PURE_ENV) and not build_state()[0]
