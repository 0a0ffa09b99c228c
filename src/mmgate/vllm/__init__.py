"""vLLM wire compatibility: what mmgate must compute or parse exactly as vLLM does.

``blocks`` (prefix-cache block keys), ``kvevents`` (KV-cache event structs, both encodings, ZMQ
framing) and ``kv_events_config`` (``--kv-events-config`` and its endpoint rules). The simulator
publishes with these and the datalayer subscribes with them, so both ends agree by construction.
"""
