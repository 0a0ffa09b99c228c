"""Which answer shape a simulated pod writes for each generating API."""

from __future__ import annotations

from mmgate.request.view import Api
from mmgate.sim.anthropic_output import MessagesWriter
from mmgate.sim.audio_output import SpeechWriter
from mmgate.sim.output import ResponseWriter, Writer
from mmgate.sim.responses_output import ResponsesWriter


def writer_for(
    api: Api,
    request_id: str,
    model: str,
    offset: int = 0,
    *,
    include_usage: bool = False,
    prompt_tokens: int = 0,
    duration_s: float = 0.0,
) -> Writer:
    """The writer of one answer (``include_usage``: the OpenAI stream's usage chunk; the others
    always report usage their own way)."""
    if api is Api.MESSAGES:
        return MessagesWriter(request_id, model, offset, prompt_tokens=prompt_tokens)
    if api is Api.RESPONSES:
        return ResponsesWriter(request_id, model, offset)
    if api in (Api.TRANSCRIPTIONS, Api.TRANSLATIONS):
        return SpeechWriter(api, request_id, model, offset, duration_s=duration_s)
    return ResponseWriter(api, request_id, model, offset, include_usage=include_usage)
