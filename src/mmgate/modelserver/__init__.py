"""What a vLLM-compatible model server of mmgate shows the world, shared by the simulator's pods
and the reference engine, which import it and never each other: the OpenAI response and stream
bytes, the small routes (``/v1/models``, ``/health``, ``/metrics``, errors), vLLM's metric names,
the KV events an engine emits (:mod:`.events`) and their publisher, the stats snapshot behind
``/metrics`` (:mod:`.stats`) and the disaggregation transfer parameters (:mod:`.transfer`). A
gateway, a benchmark or a dashboard cannot tell which one answers."""
