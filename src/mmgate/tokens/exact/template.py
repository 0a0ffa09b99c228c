"""A chat template rendered the way transformers renders it for vLLM, in a sandbox.

Templates are Jinja programs that come with model checkpoints, so they run in Jinja's
``ImmutableSandboxedEnvironment`` (no attribute access to internals, no mutation of the inputs)
with the settings transformers uses (``trim_blocks``, ``lstrip_blocks``, the ``loopcontrols``
extension), its helpers (``raise_exception``, ``strftime_now``, a ``tojson`` that keeps non-ASCII
text) and a ``{% generation %}`` block that only renders its body (transformers uses it to mark
assistant spans for training masks; it prints nothing of its own). The variables are the ones
vLLM passes: ``messages``, ``tools``, ``documents``, ``add_generation_prompt``,
``continue_final_message``, the tokenizer's special tokens and the request's
``chat_template_kwargs``.

vLLM shows a template either each content part as a dict (``{"type": "text", ...}``,
``{"type": "image"}``) or each message's text joined into one string, depending on whether the
template loops over ``message['content']`` (its "openai" and "string" content formats):
:attr:`ChatTemplate.content_format` makes the same choice by walking the template's syntax tree,
unless the pods force one (``--chat-template-content-format``, the ``contentFormat`` setting).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from datetime import datetime
from typing import Any, Literal

import jinja2
import jinja2.ext
import jinja2.nodes
from jinja2.sandbox import ImmutableSandboxedEnvironment

ContentFormat = Literal["string", "openai"]
CONTENT_FORMATS = ("auto", "string", "openai")
"""vLLM's ``--chat-template-content-format`` choices; ``auto`` detects it from the template."""


class TemplateError(ValueError):
    """The template refused the conversation (its ``raise_exception``) or failed to render."""


class _GenerationBlock(jinja2.ext.Extension):
    """``{% generation %}...{% endgeneration %}``: renders the body unchanged."""

    tags = {"generation"}  # noqa: RUF012 - jinja2 declares it an instance-level set

    def parse(self, parser: jinja2.parser.Parser) -> jinja2.nodes.Node:
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(("name:endgeneration",), drop_needle=True)
        return jinja2.nodes.Scope(body, lineno=lineno)


def _raise(message: str) -> None:
    raise TemplateError(message)


def _tojson(
    value: object,
    ensure_ascii: bool = False,
    indent: int | None = None,
    separators: Any = None,
    sort_keys: bool = False,
) -> str:
    return json.dumps(
        value, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys
    )


def _strftime_now(fmt: str) -> str:
    return datetime.now().strftime(fmt)


def _environment() -> ImmutableSandboxedEnvironment:
    env = ImmutableSandboxedEnvironment(
        trim_blocks=True,
        lstrip_blocks=True,
        extensions=[_GenerationBlock, jinja2.ext.loopcontrols],
        autoescape=False,
    )
    env.filters["tojson"] = _tojson
    env.globals["raise_exception"] = _raise
    env.globals["strftime_now"] = _strftime_now
    return env


def _is_content(node: jinja2.nodes.Node) -> bool:
    """``x['content']`` or ``x.content``."""
    if isinstance(node, jinja2.nodes.Getitem):
        return isinstance(node.arg, jinja2.nodes.Const) and node.arg.value == "content"
    return isinstance(node, jinja2.nodes.Getattr) and node.attr == "content"


def detect_content_format(tree: jinja2.nodes.Template) -> ContentFormat:
    """ "openai" when the template loops over a message's content (``{% for c in m['content'] %}``,
    also through a variable assigned from it), else "string"."""
    aliases: set[str] = set()
    for assign in tree.find_all(jinja2.nodes.Assign):
        if isinstance(assign.target, jinja2.nodes.Name) and _is_content(assign.node):
            aliases.add(assign.target.name)
    for loop in tree.find_all(jinja2.nodes.For):
        it = loop.iter
        while isinstance(it, jinja2.nodes.Filter) and it.node is not None:  # content | selectattr ...
            it = it.node
        if _is_content(it) or (isinstance(it, jinja2.nodes.Name) and it.name in aliases):
            return "openai"
    return "string"


class ChatTemplate:
    """One compiled template plus the special tokens it may print."""

    __slots__ = ("content_format", "special_tokens", "template")

    def __init__(
        self,
        source: str,
        special_tokens: Mapping[str, Any],
        *,
        where: str = "<template>",
        content_format: str = "auto",
    ) -> None:
        env = _environment()
        try:
            tree = env.parse(source)
            self.template = env.from_string(source)
        except jinja2.TemplateSyntaxError as exc:
            raise TemplateError(f"{where}: the chat template does not compile: {exc}") from None
        if content_format not in CONTENT_FORMATS:
            raise TemplateError(
                f"content format {content_format!r} is not one of {', '.join(CONTENT_FORMATS)}"
            )
        self.content_format: ContentFormat = (
            detect_content_format(tree)
            if content_format == "auto"
            else "string"
            if content_format == "string"
            else "openai"
        )
        self.special_tokens = dict(special_tokens)

    def render(
        self,
        messages: list[dict[str, Any]],
        *,
        tools: list[Any] | None = None,
        documents: list[Any] | None = None,
        add_generation_prompt: bool = True,
        continue_final_message: bool = False,
        kwargs: Mapping[str, Any] | None = None,
    ) -> str:
        """The prompt text (raises :class:`TemplateError` when the template refuses)."""
        variables: dict[str, Any] = {**self.special_tokens, **(kwargs or {})}
        variables.update(
            messages=messages,
            tools=tools,
            documents=documents,
            add_generation_prompt=add_generation_prompt,
        )
        try:
            text = self.template.render(variables)
        except TemplateError:
            raise
        except Exception as exc:  # a template is a program: whatever it raises on a conversation
            raise TemplateError(f"the chat template failed: {type(exc).__name__}: {exc}") from None
        if continue_final_message and messages:
            text = _continue(text, messages[-1])
        return text


def _continue(text: str, last: Mapping[str, Any]) -> str:
    """Cut the prompt after the final message's own text, as transformers does for
    ``continue_final_message`` (the model then continues that message instead of closing it):
    at its last occurrence, keeping the message's trailing whitespace when the template kept it."""
    content = last.get("content")
    if isinstance(content, list):
        texts = [p["text"] for p in content if isinstance(p, dict) and isinstance(p.get("text"), str)]
        content = texts[-1] if texts else None
    if not isinstance(content, str):
        raise TemplateError("continue_final_message needs a final message with text")
    core = content.strip()
    at = text.rfind(core)
    if at < 0:
        raise TemplateError("continue_final_message: the final message's text is not in the rendered prompt")
    kept = content.lstrip()
    return text[: at + len(kept)] if text[at : at + len(kept)] == kept else text[: at + len(core)]
