"""The Pump on a scheduler the test answers by hand: a real Streamer, a scripted VAD, no loop."""

from __future__ import annotations

import numpy as np
import pytest
from fakes import SpanVad, hyp
from runtime_fakes import SR, ManualScheduler, hear

from streamwhisper.events import Error, Event, Final, Partial
from streamwhisper.model.recognizer import RecognitionRequest
from streamwhisper.runtime.pump import Outcome, Pump
from streamwhisper.streaming.streamer import Streamer

CHUNK = np.zeros(SR // 10, np.float32)  # 100 ms; the scripted VAD decides what is speech


class Observer:
    def __init__(self) -> None:
        self.results: list[tuple[RecognitionRequest, Outcome]] = []
        self.refusals: list[RecognitionRequest] = []

    def result(self, request: RecognitionRequest, outcome: Outcome) -> None:
        self.results.append((request, outcome))

    def refused(self, request: RecognitionRequest) -> None:
        self.refusals.append(request)


class Harness:
    """A pump over a stream that is speech from the first sample on (or in ``spans``)."""

    def __init__(self, spans: list[tuple[float, float]] | None = None, fatal: bool = False) -> None:
        self.scheduler = ManualScheduler()
        self.events: list[Event] = []
        self.observer = Observer()
        self.finished = 0
        self.failures: list[BaseException] = []
        self.pump = Pump(
            Streamer(vad=SpanVad(spans or [(0.0, 1e6)])),
            self.scheduler,
            self.events.extend,
            observer=self.observer,
            on_finished=self._on_finished,
            on_failure=self.failures.append if fatal else None,
        )

    def _on_finished(self) -> None:
        self.finished += 1

    def feed(self, seconds: float) -> None:
        for _ in range(round(seconds * 10)):
            self.pump.feed(CHUNK)

    def answer(self, i: int, outcome: Outcome | str = "heard") -> None:
        job = self.scheduler.jobs[i]
        job.done(hear(job.request) if outcome == "heard" else outcome)  # type: ignore[arg-type]

    def answer_until_endpoint(self, outcome: Outcome | str = "heard") -> None:
        """Answer the requests out before the endpoint request (flush comes after them)."""
        while not self.scheduler.jobs[-1].request.endpoint:
            assert self.finished == 0 and self.pump.inflight is not None
            self.answer(len(self.scheduler.jobs) - 1, outcome)

    def of_type(self, kind: type) -> list[Event]:
        return [e for e in self.events if isinstance(e, kind)]


def test_one_request_at_a_time_the_next_is_submitted_when_the_result_returns() -> None:
    h = Harness()
    h.feed(6.0)
    assert len(h.scheduler.jobs) == 1, "a request was due every half second, but one was out"
    assert h.pump.inflight is h.scheduler.jobs[0].request
    h.answer(0)
    assert len(h.scheduler.jobs) == 2, "the audio that came meanwhile is due at once"
    assert h.scheduler.jobs[1].request.end == pytest.approx(6.0, abs=0.02)  # the last complete mel frame
    assert h.pump.inflight is h.scheduler.jobs[1].request
    h.feed(2.0)
    assert len(h.scheduler.jobs) == 2


def test_a_result_goes_to_the_streamer_and_comes_out_as_a_partial() -> None:
    h = Harness()
    h.feed(1.5)
    (job,) = h.scheduler.jobs
    heard = hear(job.request)
    assert heard.words, "the first window holds words"
    h.answer(0)
    (partial,) = h.of_type(Partial)
    assert [w.word for w in partial.words] == [w.word for w in heard.words]
    assert h.observer.results == [(job.request, heard)]
    assert h.pump.inflight is None


def test_a_failed_recognition_is_an_error_event_and_the_next_request_covers_its_audio() -> None:
    h = Harness()
    h.feed(2.0)
    failed = h.scheduler.jobs[0].request
    h.answer(0, RuntimeError("model exploded"))
    (error,) = h.of_type(Error)
    assert error.code == "recognition_failed" and "RuntimeError" in error.message
    assert not h.of_type(Partial)
    retry = h.scheduler.jobs[1].request
    assert retry.start == failed.start and retry.end >= failed.end


def final_words(events: list[Event]) -> list[str]:
    return [w.word for e in events if isinstance(e, Final) for w in e.words]


def test_with_on_failure_a_failed_request_stops_recognition_and_the_flush_closes_from_what_was_heard() -> None:
    h = Harness(fatal=True)
    h.feed(2.0)
    h.answer(0)
    (partial,) = h.of_type(Partial)
    heard = [w.word for w in partial.words]
    assert heard
    h.feed(2.0)
    boom = RuntimeError("poisoned window")
    h.answer(1, boom)
    assert h.failures == [boom] and not h.of_type(Error), "the caller reports the failure"
    h.feed(3.0)
    assert len(h.scheduler.jobs) == 2, "nothing more is submitted"
    h.pump.flush()
    assert h.finished == 1 and h.pump.finished and len(h.scheduler.jobs) == 2
    assert final_words(h.events) == heard, "the words heard before the failure are finals"
    assert [e.endpoint for e in h.of_type(Final)][-1]


def test_give_up_cancels_the_request_out_and_the_stream_finishes_without_the_scheduler() -> None:
    h = Harness()
    h.feed(2.0)
    h.answer(0)
    heard = [w.word for w in h.of_type(Partial)[0].words]
    h.feed(2.0)
    h.pump.flush()
    out = h.scheduler.jobs[-1]
    assert not h.pump.finished and h.pump.inflight is out.request
    h.pump.give_up()  # a shutdown's deadline: the worker is too busy
    assert out.cancelled and h.pump.finished and h.finished == 1
    assert final_words(h.events) == heard
    out.done(hear(out.request))  # a late answer is ignored
    assert final_words(h.events) == heard


def test_a_refused_submit_is_abandoned_and_retried_with_the_next_audio() -> None:
    h = Harness()
    h.scheduler.refuse = True
    h.feed(2.0)
    assert h.observer.refusals and not h.scheduler.jobs and h.pump.inflight is None
    first_refused = h.observer.refusals[0]
    h.scheduler.refuse = False
    h.feed(0.1)
    (job,) = h.scheduler.jobs
    assert job.request.start == first_refused.start and job.request.end > first_refused.end
    assert not h.of_type(Error), "a refusal is counted, not reported to the client"


def test_close_cancels_the_request_in_flight_and_ignores_its_late_outcome() -> None:
    h = Harness()
    h.feed(2.0)
    (job,) = h.scheduler.jobs
    h.pump.close()
    assert job.cancelled and h.pump.inflight is None
    before = list(h.events)
    h.answer(0)  # the scheduler raced the cancellation: the result still arrives
    h.pump.flush()
    assert h.events[: len(before)] == before and not h.of_type(Partial)
    assert len(h.scheduler.jobs) == 1 and h.finished == 0


def test_on_finished_fires_once_when_the_last_request_after_flush_returns() -> None:
    h = Harness()
    h.feed(2.0)
    h.answer(0)
    h.pump.flush()
    h.answer_until_endpoint()
    assert h.finished == 0 and not h.pump.finished
    h.answer(len(h.scheduler.jobs) - 1)
    assert h.finished == 1 and h.pump.finished
    assert h.of_type(Final)[-1].endpoint
    h.pump.flush()
    h.pump.finalize()
    assert h.finished == 1


def test_on_finished_fires_when_the_last_result_produces_no_events() -> None:
    h = Harness()
    h.feed(2.0)
    h.answer(0, hyp([]))  # nothing heard: no partial, nothing to finalise
    h.pump.flush()
    h.answer_until_endpoint(hyp([]))
    assert h.finished == 0
    seen = len(h.events)
    h.answer(len(h.scheduler.jobs) - 1, hyp([]))
    assert len(h.events) == seen, "the last result produced no events"
    assert h.finished == 1 and h.pump.finished


MARK = Error("mark", "")  # what the tests' mark callbacks put into the event list


def test_a_mark_after_finalize_comes_right_after_the_last_final_of_the_utterance() -> None:
    h = Harness()
    h.feed(2.0)
    h.answer(0)
    h.pump.finalize()
    h.pump.mark(lambda: h.events.append(MARK))
    assert MARK not in h.events, "the finalized utterance still waits for its endpoint request"
    h.answer_until_endpoint()
    assert MARK not in h.events
    h.answer(len(h.scheduler.jobs) - 1)
    final = h.events.index(MARK) - 1
    assert isinstance(h.events[final], Final) and h.events[final].endpoint
    assert h.events[final + 1 :] == [MARK]
    h.feed(1.0)  # speech goes on: a new utterance, which the mark did not wait for
    assert h.events.count(MARK) == 1


def test_a_mark_with_nothing_ended_is_called_at_once_and_marks_keep_their_order() -> None:
    h = Harness()
    h.feed(1.0)
    h.pump.mark(lambda: h.events.append(MARK))  # speech goes on, nothing has ended
    assert h.events[-1] is MARK
    h.pump.finalize()
    order: list[int] = []
    h.pump.mark(lambda: order.append(1))
    h.pump.mark(lambda: order.append(2))
    assert order == []
    h.answer_until_endpoint()
    h.answer(len(h.scheduler.jobs) - 1)
    assert order == [1, 2]


def test_a_mark_waits_for_an_utterance_that_ends_without_text_and_for_a_queued_one() -> None:
    h = Harness(spans=[(0.0, 2.0), (2.7, 3.2)])  # two utterances; the second ends before the first closes
    h.feed(2.6)  # the VAD ended the first (after 500 ms of quiet); its request of 1.5 s is still out
    h.pump.mark(lambda: h.events.append(MARK))
    h.feed(1.4)  # the second starts and ends meanwhile
    assert h.pump.streamer.utterances == (2, 0)
    h.pump.mark(lambda: h.events.append(MARK))
    seen = []  # (marks called, utterances closed) after each answer
    while h.pump.inflight is not None:
        h.answer(len(h.scheduler.jobs) - 1, hyp([]))  # nothing heard: no final at all
        seen.append((h.events.count(MARK), h.pump.streamer.utterances[1]))
    assert seen[-1] == (2, 2) and (1, 1) in seen, seen
    assert all(marks == closed for marks, closed in seen), "each mark came when its utterance closed"
    assert not h.of_type(Final)


def test_a_finalize_while_an_utterance_waits_behind_an_ended_one_ends_it_as_it_begins() -> None:
    h = Harness(spans=[(0.0, 2.0), (2.7, 10.0)])
    h.feed(3.5)  # the VAD ended the first utterance, whose pause's request is out; the second speaks
    assert h.pump.streamer.speaking and h.pump.streamer.utterances == (1, 0)
    h.pump.finalize()  # the streamer cannot end the second yet: it has not begun
    h.pump.mark(lambda: h.events.append(MARK))
    while MARK not in h.events:
        h.answer(len(h.scheduler.jobs) - 1)
    # the window to 1.5 s gave way to the pause's (2.0 s + 150 ms), whose hypothesis closes the first
    superseded, pause, endpoint = [job for job in h.scheduler.jobs]
    assert superseded.cancelled and superseded.request.end == pytest.approx(1.5, abs=0.02)
    assert not pause.request.endpoint and pause.request.end == pytest.approx(2.2, abs=0.05)
    assert endpoint.request.endpoint and endpoint.request.end == pytest.approx(3.5, abs=0.01)
    closing = h.events[h.events.index(MARK) - 1]
    assert isinstance(closing, Final) and closing.endpoint and closing.end <= 3.5
    assert h.pump.streamer.utterances == (2, 2), "the mark waited for both"


def test_a_pause_withdraws_the_partial_it_supersedes_and_its_own_request_goes_instead() -> None:
    """The pause's hypothesis may be the turn's final (a client's finalize or the VAD's endpoint
    next): a partial of a window that ends before the pause would only delay it."""
    h = Harness(spans=[(0.0, 2.0), (2.7, 10.0)])
    h.feed(2.1)
    assert len(h.scheduler.jobs) == 1 and h.scheduler.jobs[0].request.end == pytest.approx(1.5, abs=0.02)
    assert not h.scheduler.jobs[0].cancelled, "100 ms of quiet is no pause yet"
    h.feed(0.1)  # 150 ms of quiet after the last voiced frame
    assert h.scheduler.jobs[0].cancelled
    pause = h.scheduler.jobs[1].request
    assert pause.urgent and not pause.endpoint and pause.end == pytest.approx(2.2, abs=0.05)
    h.answer(1)
    h.feed(0.5)  # the VAD's endpoint (500 ms): the pause's hypothesis heard the utterance to its end
    assert len(h.scheduler.jobs) == 2, "no endpoint request"
    # its hypothesis committed the sure words another follows at once, and the rest at the endpoint
    assert [(e.text, e.endpoint) for e in h.of_type(Final)] == [("w0 w1 w2", False), ("w3", True)]


def test_a_finalize_hastens_the_pauses_request_its_final_waits_for() -> None:
    h = Harness(spans=[(0.0, 2.0), (2.7, 10.0)])
    h.feed(2.2)  # the pause's request is out (the window to 1.5 s gave way to it)
    pause = h.scheduler.jobs[-1]
    assert pause.request.urgent and not pause.request.endpoint and not pause.hastened
    h.pump.finalize()
    assert pause.hastened and not pause.cancelled and len(h.scheduler.jobs) == 2
    h.answer(1)
    finals = h.of_type(Final)
    assert len(h.scheduler.jobs) == 2 and finals[-1].endpoint, "its hypothesis is the turn's final"
    assert " ".join(e.text for e in finals) == "w0 w1 w2 w3"


def test_a_partial_whose_window_reaches_the_pause_is_not_withdrawn() -> None:
    h = Harness(spans=[(0.0, 1.8), (2.7, 10.0)])
    h.feed(1.5)
    h.answer(0)  # the window to 1.5 s
    h.feed(0.5)  # the next, to 2.0 s (150 ms past the speech), is out when the pause comes
    assert h.scheduler.jobs[1].request.end == pytest.approx(2.0, abs=0.02)
    h.feed(0.2)
    assert not h.scheduler.jobs[1].cancelled and len(h.scheduler.jobs) == 2, "and no pause request"


def test_a_finalize_withdraws_the_waiting_request_it_supersedes_and_the_endpoint_request_goes_instead() -> None:
    h = Harness()
    h.feed(3.0)
    assert len(h.scheduler.jobs) == 1 and not h.scheduler.jobs[0].request.endpoint  # the window to 1.5 s
    h.pump.finalize()
    assert h.scheduler.jobs[0].cancelled, "its window ends before the speech the endpoint finalises"
    endpoint = h.scheduler.jobs[1].request
    assert endpoint.endpoint and endpoint.end == pytest.approx(3.0, abs=0.02)
    h.answer(1)
    assert [e.endpoint for e in h.of_type(Final)] == [True]


def test_the_request_of_a_pause_that_heard_the_speech_to_its_end_is_kept_for_the_endpoint() -> None:
    h = Harness([(0.0, 2.0)])
    h.feed(2.0)  # the speech ends at 2.0 s
    while h.pump.inflight is not None:
        h.answer(len(h.scheduler.jobs) - 1)
    h.feed(0.3)  # 150 ms of quiet: the pause's request
    pause = h.scheduler.jobs[-1]
    assert pause.request.urgent and not pause.request.endpoint
    h.pump.finalize()
    assert not pause.cancelled and h.scheduler.jobs[-1] is pause
    h.answer(len(h.scheduler.jobs) - 1)
    finals = h.of_type(Final)
    assert finals and finals[-1].endpoint, "the pause's hypothesis was the endpoint's"
    assert not any(j.request.endpoint for j in h.scheduler.jobs)
