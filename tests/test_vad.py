"""VAD: the webrtcvad wrapper on real audio, the quiet/speaking machine on scripted frames."""

from __future__ import annotations

from collections.abc import Sequence
from itertools import pairwise

import numpy as np
import pytest

from benchmarks.scoring import Clip
from streamwhisper.audio.files import load_audio
from streamwhisper.audio.vad import LevelNormalizer, SpeechBoundary, SpeechDetector, VadConfig, WebRtcVad
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


def speech_starts(audio: np.ndarray, config: VadConfig) -> list[float]:
    detector = SpeechDetector(WebRtcVad.from_config(config), config)
    return [b.sample / 16_000 for b in run_detector(detector, audio, 1_600) if b.started]


def test_a_whisper_is_heard_only_with_the_input_levelled(clips: dict[str, Clip]) -> None:
    """Whispered speech peaking at -32 dBFS: webrtcvad at aggressiveness 3 calls 2 % of its frames
    voiced as recorded, so no utterance ever starts; levelled, the speech starts near 0.3 s."""
    audio = load_audio(clips["hard_voice_whisper2"].wav)
    assert speech_starts(audio, VadConfig(max_gain_db=0.0)) == []
    starts = speech_starts(audio, VadConfig())
    assert starts and starts[0] < 1.0, starts


def test_levelling_raises_quiet_speech_to_the_target_and_no_further(jfk_audio: np.ndarray) -> None:
    frames = jfk_audio[: 16_000 * 6 // 480 * 480].reshape(-1, 480)
    # jfk opens with digital silence, then -43 dBFS hiss, then speech louder than the target:
    # the hiss is not measured against the silence, and nothing is attenuated
    assert not LevelNormalizer(24.0, -20.0, 166, 15.0).gains(frames).any()
    quiet = LevelNormalizer(24.0, -20.0, 166, 15.0).gains(frames * 10 ** (-30 / 20))
    assert quiet.max() == pytest.approx(24.0)  # the cap
    peak = 10 * np.log10(np.max(np.mean(frames[-166:].astype(np.float64) ** 2, axis=1)))  # the last 5 s
    mid = LevelNormalizer(60.0, -20.0, 166, 15.0).gains(frames * 10 ** (-30 / 20))
    assert mid[-1] == pytest.approx(-20.0 - (peak - 30.0), abs=0.01)  # the window's loudest frame lands on -20


@pytest.mark.parametrize("dbfs", [-30.0, -45.0])
def test_steady_noise_is_not_raised(dbfs: float) -> None:
    """Steady noise has no quiet stretches between louder ones: raised, webrtcvad would take it
    for speech (white noise at -30 dBFS: no frame voiced as it is, every frame 10 dB louder)."""
    rng = np.random.default_rng(7)
    noise = (rng.standard_normal(16_000 * 10) * 10 ** (dbfs / 20)).astype(np.float32)
    gains = LevelNormalizer(24.0, -20.0, 166, 15.0).gains(noise[: len(noise) // 480 * 480].reshape(-1, 480))
    assert not gains.any()
    assert speech_starts(noise, VadConfig()) == []


@pytest.mark.parametrize(
    "field, value",
    [("max_gain_db", -1.0), ("max_gain_db", 61.0), ("level_target_dbfs", 3.0), ("level_window_ms", 10),
     ("level_min_range_db", -1.0)],
)
def test_levelling_settings_are_checked(field: str, value: float) -> None:
    with pytest.raises(ConfigError):
        VadConfig(**{field: value})
