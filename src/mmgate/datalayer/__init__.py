"""What the gateway knows about endpoints: discovery, health, metrics scraping."""

from mmgate.datalayer.endpoints import Endpoint, EndpointRecord, EndpointRegistry, parse_endpoint
from mmgate.datalayer.layer import DataLayer, DataLayerConfig
from mmgate.datalayer.metrics import MetricsSnapshot, parse_metrics

__all__ = [
    "DataLayer",
    "DataLayerConfig",
    "Endpoint",
    "EndpointRecord",
    "EndpointRegistry",
    "MetricsSnapshot",
    "parse_endpoint",
    "parse_metrics",
]
