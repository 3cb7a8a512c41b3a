"""Give freed heap memory back to the operating system (glibc's ``malloc_trim``).

Loading a model decodes the weight file through several temporary copies; glibc keeps the freed
blocks in its arenas, so a daemon would carry ~100 MB it no longer uses. Elsewhere (musl, macOS,
Windows) this is a no-op.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import gc
from functools import cache
from typing import Any


@cache
def _libc() -> Any:
    name = ctypes.util.find_library("c")
    try:
        libc = ctypes.CDLL(name) if name else None
    except OSError:
        return None
    return libc if libc is not None and hasattr(libc, "malloc_trim") else None


def release_free_memory() -> bool:
    """Collect garbage and return free heap pages to the OS; True when glibc did so."""
    gc.collect()
    libc = _libc()
    return bool(libc is not None and libc.malloc_trim(0))
