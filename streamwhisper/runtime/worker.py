"""InferenceWorker: the threads that own the model (two batches at once on a multi-core CPU).

The scheduler of every :class:`~streamwhisper.runtime.pump.Pump` in the process. Pumps submit
:class:`RecognitionRequest` objects from the event loop with a ``done`` callback. A worker
thread takes its share of the waiting requests, oldest first (the urgent ones, endpoints and
pauses, in a batch of their own while there are any), runs them through the recogniser as one
batch (one encoder call, decoder steps batched across the requests) and calls each ``done`` on
the submitting loop with ``call_soon_threadsafe``. A pump has at most one request outstanding,
so no stream waits for more than one batch ahead of it and the queue never holds more than one
request per stream (``max_pending`` bounds it anyway).

With ``threads`` > 1 (``server.workers``) that many batches run at once, each on its own thread,
taken from the one queue: under load the cores stay busy while one batch runs Python between
small tensor operations, where one batch over two torch threads leaves a core waiting.
``on_share`` lets the daemon give a batch every core while it runs alone, its share beside
another (:func:`~streamwhisper.model.cpu_threads.core_sharing`), as that count changes, and
take the cores back from a thread whose batch ended.

A batch taken while the threads were busy over 90 % of the last 5 s, or a turn's batch that
starts beside another one, gets a share of the cores: its live requests go to the recogniser
marked ``crowded`` (served as in a batch: fitted and greedy, 2-3x cheaper than alone); an
awaited one as its turn's ``endpoint`` (at a longer fitted context: ``RecognizerConfig``).

A turn's final waits for no partial. The requests it waits for (an endpoint's, and a pause's
whose turn ended: :meth:`_Job.hasten`) are *awaited*. A batch that holds one starts at once on
a spare thread (one per ``threads``; a spare takes nothing else), beside at most ``threads`` - 1
other such batches; if that makes more than ``threads`` batches run, one that is not awaited
pauses at its next checkpoint (:mod:`streamwhisper.model.interrupt`: between encoder blocks and
decoder steps) until a batch ends (once: turns' finals delay a batch, they cannot starve
it). So the turn's batch waits for no other, the cores run ``threads`` batches as before, and
nothing is thrown away: a paused batch goes on where it stopped.

A batch that raises is run again one request at a time, so that a request the recogniser cannot
take (a poisoned window) fails alone: every other request of its batch gets its hypothesis.

Bulk requests (the windows of uploaded files, ``RecognitionRequest.bulk``) come after every live
request and run alone, one per batch: a live request waits at most for the one bulk window under
way (a turn's final not even for that: the bulk window pauses), and a burst of uploads cannot
push live streams back in the queue.

A batch under way stops at a checkpoint when nobody waits for any of its results any more (its
requests were withdrawn or cancelled): a running request can be withdrawn, and its result is
never delivered.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace

from streamwhisper.model.interrupt import Interrupted, interruptible
from streamwhisper.model.memory import release_free_memory
from streamwhisper.model.recognizer import RecognitionRequest, Recognizer

from .pump import Done, Outcome, SchedulerFull
from .worker_stats import WorkerStats

logger = logging.getLogger(__name__)

TRIM_EVERY_S = 30.0
PAUSE_POLL_S = 0.05  # how often a paused batch looks whether it was withdrawn (that does not notify)


@dataclass(order=True)
class _Job:
    rank: tuple[int, int]  # (0 for urgent requests, 1 for other live ones, 2 bulk; arrival number)
    request: RecognitionRequest = field(compare=False)
    done: Done = field(compare=False)
    loop: asyncio.AbstractEventLoop = field(compare=False)
    submitted: float = field(compare=False, default=0.0)
    cancelled: bool = field(compare=False, default=False)
    awaited: bool = field(compare=False, default=False)  # a turn's final waits for it
    owner: InferenceWorker | None = field(compare=False, default=None)

    def cancel(self) -> None:
        self.cancelled = True  # read by the worker thread; a bool flip needs no lock

    def withdraw(self) -> bool:
        return self.owner is not None and self.owner._withdraw(self)

    def hasten(self) -> None:
        if self.owner is not None:
            self.owner._hasten(self)

    def served(self, crowded: bool) -> RecognitionRequest:
        """The request as served: ``crowded`` (a file's never is), the turn's ``endpoint`` once awaited."""
        r = self.request
        return replace(r, crowded=r.crowded or crowded and not r.bulk, endpoint=r.endpoint or self.awaited)


class InferenceWorker:
    """Runs recognition requests of all sessions on its threads, in batches.

    Args:
        recognizer: the model behind the Recognizer seam; used only from the worker thread.
        max_batch: most requests per batch.
        max_pending: most requests waiting; more raise :class:`SchedulerFull`.
        threads: batches run at once (each on a thread of its own; the recogniser must allow
            calls from several threads at once).
        on_batch: called on the worker thread after each batch with (size, seconds, waits).
        on_share: called on the worker thread before each batch and whenever that count changes
            at a checkpoint, with the number of batches then running (not paused), this one
            included, and with 0 after the batch (the daemon shares the cores by it).
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
        on_share: Callable[[int], None] | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._recognizer = recognizer
        self._max_batch = max_batch
        self._max_pending = max_pending
        self._on_batch = on_batch
        self._on_share = on_share
        self._cond = threading.Condition()
        self._queue: list[_Job] = []
        self._running: dict[int, list[_Job]] = {}  # the batch under way, per thread
        self._paused: set[int] = set()  # threads whose batch waits for an awaited batch to end
        self._paused_s: dict[int, float] = {}  # how long each thread's batch under way paused (once)
        self._shares: dict[int, int] = {}  # the count on_share last gave each thread's batch
        self._slots = threads
        self._trimmed = clock()  # when free memory was last given back
        self._ended = 0  # threads that ended (the last one calls _on_end)
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
            for i in range(2 * self._slots):  # a spare thread for each slot: see _takeable
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
            kind = 2 if request.bulk else 0 if request.urgent or request.endpoint else 1
            job = _Job((kind, self._counter), request, done, loop, self._clock(), awaited=request.endpoint, owner=self)
            self._queue.append(job)
            self._cond.notify_all()  # (paused threads wait on the same condition)
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
        """A turn's final now waits for ``job`` (a pause's request whose turn ended): queued, it
        is urgent; either way, other batches pause for its batch."""
        with self._cond:
            job.awaited = True
            if job in self._queue:
                job.rank = (0, job.rank[1])
            self._cond.notify_all()

    async def stop(self, within_s: float | None = None) -> None:
        """Drop what is still queued (``done(None)``) and wait for the batch under way to end and
        the threads to return (at most ``within_s`` seconds: they are daemon threads, they do not
        keep the process)."""
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
                    # the last thread out signals from its finally block: see each one return
                    await asyncio.to_thread(_join, self._threads)
            if not ended.is_set():
                logger.warning("stopped without waiting for the batch under way")
            self._threads = []

    def _take(self, me: int) -> list[_Job] | None:
        with self._cond:
            while not (size := self._takeable(me)) and not self._stopping:
                self._cond.wait()
            if self._stopping:
                return None
            batch, self._queue = self._queue[:size], self._queue[size:]
            self._running[me] = batch
            return batch

    def _takeable(self, me: int) -> int:
        """How many of the queue's first requests thread ``me`` takes now (0: none; holding the
        lock). The urgent ones, when one is awaited and fewer than ``threads`` awaited batches
        run (there is always a spare thread for it: another batch pauses). Else, on a thread
        that is not a spare, the next batch (the urgent requests while there are any, then the
        oldest; a bulk window alone), unless ``threads`` batches are under way, awaited and
        paused ones included: 1/``threads`` of the waiting requests (2 to ``max_batch``), as a
        CPU runs a window batched about as fast as alone (docs/tuning-log.md, 45th session)."""
        if not self._queue:
            return 0
        self._queue.sort()
        held = [batch for batch in self._running.values() if any(not job.cancelled for job in batch)]
        awaited = sum(1 for batch in held if _awaited(batch))
        urgent = sum(1 for job in self._queue if job.rank[0] == 0)
        if any(job.awaited for job in self._queue):
            return min(urgent, self._max_batch) if awaited < self._slots else 0
        if me >= self._slots or len(held) >= self._slots:  # (a spare's memory is for turns' finals)
            return 0
        n = urgent or sum(1 for job in self._queue if not job.request.bulk)  # (0: a bulk window alone)
        return min(n, max(2, -(-n // self._slots)), self._max_batch) if n else 1

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
        while (batch := self._take(me)) is not None:
            live = [job for job in batch if not job.cancelled]
            if live:
                self._pause(me, live)
            began = self._clock()
            results: list[Outcome] | None = None
            with self._cond:  # (a live window then costs what it does in a batch: _served_crowded)
                crowded = self._served_crowded(me, live)
            requests = [j.served(crowded) for j in live]
            try:
                with interruptible(functools.partial(self._checkpoint, me, live)):
                    results = self._recognize(requests) if live else None
            except Interrupted:  # nobody waits for it any more
                self.stats.interrupted += 1
            finally:
                with self._cond:
                    self._running[me] = []
                    self._shares.pop(me, None)
                    paused_s = self._paused_s.pop(me, 0.0)
                    self._cond.notify_all()  # a batch may start, a paused one go on
            took = self._clock() - began - paused_s  # (running, not paused)
            if live and self._on_share is not None:
                self._on_share(0)
            if not live:
                continue
            with self._cond:
                self.stats.busy_seconds += took
                self.stats.recent.append((began, began + took))
                if results is None:
                    continue
                self.stats.requests += len(live)
                self.stats.batches += 1
                self.stats.last_batch = len(live)
            waits = [began - j.submitted for j in live]
            if self._on_batch is not None:
                self._on_batch(len(live), took, waits)
            if logger.isEnabledFor(logging.DEBUG):
                what = "crowded batch" if crowded else "batch"
                logger.debug("%s of %d took %.2f s: %s", what, len(live), took, _describe(live, waits))
            for job, outcome in zip(live, results, strict=True):
                with contextlib.suppress(RuntimeError):  # a closed loop: nobody waits any more
                    job.loop.call_soon_threadsafe(_deliver, job, outcome)
            self._trim()

    def _trim(self) -> None:
        """Every ``TRIM_EVERY_S`` (one thread at a time, after a batch's results went out: no
        request waits for it): windows of many sizes come and go, so give the allocator's free
        pages back."""
        with self._cond:
            if self._clock() - self._trimmed <= TRIM_EVERY_S:
                return
            self._trimmed = self._clock()
        release_free_memory()

    def _batches_running(self, besides: int | None = None) -> int:
        """How many threads (other than ``besides``) run a batch that somebody waits for and that
        is not paused (holding the lock): a batch whose requests were all withdrawn stops at its
        next checkpoint, so the turn's request that superseded it gets every core (one stream)."""
        return sum(
            1
            for me, batch in self._running.items()
            if me != besides and me not in self._paused and any(not job.cancelled for job in batch)
        )

    def _checkpoint(self, me: int, batch: list[_Job]) -> bool:
        """At each of the model's checkpoints: whether the batch stops (nobody waits for it);
        else it may pause (:meth:`_pause`) and takes its share of the cores as they are now."""
        if not all(job.cancelled for job in batch):
            self._pause(me, batch)
        return all(job.cancelled for job in batch)

    def _pause(self, me: int, batch: list[_Job]) -> None:
        """A batch that no turn's final waits for waits while an awaited batch runs on another
        thread and ``threads`` batches run besides it, once at most (so turns' finals delay a
        batch by one batch's time and cannot starve it); then the batch takes its share of the
        cores (``on_share`` with the batches then running, when that count changed)."""
        with self._cond:
            if me not in self._paused_s and not _awaited(batch) and self._must_pause(me):
                self.stats.paused += 1
                began = self._clock()
                self._paused.add(me)
                while not self._stopping and not _awaited(batch) and self._must_pause(me):
                    if all(job.cancelled for job in batch):
                        break
                    self._cond.wait(PAUSE_POLL_S)
                self._paused.discard(me)
                self._paused_s[me] = self._clock() - began
            running = self._batches_running()
            changed = running != self._shares.get(me)
            self._shares[me] = running
        if self._on_share is not None and changed:
            self._on_share(running)

    def _served_crowded(self, me: int, batch: list[_Job]) -> bool:
        """Whether ``me`` serves its live windows as in a batch (``crowded``, holding the lock):
        while the worker is saturated, and for a turn's final that starts beside another batch.
        Either way it gets one core of the two, where a window served alone (20 s or more of
        context, beam search) costs two or three fitted greedy ones."""
        return self.stats.saturated() or (_awaited(batch) and self._batches_running(besides=me) > 0)

    def _must_pause(self, me: int) -> bool:
        """Whether another thread runs a batch a turn's final waits for and ``threads`` batches
        run besides ``me`` (holding the lock)."""
        awaited = any(_awaited(batch) for other, batch in self._running.items() if other != me)
        return awaited and self._batches_running(besides=me) >= self._slots

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
    """Each request of a batch for the debug log: awaited (E), urgent (!) or neither; seconds; wait."""
    return ", ".join(
        f"{'E' if j.awaited else '!' if j.rank[0] == 0 else ''}{j.request.end - j.request.start:.1f}s waited {w:.2f}"
        for j, w in zip(batch, waits, strict=True)
    )


def _awaited(batch: list[_Job]) -> bool:
    return any(job.awaited and not job.cancelled for job in batch)


def _deliver(job: _Job, outcome: Outcome) -> None:
    if not job.cancelled:
        job.done(outcome)


def _join(threads: list[threading.Thread]) -> None:
    for thread in threads:
        thread.join()
