import subprocess

from conftest import mmgate_command, subprocess_env


def test_help_lists_every_command() -> None:
    out = subprocess.run(mmgate_command("--help"), capture_output=True, text=True, env=subprocess_env())
    assert out.returncode == 0
    for name in ("serve", "sim", "inspect", "tokens", "cost", "bench"):
        assert name in out.stdout


def test_unknown_command_is_a_clear_error() -> None:
    out = subprocess.run(mmgate_command("frobnicate"), capture_output=True, text=True, env=subprocess_env())
    assert out.returncode == 2
    assert "unknown command" in out.stderr
