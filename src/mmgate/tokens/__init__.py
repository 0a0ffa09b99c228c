"""Pricing a request in tokens per served model family and per hosted API.

``price(view, config)`` gives text tokens and per-asset tokens; ``build_sequence(view, pricing)``
lays the request out as the deterministic pseudo-token stream the simulator and the scheduler share.
"""

from mmgate.tokens.estimator import EstimateConfig, Estimator, parse_estimate
from mmgate.tokens.families import FAMILIES, family_for_model, get_family
from mmgate.tokens.pricing import AssetPrice, Pricing, PricingConfig, price
from mmgate.tokens.providers import get_provider
from mmgate.tokens.rules import Count, Family, UnknownNameError
from mmgate.tokens.sequence import MMItem, TokenSequence, TokenStream, build_sequence, price_stream

__all__ = [
    "FAMILIES",
    "AssetPrice",
    "Count",
    "EstimateConfig",
    "Estimator",
    "Family",
    "MMItem",
    "Pricing",
    "PricingConfig",
    "TokenSequence",
    "TokenStream",
    "UnknownNameError",
    "build_sequence",
    "family_for_model",
    "get_family",
    "get_provider",
    "parse_estimate",
    "price",
    "price_stream",
]
