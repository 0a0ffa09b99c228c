"""The chat template sandbox, its helpers, and vLLM's content-format choice."""

from __future__ import annotations

import pytest

from mmgate.tokens.exact.template import ChatTemplate, TemplateError

LOOPS = "{% for m in messages %}{% for p in m['content'] %}{{ p['text'] }}{% endfor %}{% endfor %}"
ALIAS = "{% for m in messages %}{% set c = m.content %}{% for p in c %}{{ p.text }}{% endfor %}{% endfor %}"
FILTERED = "{% for m in messages %}{% for p in m.content | selectattr('type') %}x{% endfor %}{% endfor %}"
STRING = "{% for m in messages %}{{ m['content'] }}{% endfor %}"


@pytest.mark.parametrize(
    ("source", "fmt"), [(LOOPS, "openai"), (ALIAS, "openai"), (FILTERED, "openai"), (STRING, "string")]
)
def test_content_format(source: str, fmt: str) -> None:
    assert ChatTemplate(source, {}).content_format == fmt


def test_variables_helpers_and_generation_block() -> None:
    source = (
        "{{ bos_token }}{% for m in messages %}{% generation %}{{ m.content }}{% endgeneration %}{% endfor %}"
        "{{ tools | tojson }}{% if add_generation_prompt %}>{% endif %}{{ flavour }}"
    )
    t = ChatTemplate(source, {"bos_token": "<s>"})
    text = t.render([{"role": "user", "content": "é"}], tools=[{"n": "ü"}], kwargs={"flavour": "!"})
    assert text == '<s>é[{"n": "ü"}]>!'  # tojson keeps non-ASCII, as transformers' does


def test_raise_exception_refuses() -> None:
    t = ChatTemplate("{{ raise_exception('roles must alternate') }}", {})
    with pytest.raises(TemplateError, match="roles must alternate"):
        t.render([])


def test_sandbox_blocks_internals() -> None:
    t = ChatTemplate("{{ messages.__class__.__mro__ }}", {})
    with pytest.raises(TemplateError):
        t.render([])
    mutating = ChatTemplate("{% set _ = messages.append(1) %}", {})
    with pytest.raises(TemplateError):
        mutating.render([])


def test_syntax_error_names_the_file() -> None:
    with pytest.raises(TemplateError, match=r"x\.jinja: the chat template does not compile"):
        ChatTemplate("{% for %}", {}, where="x.jinja")


def test_continue_final_message_cuts_after_its_text() -> None:
    messages = [{"role": "assistant", "content": "Once upon "}]
    kept = ChatTemplate("{% for m in messages %}[{{ m.content }}]END{% endfor %}", {})
    assert kept.render(messages, continue_final_message=True) == "[Once upon "
    trimmed = ChatTemplate("{% for m in messages %}[{{ m.content | trim }}]END{% endfor %}", {})
    assert trimmed.render(messages, continue_final_message=True) == "[Once upon"
