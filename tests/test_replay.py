"""The synchronous driver on a timer the test controls: computation-aware time without a model."""

from __future__ import annotations

import numpy as np
import pytest
from fakes import SpanVad
from runtime_fakes import SR, TimedRecognizer

from streamwhisper.events import Final, Partial
from streamwhisper.model.recognizer import RecognitionRequest
from streamwhisper.runtime.replay import drive, replay
from streamwhisper.streaming.streamer import Streamer


class SteppingTimer:
    """Each recognition takes ``seconds`` on this timer (the driver reads it before and after)."""

    def __init__(self, seconds: float) -> None:
        self.seconds, self.now, self.reads = seconds, 0.0, 0

    def __call__(self) -> float:
        self.reads += 1
        if self.reads % 2 == 0:
            self.now += self.seconds
        return self.now


class Recording(TimedRecognizer):
    def __init__(self) -> None:
        super().__init__()
        self.requests: list[RecognitionRequest] = []

    def recognize(self, requests):  # type: ignore[no-untyped-def]
        self.requests += requests
        return super().recognize(requests)


def speech(seconds: float) -> tuple[Streamer, np.ndarray]:
    return Streamer(vad=SpanVad([(0.0, 1e6)])), np.zeros(int(seconds * SR), np.float32)


def test_compute_time_delays_the_results_and_the_next_request_covers_what_arrived_meanwhile() -> None:
    streamer, audio = speech(6.0)
    recognizer = Recording()
    result = replay(streamer, recognizer, audio, aware=True, timer=SteppingTimer(1.2))
    windows = [(r.start, round(r.end, 1)) for r in recognizer.requests]  # ends on whole mel frames
    # the first request at 1.5 s of audio; it takes 1.2 s, during which 1.2 s more arrives,
    # and the next request (issued when the result is back) covers all of it
    assert windows[0] == (0.0, 1.5)
    assert windows[1][1] == 2.7
    assert result.compute_s == pytest.approx(1.2 * len(recognizer.requests))
    # a word became final no earlier than the compute that heard it ended
    first = next(at for at, event in result.timeline if isinstance(event, (Partial, Final)) and event.words)
    assert first == pytest.approx(1.5 + 1.2)


def test_unaware_replay_serves_every_request_before_the_next_block() -> None:
    streamer, audio = speech(6.0)
    recognizer = Recording()
    result = replay(streamer, recognizer, audio, aware=False, timer=SteppingTimer(5.0))
    # compute takes no simulated time: requests come every step of audio (0.5 s after the first)
    ends = [round(r.end, 1) for r in recognizer.requests if not r.endpoint]
    assert ends[:3] == [1.5, 2.0, 2.5]
    assert result.compute_s == pytest.approx(5.0 * len(recognizer.requests))
    assert all(at <= 6.0 for at, _ in result.timeline)


def test_drive_gives_the_same_events_as_an_unaware_replay_of_the_same_chunks() -> None:
    streamer, audio = speech(4.0)
    replayed = replay(streamer, TimedRecognizer(), audio, aware=False).events
    chunks = [audio[i : i + SR // 10] for i in range(0, len(audio), SR // 10)]
    driven = drive(Streamer(vad=SpanVad([(0.0, 1e6)])), TimedRecognizer(), chunks)
    assert driven == replayed
    assert [w.word for e in driven if isinstance(e, Final) for w in e.words] == [f" w{i}" for i in range(8)]


def test_a_finalize_at_a_time_is_answered_by_the_endpoint_final_and_ttfs_is_timed_from_it() -> None:
    # speech for 2 s, then quiet; the client finalises at 2.2 s; each recognition takes 0.3 s
    streamer = Streamer(vad=SpanVad([(0.0, 2.0)]))
    audio = np.zeros(int(3.0 * SR), np.float32)
    result = replay(streamer, Recording(), audio, aware=True, timer=SteppingTimer(0.3), finalize_at=2.2)
    assert result.finalized_at == pytest.approx(2.2)
    answer = next(at for at, e in result.timeline if isinstance(e, Final) and e.endpoint)
    assert result.ttfs == pytest.approx(answer - 2.2)
    # the request issued at 2.0 s (audio to 1.99 s, short of the speech's end and 75 ms) gives
    # way at 2.2 s, where the pause and the finalize come; the endpoint request takes 0.3 s
    assert result.ttfs == pytest.approx(0.3)
    assert result.compute_s == pytest.approx(0.3 + 0.2 + 0.3), "the withdrawn request ran 0.2 s"
    final = next(e for _, e in result.timeline if isinstance(e, Final) and e.endpoint)
    assert [w.word for w in final.words] == [" w3"]
    assert replay(Streamer(vad=SpanVad([(0.0, 2.0)])), Recording(), audio, aware=True).ttfs is None


def test_a_finalize_inside_a_block_splits_it_and_comes_at_its_own_time() -> None:
    streamer = Streamer(vad=SpanVad([(0.0, 2.0)]))
    audio = np.zeros(int(3.0 * SR), np.float32)
    result = replay(streamer, Recording(), audio, aware=True, timer=SteppingTimer(0.3), finalize_at=2.25)
    assert result.finalized_at == pytest.approx(2.25)
    assert result.ttfs is not None and result.ttfs > 0
    late = replay(Streamer(vad=SpanVad([(0.0, 2.0)])), Recording(), audio, aware=False, finalize_at=9.0)
    assert late.finalized_at == pytest.approx(3.0)  # past the audio: with its last block
