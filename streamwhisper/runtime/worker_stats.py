"""WorkerStats: what the inference worker did, and how busy its threads were of late."""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field

SATURATED = 0.9  # the utilisation above which the worker is saturated (WorkerStats.saturated)


@dataclass
class WorkerStats:
    requests: int = 0
    batches: int = 0
    busy_seconds: float = 0.0
    failures: int = 0
    interrupted: int = 0  # batches stopped because nobody waited for them any more
    paused: int = 0  # times a batch paused for a turn's final
    last_batch: int = 0
    recent: deque[tuple[float, float]] = field(default_factory=lambda: deque(maxlen=256))  # (start, end)
    clock: Callable[[], float] = time.monotonic
    threads: int = 1

    def utilization(self, window_s: float = 5.0) -> float:
        """Fraction of the last ``window_s`` seconds the worker's threads spent recognising."""
        now = self.clock()
        since = now - window_s
        busy = sum(min(end, now) - max(start, since) for start, end in list(self.recent) if end > since)
        return min(busy / (window_s * self.threads), 1.0)

    def saturated(self) -> bool:
        """Whether the threads were busy nearly all the last 5 s: the daemon is overloaded."""
        return self.utilization() > SATURATED
