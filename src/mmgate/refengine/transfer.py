"""Handing image features from an encode-only engine to the engine that prefills (E/PD).

vLLM's encoder-disaggregated serving runs the vision tower on one instance (``--mm-encoder-only``)
and the language model on another; the encoder's answer carries ``ec_transfer_params`` keyed by
each item's identifier, saying where its output waits, and the proxy passes them to the prefill
instance, which reads the tensors instead of encoding. Here the wait is a small TCP service beside
the encode-only engine (:class:`FeatureServer`), and the prefill engine's :class:`FeatureClient`
is its ``fetch_features``:

* request: the identity as one UTF-8 line; answer: an 8-byte big-endian length, then the features
  as a safetensors blob (no pickle crosses the wire), length 0 when the item is not held;
* ``ec_transfer_params`` are the model servers' common shape
  (:func:`mmgate.modelserver.transfer.encoder_response_params`):
  ``{identity: {"do_remote_encode", "remote_host", "remote_port", "modality", "num_tokens"}}``;
* the client connects only to hosts on its allow-list (loopback unless configured), since the
  address comes from a request body; anything that goes wrong returns None, and the engine then
  encodes the image itself, so a lost hand-off costs time, never an answer.
"""

from __future__ import annotations

import ipaddress
import logging
import socket
import socketserver
import struct
import threading
from collections.abc import Collection, Mapping
from typing import Any

import torch
from safetensors import SafetensorError
from safetensors.torch import load as load_tensors
from safetensors.torch import save as save_tensors

from mmgate.modelserver.transfer import encoder_response_params
from mmgate.refengine.caches import LruCache

__all__ = ["FeatureClient", "FeatureServer"]

log = logging.getLogger("mmgate.refengine.transfer")

_LENGTH = struct.Struct(">Q")
_MAX_IDENTITY = 1024  # bytes of one request line
_MAX_BLOB = 1 << 30  # a bigger answer is not one image's features


class FeatureServer:
    """Serves the features an encode-only engine computed, by identity, on ``host:port``
    (port 0 picks a free one). Holds ``capacity_tokens`` embeddings, least recently used first out.
    ``advertised_host`` is the address consumers are told to connect to when it is not the bound one
    (a server bound to ``0.0.0.0`` is reached at the pod's own address)."""

    def __init__(
        self,
        host: str = "127.0.0.1",
        port: int = 0,
        capacity_tokens: int = 1 << 20,
        *,
        advertised_host: str | None = None,
    ) -> None:
        self._advertised = advertised_host
        self._lock = threading.Lock()
        self._store: LruCache[str, tuple[bytes, int]] = LruCache(capacity_tokens, lambda held: held[1])
        store = self

        class Handler(socketserver.StreamRequestHandler):
            def handle(self) -> None:
                line = self.rfile.readline(_MAX_IDENTITY)
                blob = store.held(line.rstrip(b"\r\n").decode("utf-8", "replace"))
                self.wfile.write(_LENGTH.pack(len(blob)) + blob)

        self._server = socketserver.ThreadingTCPServer((host, port), Handler, bind_and_activate=False)
        self._server.daemon_threads = True
        self._server.allow_reuse_address = True
        self._server.server_bind()
        self._server.server_activate()
        self._thread = threading.Thread(
            target=self._server.serve_forever, name="mmgate-ec-server", daemon=True
        )

    @property
    def address(self) -> tuple[str, int]:
        host, port = self._server.server_address[:2]
        return str(host), int(port)

    def start(self) -> FeatureServer:
        self._thread.start()
        return self

    def close(self) -> None:
        if self._thread.is_alive():
            self._server.shutdown()
        self._server.server_close()

    def publish(self, features: Mapping[str, torch.Tensor]) -> dict[str, dict[str, Any]]:
        """Hold ``features`` (identity -> ``(tokens, hidden)``) and return the
        ``ec_transfer_params`` naming them, for the encode leg's answer."""
        with self._lock:
            for identity, tensor in features.items():
                blob = save_tensors({"features": tensor.contiguous()})
                self._store.put(identity, (blob, int(tensor.shape[0])))
        host, port = self.address
        host = self._advertised or host
        items = [(identity, "image", int(t.shape[0])) for identity, t in features.items()]
        return encoder_response_params(items, host=host, port=port)

    def held(self, identity: str) -> bytes:
        """The safetensors blob of an item's features; empty when not held."""
        with self._lock:
            entry = self._store.get(identity)
        return entry[0] if entry is not None else b""


def _loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


class FeatureClient:
    """An engine's ``fetch_features``: reads an item's features from the encode-only engine its
    ``ec_transfer_params`` entry names, if that host is allowed (``allowed_hosts``: exact host
    names or addresses; loopback is always allowed)."""

    def __init__(self, allowed_hosts: Collection[str] = (), timeout: float = 10.0) -> None:
        self._allowed = frozenset(allowed_hosts)
        self._timeout = timeout

    def __call__(self, identity: str, params: Mapping[str, Any]) -> torch.Tensor | None:
        host, port = params.get("remote_host"), params.get("remote_port")
        if not isinstance(host, str) or not isinstance(port, int) or isinstance(port, bool):
            log.warning(
                "ec_transfer_params for %s name no remote_host/remote_port; encoding locally", identity
            )
            return None
        if not (_loopback(host) or host in self._allowed):
            log.warning("encoder %s is not on the allow-list; encoding %s locally", host, identity)
            return None
        try:
            with socket.create_connection((host, port), timeout=self._timeout) as sock:
                sock.sendall(identity.encode() + b"\n")
                reader = sock.makefile("rb")
                (length,) = _LENGTH.unpack(reader.read(_LENGTH.size))
                if not 0 < length <= _MAX_BLOB:
                    return None
                tensors = load_tensors(reader.read(length))
        except (OSError, struct.error, ValueError, SafetensorError) as exc:
            log.warning("fetching %s from %s:%s failed (%s); encoding locally", identity, host, port, exc)
            return None
        features = tensors.get("features")
        return features if isinstance(features, torch.Tensor) and features.ndim == 2 else None
