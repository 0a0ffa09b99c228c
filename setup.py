"""The one build step pyproject.toml cannot declare: compiling mmgate's per-decision modules.

setuptools runs this beside pyproject.toml (which holds everything else). The modules listed in
``src/mmgate/compiled.py`` are compiled to C extensions with mypyc (mypy's compiler, a build
requirement in pyproject.toml), because each scheduling decision runs them once per request and
per candidate; ``compiled.py`` says which modules can be listed and why. Set
``MMGATE_PURE_PYTHON=1`` to build without them (no C compiler, or to step through them in a
debugger): every listed module is also plain, working Python.
"""

from __future__ import annotations

import os
import runpy

from setuptools import setup


def extensions() -> list[object]:
    """The mypyc extensions to build, or none when pure Python is asked for."""
    if os.environ.get("MMGATE_PURE_PYTHON"):
        return []
    from mypyc.build import mypycify

    listed = runpy.run_path(os.path.join("src", "mmgate", "compiled.py"))
    paths = [os.path.join("src", *name.split(".")) + ".py" for name in listed["MODULES"]]
    # The type check that mypyc compiles from covers the listed modules; in the isolated build
    # environment the rest of the package's dependencies are absent, so modules merely imported
    # are followed for their types without reporting their errors (``make typecheck`` does).
    flags = ["--follow-imports=silent", "--ignore-missing-imports"]
    # One shared library for all of them: the modules call each other natively.
    return list(mypycify([*flags, *paths], opt_level="3", group_name=listed["GROUP"]))


setup(ext_modules=extensions())
