"""VAD: the webrtcvad wrapper on real audio, the quiet/speaking machine on scripted frames."""

from __future__ import annotations

from collections.abc import Sequence
from itertools import pairwise

import numpy as np
import pytest

from streamwhisper.audio.vad import SpeechBoundary, SpeechDetector, VadConfig, WebRtcVad
from streamwhisper.errors import ConfigError
from streamwhisper.events import SpeechEnded, SpeechStarted
from streamwhisper.model.recognizer import Hypothesis, RecognitionRequest
from streamwhisper.runtime.replay import drive
from streamwhisper.streaming.streamer import Streamer


def chunks(x: np.ndarray, size: int) -> list[np.ndarray]:
    return [x[i : i + size] for i in range(0, x.shape[0], size)]


class PatternVad:
    """Frame i is voiced when pattern[i] == '1' (silence after the pattern)."""

    def __init__(self, pattern: str, frame_ms: int = 30) -> None:
        self.pattern = pattern
        self.frame_samples = 16 * frame_ms
        self.seen = 0

    def classify(self, frames: np.ndarray) -> Sequence[bool]:
        assert frames.shape[1] == self.frame_samples
        out = [self.pattern[self.seen + i : self.seen + i + 1] == "1" for i in range(frames.shape[0])]
        self.seen += frames.shape[0]
        return out


class CountingRecognizer:
    """Hears nothing; counts the requests it gets."""

    def __init__(self) -> None:
        self.requests: list[RecognitionRequest] = []

    def recognize(self, requests: Sequence[RecognitionRequest]) -> list[Hypothesis]:
        self.requests.extend(requests)
        return [Hypothesis("", (), (), -0.2, 0.01, 1.0, "en") for _ in requests]


def run_detector(detector: SpeechDetector, x: np.ndarray, size: int) -> list[SpeechBoundary]:
    out: list[SpeechBoundary] = []
    for c in chunks(x, size):
        out += detector.feed(c)
    return out + detector.flush()


def test_jfk_speech_starts_and_ends(jfk_audio: np.ndarray) -> None:
    x = jfk_audio
    bounds = run_detector(SpeechDetector(WebRtcVad(3, 30), VadConfig()), x, 1_600)
    assert [b.started for b in bounds][:2] == [True, False]
    assert all(a.started != b.started for a, b in pairwise(bounds))
    # "And so" starts at 0.33 s; webrtcvad already calls the -43 dBFS hiss from 0.09 s voiced.
    assert abs(bounds[0].sample / 16_000 - 0.3) <= 0.25
    ends = [b for b in bounds if not b.started]
    assert ends and ends[-1].sample / 16_000 > 10.0  # the last word ends near 10.9 s
    # The machine decides after the start window and the endpoint hangover.
    assert all(b.detected >= b.sample for b in bounds)
    assert all(b.detected - b.sample >= 500 * 16 for b in ends[:-1])


def test_jfk_through_the_streamer_issues_requests_only_in_speech(jfk_audio: np.ndarray) -> None:
    x = jfk_audio
    streamer = Streamer()
    recognizer = CountingRecognizer()
    events = drive(streamer, recognizer, chunks(x, 3_200))
    kinds = [type(e) for e in events]
    assert kinds[0] is SpeechStarted and SpeechEnded in kinds
    assert recognizer.requests
    for r in recognizer.requests:
        assert r.mel.shape[0] == 80 and 0 < r.mel.shape[1] <= 3_000
    assert streamer.finished


def test_digital_silence_gives_no_speech_and_no_requests() -> None:
    streamer = Streamer()
    recognizer = CountingRecognizer()
    events = drive(streamer, recognizer, chunks(np.zeros(30 * 16_000, dtype=np.float32), 16_000))
    assert events == [] and recognizer.requests == []


def test_hours_of_silence_keep_buffers_bounded() -> None:
    streamer = Streamer()
    nbytes = streamer.audio.nbytes
    zeros = np.zeros(16_000, dtype=np.float32)
    quiet_keep = 16 * (300 + 300 + 60)  # pre-roll + start window + two frames
    for _ in range(2 * 3600):
        assert streamer.feed(zeros) == []
        assert streamer.pending_request() is None
        assert streamer.audio.buffered_samples <= quiet_keep
        assert streamer.audio.cached_frames == 0
    assert streamer.audio.nbytes == nbytes
    assert streamer.time == 7200.0


@pytest.mark.parametrize("size", [1, 7, 480, 1_000, 100_000])
def test_any_chunking_gives_the_same_boundaries(size: int) -> None:
    pattern = "0000110111111100000000000000000011111" + "0" * 5
    x = np.zeros(len(pattern) * 480, dtype=np.float32)
    expected = run_detector(SpeechDetector(PatternVad(pattern), VadConfig()), x, len(x))
    assert run_detector(SpeechDetector(PatternVad(pattern), VadConfig()), x, size) == expected
    # 5 voiced frames (150 ms) in the 10-frame window: starts at the first voiced frame.
    assert expected[0] == SpeechBoundary(True, 4 * 480, 10 * 480)
    # 17 silent frames (>= 500 ms) end it at the end of the last voiced frame.
    assert expected[1] == SpeechBoundary(False, 14 * 480, 31 * 480)
    assert expected[2].started and expected[2].sample == 32 * 480
    assert expected[3] == SpeechBoundary(False, 37 * 480, 42 * 480)  # closed by flush()


def test_sparse_voiced_frames_do_not_start_speech() -> None:
    pattern = "1000100010001000100010001" * 4  # 1 in 4 voiced: never 5 in a window of 10
    x = np.zeros(len(pattern) * 480, dtype=np.float32)
    assert run_detector(SpeechDetector(PatternVad(pattern), VadConfig()), x, 4_800) == []


def test_short_pauses_do_not_end_speech() -> None:
    pattern = "11111" + ("1" + "0" * 15) * 10  # pauses of 450 ms < 500 ms endpoint
    x = np.zeros((len(pattern) + 100) * 480, dtype=np.float32)
    bounds = run_detector(SpeechDetector(PatternVad(pattern), VadConfig()), x, 4_800)
    assert [b.started for b in bounds] == [True, False]


def test_configurable_frames_and_hangover() -> None:
    config = VadConfig(frame_ms=10, start_window_ms=100, start_speech_ms=50, endpoint_ms=200)
    pattern = "0011111" + "0" * 30
    x = np.zeros(len(pattern) * 160, dtype=np.float32)
    bounds = run_detector(SpeechDetector(PatternVad(pattern, 10), config), x, 333)
    assert bounds == [
        SpeechBoundary(True, 2 * 160, 7 * 160),
        SpeechBoundary(False, 7 * 160, 27 * 160),
    ]


@pytest.mark.parametrize("frame_ms", [10, 20, 30])
def test_webrtcvad_frame_sizes(frame_ms: int, jfk_audio: np.ndarray) -> None:
    vad = WebRtcVad(2, frame_ms)
    x = jfk_audio[16_000 : 16_000 + 20 * vad.frame_samples]
    verdicts = vad.classify(x.reshape(20, vad.frame_samples))
    assert len(verdicts) == 20 and any(verdicts)
    assert not any(vad.classify(np.zeros((5, vad.frame_samples), dtype=np.float32)))


def test_invalid_settings() -> None:
    with pytest.raises(ValueError):
        WebRtcVad(2, 25)
    with pytest.raises(ConfigError):
        VadConfig(aggressiveness=4)
    with pytest.raises(ConfigError):
        VadConfig(start_speech_ms=400, start_window_ms=300)
