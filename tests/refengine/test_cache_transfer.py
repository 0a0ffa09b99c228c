"""Encoder outputs crossing processes (E/PD): the prefill engine reads an encode-only engine's
features instead of encoding, and answers exactly as an aggregated engine does."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import pytest
import torch

from mmgate.refengine.prompt import prompt_from_messages
from mmgate.refengine.runtime import Engine, GenerateRequest
from mmgate.refengine.transfer import FeatureClient, FeatureServer
from mmgate.refengine.vlm import VisionLanguageModel
from support.processes import REPO, subprocess_env
from support.vlm import picture, user_turn


class Producer:
    def __init__(self, proc: subprocess.Popen[str]) -> None:
        self.proc = proc
        assert proc.stdout is not None
        self.address = json.loads(proc.stdout.readline())["ready"]

    def encode(self, messages: list[dict[str, Any]]) -> dict[str, Any]:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write(json.dumps(messages) + "\n")
        self.proc.stdin.flush()
        answer: dict[str, Any] = json.loads(self.proc.stdout.readline())
        return answer


@pytest.fixture(scope="module")
def producer() -> Iterator[Producer]:
    proc = subprocess.Popen(
        [sys.executable, str(REPO / "tests/support/ec_producer.py")],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        env=subprocess_env(PYTHONPATH=f"{REPO / 'src'}:{REPO / 'tests'}"),
    )
    try:
        yield Producer(proc)
    finally:
        assert proc.stdin is not None
        proc.stdin.close()
        proc.wait(timeout=30)


def test_epd_across_processes_answers_as_the_aggregated_engine(
    tiny: VisionLanguageModel, producer: Producer
) -> None:
    messages = [user_turn("describe both pictures", picture(60), picture(61))]
    encoded = producer.encode(messages)
    params = encoded["ec_transfer_params"]
    assert encoded["encoded"] == 2
    prompt = prompt_from_messages(messages)
    assert list(params) == [img.identity for img in prompt.images]
    assert params[prompt.images[0].identity]["remote_port"] == producer.address[1]

    consumer = Engine(tiny, fetch_features=FeatureClient())
    split = consumer.generate(GenerateRequest("pd", prompt, max_tokens=5, ec_transfer_params=params))
    aggregated = Engine(tiny).generate(GenerateRequest("agg", prompt, max_tokens=5))
    assert [o.token_id for o in split] == [o.token_id for o in aggregated]
    assert torch.equal(split[0].logits, aggregated[0].logits)  # the same features, bit for bit
    stages = consumer.stages
    assert (stages.fetched_items, stages.encoded_items) == (2, 0)  # its own vision tower never ran


def test_a_lost_handoff_is_encoded_locally(tiny: VisionLanguageModel) -> None:
    """An item the encoder no longer holds, an encoder off the allow-list, or one that is gone:
    the prefill engine encodes the image itself and answers the same."""
    messages = [user_turn("describe the picture", picture(62))]
    prompt = prompt_from_messages(messages)
    identity = prompt.images[0].identity
    expected = Engine(tiny).generate(GenerateRequest("a", prompt, max_tokens=2))
    server = FeatureServer().start()
    host, port = server.address
    try:
        cases = [
            {"remote_host": host, "remote_port": port},  # nothing published
            {"remote_host": "10.1.2.3", "remote_port": port},  # not allowed: never contacted
            {"remote_host": host},  # malformed
        ]
        for entry in cases:
            engine = Engine(tiny, fetch_features=FeatureClient())
            out = engine.generate(
                GenerateRequest("b", prompt, max_tokens=2, ec_transfer_params={identity: entry})
            )
            assert [o.token_id for o in out] == [o.token_id for o in expected]
            assert (engine.stages.fetched_items, engine.stages.encoded_items) == (0, 1)
        # features of the wrong shape (another model's) are not used
        server.publish({identity: torch.zeros(3, 7)})
        engine = Engine(tiny, fetch_features=FeatureClient())
        ec = {identity: {"remote_host": host, "remote_port": port}}
        engine.generate(GenerateRequest("c", prompt, max_tokens=1, ec_transfer_params=ec))
        assert (engine.stages.fetched_items, engine.stages.encoded_items) == (0, 1)
    finally:
        server.close()


def test_the_advertised_address_is_what_consumers_are_told() -> None:
    server = FeatureServer("127.0.0.1", advertised_host="10.0.0.7")
    params = server.publish({"item": torch.zeros(2, 4)})
    assert params["item"]["remote_host"] == "10.0.0.7"
    assert params["item"]["remote_port"] == server.address[1]
    assert params["item"]["num_tokens"] == 2
    server.close()
