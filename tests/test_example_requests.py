"""Every body in ``examples/requests/`` gets a 2xx from the demo its README names: the demo's own
gateway configuration and simulated fleet, with that ``--profile``."""

from __future__ import annotations

import re

import pytest

from mmgate.demo import demo_config_yaml
from mmgate.sim.profiles import load_profile
from support.processes import REPO
from support.stack import stack

REQUESTS = REPO / "examples" / "requests"
ROW = re.compile(r"^\| `([^`]+\.json)` \| `([^`]+)` \| `(mmgate demo[^`]*)` \|")


def documented() -> list[tuple[str, str, str]]:
    rows = [m.groups() for m in map(ROW.match, (REQUESTS / "README.md").read_text().splitlines()) if m]
    return [(body, route, command) for body, route, command in rows]


def test_the_readme_names_a_demo_for_every_body() -> None:
    assert sorted(body for body, _, _ in documented()) == sorted(p.name for p in REQUESTS.glob("*.json"))


@pytest.mark.parametrize(("body", "route", "command"), documented(), ids=lambda x: str(x))
async def test_each_body_runs_against_its_demo(body: str, route: str, command: str) -> None:
    found = re.search(r"--profile (\S+)", command)
    profile = found.group(1) if found else "qwen3-vl-32b-h200-tp2"  # mmgate demo's default
    data = (REQUESTS / body).read_bytes()
    json_type = {"Content-Type": "application/json"}
    async with (
        stack(demo_config_yaml(load_profile(profile).model), pods=1, profile=profile) as s,
        s.session.post(s.url + route, data=data, headers=json_type) as r,
    ):
        answer = await r.read()
        assert 200 <= r.status < 300, (body, r.status, answer[:500])
        assert r.headers["x-mmgate-endpoint"]


def test_profile_help_says_it_chooses_the_model() -> None:
    import argparse

    from mmgate import demo

    parser = argparse.ArgumentParser()
    demo.add_arguments(parser)
    help_text = " ".join(parser.format_help().split())
    assert "and the model the pods serve" in help_text
