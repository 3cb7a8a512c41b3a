"""The daemon's shutdown signal and its deadline.

``server.shutdown_timeout_s`` bounds a graceful shutdown from its start (SIGTERM) to the daemon's
end, however busy the inference worker is. It is spent in three phases:

1. until ``2 * finish_s`` before the end, sessions turn the audio they received into finals (the
   worker serves their last requests);
2. then each session still waiting gives up recognising: every utterance closes from the
   hypotheses already heard (:meth:`Pump.give_up <streamwhisper.runtime.pump.Pump.give_up>`),
   and its finals, ``closed`` and the close frame are sent until ``finish_s`` before the end;
3. the daemon then cancels what is left (a close handshake a client never answers), closes its
   sockets and stops the worker without waiting for a batch still under way.

``finish_s`` is :data:`FINISH_S`, or a quarter of the timeout when that is shorter.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

FINISH_S = 2.0


class Shutdown(asyncio.Event):
    """Set once shutdown began (:meth:`begin`); tells each phase how long it has left.

    Args:
        timeout_s: the whole shutdown's duration (``server.shutdown_timeout_s``).
        clock: monotonic seconds; the event loop's clock (the one its timeouts run on).
    """

    def __init__(self, timeout_s: float, clock: Callable[[], float] = time.monotonic) -> None:
        super().__init__()
        self.timeout_s = timeout_s
        self.finish_s = min(FINISH_S, timeout_s / 4)
        self._clock = clock
        self._ends_at: float | None = None

    def begin(self) -> None:
        """Shutdown starts now: the deadline is ``timeout_s`` from here."""
        if self._ends_at is None:
            self._ends_at = self._clock() + self.timeout_s
        self.set()

    def left(self, reserve: float = 0.0) -> float:
        """Seconds until ``reserve`` before the end (at least 0); before shutdown began, the
        timeout less ``reserve`` (what a session's ending may take when no shutdown hurries it)."""
        end = self._clock() + self.timeout_s if self._ends_at is None else self._ends_at
        return max(end - reserve - self._clock(), 0.0)

    def recognition_left(self) -> float:
        """How long sessions may still wait for the worker (phase 1)."""
        return self.left(2 * self.finish_s)

    def sending_left(self) -> float:
        """How long sessions may still take to send their last messages (phase 2)."""
        return self.left(self.finish_s)
