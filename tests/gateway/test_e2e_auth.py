"""API-key authentication over real HTTP: keys hashed at rest, 401 in OpenAI's shape, reload on
change, per-key rate and concurrency limits through admission, the tenant handed to plugins."""

from __future__ import annotations

import asyncio
import io
import json
import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager, redirect_stderr, redirect_stdout
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

import aiohttp
import msgspec
import openai
import pytest
import yaml

from mmgate.cli import main
from mmgate.config import parse_config
from mmgate.config.strict import ConfigError
from mmgate.control.admission import Admission, Overloaded
from mmgate.control.apikeys import Identity, KeyStore, hash_key, load_keys
from mmgate.errors import RequestError
from mmgate.gateway.app import Running, build_gateway, keys_of, start
from mmgate.scheduling import EndpointState, SchedulingRequest
from mmgate.scheduling.contracts import NoParams, Scorer
from mmgate.scheduling.registry import builtin_registry
from mmgate.sim.fleet import SimFleet
from support.stack import chat_body, wait_until_scraped


class TenantRecorder(Scorer[NoParams]):
    """Scores nothing; remembers the tenant of every request it scores (test only)."""

    type_name = "test-tenant-recorder"
    seen: ClassVar[list[str | None]] = []

    def score(self, request: SchedulingRequest, endpoints: list[EndpointState]) -> list[float]:
        self.seen.append(request.tenant)
        return [0.0 for _ in endpoints]


CONFIG = """
apiVersion: llm-d.ai/v1alpha1
kind: EndpointPickerConfig
plugins:
- type: test-tenant-recorder
- type: round-robin-picker
schedulingProfiles:
- name: default
  plugins:
  - pluginRef: test-tenant-recorder
  - pluginRef: round-robin-picker
"""


def add_key(path: Path, *flags: str) -> str:
    """``mmgate keys add`` as a user runs it; returns the key it printed."""
    out, err = io.StringIO(), io.StringIO()
    with redirect_stdout(out), redirect_stderr(err):
        assert main(["keys", "add", str(path), *flags]) == 0
    assert "shown only now" in err.getvalue()
    return out.getvalue().strip()


@dataclass
class Authed:
    running: Running
    session: aiohttp.ClientSession
    model: str

    @property
    def url(self) -> str:
        return self.running.url

    async def chat(self, headers: dict[str, str]) -> tuple[int, dict[str, Any]]:
        body = chat_body(self.model, "hello", max_tokens=4)
        async with self.session.post(self.url + "/v1/chat/completions", data=body, headers=headers) as resp:
            return resp.status, await resp.json(content_type=None)


@asynccontextmanager
async def authed(keys_file: Path) -> AsyncIterator[Authed]:
    fleet = SimFleet(pods=2, profile="fast")
    await fleet.start()
    config = parse_config(yaml.safe_load(CONFIG), source="<test>")
    auth = {"keysFile": str(keys_file), "reloadIntervalS": 0.0}
    section = msgspec.convert(
        {**msgspec.to_builtins(config.mmgate), "endpoints": fleet.urls, "port": 0, "auth": auth},
        type(config.mmgate),
    )
    registry = builtin_registry().with_plugins(TenantRecorder)
    gateway = build_gateway(msgspec.structs.replace(config, mmgate=section), registry=registry)
    running = await start(gateway, port=0)
    session = aiohttp.ClientSession()
    try:
        await wait_until_scraped(running)
        yield Authed(running, session, fleet.pods[0].model)
    finally:
        await session.close()
        await running.stop()
        await fleet.stop()


async def test_keys_are_required_checked_and_never_logged(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    keys_file = tmp_path / "keys.yaml"
    key = add_key(keys_file, "--tenant", "team-a")
    assert key not in keys_file.read_text() and hash_key(key) in keys_file.read_text()
    TenantRecorder.seen.clear()
    caplog.set_level(logging.DEBUG)
    async with authed(keys_file) as g:
        for headers in (
            {},
            {"Authorization": "Bearer wrong-key"},
            {"x-api-key": "wrong"},
            {"Authorization": key},
            {"Authorization": f"Bearer {key}\u00a0"},  # not OWS: never trimmed into the key
            {"Authorization": f"Bearer {key}", "x-api-key": "another"},  # two keys: a conflict
        ):
            status, body = await g.chat(headers)
            assert status == 401, headers
            assert body["error"]["code"] == "invalid_api_key"
            assert body["error"]["type"] == "invalid_request_error"
            assert set(body["error"]) == {"message", "type", "param", "code"}
        assert TenantRecorder.seen == []  # refused before scheduling
        status, body = await g.chat({"Authorization": f"Bearer {key}"})
        assert status == 200, body
        status, _ = await g.chat({"x-api-key": key})
        assert status == 200
        assert TenantRecorder.seen == ["team-a", "team-a"]
        client = openai.AsyncOpenAI(base_url=g.url + "/v1", api_key="not-a-key", max_retries=0)
        with pytest.raises(openai.AuthenticationError) as raised:
            await client.chat.completions.create(model=g.model, messages=[{"role": "user", "content": "hi"}])
        assert raised.value.code == "invalid_api_key"
        await client.close()
        good = openai.AsyncOpenAI(base_url=g.url + "/v1", api_key=key, max_retries=0)
        reply = await good.chat.completions.create(
            model=g.model, messages=[{"role": "user", "content": "hi"}], max_tokens=4
        )
        assert reply.choices[0].message.content
        await good.close()
    assert key not in caplog.text and hash_key(key) not in caplog.text


async def test_keys_added_or_revoked_take_effect_without_restart(tmp_path: Path) -> None:
    keys_file = tmp_path / "keys.yaml"
    first = add_key(keys_file, "--tenant", "team-a")
    async with authed(keys_file) as g:
        second = "later-key"
        assert (await g.chat({"Authorization": f"Bearer {second}"}))[0] == 401
        data = yaml.safe_load(keys_file.read_text())
        data["keys"] = [{"sha256": hash_key(second), "tenant": "team-b"}]  # first revoked, second added
        keys_file.write_text(yaml.safe_dump(data))
        assert (await g.chat({"Authorization": f"Bearer {second}"}))[0] == 200
        assert (await g.chat({"Authorization": f"Bearer {first}"}))[0] == 401
        keys_file.write_text("keys: [{sha256: nothex, tenant: x}]")  # broken: the last good keys stay
        assert (await g.chat({"Authorization": f"Bearer {second}"}))[0] == 200


async def test_per_key_rate_limit_is_a_429_for_that_key_only(tmp_path: Path) -> None:
    keys_file = tmp_path / "keys.yaml"
    slow = add_key(keys_file, "--tenant", "team-slow", "--rate", "0.001", "--burst", "2")
    other = add_key(keys_file, "--tenant", "team-other")
    async with authed(keys_file) as g:
        assert (await g.chat({"Authorization": f"Bearer {slow}"}))[0] == 200
        assert (await g.chat({"Authorization": f"Bearer {slow}"}))[0] == 200
        body = chat_body(g.model, "hello", max_tokens=4)
        headers = {"Authorization": f"Bearer {slow}"}
        async with g.session.post(g.url + "/v1/chat/completions", data=body, headers=headers) as resp:
            assert resp.status == 429
            assert int(resp.headers["Retry-After"]) >= 1
            error = json.loads(await resp.read())["error"]
            # the key's own limit, which the caller fixes by slowing down (not the gateway's "overloaded")
            assert error["code"] == "rate_limit_exceeded" and "requests/s" in error["message"]
        assert (await g.chat({"Authorization": f"Bearer {other}"}))[0] == 200


async def test_per_key_concurrency_limit_counts_requests_in_flight() -> None:
    adm = Admission()
    capped = Identity("t", "k1", max_inflight=2)
    await adm.enter(0, "tenant:t", capped)
    await adm.enter(0, "tenant:t", capped)
    with pytest.raises(Overloaded, match="this API key already has 2"):
        await adm.enter(0, "tenant:t", capped)
    await adm.enter(0, "tenant:t", Identity("t", "k2"))  # another key of the tenant is not capped
    adm.leave("tenant:t", capped)
    await adm.enter(0, "tenant:t", capped)  # a slot of the key freed up
    assert adm.inflight == 3


async def test_a_request_refused_by_the_global_limit_gives_its_key_slot_back() -> None:
    adm = Admission()
    capped = Identity("t", "k1", max_inflight=1)
    await adm.enter(1, "tenant:u")  # the gateway's only slot, taken by someone else
    with pytest.raises(Overloaded, match="at its limit"):
        await adm.enter(1, "tenant:t", capped)
    adm.leave("tenant:u")
    await adm.enter(1, "tenant:t", capped)  # the refused attempt did not keep the key's slot


def test_token_bucket_refills_at_the_key_rate() -> None:
    now = [0.0]
    adm = Admission(clock=lambda: now[0])
    limited = Identity("t", "k", rate_per_s=2.0, burst=2.0)

    async def go() -> None:
        await adm.enter(0, "c", limited)
        adm.leave("c", limited)

    asyncio.run(go())
    asyncio.run(go())
    with pytest.raises(Overloaded, match="2 requests/s") as refused:
        asyncio.run(go())
    assert refused.value.code == "rate_limit_exceeded"
    now[0] += 0.5  # one token back
    asyncio.run(go())
    with pytest.raises(Overloaded):
        asyncio.run(go())


def test_keystore_reads_bearer_and_x_api_key_and_reloads_on_change(tmp_path: Path) -> None:
    path = tmp_path / "keys.yaml"
    path.write_text(
        yaml.safe_dump({"keys": [{"sha256": hash_key("k-one"), "tenant": "a", "maxInflight": 3}]})
    )
    now = [0.0]
    store = KeyStore(path, check_every_s=1.0, clock=lambda: now[0])
    who = store.verify({"Authorization": "bearer k-one"})
    assert (who.tenant, who.max_inflight) == ("a", 3)
    assert store.verify({"x-api-key": "k-one"}).tenant == "a"
    with pytest.raises(RequestError) as refused:
        store.verify({"Authorization": "Basic k-one"})
    assert refused.value.status == 401 and refused.value.code == "invalid_api_key"
    path.write_text(yaml.safe_dump({"keys": [{"sha256": hash_key("k-two"), "tenant": "b"}]}))
    assert store.verify({"x-api-key": "k-one"}).tenant == "a"  # not checked again within 1 s
    now[0] = 1.0
    assert store.verify({"x-api-key": "k-two"}).tenant == "b"
    with pytest.raises(RequestError):
        store.verify({"x-api-key": "k-one"})


def test_keys_hash_prints_the_digest_of_a_key_on_stdin(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("sys.stdin", io.StringIO("my-secret\n"))
    out = io.StringIO()
    with redirect_stdout(out):
        assert main(["keys", "hash"]) == 0
    assert out.getvalue().strip() == hash_key("my-secret")


def test_a_bad_keys_file_is_a_config_error_naming_the_key(tmp_path: Path) -> None:
    path = tmp_path / "keys.yaml"
    path.write_text("keys: [{sha256: abc, tenant: x}]")
    config = parse_config(yaml.safe_load(CONFIG + f"mmgate:\n  auth:\n    keysFile: {path}\n"), source="<t>")
    with pytest.raises(ConfigError, match=r"mmgate\.auth\.keysFile.*sha256 hex digest"):
        keys_of(config.mmgate)


def test_keys_add_writes_a_flow_control_default_objective_or_priority(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "keys.yaml"
    gold = add_key(path, "--tenant", "gold", "--objective", "interactive")
    bulk = add_key(path, "--tenant", "bulk", "--priority", "-1")
    keys = load_keys(path)
    assert keys[hash_key(gold)].objective == "interactive" and keys[hash_key(gold)].priority is None
    assert keys[hash_key(bulk)].priority == -1 and keys[hash_key(bulk)].objective is None
    with pytest.raises(SystemExit) as exited:  # one or the other
        main(["keys", "add", str(path), "--tenant", "x", "--objective", "a", "--priority", "1"])
    assert exited.value.code == 2 and "not allowed with argument" in capsys.readouterr().err
