"""The single ``mmgate`` command.

Each subcommand lives in the module that owns its concern and exposes two functions:
``add_arguments(parser)`` and ``run(args) -> int``. Modules are imported only when their
subcommand runs, so ``mmgate --help`` stays fast and one broken extra cannot break the rest.

What every subcommand shares is handled here once: a reader that goes away early
(``mmgate ... | head``) ends the command quietly, as Python's documentation recommends for
SIGPIPE (point stdout at devnull so the interpreter's final flush cannot fail again); a file the
user named that cannot be read is a one-line message and exit 2; Ctrl-C is exit 130 without a
traceback. Subcommands still report their own mistakes (unknown names, bad values) with exit 2.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from collections.abc import Sequence

from mmgate import __version__, compiled
from mmgate.errors import did_you_mean

# subcommand -> (module, one-line help). Keep sorted by how a user meets them.
COMMANDS: dict[str, tuple[str, str]] = {
    "demo": ("mmgate.demo", "start the gateway on an embedded simulated fleet and print a request to try"),
    "serve": ("mmgate.gateway.cli", "run the gateway in front of a fleet of OpenAI-compatible servers"),
    "extproc": (
        "mmgate.gateway.extproc.cli",
        "run as the endpoint picker of an Envoy-based inference gateway (ext_proc)",
    ),
    "sidecar": (
        "mmgate.disagg.cli",
        "run the routing sidecar beside a decode server (encode and prefill legs, llm-d's contract)",
    ),
    "keys": ("mmgate.control.keys_cli", "make entries for the gateway's API-keys file (mmgate.auth)"),
    "check": (
        "mmgate.gateway.check_cli",
        "check config files: every mistake with file and line, or the scheduler",
    ),
    "sim": ("mmgate.sim.cli", "run simulated vLLM-compatible model servers"),
    "engine": (
        "mmgate.refengine.server_cli",
        "serve a real vision-language model on CPU with the simulator's API and three caches",
    ),
    "inspect": ("mmgate.request.cli", "show what the gateway reads from a request body"),
    "tokens": ("mmgate.tokens.cli", "count visual/audio tokens for images, videos or sizes per model family"),
    "cost": (
        "mmgate.tokens.cost_cli",
        "cost of questions on a cached prefix, with and without prompt caching",
    ),
    "bench": ("mmgate_bench.cli", "run a benchmark: routing ladders, overhead, soak, micro-benchmarks"),
}

# Where a missing module comes from, by import name: the optional extras (pyproject.toml; `make run`
# installs none of them) and the benchmarks, which are their own distribution (bench/ in the
# repository, not in mmgate's wheel): a missing one names what to install.
BENCH_INSTALL = "pip install -e ./bench (the benchmarks' distribution, mmgate-bench), or make bench"
INSTALLS = {
    "mmgate_bench": BENCH_INSTALL,
    "matplotlib": BENCH_INSTALL,
    "numpy": BENCH_INSTALL,
    "blake3": BENCH_INSTALL,
    "imagesize": BENCH_INSTALL,
    "grpc": "pip install 'mmgate[extproc]'",
    "grpc_health": "pip install 'mmgate[extproc]'",
    "envoy": "pip install 'mmgate[extproc]'",
    "google": "pip install 'mmgate[extproc]'",
    "kubernetes_asyncio": "pip install 'mmgate[kubernetes]'",
    "torch": "pip install 'mmgate[engine]'",
    "transformers": "pip install 'mmgate[engine]'",
}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="mmgate",
        description="mmgate: a multimodal-aware inference gateway for vLLM and SGLang fleets.",
    )
    parser.add_argument(
        "--version",
        action="version",
        version=f"mmgate {__version__} (scheduler: {compiled.status()})",
        help="show the version and whether the scheduler's hot modules run compiled (mypyc), then exit",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name, (_module, help_text) in COMMANDS.items():
        sub.add_parser(name, help=help_text, add_help=False)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    name = args[0] if args else "mmgate"
    try:
        code = _dispatch(args)
        sys.stdout.flush()  # inside the try: a closed pipe must fail here, not at interpreter exit
    except BrokenPipeError:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 0
    except KeyboardInterrupt:
        return 130
    except ModuleNotFoundError as exc:
        if not exc.name or exc.name.split(".")[0] == "mmgate" or exc.name.startswith("mmgate_bench."):
            raise  # a module of mmgate's own (or of an installed mmgate-bench) is missing: a bug
        _missing(name, exc.name)
        return 2
    except OSError as exc:
        if exc.filename is None:  # not a file the user named: a real failure, keep the traceback
            raise
        print(f"mmgate {name}: {exc.filename}: {exc.strerror or exc}", file=sys.stderr)
        return 2
    return code


def _dispatch(args: list[str]) -> int:
    parser = build_parser()
    if not args or args[0] in ("-h", "--help", "--version"):
        parser.parse_args(args[:1])  # --version exits after printing
        parser.print_help()
        return 0
    name = args[0]
    if name not in COMMANDS:
        hint = did_you_mean(name, COMMANDS)
        parser.error(f"unknown command {name!r}{hint}; choose one of: {', '.join(COMMANDS)}")
    module_name, help_text = COMMANDS[name]
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        if exc.name and module_name.startswith(exc.name):  # the command's own package is absent
            _missing(name, exc.name)
            return 2
        raise
    sub = argparse.ArgumentParser(prog=f"mmgate {name}", description=help_text)
    module.add_arguments(sub)
    ns = sub.parse_args(args[1:])
    result: int = module.run(ns)
    return result


def _missing(command: str, module: str) -> None:
    """One line for a subcommand whose module, or a library it needs, is not installed."""
    install = INSTALLS.get(module.split(".")[0])
    if install is None:
        print(f"mmgate {command}: not available in this build ({module} missing)", file=sys.stderr)
    else:
        print(f"mmgate {command}: needs {module}, which is not installed here: {install}", file=sys.stderr)


if __name__ == "__main__":
    raise SystemExit(main())
