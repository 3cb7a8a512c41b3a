"""The driver: moves one stream's recognition requests from its Streamer to a scheduler and back.

Every way audio reaches the streaming core goes through a :class:`Pump`: a daemon session (the
:class:`~streamwhisper.runtime.worker.InferenceWorker` as scheduler), the ``listen`` app (the same
worker, for one stream) and ``bench`` (:mod:`streamwhisper.runtime.replay`, a synchronous
scheduler on a clock of its own). So what the benchmark measures is the loop the daemon runs.

The pump keeps at most one request of its stream at the scheduler. Whenever audio arrives, the
stream is finalised or flushed, or a result comes back, it asks the Streamer for the request that
is due and submits it. A result goes back to the Streamer (:meth:`Streamer.complete`); a
dropped or refused request is abandoned (its audio is covered by the next one, an endpoint
request closes its utterance from what was heard before). A failed one is too, and is reported
as an ``Error`` event, unless the pump was given ``on_failure``: then recognition stops there
(:meth:`Pump.give_up`) and the caller ends the stream. A request that an endpoint or a pause
made useless (its window ends before the speech the endpoint's or the pause's request will
cover) is withdrawn, waiting or under way, so that request need not wait for it; a request
whose result now closes an ended turn (a pause's, when the endpoint or a finalize came after
it) is hastened. The pump itself has no clock and no
event loop: the scheduler decides where and when a request runs and calls ``done`` with its
outcome (on the event loop, for the worker).

:meth:`Pump.give_up` ends a stream without the scheduler (a failed recognition, a shutdown
deadline): once flushed, each utterance closes from the hypotheses already heard.

A mark (:meth:`Pump.mark`) tells its caller when every utterance that had ended has been closed,
so that a protocol with turns (a client's commit, a VAD endpoint) knows its turn's last final
was handed on.
"""

from __future__ import annotations

import functools
import logging
from collections import deque
from collections.abc import Callable
from typing import Protocol

import numpy as np

from streamwhisper.events import Error, Event, Final, SpeechEnded, SpeechStarted
from streamwhisper.model.recognizer import Hypothesis, RecognitionRequest
from streamwhisper.streaming.streamer import Streamer
from streamwhisper.whisper_input import SAMPLE_RATE

# What became of a request: its hypothesis, the exception recognition raised, or None when the
# scheduler dropped it unrun (shutting down, or the session went away).
Outcome = Hypothesis | BaseException | None
Done = Callable[[Outcome], None]

logger = logging.getLogger(__name__)


class SchedulerFull(RuntimeError):
    """The scheduler cannot take the request now (its queue is full, or it is stopping)."""


class Job(Protocol):
    """A submitted request."""

    def cancel(self) -> None:
        """Drop the request if it has not run yet (``done`` is then never called)."""
        ...

    def withdraw(self) -> bool:
        """Drop the request, waiting or under way: True if dropped (``done`` is then never
        called), False if its outcome is already on its way (``done`` is called as usual)."""
        ...

    def hasten(self) -> None:
        """A turn's final now waits for this request: run it before work nobody waits for."""
        ...


class Scheduler(Protocol):
    """Where requests run: ``submit`` takes one, and ``done`` is called once with its outcome."""

    def submit(self, request: RecognitionRequest, done: Done) -> Job:
        """Queue ``request``; raises :class:`SchedulerFull` when it cannot.

        ``done`` is called later, never from within ``submit``.
        """
        ...


class PumpObserver(Protocol):
    """What a pump reports besides events (metrics and load adaptation hook in here)."""

    def result(self, request: RecognitionRequest, outcome: Outcome) -> None: ...

    def refused(self, request: RecognitionRequest) -> None: ...


class Pump:
    """One stream's driver.

    Args:
        streamer: the stream's pure core.
        scheduler: where its requests run.
        on_events: receives every event, in order, as it is produced.
        observer: told of each result and refusal before its events are handed on.
        on_finished: called once, when :attr:`finished` becomes true.
        on_failure: when given, a failed request makes the pump give up (:meth:`give_up`) and
            is passed here instead of becoming an ``Error`` event.
    """

    def __init__(
        self,
        streamer: Streamer,
        scheduler: Scheduler,
        on_events: Callable[[list[Event]], None],
        observer: PumpObserver | None = None,
        on_finished: Callable[[], None] | None = None,
        on_failure: Callable[[BaseException], None] | None = None,
    ) -> None:
        self.streamer = streamer
        self._scheduler = scheduler
        self._on_events = on_events
        self._observer = observer
        self._on_finished = on_finished
        self._on_failure = on_failure
        self._inflight: RecognitionRequest | None = None
        self._job: Job | None = None
        self._ticket = 0  # numbers submissions, so a late outcome of a dropped request is ignored
        self._closed = False
        self._flushed = False
        self._given_up = False  # no more requests: the stream ends from what was heard
        self._finalize_owed = False  # a finalize the streamer could not take yet
        self._marks: deque[tuple[int, Callable[[], None]]] = deque()  # (utterances to close, callback)

    @property
    def inflight(self) -> RecognitionRequest | None:
        """The request at the scheduler, if any."""
        return self._inflight

    @property
    def finished(self) -> bool:
        """True once the stream was flushed and every request it needed has come back."""
        return self.streamer.finished

    def feed(self, samples: np.ndarray) -> None:
        """Audio arrived (16 kHz float samples)."""
        if len(samples):
            self._emit(self.streamer.feed(samples))
            self._advance()

    def finalize(self) -> None:
        """The client says the utterance ended here (see :meth:`Streamer.finalize`).

        An utterance the streamer holds queued behind one that ended and waits for its last
        request cannot be ended yet; it is ended as soon as it begins (where the audio is then).
        """
        s = self.streamer
        logger.debug("finalize at %.2f s (%s)", s.audio.end / SAMPLE_RATE, "speech" if s.speaking else "quiet")
        self._finalize_owed = True
        self._retry_finalize()
        self._advance()

    def flush(self) -> None:
        """End of the stream: what was heard becomes finals as its requests come back."""
        self._finalize_owed = False
        self._flushed = True
        self._emit(self.streamer.flush())
        self._advance()

    def mark(self, then: Callable[[], None]) -> None:
        """Call ``then`` once every utterance that has ended so far is closed: its events (its
        last final included) were handed on. Marks are called in the order they were made; a
        mark with nothing to wait for is called now. The caller bounds how many it makes."""
        self._marks.append((self.streamer.utterances[0] + self._finalize_owed, then))
        self._call_marks()

    def give_up(self) -> None:
        """Submit nothing more; the request at the scheduler is cancelled and abandoned. From the
        flush on, every utterance closes at once from the hypotheses already heard (their words
        not yet final become finals), so the stream finishes without the scheduler."""
        self._given_up = True
        if self._job is not None:
            self._job.cancel()
        if self._inflight is not None:
            self._inflight = self._job = None
            self._emit(self.streamer.abandon())
        self._advance()

    def close(self) -> None:
        """Stop driving: the request at the scheduler is cancelled and nothing more submitted."""
        self._closed = True
        if self._job is not None:
            self._job.cancel()
        self._inflight = self._job = None

    def _advance(self) -> None:
        """Submit the request that is due, if none is at the scheduler; first drop the one there
        if the utterance's endpoint or pause superseded it (:attr:`Streamer.superseded`)."""
        if not self._closed and self._inflight is not None and self.streamer.superseded:
            assert self._job is not None
            if self._job.withdraw():
                self._inflight = self._job = None
                self._emit(self.streamer.abandon())
        if not self._closed and self._job is not None and self.streamer.awaited:
            self._job.hasten()
        while not self._closed and self._inflight is None:
            if self._given_up and not self._flushed:
                return  # the flush ends the stream
            request = self.streamer.pending_request()
            self._retry_finalize()  # an endpoint request begins the utterance queued behind it
            if request is None:
                if self.streamer.finished and self._on_finished is not None:
                    on_finished, self._on_finished = self._on_finished, None
                    on_finished()
                return
            if self._given_up:  # flushed: only endpoint requests are due, each closes its utterance
                self._emit(self.streamer.abandon())
                if not request.endpoint:
                    return
                continue
            self._ticket += 1
            self._inflight = request
            try:
                self._job = self._scheduler.submit(request, functools.partial(self._done, self._ticket))
            except SchedulerFull:
                self._inflight = None
                if self._observer is not None:
                    self._observer.refused(request)
                self._emit(self.streamer.abandon())
                return  # the next audio, finalize or flush retries: never loops here

    def _done(self, ticket: int, outcome: Outcome) -> None:
        request = self._inflight
        if self._closed or request is None or ticket != self._ticket:
            return
        self._inflight = self._job = None
        if self._observer is not None:
            self._observer.result(request, outcome)
        if isinstance(outcome, Hypothesis):
            self._emit(self.streamer.complete(outcome))
        elif outcome is not None and self._on_failure is not None:
            self._emit(self.streamer.abandon())
            self.give_up()
            self._on_failure(outcome)
            return
        else:
            if outcome is not None:
                failure = f"recognition failed: {type(outcome).__name__}"
                self._emit([Error("recognition_failed", failure)])
            self._emit(self.streamer.abandon())
        self._advance()

    def _emit(self, events: list[Event]) -> None:
        """Hand on the events of one step of the streamer, then the marks that step completed."""
        if events:
            if logger.isEnabledFor(logging.DEBUG):
                for e in events:
                    if isinstance(e, (SpeechStarted, SpeechEnded)) or (isinstance(e, Final) and e.endpoint):
                        logger.debug("%s", e)
            self._on_events(events)
        self._retry_finalize()
        self._call_marks()

    def _retry_finalize(self) -> None:
        if not self._finalize_owed:
            return
        ended = self.streamer.utterances[0]
        events = self.streamer.finalize()
        # still owed only while an utterance the finalize could not end goes on (VAD in speech)
        if self.streamer.utterances[0] > ended or not self.streamer.speaking:
            self._finalize_owed = False
            logger.debug(
                "finalize taken: utterances (ended, closed) %s, %d event(s), %s",
                self.streamer.utterances,
                len(events),
                "a request out" if self._inflight else "no request out",
            )
            self._emit(events)

    def _call_marks(self) -> None:
        closed = self.streamer.utterances[1]
        while self._marks and self._marks[0][0] <= closed and not self._closed:
            self._marks.popleft()[1]()
