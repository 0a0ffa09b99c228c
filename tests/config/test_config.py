"""Loading configs: every shipped example loads and builds; mistakes are named precisely."""

from __future__ import annotations

from pathlib import Path

import pytest

from mmgate.config import ConfigError, ConfigErrors, load_config, load_config_text
from mmgate.config.lines import key_lines, line_of
from mmgate.scheduling import build_scheduler
from support.processes import REPO

EXAMPLES = sorted((REPO / "examples").glob("*.yaml"))


def test_there_are_examples() -> None:
    names = {p.name for p in EXAMPLES}
    assert {"round-robin.yaml", "random.yaml"} <= names


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.name)
def test_every_example_loads_and_builds(path: Path) -> None:
    cfg = load_config(path)
    assert cfg.picker.kind == "EndpointPickerConfig"
    scheduler = build_scheduler(cfg.picker, mmgate=cfg.mmgate)
    assert scheduler.profiles


def test_misspelled_top_level_key_names_valid_keys() -> None:
    with pytest.raises(ConfigError) as err:
        load_config_text("apiVersion: llm-d.ai/v1alpha1\nkind: EndpointPickerConfig\nplugin: []\n")
    msg = str(err.value)
    assert err.value.path == "plugin"
    assert "did you mean 'plugins'" in msg
    assert "schedulingProfiles" in msg


def test_misspelled_profile_key_has_full_path() -> None:
    text = """
plugins: [{type: queue-scorer}]
schedulingProfiles:
- name: default
  plugins:
  - pluginRef: queue-scorer
    wieght: 2
"""
    with pytest.raises(ConfigError) as err:
        load_config_text(text)
    assert err.value.path == "schedulingProfiles[0].plugins[0].wieght"
    assert "did you mean 'weight'" in str(err.value)


def test_misspelled_mmgate_key() -> None:
    with pytest.raises(ConfigError) as err:
        load_config_text("mmgate:\n  scrapeInterval: 50\n")
    assert err.value.path == "mmgate.scrapeInterval"
    assert "scrapeIntervalMs" in str(err.value)


def test_misspelled_plugin_parameter_names_the_plugin_keys() -> None:
    cfg = load_config_text("plugins:\n- type: load-aware-scorer\n  parameters: {treshold: 5}\n")
    with pytest.raises(ConfigError) as err:
        build_scheduler(cfg.picker)
    assert err.value.path == "plugins[0].parameters.treshold"
    assert "did you mean 'threshold'" in str(err.value)


def test_wrong_type_names_the_path() -> None:
    cfg = load_config_text("plugins:\n- type: load-aware-scorer\n  parameters: {threshold: lots}\n")
    with pytest.raises(ConfigError) as err:
        build_scheduler(cfg.picker)
    assert "plugins[0].parameters.threshold" in str(err.value)
    assert "int" in str(err.value)


def test_unknown_plugin_type_suggests() -> None:
    cfg = load_config_text("plugins:\n- type: queue-scorrer\n")
    with pytest.raises(ConfigError, match="did you mean 'queue-scorer'"):
        build_scheduler(cfg.picker)


@pytest.mark.parametrize(
    "version", ["llm-d.ai/v1alpha1", "llm-d.ai/v1", "inference.networking.x-k8s.io/v1alpha1"]
)
def test_accepted_api_versions(version: str) -> None:
    assert (
        load_config_text(f"apiVersion: {version}\nkind: EndpointPickerConfig\n").picker.apiVersion == version
    )


def test_bad_api_version_and_kind() -> None:
    with pytest.raises(ConfigError, match="apiVersion"):
        load_config_text("apiVersion: v2\n")
    with pytest.raises(ConfigError, match="kind"):
        load_config_text("kind: Deployment\n")


def test_dangling_plugin_ref() -> None:
    text = "plugins: [{type: queue-scorer}]\nschedulingProfiles: [{name: d, plugins: [{pluginRef: nope}]}]\n"
    config = load_config_text(text)  # the file's shape is fine; what it refers to is not
    with pytest.raises(ConfigError) as err:
        build_scheduler(config.picker)
    assert err.value.path == "schedulingProfiles[0].plugins[0].pluginRef"
    assert "queue-scorer" in str(err.value)


def test_duplicate_plugin_names() -> None:
    config = load_config_text("plugins: [{type: queue-scorer}, {type: queue-scorer}]\n")
    with pytest.raises(ConfigError, match="duplicate plugin name") as err:
        build_scheduler(config.picker)
    assert err.value.path == "plugins[1].name"


def test_a_reference_to_a_broken_plugin_is_not_a_second_mistake() -> None:
    text = """
plugins:
- {type: queue-scorer, parameters: {x: 1}}
- {type: no-such-scorer}
schedulingProfiles:
- {name: d, plugins: [{pluginRef: queue-scorer}, {pluginRef: no-such-scorer}, {pluginRef: typo}]}
- {name: d, plugins: []}
"""
    with pytest.raises(ConfigErrors) as err:
        build_scheduler(load_config_text(text).picker)
    assert [e.path for e in err.value.errors] == [
        "plugins[0].parameters.x",
        "plugins[1].type",
        "schedulingProfiles[0].plugins[2].pluginRef",
        "schedulingProfiles[1].name",
    ]


def test_every_shape_mistake_at_once_with_its_line() -> None:
    text = """apiVersion: llm-d.ai/v1alpha1
kind: EndpointPickerConfig
plugins:
- type: queue-scorer
  nmae: q
schedulingProfiles:
- name: default
  plugins:
  - {pluginRef: q, weight: heavy}
mmgate:
  port: 99999
  limits: {maxPixels: 0, maxDimensions: 5}
"""
    with pytest.raises(ConfigErrors) as err:
        load_config_text(text, source="my.yaml")
    found = [(e.line, e.path) for e in err.value.errors]
    assert found == [
        (5, "plugins[0].nmae"),
        (9, "schedulingProfiles[0].plugins[0].weight"),
        (12, "mmgate.limits.maxDimensions"),
    ]  # the range checks of a section wait until its keys and types are right
    assert str(err.value).splitlines()[0].startswith("my.yaml:5: plugins[0].nmae: unknown key 'nmae'")
    text = text.replace("  nmae: q\n", "").replace("heavy", "-1").replace(", maxDimensions: 5", "")
    with pytest.raises(ConfigErrors) as err:
        load_config_text(text, source="my.yaml")
    assert [(e.line, e.path) for e in err.value.errors] == [
        (8, "schedulingProfiles[0].plugins[0].weight"),
        (10, "mmgate.port"),
        (11, "mmgate.limits.maxPixels"),
    ]


def test_key_lines_follow_yaml_paths_and_fall_back_to_the_parent() -> None:
    lines = key_lines("a:\n  b: [1,\n    2]\nc:\n- x: 1\n  y: 2\n")
    assert lines["a"] == 1 and lines["a.b"] == 2 and lines["a.b[1]"] == 3
    assert lines["c[0]"] == 5 and lines["c[0].y"] == 6
    assert line_of(lines, "c[0].y.deeper") == 6
    assert line_of(lines, "nowhere") is None
    assert key_lines("a: [\n") == {}
    assert key_lines("a: &x [*x]\n") == {"a": 1, "a[0]": 1}  # a recursive alias ends the walk


def test_two_profiles_without_handler_is_an_error() -> None:
    text = """
plugins: [{type: queue-scorer}]
schedulingProfiles:
- {name: a, plugins: [{pluginRef: queue-scorer}]}
- {name: b, plugins: [{pluginRef: queue-scorer}]}
"""
    with pytest.raises(ConfigError, match="profile handler"):
        build_scheduler(load_config_text(text).picker)


def test_not_yaml_and_not_a_mapping(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="not valid YAML"):
        load_config_text("plugins: [\n")
    with pytest.raises(ConfigError, match="mapping"):
        load_config_text("- a\n- b\n")
    with pytest.raises(ConfigError, match="cannot read"):
        load_config(tmp_path / "missing.yaml")


def test_mmgate_section_values() -> None:
    cfg = load_config_text(
        "mmgate:\n  port: 9000\n  endpoints: [127.0.0.1:8001, {url: 'http://h:1', role: encode}]\n"
    )
    assert cfg.mmgate.port == 9000
    assert cfg.mmgate.endpoints[0] == "127.0.0.1:8001"
    assert cfg.mmgate.endpoints[1].role == "encode"
    with pytest.raises(ConfigError, match="scrapeIntervalMs"):
        load_config_text("mmgate:\n  scrapeIntervalMs: 10\n")


def test_limits_section_maps_to_request_limits() -> None:
    from mmgate.request import DEFAULT_LIMITS, Limits

    assert Limits.from_config(load_config_text("").mmgate.limits) == DEFAULT_LIMITS
    cfg = load_config_text("mmgate:\n  limits: {maxMediaItems: 8, maxPixels: 1000000, urlSchemes: [HTTPS]}\n")
    limits = Limits.from_config(cfg.mmgate.limits)
    assert (limits.max_assets, limits.max_pixels, limits.url_schemes) == (8, 1_000_000, frozenset({"https"}))
    with pytest.raises(ConfigError) as err:
        load_config_text("mmgate:\n  limits: {maxPixels: 0}\n")
    assert err.value.path == "mmgate.limits.maxPixels"


def test_a_missing_named_producer_names_the_consumer_entry() -> None:
    text = (
        "plugins:\n- type: queue-scorer\n"
        "- type: prefix-cache-scorer\n  parameters: {prefixMatchInfoProducerName: nope}\n"
    )
    config = load_config_text(text, source="p.yaml")
    with pytest.raises(ConfigError) as err:
        build_scheduler(config.picker)
    located = config.locate(err.value)
    assert located.path == "plugins[1].parameters" and located.line == 4
    assert "reads data from producer 'nope'" in str(located)
