"""``multipart/form-data`` bodies (RFC 7578), split into their parts without copying them.

The audio APIs (``/v1/audio/transcriptions``, ``/v1/audio/translations``) upload the audio file as
one part of a form. The gateway only needs the small text fields (``model``, ``stream``, ...) and
the file's first bytes (its header, for the duration), so each part's content is a
:class:`memoryview` of the body the client sent: a 25 MB upload is never copied, and the original
bytes are what goes upstream.

The grammar is RFC 2046 §5.1.1: an optional preamble, then ``--boundary`` lines that open each
part, the part's header lines, a blank line, its content, and ``--boundary--`` at the end. The
boundary is a parameter of the request's ``Content-Type`` (1 to 70 characters). Each part names
its field in ``Content-Disposition: form-data; name="..."`` (with ``filename`` for files).
"""

from __future__ import annotations

from dataclasses import dataclass

from mmgate.errors import RequestError

MAX_PARTS = 256
"""Form fields accepted in one request (vLLM's forms have about twenty)."""
MAX_PART_HEAD = 8 * 1024
"""Bytes of one part's header lines."""
_MAX_BOUNDARY = 70  # RFC 2046 §5.1.1


@dataclass(frozen=True, slots=True)
class FormPart:
    """One field of a form: its name, the file name and media type it was sent with (files), and
    its content as a view of the request body."""

    name: str
    filename: str | None
    content_type: str | None
    data: memoryview

    def text(self) -> str:
        """The content of a text field (UTF-8, as browsers and HTTP clients send form fields)."""
        try:
            return str(self.data, "utf-8")
        except UnicodeDecodeError:
            raise RequestError(f"Form field '{self.name}' is not valid UTF-8.", param=self.name) from None


def boundary_of(content_type: str | None) -> str:
    """The boundary of a ``multipart/form-data`` Content-Type; a 400 naming the header otherwise."""
    kind, params = _header_value(content_type or "")
    if kind != "multipart/form-data":
        got = f"{content_type[:64]!r}" if content_type else "none"
        raise RequestError(
            f"This route takes a multipart/form-data body (Content-Type: multipart/form-data; "
            f"boundary=...); got Content-Type {got}.",
            param="Content-Type",
            code="unsupported_media_type",
        )
    boundary = params.get("boundary", "")
    if not 0 < len(boundary) <= _MAX_BOUNDARY:
        raise RequestError(
            f"The multipart/form-data Content-Type needs a boundary of 1 to {_MAX_BOUNDARY} characters.",
            param="Content-Type",
        )
    return boundary


def parse_form(body: bytes, content_type: str | None) -> list[FormPart]:
    """The parts of a form body, in order. A malformed body is a 400 naming ``body``."""
    delimiter = b"--" + boundary_of(content_type).encode("latin-1")
    view = memoryview(body)
    if body.startswith(delimiter):
        at = 0
    else:  # a preamble, ignored (RFC 2046): the first delimiter starts a line
        at = body.find(b"\r\n" + delimiter)
        if at < 0:
            raise _malformed("the boundary of its Content-Type never appears")
        at += 2
    separator = b"\r\n" + delimiter
    parts: list[FormPart] = []
    while True:
        at += len(delimiter)
        if body.startswith(b"--", at):  # the close delimiter: the epilogue is ignored
            return parts
        line_end = body.find(b"\r\n", at)
        if line_end < 0 or body[at:line_end].strip(b" \t"):  # only transport padding may follow
            raise _malformed("a boundary line is not followed by a line break")
        head_start = line_end + 2
        if body.startswith(b"\r\n", head_start):  # a part without header lines
            head_end = head_start
        else:
            head_end = body.find(b"\r\n\r\n", head_start, head_start + MAX_PART_HEAD + 4)
            if head_end < 0:
                raise _malformed(f"a part's headers do not end within {MAX_PART_HEAD} bytes")
        content_start = head_end + 4 if head_end > head_start else head_start + 2
        next_at = body.find(separator, content_start)
        if next_at < 0:
            raise _malformed("the body ends before the closing boundary")
        if len(parts) >= MAX_PARTS:
            raise RequestError(f"Too many form fields: at most {MAX_PARTS} are accepted.", param="body")
        parts.append(_part(body[head_start:head_end], view[content_start:next_at]))
        at = next_at + 2


def _part(head: bytes, data: memoryview) -> FormPart:
    disposition: str | None = None
    content_type: str | None = None
    for line in head.decode("utf-8", "replace").split("\r\n"):
        name, sep, value = line.partition(":")
        if not sep:
            raise _malformed(f"a part header line has no colon: {line[:64]!r}")
        lower = name.strip().lower()
        if lower == "content-disposition":
            disposition = value
        elif lower == "content-type":
            content_type = value.strip() or None
    kind, params = _header_value(disposition or "")
    if kind != "form-data" or "name" not in params:
        raise _malformed('a part has no Content-Disposition: form-data; name="..."')
    return FormPart(params["name"], params.get("filename"), content_type, data)


def _header_value(value: str) -> tuple[str, dict[str, str]]:
    """``type; a=1; b="x y"`` → (``type`` lower-cased, {``a``: ``1``, ``b``: ``x y``}); parameter
    names are case-insensitive (RFC 9110 §5.6.6), quoted values may hold ``;`` and ``\\"``."""
    kind, _, rest = value.partition(";")
    params: dict[str, str] = {}
    i, n = 0, len(rest)
    while i < n:
        eq = rest.find("=", i)
        if eq < 0:
            break
        key = rest[i:eq].strip(" \t;").lower()
        i = eq + 1
        while i < n and rest[i] in " \t":
            i += 1
        if i < n and rest[i] == '"':
            out: list[str] = []
            i += 1
            while i < n and rest[i] != '"':
                if rest[i] == "\\" and i + 1 < n:
                    i += 1
                out.append(rest[i])
                i += 1
            text = "".join(out)
            i = rest.find(";", i)
            i = n if i < 0 else i + 1
        else:
            end = rest.find(";", i)
            end = n if end < 0 else end
            text = rest[i:end].strip()
            i = end + 1
        if key:
            params.setdefault(key, text)
    return kind.strip().lower(), params


def _malformed(why: str) -> RequestError:
    return RequestError(f"The multipart/form-data body is malformed: {why}.", param="body")
