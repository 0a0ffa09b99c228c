"""``mmgate engine`` mistakes: one line naming what is wrong, exit 2, never a traceback."""

from __future__ import annotations

import pytest

from mmgate.cli import main


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        ([], "one of the arguments --tiny --model is required"),
        (["--tiny", "qwen2-vl", "--model", "x"], "not allowed with argument"),
        (["--tiny", "qwen2-vl", "--block-size", "0"], "--block-size must be at least 1, not 0"),
        (["--tiny", "qwen2-vl", "--encoder-cache-tokens", "-1"], "--encoder-cache-tokens must be at least 0"),
        (["--tiny", "qwen2-vl", "--port", "99999"], "port must be in 0..65535"),
        (["--tiny", "qwen2-vl", "--kv-events-config", "{nope"], "--kv-events-config:"),
        (["--tiny", "llava"], "--tiny 'llava': choose one of qwen2-vl"),
        (["--model", "/nonexistent/model"], "has no config.json"),
    ],
)
def test_mistakes_are_one_line_and_exit_2(
    args: list[str], needle: str, capsys: pytest.CaptureFixture[str]
) -> None:
    try:
        code = main(["engine", *args])
    except SystemExit as exc:  # argparse's own refusals
        code = int(exc.code or 0)
    err = capsys.readouterr().err
    assert code == 2
    assert needle in err and "Traceback" not in err


def test_help_explains_the_caches_and_the_flags(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["engine", "--help"])
    out = capsys.readouterr().out
    assert exc.value.code == 0
    flags = ["--tiny", "--model", "--encoder-cache-tokens", "--mm-processor-cache-gb", "--block-size"]
    flags += ["--enable-prefix-caching", "--kv-events-config"]
    assert all(flag in out for flag in flags)
    assert "encoder cache" in out and "prefix cache" in out and "processor cache" in out
