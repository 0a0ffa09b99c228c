"""Documents through the gateway: priced per page when the served model takes PDFs (a hosted-API
rule), refused with a 400 naming the part and the model when it does not, before any upload."""

from __future__ import annotations

import base64

import orjson

from mmgate.request import parse_request
from mmgate.tokens import EstimateConfig, PricingConfig, price
from mmgate.tokens.providers import ANTHROPIC_PAGE_TOKENS
from support.documents import pdf
from support.stack import ENCODER_AFFINITY, stack

QWEN3 = "Qwen/Qwen3-VL-32B-Instruct"
SERVED = "vllm:request_success_total"
ANTHROPIC_PRICED = """
apiVersion: llm-d.ai/v1alpha1
kind: EndpointPickerConfig
plugins:
- type: token-producer
  parameters: {provider: anthropic}
- type: token-load-scorer
schedulingProfiles:
- name: default
  plugins:
  - pluginRef: token-load-scorer
"""


def with_document(model: str, pages: int) -> bytes:
    data = base64.b64encode(pdf([f"page {i}" for i in range(pages)])).decode()
    part = {"type": "file", "file": {"file_data": "data:application/pdf;base64," + data, "filename": "r.pdf"}}
    content = [{"type": "text", "text": "Summarise this."}, part]
    return orjson.dumps({"model": model, "messages": [{"role": "user", "content": content}], "max_tokens": 2})


async def test_a_document_to_a_model_that_reads_no_pdfs_is_a_400_naming_part_and_model() -> None:
    async with stack(ENCODER_AFFINITY, pods=1, model=QWEN3) as s:
        before = await s.fleet_counter(SERVED)
        reply = await s.post(with_document(QWEN3, 2))
        assert reply.status == 400
        error = orjson.loads(reply.body)["error"]
        assert error["param"] == "messages[0].content[1].file.file_data"
        assert error["code"] == "unsupported_modality" and QWEN3 in error["message"]
        assert await s.fleet_counter(SERVED) == before


async def test_a_document_is_priced_per_page_under_a_provider_rule() -> None:
    async with stack(ANTHROPIC_PRICED, pods=1) as s:
        body = with_document(s.model, 3)
        reply = await s.post(body)
        assert reply.status == 200, reply.body
        text = price(
            parse_request(body, {}), PricingConfig(family=None, estimate=EstimateConfig())
        ).text_tokens
        # the hot path counts pages only (the text layer is not extracted there)
        assert reply.tokens == text + 3 * ANTHROPIC_PAGE_TOKENS


def responses_with_document(model: str, pages: int) -> bytes:
    data = base64.b64encode(pdf([f"page {i}" for i in range(pages)])).decode()
    part = {"type": "input_file", "file_data": "data:application/pdf;base64," + data, "filename": "r.pdf"}
    item = {"role": "user", "content": [{"type": "input_text", "text": "Summarise this."}, part]}
    return orjson.dumps({"model": model, "input": [item], "max_output_tokens": 2})


async def test_a_responses_input_file_follows_the_chat_file_rule_and_its_switch() -> None:
    """``/v1/responses`` ``input_file`` parts are documents as chat ``file`` parts are: refused
    for a family that reads no PDFs, forwarded (priced per page) with ``validation.modalities``
    off, as every modality refusal is."""
    lax = ENCODER_AFFINITY + "mmgate:\n  validation: {modalities: false}\n"
    async with stack(ENCODER_AFFINITY, pods=1, model=QWEN3) as s:
        before = await s.fleet_counter(SERVED)
        reply = await s.post(responses_with_document(QWEN3, 2), path="/v1/responses")
        assert reply.status == 400, reply.body
        error = orjson.loads(reply.body)["error"]
        assert error["param"] == "input[0].content[1].file_data"
        assert error["code"] == "unsupported_modality" and QWEN3 in error["message"]
        assert await s.fleet_counter(SERVED) == before
    async with stack(lax, pods=1, model=QWEN3) as s:
        chat = await s.post(with_document(QWEN3, 2))
        responses = await s.post(responses_with_document(QWEN3, 2), path="/v1/responses")
        assert chat.status == responses.status == 200, (chat.body, responses.body)
        assert await s.fleet_counter(SERVED) == 2
        # priced per page, as chat's file part is
        longer = await s.post(responses_with_document(QWEN3, 4), path="/v1/responses")
        assert longer.status == 200 and longer.tokens > responses.tokens
        assert abs(responses.tokens - chat.tokens) < (longer.tokens - responses.tokens) / 2  # one rule
