import asyncio
import os
from pathlib import Path

import pytest

from mmgate.datalayer.discovery import FileDiscovery, endpoints_from_document
from mmgate.datalayer.endpoints import Endpoint, EndpointRegistry, parse_endpoint


def test_addresses_normalise_to_host_port_names() -> None:
    assert parse_endpoint("127.0.0.1:8000") == Endpoint("127.0.0.1:8000", "http://127.0.0.1:8000")
    assert parse_endpoint("https://pod-a:443/").url == "https://pod-a:443"
    assert parse_endpoint("[::1]:9000").name == "[::1]:9000"
    for bad in ("", "pod-a", "ftp://pod:1", "http://pod:1/v1", "pod:99999"):
        with pytest.raises(ValueError):
            parse_endpoint(bad)


def test_document_shapes() -> None:
    assert [e.name for e in endpoints_from_document("a:1\nb:2, a:1")] == ["a:1", "b:2"]
    doc = {"endpoints": ["a:1", {"address": "http://b:2", "role": "encode"}]}
    assert endpoints_from_document(doc)[1] == Endpoint("b:2", "http://b:2", role="encode")
    with pytest.raises(ValueError, match="unknown: adress"):
        endpoints_from_document([{"adress": "a:1"}])
    # What `mmgate sim --endpoints-file` writes.
    sim = [{"name": "pod-0", "role": "both", "model": "m", "url": "http://127.0.0.1:8101", "kv_events": None}]
    assert endpoints_from_document(sim) == [Endpoint("127.0.0.1:8101", "http://127.0.0.1:8101", role="both")]
    labelled = endpoints_from_document(
        [{"address": "a:1", "labels": {"zone": "b", "llm-d.ai/role": "decode"}}]
    )
    assert labelled[0].labels == (("llm-d.ai/role", "decode"), ("zone", "b"))


def test_removal_notifies_listeners_so_indexes_forget() -> None:
    registry = EndpointRegistry()
    forgotten: list[str] = []
    registry.on_remove(lambda e: forgotten.append(e.name))
    registry.sync([parse_endpoint("a:1"), parse_endpoint("b:2")])
    added, removed = registry.sync([parse_endpoint("b:2"), parse_endpoint("c:3")])
    assert (added, removed, forgotten) == (["c:3"], ["a:1"], ["a:1"])
    assert [r.name for r in registry.records()] == ["b:2", "c:3"]


async def test_watched_file_changes_the_fleet_and_a_broken_file_keeps_it(tmp_path: Path) -> None:
    path = tmp_path / "endpoints.yaml"
    path.write_text("- a:1\n- b:2\n")
    registry = EndpointRegistry()
    watcher = FileDiscovery(path, poll_interval_s=0.02, static=[parse_endpoint("s:9")])
    await watcher.start(registry)
    try:
        assert sorted(r.name for r in registry.records()) == ["a:1", "b:2", "s:9"]
        path.write_text("endpoints: [b:2]\n")
        os.utime(path, ns=(1, 1))  # a distinct mtime even on coarse filesystems
        for _ in range(100):
            if "a:1" not in registry:
                break
            await asyncio.sleep(0.02)
        assert sorted(r.name for r in registry.records()) == ["b:2", "s:9"]
        path.write_text("endpoints: [[[")
        os.utime(path, ns=(2, 2))
        await asyncio.sleep(0.1)
        assert sorted(r.name for r in registry.records()) == ["b:2", "s:9"]
    finally:
        await watcher.stop()


async def test_a_missing_file_is_waited_for(tmp_path: Path) -> None:
    path = tmp_path / "later.json"
    registry = EndpointRegistry()
    watcher = FileDiscovery(path, poll_interval_s=0.02)
    await watcher.start(registry)
    try:
        assert len(registry) == 0
        path.write_text('[{"url": "http://127.0.0.1:9", "name": "pod-0"}]')
        for _ in range(100):
            if len(registry):
                break
            await asyncio.sleep(0.02)
        assert [r.name for r in registry.records()] == ["127.0.0.1:9"]
    finally:
        await watcher.stop()
