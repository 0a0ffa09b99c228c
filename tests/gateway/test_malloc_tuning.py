"""The malloc tuning that keeps multi-megabyte bodies off fresh pages."""

from __future__ import annotations

from mmgate.gateway.malloc_tuning import keep_large_buffers


def test_malloc_tuning_applies_on_linux_glibc() -> None:
    import platform

    expected = platform.system() == "Linux" and platform.libc_ver()[0] == "glibc"
    assert keep_large_buffers() is expected
