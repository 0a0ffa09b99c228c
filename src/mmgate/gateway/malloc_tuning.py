"""Keeping multi-megabyte request bodies off fresh pages (glibc malloc tuning for the gateway).

By default glibc serves every allocation above ~128 KiB (adaptively up to 32 MiB) with its own
``mmap`` and returns it to the kernel on free. A gateway that receives a 2.3 MB body, joins it,
and frees it a few milliseconds later then pays ~600 page faults (zeroed pages) per copy, every
request: about a fifth of its CPU on the three-image benchmark body (docs/benchmarks/overhead.md).
Raising the mmap and trim thresholds keeps those buffers in the heap and reuses them. The price
is that freed memory is handed back to the kernel less eagerly: peak RSS stays near the largest
burst of bodies in flight.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import logging
import sys

log = logging.getLogger("mmgate.gateway")

_M_TRIM_THRESHOLD = -1
_M_TOP_PAD = -2
_M_MMAP_THRESHOLD = -3
MMAP_THRESHOLD = 32 * 1024 * 1024  # glibc's maximum on 64-bit
TRIM_THRESHOLD = 256 * 1024 * 1024
TOP_PAD = 16 * 1024 * 1024


def keep_large_buffers() -> bool:
    """Apply the thresholds above when running on glibc; True if they took effect."""
    if not sys.platform.startswith("linux"):
        return False
    name = ctypes.util.find_library("c")
    if not name:
        return False
    try:
        libc = ctypes.CDLL(name)
        mallopt = libc.mallopt
    except (OSError, AttributeError):  # musl and others have no mallopt
        return False
    mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    mallopt.restype = ctypes.c_int
    done = all(
        mallopt(option, value) == 1
        for option, value in (
            (_M_MMAP_THRESHOLD, MMAP_THRESHOLD),
            (_M_TRIM_THRESHOLD, TRIM_THRESHOLD),
            (_M_TOP_PAD, TOP_PAD),
        )
    )
    if not done:
        log.debug("malloc tuning not applied")
    return done
