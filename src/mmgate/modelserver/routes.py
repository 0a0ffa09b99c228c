"""The small routes of a vLLM-compatible server and its error answers, on aiohttp.

Every answer carries the server's identification header (``x-mmgate-sim-pod`` for a simulated pod,
``x-mmgate-engine`` for the reference engine) so a test or a curious operator can see where a
request landed. Client mistakes are OpenAI-shaped errors naming the field, as vLLM answers them.
"""

from __future__ import annotations

from collections.abc import Mapping

from aiohttp import web

from mmgate.errors import RequestError

SSE_HEADERS = {"Content-Type": "text/event-stream", "Cache-Control": "no-cache"}
METRICS_CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


async def listen(app: web.Application, host: str, port: int) -> tuple[web.AppRunner, int]:
    """Serve ``app`` on ``host:port`` (0 picks a free port); the runner to clean up and the port.
    No access log (a scrape every 50 ms would drown it) and no signal handlers (the command owns
    them)."""
    runner = web.AppRunner(app, access_log=None, handle_signals=False)
    await runner.setup()
    site = web.TCPSite(runner, host, port, reuse_address=True)
    await site.start()
    return runner, runner.addresses[0][1] if port == 0 else port


def error_response(err: RequestError, headers: Mapping[str, str]) -> web.Response:
    return web.json_response(err.to_dict(), status=err.status, headers=headers)


def unknown_model(model: str) -> RequestError:
    """vLLM's answer to a request naming a model the server does not serve."""
    return RequestError(
        f"The model `{model}` does not exist.",
        param="model",
        status=404,
        type="NotFoundError",
        code="model_not_found",
    )


def models_response(
    model: str, max_model_len: int, headers: Mapping[str, str], adapters: Mapping[str, str] | None = None
) -> web.Response:
    """``GET /v1/models`` as vLLM lists its served model and its LoRA adapters (name -> path):
    an adapter's card has the path as ``root`` and the base model as ``parent``."""
    cards = [(model, model, None)] + [(name, path, model) for name, path in (adapters or {}).items()]
    doc = {
        "object": "list",
        "data": [
            {
                "id": name,
                "object": "model",
                "created": 0,
                "owned_by": "vllm",
                "root": root,
                "parent": parent,
                "max_model_len": max_model_len,
            }
            for name, root, parent in cards
        ],
    }
    return web.json_response(doc, headers=headers)


def metrics_response(body: bytes, headers: Mapping[str, str]) -> web.Response:
    """``GET /metrics``: Prometheus text exposition format 0.0.4."""
    return web.Response(body=body, headers={**headers, "Content-Type": METRICS_CONTENT_TYPE})
