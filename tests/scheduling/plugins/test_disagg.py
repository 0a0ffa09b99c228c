"""E/PD and E/P/D: role filters, deciders and the decode-first disagg-profile-handler."""

from __future__ import annotations

import pytest

from mmgate.config import ConfigError, load_config, parse_config
from mmgate.request.view import MediaAsset
from mmgate.scheduling import EndpointState, Metrics, Scheduler, SchedulingRequest, build_scheduler
from mmgate.scheduling.keys import PREFIX_MATCH, TOKENIZED_PROMPT, PrefixMatch, TokenizedPrompt
from mmgate.scheduling.plugins.decode_filter import DecodeFilter
from mmgate.scheduling.plugins.encode_filter import EncodeFilter
from mmgate.scheduling.plugins.prefill_filter import PrefillFilter
from mmgate.scheduling.plugins.prefix_based_pd_decider import PrefixBasedPDDecider
from support.processes import REPO
from support.scheduling import image, request, scheduler, view

EXAMPLES = REPO / "examples"
ROLES = [
    None,
    "encode",
    "prefill",
    "decode",
    "both",
    "prefill-decode",
    "encode-prefill",
    "encode-prefill-decode",
]


def fleet(*roles: str | None) -> list[EndpointState]:
    return [EndpointState(f"10.0.1.{i}:8000", role=r, metrics=Metrics()) for i, r in enumerate(roles)]


@pytest.mark.parametrize(
    ("kind", "accepted"),
    [
        ("encode-filter", {"encode", "encode-prefill", "encode-prefill-decode"}),
        ("prefill-filter", {"prefill", "both", "prefill-decode", "encode-prefill", "encode-prefill-decode"}),
        ("decode-filter", {None, "decode", "both", "prefill-decode", "encode-prefill-decode"}),
    ],
)
def test_role_filters_follow_llm_d_roles(kind: str, accepted: set[str | None]) -> None:
    s = scheduler([{"type": kind}])
    f = s.plugins[kind]
    assert isinstance(f, EncodeFilter | PrefillFilter | DecodeFilter)
    eps = fleet(*ROLES)
    assert {e.role for e in f.filter(request(), eps)} == accepted


def test_role_label_is_read_when_role_is_unset() -> None:
    f = scheduler([{"type": "encode-filter"}]).plugins["encode-filter"]
    assert isinstance(f, EncodeFilter)
    ep = EndpointState("a:1", labels={"llm-d.ai/role": "encode"})
    assert f.filter(request(), [ep]) == [ep]


def test_a_role_filter_answers_a_changed_fleet_anew() -> None:
    """It remembers its answer per list of endpoint states: a state made for a new role (as the
    data layer makes one), an added endpoint or a removed one gives a new answer."""
    s = scheduler([{"type": "encode-filter"}])
    f = s.plugins["encode-filter"]
    assert isinstance(f, EncodeFilter)
    eps = fleet("encode", "decode", "encode")
    assert f.filter(request(), eps) == [eps[0], eps[2]]
    assert f.filter(request(), eps) == [eps[0], eps[2]]  # the remembered answer, a fresh list
    assert f.filter(request(), eps) is not f.filter(request(), eps)
    now_encode = EndpointState(eps[1].name, role="encode", metrics=Metrics())
    assert f.filter(request(), [eps[0], now_encode, eps[2]]) == [eps[0], now_encode, eps[2]]
    assert f.filter(request(), eps[:2]) == [eps[0]]
    s.remove_endpoint(eps[0].name)
    assert f.filter(request(), eps[1:]) == [eps[2]]


def load(name: str) -> Scheduler:
    cfg = load_config(EXAMPLES / name)
    return build_scheduler(cfg.picker, mmgate=cfg.mmgate, seed=2)


def send(s: Scheduler, eps: list[EndpointState], rid: str, *parts: str | MediaAsset) -> dict[str, list[str]]:
    req = SchedulingRequest(view(*parts), rid)
    result = s.schedule(req, eps, 0.0)
    s.on_started(req, result.target, 0.0)
    s.pre_request(req, result, 0.0)
    s.on_finished(rid, 0.0)
    assert result.primary_profile == "decode"
    return {name: [e.name for e in result.targets_of(name)] for name in result.profiles}


def test_e_p_d_media_request_uses_three_stages_on_the_right_roles() -> None:
    s = load("e-p-d.yaml")
    eps = fleet("encode", "encode", "prefill", "decode")
    got = send(s, eps, "a", "what is this?", image("c" * 32))
    assert got["decode"] == [eps[3].name]
    assert got["prefill"] == [eps[2].name]
    assert got["encode"][0] in {eps[0].name, eps[1].name}


def test_a_request_scheduled_again_gets_its_stages_planned_again() -> None:
    """The handler plans from this call's results, not from a mark an earlier call left."""
    s = load("e-p-d.yaml")
    eps = fleet("encode", "prefill", "decode")
    req = SchedulingRequest(view("what is this?", image("e" * 32)), "again")
    first = s.schedule(req, eps, 0.0)
    again = s.schedule(req, eps, 0.0)
    assert set(first.profiles) == set(again.profiles) == {"decode", "encode", "prefill"}


def test_text_only_request_skips_the_encode_stage() -> None:
    s = load("e-p-d.yaml")
    got = send(s, fleet("encode", "prefill", "decode"), "t", "hello there")
    assert "encode" not in got and "prefill" in got


def test_repeat_image_goes_to_the_encoder_that_encoded_it() -> None:
    """The llm-d #2626 fix end to end: encoder-cache affinity works in the encode profile."""
    s = load("e-pd.yaml")
    eps = fleet("encode", "encode", "encode", "prefill-decode", "prefill-decode")
    picture = image("d" * 32)
    first = send(s, eps, "0", "describe", picture)["encode"]
    for i in range(6):
        assert send(s, eps, f"r{i}", f"unrelated question {i}", picture)["encode"] == first


def test_prefix_based_decider() -> None:
    s = scheduler(
        [{"type": "prefix-based-pd-decider", "parameters": {"nonCachedTokens": 100, "promptTokens": 200}}]
    )
    d = s.plugins["prefix-based-pd-decider"]
    assert isinstance(d, PrefixBasedPDDecider)
    ep = EndpointState("d:1")

    def decide(total: int, matched_blocks: int) -> bool:
        req = request()
        req.put(TOKENIZED_PROMPT, TokenizedPrompt([0] * total, [], total, 0))
        req.put(PREFIX_MATCH, PrefixMatch(64, total // 64 + 1, total, [], {ep.name: matched_blocks}))
        return d.disaggregate(req, ep)

    assert decide(1000, 0)  # 1000 uncached
    assert not decide(150, 0)  # shorter than promptTokens
    assert not decide(1000, 15)  # 1000 - 960 = 40 uncached < 100
    assert decide(1000, 14)  # 1000 - 896 = 104 uncached


def test_decider_references_are_checked() -> None:
    with pytest.raises(ConfigError) as err:
        scheduler([{"type": "disagg-profile-handler", "parameters": {"deciders": {"encode": "nope"}}}])
    assert err.value.path == "plugins[0].parameters"
    assert "deciders.encode" in str(err.value)
    with pytest.raises(ConfigError, match="not a decider"):
        scheduler(
            [
                {"type": "queue-scorer"},
                {"type": "disagg-profile-handler", "parameters": {"deciders": {"prefill": "queue-scorer"}}},
            ]
        )


def _headers_of(s: Scheduler, eps: list[EndpointState], *parts: str | MediaAsset) -> dict[str, str]:
    req = SchedulingRequest(view(*parts), "h")
    result = s.schedule(req, eps, 0.0)
    s.pre_request_before_send(req, result, 0.0)
    return dict(req.upstream_headers or {})


def test_routing_headers_name_each_stage_pod_before_the_request_is_sent() -> None:
    s = load("e-p-d.yaml")
    eps = fleet("encode", "prefill", "decode")
    assert _headers_of(s, eps, "what is this?", image("e" * 32)) == {
        "x-encoder-hosts-ports": eps[0].name,
        "x-prefiller-host-port": eps[1].name,
    }
    assert _headers_of(s, eps, "hello there") == {"x-prefiller-host-port": eps[1].name}  # no encode stage


E_P_D_WITHOUT_HEADER_PLUGINS = [
    {"type": "always-disagg-multimodal-decider"},
    {"type": "always-disagg-pd-decider"},
    {
        "type": "disagg-profile-handler",
        "parameters": {
            "profiles": {"encode": "enc", "prefill": "pre"},
            "deciders": {"encode": "always-disagg-multimodal-decider", "prefill": "always-disagg-pd-decider"},
        },
    },
    {"type": "encode-filter"},
    {"type": "prefill-filter"},
    {"type": "decode-filter"},
]


def test_a_disaggregated_config_without_header_plugins_gets_them_by_default() -> None:
    profiles = [
        {"name": "enc", "plugins": [{"pluginRef": "encode-filter"}]},
        {"name": "pre", "plugins": [{"pluginRef": "prefill-filter"}]},
        {"name": "decode", "plugins": [{"pluginRef": "decode-filter"}]},
    ]
    s = build_scheduler(
        parse_config({"plugins": E_P_D_WITHOUT_HEADER_PLUGINS, "schedulingProfiles": profiles}).picker
    )
    made = {p.type_name: p for p in s.plugins.values() if p.type_name.endswith("-header-handler")}
    assert set(made) == {"encoder-header-handler", "prefill-header-handler"}
    eps = fleet("encode", "prefill", "decode")
    assert _headers_of(s, eps, "look", image("f" * 32)) == {
        "x-encoder-hosts-ports": eps[0].name,
        "x-prefiller-host-port": eps[1].name,
    }


def test_a_configured_header_plugin_is_not_doubled() -> None:
    s = load("e-pd.yaml")  # lists encoder-header-handler itself
    kinds = [p.type_name for p in s.plugins.values() if p.type_name.endswith("-header-handler")]
    assert kinds == ["encoder-header-handler"]


def test_the_encoder_header_names_one_encoder_per_item_and_the_holder_of_a_seen_one() -> None:
    s = load("e-pd.yaml")
    eps = fleet("encode", "encode", "prefill-decode")
    encoders = {eps[0].name, eps[1].name}
    cats = [image(c * 32) for c in "abcd"]

    def header(*parts: str | MediaAsset) -> list[str]:
        req = SchedulingRequest(view(*parts), "r")
        result = s.schedule(req, eps, 0.0)
        s.pre_request(req, result, 0.0)  # before-send headers, then the index updates
        return (req.upstream_headers or {})["x-encoder-hosts-ports"].split(",")

    first = header("four cold images", *cats, cats[0])  # the repeat is listed once
    assert len(first) == 4 and set(first) == encoders  # spread over both encoders
    again = header("seen before", cats[2], cats[1])
    assert again == [first[2], first[1]]  # each to the encoder that encoded it
    eps[0].metrics = Metrics(waiting=9)
    busy = header("cold again", image("e" * 32), image("f" * 32))
    assert busy == [eps[1].name, eps[1].name]  # a deep queue keeps cold items away


def test_per_item_planning_can_be_turned_off_for_llm_d_s_target_list() -> None:
    cfg = load_config(EXAMPLES / "e-pd.yaml")
    for plugin in cfg.picker.plugins:
        if plugin.type == "encoder-header-handler":
            plugin.parameters = {"encodeProfile": "encode", "perItem": False}
    s = build_scheduler(cfg.picker, mmgate=cfg.mmgate, seed=2)
    eps = fleet("encode", "encode", "prefill-decode")
    assert (
        len(_headers_of(s, eps, "two", image("a" * 32), image("b" * 32))["x-encoder-hosts-ports"].split(","))
        == 1
    )


def test_every_encoder_of_a_per_item_plan_is_charged_at_once_until_the_first_token() -> None:
    s = load("e-pd.yaml")
    eps = fleet("encode", "encode", "prefill-decode")
    req = SchedulingRequest(view("four", *(image(c * 32) for c in "abcd")), "r")
    result = s.schedule(req, eps, 0.0)
    s.pre_request_before_send(req, result, 0.0)
    planned = set((req.upstream_headers or {})["x-encoder-hosts-ports"].split(","))
    assert planned == {eps[0].name, eps[1].name}
    s.start(req, result, 0.0)
    assert [e.inflight.requests for e in eps] == [1, 1, 1]  # both encoders, before any scrape
    s.on_first_token("r", 0.1)
    assert [e.inflight.requests for e in eps] == [0, 0, 1]  # their legs are over
    s.on_finished("r", 0.2)
    assert [e.inflight.requests for e in eps] == [0, 0, 0]


def test_a_stage_pod_whose_legs_ended_is_released_before_the_first_token() -> None:
    s = load("e-pd.yaml")
    eps = fleet("encode", "encode", "prefill-decode")
    req = SchedulingRequest(view("four", *(image(c * 32) for c in "abcd")), "r")
    result = s.schedule(req, eps, 0.0)
    s.pre_request_before_send(req, result, 0.0)
    s.start(req, result, 0.0)
    assert [e.inflight.requests for e in eps] == [1, 1, 1]
    assert eps[0].inflight.tokens > 0 and eps[1].inflight.tokens > 0
    s.on_stage_done("r", eps[1].name, 0.05)  # its legs are over; the other encoder's are not
    assert [e.inflight.requests for e in eps] == [1, 0, 1]
    assert eps[0].inflight.tokens > 0 and eps[1].inflight.tokens == 0
    s.on_stage_done("r", eps[1].name, 0.06)  # told twice: released once
    s.on_stage_done("r", eps[2].name, 0.06)  # the serving pod is no stage pod: it keeps the request
    assert [e.inflight.requests for e in eps] == [1, 0, 1]
    s.on_first_token("r", 0.1)
    assert [e.inflight.requests for e in eps] == [0, 0, 1]
    s.on_finished("r", 0.2)
    assert [e.inflight.requests for e in eps] == [0, 0, 0]
    assert all(e.inflight.tokens == 0 for e in eps)


@pytest.mark.parametrize("n", range(8))
def test_a_cold_item_goes_to_the_encoder_the_request_before_it_did_not_plan(n: int) -> None:
    """Two one-image requests, the second while the first is in flight and before any scrape:
    the first's planned encoder carries it, so the second's cold item goes to the other one."""
    s = load("e-pd.yaml")
    eps = fleet("encode", "encode", "prefill-decode")
    chosen = []
    for rid, identity in (("a", f"{n:032d}"), ("b", f"{n + 1000:032d}")):
        req = SchedulingRequest(view("one", image(identity)), rid)
        result = s.schedule(req, eps, 0.0)
        s.pre_request_before_send(req, result, 0.0)
        s.start(req, result, 0.0)
        chosen.append((req.upstream_headers or {})["x-encoder-hosts-ports"])
    assert sorted(chosen) == sorted([eps[0].name, eps[1].name])
