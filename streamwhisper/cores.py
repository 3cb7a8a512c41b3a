"""The CPU cores this process may run on: its affinity mask where the OS has one (a container
or ``taskset`` limits it), else the machine's count."""

from __future__ import annotations

import os


def available_cores() -> int:
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
