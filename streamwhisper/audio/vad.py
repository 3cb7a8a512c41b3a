"""Voice activity: a per-frame classifier behind the :class:`Vad` protocol and a state machine.

:class:`WebRtcVad` levels its input first (:class:`LevelNormalizer`): webrtcvad's verdict depends
on the level, and at aggressiveness 3 it hears almost nothing of speech that peaks 30 dB below
full scale (a whisper, a quiet microphone) that it hears at once 20 dB louder.

:class:`SpeechDetector` cuts any chunking of the stream into fixed VAD frames (buffering the
partial frame), classifies each one and runs a quiet/speaking machine with a start window and
an endpoint hangover. It reports boundaries on the absolute sample clock; its memory does not
depend on how long the stream is.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

import numpy as np
import webrtcvad

from streamwhisper.errors import ConfigError

from .mel import SAMPLE_RATE


def _require(ok: bool, message: str) -> None:
    if not ok:
        raise ConfigError(message)


@dataclass(frozen=True)
class VadConfig:
    """Voice activity detection: webrtcvad frames and the quiet/speaking state machine.

    Speech starts when at least ``start_speech_ms`` of the last ``start_window_ms`` are voiced;
    it ends after ``endpoint_ms`` of unbroken silence (the hangover). ``pre_roll_ms`` of audio
    before the first voiced frame are kept and sent to the model so onsets are not clipped.
    """

    aggressiveness: int = 3  # webrtcvad 0 (lenient) .. 3 (strict); 3 rejects steady noise best
    frame_ms: int = 30  # 10, 20 or 30
    start_window_ms: int = 300
    start_speech_ms: int = 150
    endpoint_ms: int = 500
    pre_roll_ms: int = 300
    # Input levelling before webrtcvad (0 disables): frames are raised by up to max_gain_db so the
    # loudest frame of the last level_window_ms reaches level_target_dbfs (RMS), but only while
    # that loudest frame stands level_min_range_db above the quietest tenth: speech rises and
    # falls by 20-40 dB between syllables and pauses; steady noise, which the gain would make
    # pass for speech, does not.
    max_gain_db: float = 24.0
    level_target_dbfs: float = -20.0
    level_window_ms: int = 5000
    level_min_range_db: float = 15.0

    def __post_init__(self) -> None:
        _require(self.aggressiveness in (0, 1, 2, 3), "vad.aggressiveness must be 0, 1, 2 or 3")
        _require(self.frame_ms in (10, 20, 30), "vad.frame_ms must be 10, 20 or 30")
        _require(self.start_window_ms >= self.frame_ms, "vad.start_window_ms must hold one frame")
        _require(
            0 < self.start_speech_ms <= self.start_window_ms,
            "vad.start_speech_ms must be in (0, start_window_ms]",
        )
        _require(self.endpoint_ms >= self.frame_ms, "vad.endpoint_ms must be at least one frame")
        _require(0 <= self.pre_roll_ms <= 2000, "vad.pre_roll_ms must be in [0, 2000]")
        _require(0.0 <= self.max_gain_db <= 60.0, "vad.max_gain_db must be in [0, 60]")
        _require(-60.0 <= self.level_target_dbfs <= 0.0, "vad.level_target_dbfs must be in [-60, 0]")
        _require(self.level_window_ms >= self.frame_ms, "vad.level_window_ms must hold one frame")
        _require(self.level_min_range_db >= 0.0, "vad.level_min_range_db must be >= 0")


class Vad(Protocol):
    """Classifies frames of ``frame_samples`` float32 samples at 16 kHz as speech or not.

    ``classify`` takes a batch of consecutive frames, shape (n, frame_samples), in stream
    order (so a stateful classifier may adapt), and returns one bool per frame.
    """

    @property
    def frame_samples(self) -> int: ...

    def classify(self, frames: np.ndarray) -> Sequence[bool]: ...


SILENT_DBFS = -80.0  # a frame quieter than this (RMS) is silence, not a level to measure


class LevelNormalizer:
    """The gain, in dB, that raises each frame towards a target level (see :class:`VadConfig`).

    It looks back over a bounded window of frame levels: the gain lifts the loudest frame there
    to the target, up to ``max_gain_db``, and is 0 while the window's range (loudest frame over
    the quietest tenth) is below ``min_range_db``. It never attenuates. Frames below
    ``SILENT_DBFS`` (digital silence, a muted input) get no gain and are left out of the window.
    """

    def __init__(self, max_gain_db: float, target_dbfs: float, window_frames: int, min_range_db: float) -> None:
        self._max_gain = max_gain_db
        self._target = target_dbfs
        self._min_range = min_range_db
        self._levels: deque[float] = deque(maxlen=max(1, window_frames))

    def gains(self, frames: np.ndarray) -> np.ndarray:
        """One gain per frame (dB), each from the window ending at that frame."""
        out = np.zeros(frames.shape[0], dtype=np.float32)
        power = np.mean(np.square(frames, dtype=np.float64), axis=1)
        levels = 10.0 * np.log10(power + 1e-12)
        for i, level in enumerate(levels):
            if level < SILENT_DBFS:
                continue  # not a floor to measure speech against: hiss after it is not speech
            self._levels.append(float(level))
            window = np.fromiter(self._levels, dtype=np.float64, count=len(self._levels))
            loudest = window.max()
            floor = np.partition(window, len(window) // 10)[len(window) // 10]
            if loudest - floor >= self._min_range:
                out[i] = min(self._max_gain, max(0.0, self._target - loudest))
        return out


class WebRtcVad:
    """webrtcvad (the WebRTC GMM classifier) on 10, 20 or 30 ms frames, levelled first."""

    def __init__(self, aggressiveness: int = 3, frame_ms: int = 30, level: LevelNormalizer | None = None) -> None:
        if frame_ms not in (10, 20, 30):
            raise ValueError(f"webrtcvad takes 10, 20 or 30 ms frames, got {frame_ms}")
        self._vad = webrtcvad.Vad(aggressiveness)
        self._frame_samples = SAMPLE_RATE * frame_ms // 1000
        self._level = level

    @classmethod
    def from_config(cls, config: VadConfig) -> WebRtcVad:
        """The classifier ``config`` describes, its levelling included (none at ``max_gain_db`` 0)."""
        level = None
        if config.max_gain_db > 0:
            window = config.level_window_ms // config.frame_ms
            level = LevelNormalizer(config.max_gain_db, config.level_target_dbfs, window, config.level_min_range_db)
        return cls(config.aggressiveness, config.frame_ms, level)

    @property
    def frame_samples(self) -> int:
        """Samples per frame."""
        return self._frame_samples

    def classify(self, frames: np.ndarray) -> list[bool]:
        """webrtcvad's verdict per frame; all-zero (digital silence) frames skip the call."""
        if self._level is not None:
            frames = frames * np.power(10.0, self._level.gains(frames) / 20.0)[:, None]
        pcm = (np.clip(frames, -1.0, 1.0) * 32767.0).astype("<i2")
        nonzero = pcm.any(axis=1)  # muted inputs send zeros for hours: keep them cheap
        return [
            bool(live) and self._vad.is_speech(row.tobytes(), SAMPLE_RATE)
            for row, live in zip(pcm, nonzero, strict=True)
        ]


@dataclass(frozen=True, slots=True)
class SpeechBoundary:
    """A change of the speech state.

    ``sample`` is where speech began (start of the first voiced frame) or ended (end of the
    last voiced frame); ``detected`` is the sample at which the machine decided, which lags by
    up to the start window or the endpoint hangover.
    """

    started: bool
    sample: int
    detected: int


class SpeechDetector:
    """The quiet/speaking state machine over a :class:`Vad`.

    Quiet -> speaking when ``start_speech_ms`` of the last ``start_window_ms`` are voiced;
    speaking -> quiet after ``endpoint_ms`` of unbroken unvoiced frames.
    """

    def __init__(self, vad: Vad, config: VadConfig, start: int = 0) -> None:
        self._vad = vad
        self._frame = vad.frame_samples
        frame_ms = 1000 * self._frame // SAMPLE_RATE
        window = max(1, config.start_window_ms // frame_ms)
        self._window: deque[tuple[int, bool]] = deque(maxlen=window)
        self._start_frames = min(window, -(-config.start_speech_ms // frame_ms))  # ceil
        self._voiced = 0  # voiced frames in the window
        self._end_frames = -(-config.endpoint_ms // frame_ms)
        self._partial = np.zeros(0, dtype=np.float32)
        self._pos = start  # absolute sample index of the next frame
        self._speaking = False
        self._silent_run = 0
        self._last_voiced_end = start

    @property
    def speaking(self) -> bool:
        """True between a start and an end boundary."""
        return self._speaking

    @property
    def quiet_samples(self) -> int:
        """While speaking: samples classified unvoiced since the last voiced frame (else 0)."""
        return self._pos - self._last_voiced_end if self._speaking else 0

    @property
    def last_voiced_end(self) -> int:
        """Where the last voiced frame ended (samples; where the current quiet began)."""
        return self._last_voiced_end

    def feed(self, samples: np.ndarray) -> list[SpeechBoundary]:
        """Classify the complete frames of ``samples`` (after any buffered remainder)."""
        samples = np.asarray(samples, dtype=np.float32).reshape(-1)
        if self._partial.shape[0]:
            samples = np.concatenate([self._partial, samples])
        n = samples.shape[0] // self._frame
        out: list[SpeechBoundary] = []
        if n:
            frames = samples[: n * self._frame].reshape(n, self._frame)
            for voiced in self._vad.classify(frames):
                boundary = self._step(bool(voiced))
                if boundary is not None:
                    out.append(boundary)
        self._partial = samples[n * self._frame :].copy()
        return out

    def flush(self) -> list[SpeechBoundary]:
        """End of stream: close an open speech segment; the partial frame is discarded."""
        detected = self._pos + self._partial.shape[0]
        self._partial = np.zeros(0, dtype=np.float32)
        self._window.clear()
        self._voiced = 0
        if not self._speaking:
            return []
        self._speaking = False
        return [SpeechBoundary(False, self._last_voiced_end, detected)]

    def _step(self, voiced: bool) -> SpeechBoundary | None:
        start, self._pos = self._pos, self._pos + self._frame
        if voiced:
            self._last_voiced_end = self._pos
        if not self._speaking:
            if len(self._window) == self._window.maxlen and self._window[0][1]:
                self._voiced -= 1  # about to fall out of the window
            self._window.append((start, voiced))
            self._voiced += voiced
            if self._voiced < self._start_frames:
                return None
            onset = next(s for s, v in self._window if v)
            self._speaking, self._silent_run = True, 0
            self._window.clear()
            self._voiced = 0
            return SpeechBoundary(True, onset, self._pos)
        self._silent_run = 0 if voiced else self._silent_run + 1
        if self._silent_run < self._end_frames:
            return None
        self._speaking = False
        return SpeechBoundary(False, self._last_voiced_end, self._pos)
