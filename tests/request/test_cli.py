"""``mmgate inspect`` as a user runs it (real subprocesses)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

from mmgate.request import Api
from mmgate.request.cli import guess_api
from support.bodies import chat, data_uri, image, image_part
from support.processes import REPO, mmgate_command, subprocess_env

EXAMPLES = REPO / "examples" / "requests"


def run(*args: str, stdin: bytes | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        mmgate_command(*args),
        input=stdin.decode() if stdin is not None else None,
        capture_output=True,
        text=True,
        env=subprocess_env(COLUMNS="160"),
        timeout=60,
    )


def test_inspect_json_lists_assets_with_the_documented_keys(tmp_path: Path) -> None:
    body = chat(
        "look", image_part(data_uri(image("JPEG", 1280, 720), "image/jpeg")), image_part("https://x/a.png")
    )
    path = tmp_path / "body.json"
    path.write_bytes(body)
    out = run("inspect", str(path), "--json")
    assert out.returncode == 0, out.stderr
    doc = json.loads(out.stdout)
    inline, url = doc["assets"]
    for key in ("modality", "source", "identity", "width", "height", "duration_s", "probed"):
        assert key in inline and key in url
    assert (inline["modality"], inline["source"], inline["width"], inline["height"], inline["probed"]) == (
        "image",
        "inline",
        1280,
        720,
        True,
    )
    assert (url["source"], url["width"], url["duration_s"], url["probed"]) == ("url", None, None, False)
    assert doc["unprobed_assets"] == 1


def test_inspect_table_with_headers_for_a_video_url() -> None:
    out = run(
        "inspect",
        str(EXAMPLES / "video-audio-chat.json"),
        "--header",
        "x-llm-d-video-resolution:1920x1080",
        "--header",
        "x-llm-d-video-duration-seconds:42",
    )
    assert out.returncode == 0, out.stderr
    assert "1920x1080, 42 s" in out.stdout  # the URL video, filled from headers
    assert "640x360, 6 s, 24 fps" in out.stdout  # the inline MP4, probed
    assert "unprobed 0" in out.stdout


def test_inspect_reads_stdin_and_reports_refusals() -> None:
    out = run("inspect", "-", "--json", stdin=b'{"messages": [{"role": "user", "content": 5}]}')
    assert out.returncode == 1
    err = json.loads(out.stdout)
    assert err["status"] == 400 and err["error"]["param"] == "messages[0].content"
    table = run("inspect", "-", stdin=b"{")
    assert table.returncode == 1 and "refused with 400" in table.stderr


def test_api_is_guessed_from_the_body() -> None:
    assert guess_api((EXAMPLES / "anthropic-messages.json").read_bytes()) is Api.MESSAGES
    assert guess_api((EXAMPLES / "completions.json").read_bytes()) is Api.COMPLETIONS
    assert guess_api((EXAMPLES / "text-chat.json").read_bytes()) is Api.CHAT
    responses = (
        b'{"model": "m", "input": [{"role": "user", "content": [{"type": "input_text", "text": "hi"}]}]}'
    )
    assert guess_api(responses) is Api.RESPONSES
    assert guess_api(b'{"model": "m", "input": ["a", "b"], "encoding_format": "float"}') is Api.EMBEDDINGS
    assert guess_api(b'{"model": "m", "query": "q", "documents": ["a"]}') is Api.RERANK
    assert guess_api(b'{"model": "m", "text_1": "a", "text_2": "b"}') is Api.SCORE


def test_every_bundled_example_parses() -> None:
    # `mmgate demo` now starts the gateway on a simulated fleet (tests/gateway/test_gateway_demo.py);
    # the bundled examples it used to table are checked one by one with `mmgate inspect`.
    outputs = []
    for path in sorted(EXAMPLES.glob("*.json")):
        out = run("inspect", str(path))
        assert out.returncode == 0, (path.name, out.stderr)
        outputs.append(out.stdout)
    assert "1280x720" in "".join(outputs)


def test_inspect_refuses_a_body_nested_too_deep_for_guessing_without_a_traceback() -> None:
    # Deep enough to exhaust the standard json module's recursion while guessing the API.
    body = b'{"model": "m", "messages": [{"role": "user", "content": ' + b"[" * 5000 + b"]" * 5000 + b"}]}"
    assert guess_api(body) is Api.CHAT
    out = run("inspect", "-", stdin=body)
    assert out.returncode == 1, out.stderr
    assert "Traceback" not in out.stderr
    assert "400" in out.stdout + out.stderr
