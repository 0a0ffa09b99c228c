"""URL media sized by their real headers, when the operator opted in (``mmgate.urlProbe``).

A URL image is otherwise priced at a configured default resolution; a wrong default misprices
every such request. With the probe on, the URL assets a parse left unprobed are fetched (the first
bytes only, through :class:`~mmgate.request.urlprobe.UrlProber` and its guards), all of one request
at once, and sized by the same header readers as inline media. The request waits at most
``timeout_s`` for them together; whatever has not answered by then keeps the default, and its fetch
goes on in the background for the next request (it never outlives its own timeout either).
"""

from __future__ import annotations

import asyncio

from mmgate.request.assets import apply_head
from mmgate.request.urlprobe import UrlProber
from mmgate.request.view import MediaAsset, Modality, RequestView, Source

_SIZED = (Modality.IMAGE, Modality.VIDEO, Modality.AUDIO)


class UrlSizer:
    def __init__(self, prober: UrlProber) -> None:
        self.prober = prober

    async def size(self, view: RequestView) -> int:
        """Fill the sizes of ``view``'s unprobed URL assets that answer in time; how many were."""
        wanted = [a for a in view.assets if _wanted(a)]
        if not wanted:
            return 0
        by_url: dict[str, list[MediaAsset]] = {}
        for asset in wanted:
            assert asset.url is not None
            same = by_url.setdefault(asset.url, [])
            if not any(a is asset for a in same):  # a repeated part may be the same object
                same.append(asset)
        tasks = {asyncio.ensure_future(self.prober.fetch_head(url)): url for url in by_url}
        done, pending = await asyncio.wait(tasks, timeout=self.prober.settings.timeout_s)
        for task in pending:
            task.cancel()  # only this request's wait: the shared fetch goes on (fetch_head shields it)
        sized = 0
        for task in done:
            head = task.result().head
            if head is None:
                continue
            for asset in by_url[tasks[task]]:
                if apply_head(asset, head):
                    sized += 1
        view.unprobed_assets = max(0, view.unprobed_assets - sized)
        return sized


def _wanted(asset: MediaAsset) -> bool:
    if asset.source is not Source.URL or asset.probed or asset.url is None:
        return False
    return asset.modality in _SIZED
