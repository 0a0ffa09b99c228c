"""Encode / prefill / decode disaggregation that runs: the legs before a decode pod gets a request.

``plan``: the pure decisions (which encoder per media item, each leg's body). ``orchestrate``: the
legs over the gateway's upstream client, with timeouts, retries and the fallback. ``stages``: the
routing headers as stages to run. ``sidecar``: ``mmgate sidecar``, beside each decode pod (llm-d's
routing sidecar contract). The gateway runs the same orchestration itself with
``mmgate.disaggregation.orchestrator: gateway``.
"""
