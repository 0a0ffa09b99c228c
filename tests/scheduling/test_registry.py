"""The plugin registry: one explicit list of built-ins, typed parameters, no duplicate names."""

from __future__ import annotations

import importlib
import pkgutil
import random

import pytest

import mmgate.scheduling.plugins as builtin_package
from mmgate.config import ConfigError
from mmgate.scheduling import PluginHandle, builtin_registry
from mmgate.scheduling.contracts import NoParams, Plugin
from mmgate.scheduling.plugins import BUILTIN_PLUGINS
from mmgate.scheduling.plugins.approx_prefix_cache_producer import ApproxPrefixParams
from mmgate.scheduling.plugins.max_score_picker import MaxScorePicker
from mmgate.scheduling.plugins.queue_scorer import QueueScorer
from mmgate.scheduling.plugins.token_producer import TokenProducer


def test_every_plugin_module_has_its_class_in_the_builtin_tuple() -> None:
    listed = {cls.__module__ for cls in BUILTIN_PLUGINS}
    for info in pkgutil.iter_modules(builtin_package.__path__):
        if info.name.startswith("_"):
            continue  # shared helpers, not plugins
        module = f"{builtin_package.__name__}.{info.name}"
        importlib.import_module(module)
        assert module in listed, f"{module} defines a plugin missing from BUILTIN_PLUGINS"
        type_names = [c.type_name for c in BUILTIN_PLUGINS if c.__module__ == module]
        assert type_names == [info.name.replace("_", "-")], "a module is named after its llm-d type"


def test_params_come_from_the_type_argument() -> None:
    registry = builtin_registry()
    made = registry.create(
        "approx-prefix-cache-producer", "p", {"blockSizeTokens": 32}, PluginHandle(random.Random(0))
    )
    assert isinstance(made.params, ApproxPrefixParams) and made.params.blockSizeTokens == 32
    assert QueueScorer.Params is NoParams
    assert MaxScorePicker.Params.__name__ == "PickerParams"  # inherited from the shared picker base


def test_deprecated_alias_finds_the_same_class() -> None:
    assert builtin_registry().lookup("tokenizer") is TokenProducer
    assert "tokenizer" not in builtin_registry().types()


def test_unknown_type_suggests_the_close_one() -> None:
    with pytest.raises(ConfigError, match="did you mean 'queue-scorer'"):
        builtin_registry().lookup("queue-scorr", path="plugins[0].type")


def test_a_type_name_cannot_be_registered_twice() -> None:
    class Impostor(Plugin[NoParams]):
        type_name = "queue-scorer"

    with pytest.raises(TypeError, match="registered twice"):
        builtin_registry().with_plugins(Impostor)

    class Nameless(Plugin[NoParams]):
        pass

    with pytest.raises(TypeError, match="no type_name"):
        builtin_registry().with_plugins(Nameless)


@pytest.mark.parametrize(
    ("type_name", "typo"),
    [
        ("approx-prefix-cache-producer", "blockSizeToken"),
        ("mm-embeddings-cache-producer", "cacheSizeInMB"),
        ("predicted-ttft-producer", "prefillTokensPerSec"),
        ("predicted-ttft-scorer", "futureWeigth"),
    ],
)
def test_a_misspelt_parameter_of_a_compiled_plugin_is_refused(type_name: str, typo: str) -> None:
    """Their schemas live apart from the compiled modules (plugins/_schemas.py) so that msgspec,
    not mypyc, builds them: an unknown field must still be an error naming it."""
    with pytest.raises(ConfigError, match=typo):
        builtin_registry().create(type_name, "p", {typo: 1}, PluginHandle(random.Random(0)))
