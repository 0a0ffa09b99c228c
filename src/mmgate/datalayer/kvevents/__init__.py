"""Subscribing to the pods' vLLM KV events and mirroring them into a block index."""

from mmgate.datalayer.kvevents.settings import KVEventsSettings, Source
from mmgate.datalayer.kvevents.subscriber import KVEventSubscriber

__all__ = ["KVEventSubscriber", "KVEventsSettings", "Source"]
