"""LoRA adapters as a vLLM server shows them: in ``/v1/models`` and in ``vllm:lora_requests_info``.

* ``GET /v1/models`` lists the base model and, for each adapter (``--lora-modules`` or loaded at
  run time), a card whose ``id`` is the adapter's name, ``root`` its path and ``parent`` the base
  model's id. A request names an adapter by putting its name in ``model``; the adapter's blocks
  hash apart from the base model's (the LoRA extra key, :mod:`mmgate.vllm.blocks`).
* ``vllm:lora_requests_info`` is a gauge whose value is the time it was last updated and whose
  labels carry the state: ``running_lora_adapters`` and ``waiting_lora_adapters`` (comma-separated
  adapter names) and ``max_lora`` (``--max-loras``, the adapters one batch can hold). The labels
  change with the state, so a page carries one sample per label set ever seen: the current one is
  the sample with the largest value (the Gateway API Inference Extension's model-server protocol
  reads it so). vLLM fills ``running_lora_adapters`` from the adapters of the running requests.

Both are read off the network, so names and counts are bounded here (:data:`MAX_ADAPTERS`,
:data:`MAX_NAME_CHARS`): a page cannot make the gateway hold more than that per endpoint.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

LORA_INFO = "vllm:lora_requests_info"
MAX_ADAPTERS = 1024
"""Adapter names kept per list and per endpoint; the rest of a longer list is ignored."""
MAX_NAME_CHARS = 256


@dataclass(slots=True, frozen=True)
class Adapter:
    """A served adapter: its base model (the card's ``parent``) and path (``root``), which vLLM's
    block keys of the adapter's requests include (:class:`mmgate.vllm.blocks.LoRA`)."""

    base: str
    path: str = ""


@dataclass(slots=True, frozen=True)
class LoraState:
    """One endpoint's adapters: those it serves (by name, from ``/v1/models``), those its running
    and waiting requests use, and how many one batch can hold."""

    adapters: Mapping[str, Adapter] = field(default_factory=dict)
    running: frozenset[str] = frozenset()
    waiting: frozenset[str] = frozenset()
    max_loras: int = 0

    def room(self) -> bool:
        """Fewer adapters in use than ``max_loras``: one more can be loaded without waiting."""
        return len(self.running | self.waiting) < self.max_loras


def adapter_names(label: str) -> frozenset[str]:
    """The names of a comma-separated label value (blanks and over-long names dropped)."""
    names = (n.strip() for n in label.split(",", MAX_ADAPTERS)[:MAX_ADAPTERS])
    return frozenset(n for n in names if n and len(n) <= MAX_NAME_CHARS)


def adapters_of(cards: Iterable[Mapping[str, Any]]) -> dict[str, Adapter]:
    """The adapters of ``/v1/models`` cards: those naming a ``parent`` other than themselves."""
    out: dict[str, Adapter] = {}
    for card in cards:
        name, parent = card.get("id"), card.get("parent")
        if not isinstance(name, str) or not isinstance(parent, str) or not parent or name == parent:
            continue
        root = card.get("root")
        path = root if isinstance(root, str) and len(root) <= 4 * MAX_NAME_CHARS else ""
        if len(name) <= MAX_NAME_CHARS and len(out) < MAX_ADAPTERS:
            out[name] = Adapter(parent, path)
    return out


def lora_info_labels(running: Iterable[str], waiting: Iterable[str], max_loras: int) -> dict[str, str]:
    """The label set a server publishes (vLLM joins the names with commas, no spaces)."""
    return {
        "max_lora": str(max_loras),
        "running_lora_adapters": ",".join(running),
        "waiting_lora_adapters": ",".join(waiting),
    }
