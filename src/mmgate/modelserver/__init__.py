"""What a vLLM-compatible model server of mmgate shows the world, shared by the simulator's pods
(:mod:`mmgate.sim`) and the reference engine (:mod:`mmgate.refengine`): the OpenAI response and stream
bytes, the small routes (``/v1/models``, ``/health``, ``/metrics``, errors), vLLM's metric names and
the KV-event publisher. A gateway, a benchmark or a dashboard cannot tell which one answers."""
