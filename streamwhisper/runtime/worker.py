"""InferenceWorker: the threads that own the model (the daemon runs two on a multi-core CPU).

The scheduler of every :class:`~streamwhisper.runtime.pump.Pump` in the process. Pumps submit
:class:`RecognitionRequest` objects from the event loop with a ``done`` callback. A worker
thread takes the waiting requests, oldest first and at most ``max_batch`` (the urgent ones,
endpoints and pauses, in a batch of their own while there are any: a turn's final waits for no
partial), runs them through the recogniser as one batch (one encoder call, decoder steps batched
across the requests) and calls each ``done`` on the submitting loop with ``call_soon_threadsafe``. A pump has
at most one request outstanding, so no stream waits for more than one batch ahead of it and the
queue never holds more than one request per stream (``max_pending`` bounds it anyway).

With ``threads`` > 1 (``server.workers``) each thread takes its own batches from the one queue,
so that two batches run at once: under load the cores stay busy while one batch runs Python
between small tensor operations, where one batch over two torch threads leaves a core waiting.
``on_start`` lets the daemon give a batch every core while it runs alone, its share beside
another (:func:`~streamwhisper.model.loading.core_sharing`).

A batch that raises is run again one request at a time, so that a request the recogniser cannot
take (a poisoned window) fails alone: every other request of its batch gets its hypothesis.

Bulk requests (the windows of uploaded files, ``RecognitionRequest.bulk``) come after every live
request and run alone, one per batch: a live request waits at most for the one bulk window under
way (a turn's final not even for that, see below), and a burst of uploads cannot push live
streams back in the queue.

A batch under way stops (:mod:`streamwhisper.model.interrupt`: between encoder blocks and
decoder steps) when nobody waits for any of its results any more (its requests were withdrawn
or cancelled), and gives way when a turn's final waits for a request in the queue (an endpoint
request, or one :meth:`_Job.hasten` made urgent: a pause's request once its turn ended), no
thread is free to take it and the batch holds no urgent request, in the first half of its
typical time (batches of its size so far): past that, waiting for it costs the turn less than
the work thrown away costs everyone.
Its requests go back to the queue in their places and the urgent batch runs first. A pause's
request alone stops nothing (pauses are many, most not a turn's end, and every interruption
throws work away). A request interrupted once is not interrupted again, so partials are delayed
by turn ends, never starved by them. A running request can be withdrawn: its result is never
delivered.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field

from streamwhisper.model.interrupt import Interrupted, interruptible
from streamwhisper.model.memory import release_free_memory
from streamwhisper.model.recognizer import RecognitionRequest, Recognizer

from .pump import Done, Outcome, SchedulerFull

logger = logging.getLogger(__name__)

TRIM_EVERY_S = 30.0


@dataclass(order=True)
class _Job:
    rank: tuple[int, int]  # (0 for urgent requests, 1 for other live ones, 2 bulk; arrival number)
    request: RecognitionRequest = field(compare=False)
    done: Done = field(compare=False)
    loop: asyncio.AbstractEventLoop = field(compare=False)
    submitted: float = field(compare=False, default=0.0)
    cancelled: bool = field(compare=False, default=False)
    interrupted: bool = field(compare=False, default=False)  # gave way once: runs to its end next time
    awaited: bool = field(compare=False, default=False)  # a turn's final waits for it
    owner: InferenceWorker | None = field(compare=False, default=None)

    def cancel(self) -> None:
        self.cancelled = True  # read by the worker thread; a bool flip needs no lock

    def withdraw(self) -> bool:
        return self.owner is not None and self.owner._withdraw(self)

    def hasten(self) -> None:
        if self.owner is not None:
            self.owner._hasten(self)


@dataclass
class WorkerStats:
    requests: int = 0
    batches: int = 0
    busy_seconds: float = 0.0
    failures: int = 0
    interrupted: int = 0  # batches that gave way to a turn's final (or that nobody waited for)
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


class InferenceWorker:
    """Runs recognition requests of all sessions on one thread, in batches.

    Args:
        recognizer: the model behind the Recognizer seam; used only from the worker thread.
        max_batch: most requests per batch.
        max_pending: most requests waiting; more raise :class:`SchedulerFull`.
        threads: worker threads taking batches from the one queue (the recogniser must allow
            calls from several threads at once).
        on_batch: called on the worker thread after each batch with (size, seconds, waits).
        on_start: called on the worker thread before each batch with the number of batches
            then under way, this one included (the daemon shares the cores by it).
        clock: monotonic seconds for waits and utilisation (read on the worker thread).
    """

    def __init__(
        self,
        recognizer: Recognizer,
        *,
        max_batch: int = 16,
        max_pending: int = 256,
        threads: int = 1,
        on_batch: Callable[[int, float, list[float]], None] | None = None,
        on_start: Callable[[int], None] | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._recognizer = recognizer
        self._max_batch = max_batch
        self._max_pending = max_pending
        self._on_batch = on_batch
        self._on_start = on_start
        self._cond = threading.Condition()
        self._queue: list[_Job] = []
        self._running: dict[int, list[_Job]] = {}  # the batch under way, per thread
        self._n_threads = threads
        self._ended = 0  # threads that ended (the last one calls _on_end)
        self._typical: dict[int, float] = {}  # seconds a batch of each size takes (moving average)
        self._counter = 0
        self._stopping = False
        self._threads: list[threading.Thread] = []
        self._on_end: Callable[[], object] = lambda: None  # called by the thread as it ends
        self._clock = clock
        self.stats = WorkerStats(clock=clock, threads=threads)

    @property
    def pending(self) -> int:
        return len(self._queue)

    def start(self) -> None:
        if not self._threads:
            for i in range(self._n_threads):
                name = "streamwhisper-inference" + (f"-{i}" if i else "")
                self._threads.append(threading.Thread(target=self._run, args=(i,), name=name, daemon=True))
            for thread in self._threads:
                thread.start()

    def submit(self, request: RecognitionRequest, done: Done) -> _Job:
        """Queue a request (on the event loop); ``done`` is called on that loop with its outcome."""
        loop = asyncio.get_running_loop()
        with self._cond:
            if self._stopping:
                raise SchedulerFull("the inference worker is stopping")
            if len(self._queue) >= self._max_pending:
                raise SchedulerFull(f"{len(self._queue)} requests waiting")
            self._counter += 1
            kind = 2 if request.bulk else 0 if request.urgent else 1
            job = _Job((kind, self._counter), request, done, loop, self._clock(), awaited=request.endpoint, owner=self)
            self._queue.append(job)
            self._cond.notify()
        return job

    def _withdraw(self, job: _Job) -> bool:
        """Take ``job`` out of the queue, or out of the batch under way (its result is dropped, and
        the batch stops early if no request of it is left)."""
        with self._cond:
            if job in self._queue:
                self._queue.remove(job)
            elif not any(job in batch for batch in self._running.values()):
                return False
            job.cancelled = True
            return True

    def _hasten(self, job: _Job) -> None:
        """A turn's final now waits for ``job`` (a pause's request whose turn ended): while it is
        queued, it is urgent and the batch under way gives way to it."""
        with self._cond:
            if job in self._queue:
                job.awaited, job.rank = True, (0, job.rank[1])

    async def stop(self, within_s: float | None = None) -> None:
        """Drop what is still queued (``done(None)``) and wait for the batch under way to end (at
        most ``within_s`` seconds: the thread is a daemon thread, it does not keep the process)."""
        ended = asyncio.Event()
        loop = asyncio.get_running_loop()
        with self._cond:
            self._stopping = True
            self._on_end = functools.partial(loop.call_soon_threadsafe, ended.set)
            left, self._queue = self._queue, []
            self._cond.notify_all()
        for job in left:
            if not job.cancelled:
                job.done(None)
        if self._threads:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(within_s):  # on the loop's clock
                    await ended.wait()
            if not ended.is_set():
                logger.warning("stopped without waiting for the batch under way")
            self._threads = []

    def _take(self, me: int) -> list[_Job] | None:
        with self._cond:
            while not self._queue and not self._stopping:
                self._cond.wait()
            if self._stopping:
                return None
            self._queue.sort()
            urgent = sum(1 for job in self._queue if job.rank[0] == 0)
            live = sum(1 for job in self._queue if not job.request.bulk)
            # urgent requests run in a batch of their own: an endpoint waits for no partial
            size = min(urgent or live, self._max_batch) if live else 1  # bulk windows run alone
            batch, self._queue = self._queue[:size], self._queue[size:]
            self._running[me] = batch
            return batch

    def _run(self, me: int) -> None:
        try:
            self._serve(me)
        finally:
            with self._cond:
                self._running.pop(me, None)
                self._ended += 1
                if self._ended == len(self._threads):  # the last one out
                    with contextlib.suppress(RuntimeError):  # RuntimeError: the loop is closed
                        self._on_end()

    def _serve(self, me: int) -> None:
        trimmed = self._clock()
        while (batch := self._take(me)) is not None:
            if self._clock() - trimmed > TRIM_EVERY_S:  # windows of many sizes come and go:
                release_free_memory()  # keep the allocator's free pages from piling up
                trimmed = self._clock()
            live = [job for job in batch if not job.cancelled]
            if not live:
                continue
            if self._on_start is not None:
                with self._cond:
                    running = self._batches_running()
                self._on_start(running)
            began = self._clock()
            results: list[Outcome] | None = None
            try:
                with interruptible(functools.partial(self._gives_way, live, began)):
                    results = self._recognize([j.request for j in live])
            except Interrupted:
                self._requeue(live)
                self.stats.interrupted += 1
            finally:
                with self._cond:
                    self._running[me] = []
            took = self._clock() - began
            with self._cond:
                self.stats.busy_seconds += took
                self.stats.recent.append((began, began + took))
                if results is None:  # interrupted: its requests run again
                    continue
                typical = self._typical.get(len(live), took)
                self._typical[len(live)] = typical + 0.2 * (took - typical)
                self.stats.requests += len(live)
                self.stats.batches += 1
                self.stats.last_batch = len(live)
            waits = [began - j.submitted for j in live]
            if self._on_batch is not None:
                self._on_batch(len(live), took, waits)
            if logger.isEnabledFor(logging.DEBUG):
                logger.debug("batch of %d took %.2f s: %s", len(live), took, _describe(live, waits))
            for job, outcome in zip(live, results, strict=True):
                with contextlib.suppress(RuntimeError):  # a closed loop: nobody waits any more
                    job.loop.call_soon_threadsafe(_deliver, job, outcome)

    def _batches_running(self) -> int:
        """How many threads have a batch under way that somebody waits for (called holding the
        lock): a batch whose requests were all withdrawn stops at its next checkpoint, so the
        turn's request that superseded it gets every core (one stream, two workers)."""
        return sum(1 for batch in self._running.values() if any(not job.cancelled for job in batch))

    def _gives_way(self, batch: list[_Job], began: float) -> bool:
        """Whether the batch under way should stop now (called at the model's checkpoints)."""
        if all(job.cancelled for job in batch):
            return True
        if any(job.rank[0] == 0 or job.interrupted for job in batch):
            return False
        with self._cond:
            awaited = any(job.awaited for job in self._queue)
            idle = self._batches_running() < self._n_threads
        if not awaited or idle:  # (an idle thread takes the turn's request at once)
            return False
        typical = self._typical.get(len(batch))
        return typical is None or self._clock() - began < typical / 2

    def _requeue(self, batch: list[_Job]) -> None:
        """Put an interrupted batch's requests back in their places (or drop them, stopping)."""
        with self._cond:
            for job in batch:
                if job.cancelled:
                    continue
                if self._stopping:
                    with contextlib.suppress(RuntimeError):
                        job.loop.call_soon_threadsafe(_deliver, job, None)
                    continue
                job.interrupted = True
                self._queue.append(job)
                self._cond.notify()

    def _recognize(self, requests: list[RecognitionRequest]) -> list[Outcome]:
        """The batch's outcomes; a failed batch of several is retried request by request, so
        that only the request that fails alone fails (never the worker)."""
        try:
            return list(self._recognizer.recognize(requests))
        except Interrupted:
            raise  # not a failure: the batch runs again
        except Exception as exc:
            if len(requests) > 1:
                logger.warning("a batch of %d failed (%r): running its requests one by one", len(requests), exc)
                return [outcome for request in requests for outcome in self._recognize([request])]
            logger.exception("recognition failed for the request of %s", requests[0].key)
            self.stats.failures += 1
            return [exc]


def _describe(batch: list[_Job], waits: list[float]) -> str:
    """Each request of a batch, for the debug log: awaited by a turn's final (E), urgent (!) or
    neither; its window's seconds; how long it waited."""
    return ", ".join(
        f"{'E' if j.awaited else '!' if j.rank[0] == 0 else ''}{j.request.end - j.request.start:.1f}s waited {w:.2f}"
        for j, w in zip(batch, waits, strict=True)
    )


def _deliver(job: _Job, outcome: Outcome) -> None:
    if not job.cancelled:
        job.done(outcome)
