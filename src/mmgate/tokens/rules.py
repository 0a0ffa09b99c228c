"""The shape every token rule shares: a count, a parameter set, a family, and input checks.

A *family rule* is a pure function of the media's size (and, for video/audio, duration) plus a
frozen parameter dataclass whose field names follow the Hugging Face processor config, so a user
can copy a value from ``preprocessor_config.json`` into ``--param`` or a YAML file unchanged.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Generic, NamedTuple, TypeVar

from mmgate.errors import RequestError, did_you_mean

# Beyond these the input is a mistake or an attack, not a picture: JPEG caps sides at 65,535 px and
# no model processes a day-long clip in one request.
MAX_SIDE = 65_535
MAX_DURATION_S = 24 * 3600.0
MAX_FPS = 1000.0


class Count(NamedTuple):
    """Tokens one media item occupies in the prompt.

    ``tokens`` are the encoder-output positions (visual or audio embeddings); ``extra`` are the
    ordinary tokens the prompt template adds around them (start/end markers, row breaks, tile
    separators, timestamps). The model's context holds ``tokens + extra``.
    """

    tokens: int
    extra: int = 0

    @property
    def total(self) -> int:
        return self.tokens + self.extra


class UnknownNameError(ValueError):
    """A family, provider, model or parameter name that does not exist; the message lists valid ones."""


def unknown(kind: str, name: str, choices: Iterable[str]) -> UnknownNameError:
    valid = sorted(choices)
    hint = did_you_mean(name, valid)
    return UnknownNameError(f"unknown {kind} {name!r}{hint}; valid choices: {', '.join(valid)}")


def check_size(width: object, height: object, *, param: str | None = None) -> tuple[int, int]:
    """Validate an image or frame size, returning it as ints; a clear 400 otherwise."""
    for name, value in (("width", width), ("height", height)):
        if isinstance(value, bool) or not isinstance(value, int):
            raise RequestError(f"image {name} must be an integer, got {value!r}", param=param)
        if value < 1:
            raise RequestError(f"image {name} must be at least 1 pixel, got {value}", param=param)
        if value > MAX_SIDE:
            raise RequestError(f"image {name} {value} exceeds the maximum of {MAX_SIDE} pixels", param=param)
    return int(width), int(height)  # type: ignore[call-overload]


def check_duration(duration_s: object, *, param: str | None = None) -> float:
    if (
        isinstance(duration_s, bool)
        or not isinstance(duration_s, int | float)
        or not math.isfinite(duration_s)
    ):
        raise RequestError(f"duration must be a number of seconds, got {duration_s!r}", param=param)
    if duration_s <= 0:
        raise RequestError(f"duration must be positive, got {duration_s}", param=param)
    if duration_s > MAX_DURATION_S:
        raise RequestError(
            f"duration {duration_s} s exceeds the maximum of {MAX_DURATION_S:.0f} s", param=param
        )
    return float(duration_s)


def check_fps(fps: object, *, param: str | None = None) -> float:
    if isinstance(fps, bool) or not isinstance(fps, int | float) or not math.isfinite(fps):
        raise RequestError(f"fps must be a number, got {fps!r}", param=param)
    if not 0 < fps <= MAX_FPS:
        raise RequestError(f"fps must be in (0, {MAX_FPS:.0f}], got {fps}", param=param)
    return float(fps)


P = TypeVar("P")

ImageRule = Callable[[Any, int, int], Count]
VideoRule = Callable[[Any, int, int, float, float], Count]  # (params, width, height, duration_s, fps)
AudioRule = Callable[[Any, float], Count]  # (params, duration_s)


@dataclass(frozen=True, slots=True)
class Family(Generic[P]):
    """A served model family: its parameters and the rules it supports for each modality."""

    name: str
    params: P
    image: ImageRule | None = None
    video: VideoRule | None = None
    audio: AudioRule | None = None
    about: str = ""  # one line for `mmgate tokens --list`: reference model and source

    @property
    def modalities(self) -> tuple[str, ...]:
        return tuple(m for m in ("image", "video", "audio") if getattr(self, m) is not None)

    def with_params(self, overrides: Mapping[str, object]) -> Family[P]:
        """A copy with parameters replaced; values are coerced to the field's type."""
        if not overrides:
            return self
        family = dataclasses.replace(self, params=override_params(self.params, overrides, self.name))
        family.self_check(overrides)
        return family

    def self_check(self, overrides: Mapping[str, object]) -> None:
        """Count a typical image/clip once so impossible parameters fail at configuration time,
        not as a client error on the first request."""
        try:
            if self.image is not None:
                self.count_image(640, 480)
            if self.video is not None:
                self.count_video(640, 480, 4.0, 24.0)
            if self.audio is not None:
                self.count_audio(4.0)
        except (ArithmeticError, ValueError) as exc:
            given = ", ".join(f"{k}={v}" for k, v in overrides.items())
            raise ValueError(f"{self.name}: parameters {given} do not work: {exc}") from None

    def param_names(self) -> list[str]:
        return [f.name for f in dataclasses.fields(self.params)]  # type: ignore[arg-type]

    def count_image(self, width: int, height: int) -> Count:
        if self.image is None:
            raise UnknownNameError(f"family {self.name!r} has no image rule (it prices {self._what()})")
        w, h = check_size(width, height)
        return self.image(self.params, w, h)

    def count_video(self, width: int, height: int, duration_s: float, fps: float) -> Count:
        if self.video is None:
            raise UnknownNameError(f"family {self.name!r} has no video rule (it prices {self._what()})")
        w, h = check_size(width, height)
        return self.video(self.params, w, h, check_duration(duration_s), check_fps(fps))

    def count_audio(self, duration_s: float) -> Count:
        if self.audio is None:
            raise UnknownNameError(f"family {self.name!r} has no audio rule (it prices {self._what()})")
        return self.audio(self.params, check_duration(duration_s))

    def _what(self) -> str:
        return " and ".join(self.modalities) or "nothing"


def override_params(params: P, overrides: Mapping[str, object], owner: str) -> P:
    """Replace fields of a parameter dataclass by name, coercing strings from the command line."""
    fields = {f.name: f for f in dataclasses.fields(params)}  # type: ignore[arg-type]
    changes: dict[str, object] = {}
    for key, raw in overrides.items():
        if key not in fields:
            raise unknown(f"parameter of {owner}", key, fields)
        current = getattr(params, key)
        value = coerce(raw, current, f"{owner}.{key}")
        if isinstance(value, int | float) and not isinstance(value, bool) and value < 0:
            raise ValueError(f"parameter {owner}.{key} must not be negative, got {value}")
        changes[key] = value
    return dataclasses.replace(params, **changes)  # type: ignore[type-var]


def coerce(raw: object, like: object, name: str) -> object:
    """Convert ``raw`` to the type of ``like`` (bool/int/float/tuple), with a clear error."""
    try:
        if isinstance(like, bool):
            if isinstance(raw, str):
                low = raw.strip().lower()
                if low not in ("true", "false", "1", "0", "yes", "no", "on", "off"):
                    raise ValueError(raw)
                return low in ("true", "1", "yes", "on")
            return bool(raw)
        if isinstance(like, int):
            if isinstance(raw, float) and not raw.is_integer():
                raise ValueError(raw)
            value = int(str(raw).strip()) if isinstance(raw, str) else int(raw)  # type: ignore[call-overload]
            return value
        if isinstance(like, float):
            return float(raw)  # type: ignore[arg-type]
        if isinstance(like, tuple):
            if isinstance(raw, str):
                return tuple(_parse_tuple(raw))
            return tuple(raw)  # type: ignore[arg-type]
        if isinstance(like, str):
            return str(raw)
    except (TypeError, ValueError):
        pass
    else:
        return raw
    raise UnknownNameError(f"parameter {name}: cannot use {raw!r}; expected {type(like).__name__}")


def _parse_tuple(text: str) -> list[object]:
    """Parse ``70,140`` or ``336x672,672x336`` (a list of sizes) from the command line."""
    items: list[object] = []
    for chunk in text.replace(" ", "").split(","):
        if not chunk:
            continue
        if "x" in chunk:
            a, b = chunk.split("x", 1)
            items.append((int(a), int(b)))
        else:
            items.append(int(chunk))
    return items
