"""Re-capture docs/quickstart.md: run every command it shows against a fresh demo, paste the output.

``make quickstart-docs`` (or ``python bench/scripts/capture_quickstart.py``) starts ``mmgate demo`` on
port 8080 as ``make run`` does, then walks the page: in each plain fenced block every ``$ `` line
is a command, run in one bash session (so ``&`` jobs, variables and files carry over from one
command to the next), in a scratch folder with a link to ``examples/`` (the files the page uses
ship in ``examples/quickstart/``, so the commands run as written from the repository root); the
lines after a command, up to the next one, are replaced by what it printed (stdout and stderr, as
a terminal shows them), with ``(exit status N)`` when it failed. Fenced blocks with a language
(```` ```python ````) are shown, not run. ``--check`` runs every step the same way and changes
nothing: it fails when a step's exit status is not the page's (bench/tests runs it). A few hidden
comments in the page steer the capture:

- ``<!-- capture: demo-banner -->``: the next block's ``$ make run`` is not run; its output is the
  banner of the demo this script started;
- ``<!-- capture: endpoint -->``: in the next block, the first ``127.0.0.1:PORT`` of a command is
  the pod that served the previous request (its ``x-mmgate-endpoint``);
- ``<!-- capture: stop-demo -->``: the next block is what the demo prints at Ctrl-C.

The demo's folder (``/tmp/mmgate-demo-...``) in a command is the current demo's. A command that
ends with ``&`` runs in the background (its output kept in the scratch folder) and the next
command waits until the ports it names (``--port``, ``--base-port``, ``--admin-port``, an Envoy
file's listeners) accept connections and a gateway's ``/ready`` answers 200. Every background job
and the demo are stopped at the end. The header line's date is today's.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
PAGE = REPO / "docs" / "quickstart.md"
SCRATCH = Path("/tmp/mmgate-quickstart")
DEMO_PORT = 8080
DEMO_FOLDER = re.compile(r"/tmp/mmgate-demo-[A-Za-z0-9_]+")
ADDRESS = re.compile(r"127\.0\.0\.1:(\d+)")
PORT_FLAGS = re.compile(r"--(?:port|base-port|admin-port|envoy-port)[ =](\d+)")
DIRECTIVE = re.compile(r"<!-- capture: ([a-z-]+) -->")
END = "__capture_end__"


def fail(message: str) -> None:
    print(f"capture_quickstart: {message}", file=sys.stderr)
    sys.exit(1)


# -- the files the page uses --------------------------------------------------------------------


def write_files(folder: Path) -> None:
    """The page's commands run from the repository root and read what ships in
    ``examples/quickstart/``: the scratch folder links ``examples`` there, so what the commands
    write (logs, an endpoints file, results) stays out of the checkout."""
    (folder / "examples").symlink_to(REPO / "examples")


# -- the bash session ---------------------------------------------------------------------------


@dataclass
class Shell:
    """One bash process the commands are fed to, in order; ``run`` returns what one printed."""

    cwd: Path
    env: dict[str, str]
    background: list[int] = field(default_factory=list)
    jobs: int = 0

    def __post_init__(self) -> None:
        self.proc = subprocess.Popen(
            ["bash", "--norc", "--noprofile"],
            cwd=self.cwd,
            env=self.env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,  # the shell's own job notices; commands' stderr is merged below
            text=True,
            bufsize=1,
        )
        self._send("set -m")  # each background job in its own process group, stopped as one

    def _send(self, line: str) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(line + "\n")
        self.proc.stdin.flush()

    def run(self, command: str, timeout_s: float = 300.0) -> tuple[str, int]:
        if command.rstrip().endswith("&"):
            self.jobs += 1
            log = self.cwd / f".job-{self.jobs}.log"
            self._send(f"{{ {command.rstrip()[:-1]} ; }} >>{log} 2>&1 &")
            self._send(f"echo {END} 0 $!")
            out, _, pid = self._collect(timeout_s)
            self.background.append(int(pid))
            wait_for(command, self.cwd)
            return out, 0
        self._send(f"{{ {command} ; }} 2>&1; echo {END} $? 0")
        out, status, _ = self._collect(timeout_s)
        return out, status

    def _collect(self, timeout_s: float) -> tuple[str, int, str]:
        assert self.proc.stdout is not None
        lines: list[str] = []
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            line = self.proc.stdout.readline()
            if not line:
                fail("the bash session ended early")
            marker = line.find(END)
            if marker >= 0:
                if marker:
                    lines.append(line[:marker])
                _, status, pid = line[marker:].split()
                return "".join(lines), int(status), pid
            lines.append(line)
        fail(f"a command ran longer than {timeout_s:g} s")
        raise AssertionError

    def close(self) -> None:
        for pid in reversed(self.background):
            try:
                os.killpg(pid, signal.SIGINT)
            except ProcessLookupError:
                continue
        deadline = time.monotonic() + 10
        for pid in self.background:
            while time.monotonic() < deadline:
                try:
                    os.killpg(pid, 0)
                except ProcessLookupError:
                    break
                time.sleep(0.1)
            else:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(pid, signal.SIGKILL)
        self._send("exit")
        self.proc.wait(10)


def ports_of(command: str, cwd: Path) -> list[int]:
    ports = [int(p) for p in PORT_FLAGS.findall(command)]
    match = re.search(r"\benvoy -c (\S+)", command)
    if match:
        text = (cwd / match.group(1)).read_text()
        ports += [int(p) for p in re.findall(r"port_value: (\d+)", text)][:1]
    return ports


def wait_for(command: str, cwd: Path, timeout_s: float = 60.0) -> None:
    """Until the ports a background command names accept connections (and a gateway is ready)."""
    deadline = time.monotonic() + timeout_s
    for port in ports_of(command, cwd):
        while True:
            try:
                with socket.create_connection(("127.0.0.1", port), timeout=1):
                    break
            except OSError:
                if time.monotonic() > deadline:
                    fail(f"nothing listens on {port} after: {command}")
                time.sleep(0.1)
    if re.search(r"\bmmgate (serve|extproc)\b", command):
        target = re.search(r"--admin-port[ =](\d+)", command) or re.search(r"--port[ =](\d+)", command)
        if target is not None:
            ready(int(target.group(1)), deadline)


def ready(port: int, deadline: float) -> None:
    while True:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/ready", timeout=2) as r:
                if r.status == 200:
                    return
        except (urllib.error.URLError, OSError):
            pass
        if time.monotonic() > deadline:
            fail(f"the gateway on {port} never got ready")
        time.sleep(0.1)


# -- the demo -----------------------------------------------------------------------------------


@dataclass
class Demo:
    proc: subprocess.Popen[str]
    banner: str
    folder: Path
    model: str

    @classmethod
    def start(cls, env: dict[str, str]) -> Demo:
        with socket.socket() as probe:
            if probe.connect_ex(("127.0.0.1", DEMO_PORT)) == 0:
                fail(f"port {DEMO_PORT} is taken; the page shows the demo there")
        proc = subprocess.Popen(
            [sys.executable, "-m", "mmgate", "demo", "--port", str(DEMO_PORT)],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            start_new_session=True,
        )
        assert proc.stdout is not None
        lines: list[str] = []
        while not lines or lines[-1] != "Press Ctrl-C to stop.":
            line = proc.stdout.readline()
            if not line:
                fail("the demo exited:\n" + "".join(lines))
            lines.append(line.rstrip("\n"))
        banner = "\n".join(lines)
        found = DEMO_FOLDER.search(banner)
        model = re.search(r"model ([^)]+)\)", banner)
        if found is None or model is None:
            fail("the demo's banner changed:\n" + banner)
            raise AssertionError
        ready(DEMO_PORT, time.monotonic() + 60)
        return cls(proc, banner, Path(found.group(0)), model.group(1))

    def stop(self) -> str:
        os.killpg(self.proc.pid, signal.SIGINT)
        out, _ = self.proc.communicate(timeout=30)
        return "^C" + out.rstrip()


# -- the page -----------------------------------------------------------------------------------


def capture(page: str, shell: Shell, demo: Demo, changed: list[str] | None = None) -> str:
    """The page with every command's output replaced by what it printed now; a command whose exit
    status differs from the one the page shows is added to ``changed``."""
    out: list[str] = []
    lines = page.split("\n")
    pending: set[str] = set()
    endpoint: str | None = None
    i = 0
    while i < len(lines):
        line = lines[i]
        directive = DIRECTIVE.fullmatch(line.strip())
        if directive:
            pending.add(directive.group(1))
        if line != "```":
            out.append(line)
            i += 1
            if line.startswith("```"):  # a block with a language: shown, not run
                while i < len(lines) and lines[i] != "```":
                    out.append(lines[i])
                    i += 1
                if i < len(lines):
                    out.append(lines[i])
                    i += 1
            continue
        end = lines.index("```", i + 1)
        block = lines[i + 1 : end]
        out.append("```")
        if "stop-demo" in pending:
            out.append(demo.stop())
        elif any(b.startswith("$ ") for b in block):
            for command, old in commands(block):
                if "demo-banner" in pending and command == "make run":
                    out += ["$ make run", demo.banner]
                    continue
                command = DEMO_FOLDER.sub(str(demo.folder), command)
                if "endpoint" in pending and endpoint is not None:
                    command = first_address(command, endpoint)
                    pending.discard("endpoint")
                print(f"$ {command}", file=sys.stderr)
                printed, status = shell.run(command)
                served = re.findall(r"(?im)^x-mmgate-endpoint: (\S+)", printed)
                if served:
                    endpoint = served[-1]
                out.append(f"$ {command}")
                out += printed.rstrip().split("\n") if printed.strip() else []
                if status:
                    out.append(f"(exit status {status})")
                if changed is not None:
                    changed += differences(command, old, printed, status)
        else:
            out += block
        out.append("```")
        pending.clear()
        i = end + 1
    return "\n".join(out)


def commands(block: list[str]) -> list[tuple[str, list[str]]]:
    """The block's commands, each with the output lines the page had under it."""
    found: list[tuple[str, list[str]]] = []
    for line in block:
        if line.startswith("$ "):
            found.append((line[2:], []))
        elif found:
            found[-1][1].append(line)
    return found


def differences(command: str, old: list[str], printed: str, status: int) -> list[str]:
    """How a step's outcome differs from the one the page shows: its exit status, and the HTTP
    status lines it printed (``curl -s`` exits 0 on a 404 too)."""
    found = []
    if status != shown_status(old):
        found.append(f"{command}: exit status {status}, the page shows {shown_status(old)}")
    was = [line for line in old if line.startswith("HTTP/1.1 ")]
    now = [line for line in printed.splitlines() if line.startswith("HTTP/1.1 ")]
    if was != now:
        found.append(f"{command}: answered {now}, the page shows {was}")
    return found


def shown_status(lines: list[str]) -> int:
    """The exit status the page shows under a command (0 when it shows none)."""
    found = [int(m.group(1)) for line in lines if (m := re.fullmatch(r"\(exit status (\d+)\)", line))]
    return found[-1] if found else 0


def first_address(command: str, endpoint: str) -> str:
    """``command`` with its first loopback address other than the demo's replaced by ``endpoint``."""
    for match in ADDRESS.finditer(command):
        if int(match.group(1)) != DEMO_PORT:
            return command[: match.start()] + endpoint + command[match.end() :]
    return command


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument(
        "--page", type=Path, default=PAGE, help="the page to re-capture (default: %(default)s)"
    )
    parser.add_argument(
        "--check",
        action="store_true",
        help="run every command but leave the page as it is; exit 1 if a command's exit status is "
        "not the one the page shows (a fresh checkout passes every step as written)",
    )
    args = parser.parse_args()
    bin_dir = Path(sys.executable).parent
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(REPO / "src"), str(REPO / "bench" / "src")])
    env["COLUMNS"] = "200"
    try:
        from mmgate_bench.overhead.envoy_system import envoy_binary

        envoy_dir = str(Path(envoy_binary()).parent)
    except Exception:  # no Envoy: the extproc section will say so in its output
        envoy_dir = ""
    env["PATH"] = os.pathsep.join(p for p in (str(bin_dir), envoy_dir, env.get("PATH", "")) if p)
    scratch = Path(tempfile.mkdtemp(prefix="mmgate-quickstart-")) if args.check else SCRATCH
    shutil.rmtree(scratch, ignore_errors=True)
    scratch.mkdir(parents=True)
    demo = Demo.start(env)
    shell = Shell(scratch, env)
    try:
        write_files(scratch)
        page = args.page.read_text()
        changed: list[str] = []
        new = capture(page, shell, demo, changed)
    finally:
        shell.close()
        if demo.proc.poll() is None:
            demo.stop()
    if args.check:
        shutil.rmtree(scratch, ignore_errors=True)
        for line in changed:
            print(f"capture_quickstart: {line}", file=sys.stderr)
        print(f"capture_quickstart: {len(changed)} step(s) of {args.page} differ", file=sys.stderr)
        return 1 if changed else 0
    stamp = dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M UTC")
    new = re.sub(r"on one `make run` \([^,]*,", f"on one `make run` ({stamp},", new, count=1)
    args.page.write_text(new)
    print(f"capture_quickstart: wrote {args.page}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
