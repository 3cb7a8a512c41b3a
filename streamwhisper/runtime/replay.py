"""The synchronous driver: audio replayed through a :class:`Pump` on a clock the caller controls.

``bench``, the benchmarks and the tests run a stream the way the daemon does (the same
:class:`~streamwhisper.runtime.pump.Pump` decides when a request is due, submits it, completes or
abandons it), with an :class:`InlineScheduler` in place of the inference thread: it runs each
request when the driver takes it, one at a time.

:func:`replay` feeds audio in blocks as a client sends it, on a simulated clock:

* computation-aware (``aware=True``): audio arrives in real time and every recognition advances
  the clock by its compute time as measured by ``timer`` (``time.perf_counter`` by default; a
  test passes a fake), so a slow model falls behind exactly as it would live
  (whisper_streaming's simulation). Audio that arrives while a request runs is fed before its
  result is delivered, as the daemon's event loop receives it while the worker computes.
* computation-unaware (``aware=False``): recognition takes no time; each block's requests are
  served before the next block (or the end of the stream) arrives.

With ``finalize_at``, the client also ends its turn there, as a voice agent does when its own VAD
decides the user stopped: the pump is finalised once the audio up to that time (at the latest,
the end of the audio) has arrived, and :attr:`Replay.ttfs` is how long the final that answers it
took.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

import numpy as np

from streamwhisper.events import Event, Final
from streamwhisper.model.recognizer import RecognitionRequest, Recognizer
from streamwhisper.streaming.streamer import Streamer
from streamwhisper.whisper_input import SAMPLE_RATE

from .pump import Done, Pump

CHUNK_S = 0.1  # audio arrives in 100 ms blocks, as a capture callback or a WebSocket client sends it


@dataclass
class _InlineJob:
    request: RecognitionRequest
    done: Done
    cancelled: bool = False
    started: bool = False

    def cancel(self) -> None:
        self.cancelled = True

    def withdraw(self) -> bool:  # waiting, or under way (see run_next)
        self.cancelled = True
        return True

    def withdrawn(self) -> bool:
        return self.cancelled

    def hasten(self) -> None:  # requests run one at a time, in order
        pass


class InlineScheduler:
    """Holds submitted requests until the driver runs them (:meth:`run_next`), in order."""

    def __init__(self, recognizer: Recognizer, timer: Callable[[], float] = time.perf_counter) -> None:
        self._recognizer = recognizer
        self._timer = timer
        self._queue: deque[_InlineJob] = deque()

    def submit(self, request: RecognitionRequest, done: Done) -> _InlineJob:
        job = _InlineJob(request, done)
        self._queue.append(job)
        return job

    @property
    def waiting(self) -> bool:
        """Whether a submitted request waits to be run."""
        return any(not job.cancelled for job in self._queue)

    def run_next(self, before_done: Callable[[float, Callable[[], bool]], None] | None = None) -> bool:
        """Run the oldest waiting request; False when none waits.

        ``before_done`` gets the seconds the recognition took (on ``timer``) and a test of whether
        the request was withdrawn, before the result is delivered: the driver advances its clock
        there, feeding the audio that arrived meanwhile; a request withdrawn then gave way as the
        worker's does (its result is dropped, and the driver stops its clock there).
        """
        while self._queue:
            job = self._queue.popleft()
            if job.cancelled:
                continue
            job.started = True
            began = self._timer()
            hypothesis = self._recognizer.recognize([job.request])[0]
            if before_done is not None:
                before_done(self._timer() - began, job.withdrawn)
            if not job.cancelled:
                job.done(hypothesis)
            return True
        return False


@dataclass
class Replay:
    """What a replay produced: each event with the (simulated) time it was emitted."""

    timeline: list[tuple[float, Event]] = field(default_factory=list)
    compute_s: float = 0.0  # seconds spent recognising, on the timer
    finalized_at: float | None = None  # when the client's finalize was taken (``finalize_at``)

    @property
    def events(self) -> list[Event]:
        return [event for _, event in self.timeline]

    @property
    def ttfs(self) -> float | None:
        """Seconds from the finalize to the endpoint final that answers it (the first after it)."""
        if self.finalized_at is None:
            return None
        for at, event in self.timeline:
            if at >= self.finalized_at and isinstance(event, Final) and event.endpoint:
                return at - self.finalized_at
        return None


class _Run:
    """One replay: the pump, the scheduler and the simulated clock."""

    def __init__(self, streamer: Streamer, recognizer: Recognizer, timer: Callable[[], float]) -> None:
        self.out = Replay()
        self.now = 0.0  # the time events emitted now are stamped with
        self.scheduler = InlineScheduler(recognizer, timer)
        self.pump = Pump(streamer, self.scheduler, self._record)

    def _record(self, events: list[Event]) -> None:
        self.out.timeline.extend((self.now, event) for event in events)

    def feed(self, samples: np.ndarray, at: float) -> None:
        self.now = at
        self.pump.feed(samples)

    def flush(self, at: float) -> None:
        self.now = at
        self.pump.flush()

    def finalize(self, at: float) -> None:
        self.now = self.out.finalized_at = at
        self.pump.finalize()


def replay(
    streamer: Streamer,
    recognizer: Recognizer,
    audio: np.ndarray,
    *,
    aware: bool = True,
    chunk_s: float = CHUNK_S,
    timer: Callable[[], float] = time.perf_counter,
    finalize_at: float | None = None,
) -> Replay:
    """Stream ``audio`` (16 kHz float) through ``streamer`` and ``recognizer``; see the module doc."""
    run = _Run(streamer, recognizer, timer)
    arrivals = _arrivals(len(audio), chunk_s, finalize_at)
    clock = 0.0
    fed = 0  # arrivals fed
    flushed = False

    def arrive(until: float) -> None:
        nonlocal fed
        while fed < len(arrivals) and arrivals[fed][0] <= until + 1e-9:
            at, start, end, finalize = arrivals[fed]
            fed += 1
            run.feed(audio[start:end], at)
            if finalize:
                run.finalize(at)

    def spend(seconds: float, withdrawn: Callable[[], bool]) -> None:
        nonlocal clock
        if aware:  # audio heard while the request ran; a withdrawal stops it there
            end = clock + seconds
            while fed < len(arrivals) and arrivals[fed][0] <= end + 1e-9 and not withdrawn():
                arrive(arrivals[fed][0])
                if withdrawn():
                    end = max(clock, arrivals[fed - 1][0])
            seconds, clock = end - clock, end
            run.now = clock
        else:
            run.now = arrivals[fed - 1][0] if fed else 0.0
        run.out.compute_s += seconds

    while True:
        if aware:
            arrive(clock)
        elif fed < len(arrivals):
            arrive(arrivals[fed][0])
        # the end of the stream arrives with the last block, or (taking no time) once it is served
        if fed == len(arrivals) and not flushed and (aware or not run.scheduler.waiting):
            flushed = True
            run.flush(max(clock, len(audio) / SAMPLE_RATE))
        if run.scheduler.run_next(spend):
            continue
        if flushed:
            return run.out
        if aware:
            clock = max(clock, arrivals[fed][0])


def _arrivals(samples: int, chunk_s: float, finalize_at: float | None) -> list[tuple[float, int, int, bool]]:
    """(time, first sample, end sample, finalize after it) of each block a client sends: one every
    ``chunk_s``, the block holding ``finalize_at`` split there (the client's VAD stops mid-block)."""
    block = int(chunk_s * SAMPLE_RATE)
    cut = None if finalize_at is None else min(max(round(finalize_at * SAMPLE_RATE), 1), samples)
    out = []
    for start in range(0, samples, block):
        end = min(start + block, samples)
        if cut is not None and start < cut <= end:
            out.append((cut / SAMPLE_RATE if cut < end else (start // block + 1) * chunk_s, start, cut, True))
            if cut < end:
                out.append(((start // block + 1) * chunk_s, cut, end, False))
        else:
            out.append(((start // block + 1) * chunk_s, start, end, False))
    return out


def drive(
    streamer: Streamer, recognizer: Recognizer, chunks: Iterable[np.ndarray], *, flush: bool = True
) -> list[Event]:
    """Feed every chunk and serve each request before the next chunk (computation-unaware)."""
    run = _Run(streamer, recognizer, time.perf_counter)
    for chunk in chunks:
        run.feed(chunk, 0.0)
        while run.scheduler.run_next():
            pass
    if flush:
        run.flush(0.0)
        while run.scheduler.run_next():
            pass
    return run.out.events
