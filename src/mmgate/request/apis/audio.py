"""``/v1/audio/transcriptions`` and ``/v1/audio/translations``: speech to text, as a form upload.

The body is ``multipart/form-data`` (RFC 7578): a ``file`` field with the audio and text fields
(``model``, ``prompt``, ``language``, ``stream``, ...). The file becomes one audio asset of the
prompt, identified and probed from its own bytes (not base64) as a view of the body, so its
duration comes from its header (WAV, FLAC, MP3, Ogg; MP4/WebM audio tracks) and pricing counts it
per the served family, e.g. Whisper's 1,500 positions per started 30-s window. The optional
``prompt`` (a decoder prompt that steers spelling and style) is text the model reads first.
"""

from __future__ import annotations

from collections.abc import Mapping

from mmgate.errors import RequestError
from mmgate.request.assets import PromptBuilder
from mmgate.request.multipart import FormPart, parse_form
from mmgate.request.view import Api, Modality, RequestView

_TRUE = frozenset({"true", "1", "yes", "on"})
_FALSE = frozenset({"false", "0", "no", "off", ""})


def parse_audio(body: bytes, headers: Mapping[str, str], api: Api, b: PromptBuilder) -> RequestView:
    fields: dict[str, FormPart] = {}
    for part in parse_form(body, _header(headers, "content-type")):
        fields.setdefault(part.name, part)  # the first of a repeated field, as form parsers do
    upload = fields.get("file")
    if upload is None:
        raise RequestError("Missing required form field 'file' (the audio to transcribe).", param="file")
    if not len(upload.data):
        raise RequestError("The form field 'file' is empty.", param="file")
    model = fields["model"].text().strip() if "model" in fields else ""
    prompt = fields["prompt"].text() if "prompt" in fields else ""
    if prompt:
        b.text(prompt)
    mime = upload.content_type.split(";")[0].strip().lower() if upload.content_type else None
    b.media(
        Modality.AUDIO, "file", raw=upload.data, mime=mime if mime and mime.startswith("audio/") else None
    )
    view = RequestView(api=api, model=model, parts=b.finish(), stream=_flag(fields, "stream"))
    if "language" in fields:
        view.extra["language"] = fields["language"].text().strip()[:16]
    return view


def _flag(fields: dict[str, FormPart], name: str) -> bool:
    if name not in fields:
        return False
    value = fields[name].text().strip().lower()
    if value in _TRUE:
        return True
    if value in _FALSE:
        return False
    raise RequestError(f"Form field '{name}' must be true or false, got {value[:32]!r}.", param=name)


def _header(headers: Mapping[str, str], name: str) -> str | None:
    value = headers.get(name)
    if value is not None:
        return value
    for key, v in headers.items():  # plain dicts (tests, the simulator's callers) keep their case
        if key.lower() == name:
            return v
    return None
