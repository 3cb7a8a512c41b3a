"""How far one session's transcript lags its audio, and the step it runs at under load.

:class:`Pacing` remembers when each piece of the session's audio arrived (bounded), measures the
lag at each result and latencies of events, and lengthens the Streamer's step while the worker is
saturated and the lag passes ``degrade_lag_s`` (shortening it again as the lag falls).
"""

from __future__ import annotations

import bisect
from collections import deque
from collections.abc import Callable

from streamwhisper.streaming.streamer import Streamer

from .config import ServerConfig
from .pump import Pump
from .worker import InferenceWorker


class Pacing:
    """One session's lag and step.

    Args:
        server: ``degrade_lag_s`` and ``max_step_s``.
        min_step_s, max_window_s, force_commit_s: the streaming settings that bound the step.
        worker: whose utilisation says whether a lag is overload.
        clock: monotonic seconds (the event loop's clock).
        on_status: told ``(lag, step)`` when the step changes, and every 5 s while lagging.
    """

    def __init__(
        self,
        server: ServerConfig,
        min_step_s: float,
        max_step_s: float,
        worker: InferenceWorker,
        clock: Callable[[], float],
        on_status: Callable[[float, float], None],
    ) -> None:
        self._server, self._worker, self._clock, self._on_status = server, worker, clock, on_status
        self._min_step, self._max_step = min_step_s, max_step_s
        self._lag = 0.0  # transcript lag measured at the last result
        self._lag_at = 0.0  # when
        self._last_status = 0.0
        self._arrivals: deque[tuple[float, float]] = deque(maxlen=4096)  # (audio seconds, monotonic)

    def arrived(self, audio_s: float) -> None:
        """The session has received audio up to ``audio_s`` (seconds of 16 kHz audio)."""
        self._arrivals.append((audio_s, self._clock()))

    def lag(self, pump: Pump | None) -> float:
        """Seconds the transcript lags the audio: the last measured lag while requests keep coming
        (or longer, while one is stuck at the worker); 0 once the session went quiet."""
        now = self._clock()
        waiting = 0.0
        if pump is not None and pump.inflight is not None:
            waiting = now - self.arrival(pump.inflight.end)
        elif pump is None or now - self._lag_at > 2 * pump.streamer.step_s + 1.0:
            return 0.0
        return max(self._lag, waiting)

    def latency(self, audio_s: float) -> float:
        """Seconds since the audio up to ``audio_s`` arrived."""
        return max(self._clock() - self.arrival(audio_s), 0.0)

    def arrival(self, audio_s: float) -> float:
        """When the audio up to ``audio_s`` had been received (monotonic seconds)."""
        arrivals = self._arrivals
        if not arrivals:
            return self._clock()
        i = bisect.bisect_left(arrivals, audio_s - 1e-6, key=lambda a: a[0])
        return arrivals[min(i, len(arrivals) - 1)][1]

    def adapt(self, streamer: Streamer, request_end: float) -> None:
        """A result came for the request that ended at ``request_end``: longer steps (fewer
        requests, fewer partials) while the transcript lags the audio."""
        lag = self._clock() - self.arrival(request_end)
        self._lag, self._lag_at = lag, self._clock()
        server = self._server
        step = streamer.step_s
        # Only a saturated worker is overload; a lag of a batch or two on an idle one is not,
        # and longer steps would only add latency there.
        if lag > server.degrade_lag_s and self._worker.stats.saturated():
            new = min(step * 1.5, self._max_step)
        elif lag < server.degrade_lag_s / 3:
            new = max(step / 1.5, self._min_step)
        else:
            new = step
        now = self._clock()
        if new != step or (lag > server.degrade_lag_s and now - self._last_status > 5.0):
            streamer.step_s = new
            self._last_status = now
            self._on_status(lag, new)
