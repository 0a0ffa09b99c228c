"""Reading the output tokens an answer reports, from the bytes a transport relays (untrusted)."""

from __future__ import annotations

import orjson

from mmgate.gateway.usage import TAIL, UsageMeter, usage_of
from mmgate.request.view import Api, RequestView

USAGE = {"prompt_tokens": 900, "completion_tokens": 17, "prompt_tokens_details": {"cached_tokens": 64}}


def chunked(data: bytes, size: int) -> list[bytes]:
    return [data[i : i + size] for i in range(0, len(data), size)]


def test_a_json_answer_even_one_longer_than_the_tail_kept() -> None:
    text = "x" * (3 * TAIL) + ' and \\"usage\\": {\\"completion_tokens\\": 999}'  # in generated text
    answer = orjson.dumps({"choices": [{"message": {"content": text}}], "usage": USAGE})
    meter = UsageMeter.of(RequestView(Api.CHAT, "m", [], stream=False))
    for piece in chunked(answer, 10_000):
        meter.feed(piece)
    usage = meter.usage()
    assert usage is not None
    assert (usage.prompt_tokens, usage.completion_tokens, usage.cached_tokens) == (900, 17, 64)
    # The text's escaped "usage" alone is not an object.
    assert usage_of(orjson.dumps({"content": 'say "usage": {"completion_tokens": 5}'})) is None


def sse(*events: object) -> bytes:
    return b"".join(b"data: " + orjson.dumps(e) + b"\n\n" for e in events) + b"data: [DONE]\n\n"


def test_a_stream_reports_its_last_usage_or_its_content_events_are_counted() -> None:
    role = {"choices": [{"delta": {"role": "assistant", "content": ""}}], "usage": None}
    tokens = [{"choices": [{"delta": {"content": f"t{i}"}}], "usage": None} for i in range(5)]
    finish = {"choices": [{"delta": {}, "finish_reason": "stop"}], "usage": None}
    with_usage = sse(role, *tokens, finish, {"choices": [], "usage": USAGE})
    view = RequestView(Api.CHAT, "m", [], stream=True)
    for size in (1, 7, 4096):  # events cut anywhere across chunks
        meter = UsageMeter.of(view)
        for piece in chunked(with_usage, size):
            meter.feed(piece)
        assert (u := meter.usage()) is not None and u.completion_tokens == 17
        meter = UsageMeter.of(view)
        for piece in chunked(sse(role, *tokens, finish), size):
            meter.feed(piece)
        assert (u := meter.usage()) is not None and u.completion_tokens == 5, size
    # Completions streams have no role event; continuous usage stats: the last is the total.
    meter = UsageMeter.of(RequestView(Api.COMPLETIONS, "m", [], stream=True))
    meter.feed(sse(*[{"choices": [{"text": "a"}], "usage": {"completion_tokens": i}} for i in (1, 2, 3)]))
    assert (u := meter.usage()) is not None and u.completion_tokens == 3


def test_anthropic_and_responses_name_it_output_tokens() -> None:
    message_delta = b'event: message_delta\ndata: {"type":"message_delta","usage":{"output_tokens":12}}\n\n'
    assert (u := usage_of(message_delta)) is not None and u.completion_tokens == 12
    body = orjson.dumps({"output": [], "usage": {"input_tokens": 30, "output_tokens": 8}})
    assert (u := usage_of(body)) is not None and (u.prompt_tokens, u.completion_tokens) == (30, 8)


def test_what_a_pod_sends_wrong_reads_as_not_reported() -> None:
    for bad in (
        b'{"usage": null}',
        b'{"usage": {"completion_tokens": "12"}}',
        b'{"usage": {"completion_tokens": -1}}',
        b'{"usage": {"completion_tokens": true}}',
        b'{"usage": {"completion_tokens": 1e9}}',
        b'{"usage": {"completion_tokens": 99999999999999999999}}',
        b'{"usage": {"completion_tokens": 3',  # cut off
        b'{"usage": [1, 2]}',
        b'{"usage": {' + b"{" * 10_000,  # unbalanced, long
        b"",
    ):
        assert usage_of(bad) is None, bad
    # A JSON answer without usage leaves the estimate; a non-numeric prompt count is dropped.
    meter = UsageMeter.of(RequestView(Api.CHAT, "m", [], stream=False))
    meter.feed(b'{"choices": []}')
    assert meter.usage() is None
    found = usage_of(b'{"usage": {"prompt_tokens": "x", "completion_tokens": 4}}')
    assert found is not None and (found.prompt_tokens, found.completion_tokens) == (0, 4)
