"""API keys: who may use the gateway, as which tenant, within which per-key limits.

The keys file holds only digests (``sha256`` of the key, hex), never the keys, so a leaked file
or backup grants nothing. A presented key is hashed and its digest compared with every stored one
by :func:`hmac.compare_digest`, without stopping at a match, so the time taken says nothing about
which digest (or how much of one) matched.
The file is re-read when it changes (checked at most once per ``check_every_s``, one ``stat``),
so keys can be added or revoked without a restart; a file that stops parsing keeps the last good
keys and logs why (without any digest). Keys come as ``Authorization: Bearer KEY`` (what the
OpenAI clients send) or ``x-api-key: KEY`` (what the Anthropic clients send). A missing or unknown
key is refused with OpenAI's 401 body (``code: invalid_api_key``); nothing here logs a key.

What counts as the presented key, exactly:

* Only the spaces and tabs at the two ends of a header value are dropped: RFC 9110 §5.5 says they
  are not part of the value and a recipient MUST exclude them (Envoy does, so in ext_proc mode the
  gateway never sees them either). Nothing else is stripped or folded: a key with any other
  whitespace or a control character in it (a vertical tab, a no-break space read as Latin-1, a
  space inside) is refused, never trimmed into a different key.
* ``Authorization`` must use the ``Bearer`` scheme (RFC 6750 §2.1: ``Bearer 1*SP token``); another
  scheme carries no key for the gateway.
* Both headers present: with the same key, fine; with different keys, a 401 that names the
  conflict. Neither header silently wins: a client sending two keys has a bug worth seeing.

File format (YAML or JSON)::

    keys:
      - sha256: 9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08
        tenant: team-a
        requestsPerSecond: 5      # sustained rate (0: no limit); bursts up to `burst`
        burst: 10
        maxInflight: 4            # requests in flight or queued at once (0: no limit)
        objective: interactive    # flow control: the key's default InferenceObjective, or
        # priority: 10            # its default priority (one of the two); the request's
                                  # x-gateway-inference-objective header still comes first
"""

from __future__ import annotations

import hashlib
import hmac
import logging
import os
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

import msgspec
import yaml

from mmgate.errors import RequestError

log = logging.getLogger("mmgate.auth")


class KeyEntry(msgspec.Struct, forbid_unknown_fields=True, frozen=True):
    """One key as the file stores it."""

    sha256: str
    tenant: str
    requestsPerSecond: float = 0.0
    burst: float = 0.0  # 0: one second's worth of requestsPerSecond (at least 1)
    maxInflight: int = 0
    objective: str | None = None  # flow control: the default InferenceObjective of the key's requests
    priority: int | None = None  # ... or their default priority (not both)


class KeysFile(msgspec.Struct, forbid_unknown_fields=True):
    keys: list[KeyEntry] = msgspec.field(default_factory=list)


@dataclass(frozen=True, slots=True)
class Identity:
    """A verified caller: its tenant and the limits of the key it used. ``key_id`` is a short
    prefix of the key's digest: enough to tell keys apart in counters, useless to an attacker.
    ``objective`` / ``priority``: the key's defaults for flow control (``None``: none), used when
    the request names no known InferenceObjective."""

    tenant: str
    key_id: str
    rate_per_s: float = 0.0
    burst: float = 0.0
    max_inflight: int = 0
    objective: str | None = None
    priority: int | None = None


def hash_key(key: str) -> str:
    """The digest the keys file stores for ``key``."""
    return hashlib.sha256(key.encode()).hexdigest()


_OWS = " \t"
"""RFC 9110 §5.5: the optional whitespace around a field value, which is not part of it."""

MISSING = "You didn't provide an API key. Send it as 'Authorization: Bearer KEY' or 'x-api-key: KEY'."


def presented_key(headers: Mapping[str, str]) -> str | None:
    """The key a request carries (``Authorization: Bearer KEY`` or ``x-api-key: KEY``); None when
    it carries none. Raises a 401 :class:`RequestError` for a key that is malformed, an
    ``Authorization`` of another scheme with no ``x-api-key``, or two different keys."""
    bearer: str | None = None
    auth = headers.get("Authorization")
    other_scheme = False
    if auth is not None and auth.strip(_OWS):
        scheme, _, rest = auth.strip(_OWS).partition(" ")
        if scheme.lower() == "bearer":
            bearer = _checked(rest.lstrip(" "), "Authorization")
        else:
            other_scheme = True
    api_key: str | None = None
    raw = headers.get("x-api-key")
    if raw is not None and raw.strip(_OWS):
        api_key = _checked(raw.strip(_OWS), "x-api-key")
    if bearer is not None and api_key is not None and bearer != api_key:  # both from the client
        raise unauthorized(
            "The request carries two different API keys, in 'Authorization' and 'x-api-key'."
            " Send one of them (or the same key in both)."
        )
    if bearer is None and api_key is None and other_scheme:
        raise unauthorized("'Authorization' must use the Bearer scheme: 'Authorization: Bearer KEY'.")
    return bearer if bearer is not None else api_key


def _checked(key: str, header: str) -> str:
    """``key`` unchanged, or a 401 when it cannot be a key (empty, whitespace or control chars)."""
    if not key:
        raise unauthorized(f"The '{header}' header carries an empty API key.")
    if not key.isprintable() or any(c.isspace() for c in key):
        raise unauthorized(
            f"The API key in '{header}' contains whitespace or a control character;"
            " keys are matched exactly, nothing is trimmed from inside a header value."
        )
    return key


def load_keys(path: Path) -> dict[str, Identity]:
    """The identities of a keys file, by digest. Raises ``ValueError`` naming what is wrong."""
    try:
        data = yaml.safe_load(path.read_text()) or {}
    except yaml.YAMLError as exc:
        raise ValueError(f"{path}: not YAML: {exc}") from None
    try:
        parsed = msgspec.convert(data, KeysFile)
    except msgspec.ValidationError as exc:
        raise ValueError(f"{path}: {exc}") from None
    out: dict[str, Identity] = {}
    for i, entry in enumerate(parsed.keys):
        digest = entry.sha256.strip().lower()
        if len(digest) != 64 or any(c not in "0123456789abcdef" for c in digest):
            raise ValueError(f"{path}: keys[{i}].sha256 is not a sha256 hex digest (64 hex digits)")
        if entry.requestsPerSecond < 0 or entry.burst < 0 or entry.maxInflight < 0:
            raise ValueError(f"{path}: keys[{i}]: limits must not be negative")
        if entry.objective is not None and entry.priority is not None:
            raise ValueError(f"{path}: keys[{i}]: set objective or priority, not both")
        if entry.objective is not None and not entry.objective.strip():
            raise ValueError(f"{path}: keys[{i}].objective is empty")
        burst = entry.burst or max(1.0, entry.requestsPerSecond)
        out[digest] = Identity(
            entry.tenant,
            digest[:12],
            entry.requestsPerSecond,
            burst,
            entry.maxInflight,
            entry.objective,
            entry.priority,
        )
    return out


def unauthorized(message: str) -> RequestError:
    return RequestError(message, status=401, code="invalid_api_key")


class KeyStore:
    """The keys of one file, re-read when it changes."""

    def __init__(
        self, path: Path, *, check_every_s: float = 1.0, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.path = path
        self.check_every_s = check_every_s
        self._clock = clock
        self._keys = load_keys(path)  # a bad file at start is a config error: raise
        self._stamp = self._stat()
        self._checked = clock()

    def __len__(self) -> int:
        return len(self._keys)

    def verify(self, headers: Mapping[str, str]) -> Identity:
        """The caller's identity; raises a 401 :class:`RequestError` for a missing/unknown key."""
        self._maybe_reload()
        key = presented_key(headers)
        if key is None:
            raise unauthorized(MISSING)
        digest = hash_key(key).encode()
        found: Identity | None = None
        for stored, identity in self._keys.items():
            if hmac.compare_digest(stored.encode(), digest):
                found = identity
        if found is None:
            raise unauthorized("Incorrect API key provided.")
        return found

    def _stat(self) -> tuple[int, int, int] | None:
        try:
            st = os.stat(self.path)
        except OSError:
            return None
        return (st.st_mtime_ns, st.st_size, st.st_ino)

    def _maybe_reload(self) -> None:
        now = self._clock()
        if now - self._checked < self.check_every_s:
            return
        self._checked = now
        stamp = self._stat()
        if stamp == self._stamp:
            return
        self._stamp = stamp
        try:
            self._keys = load_keys(self.path)
        except (OSError, ValueError) as exc:
            log.error("keys file %s not reloaded, the previous keys stay: %s", self.path, exc)
            return
        log.info("keys file %s reloaded: %d keys", self.path, len(self._keys))
