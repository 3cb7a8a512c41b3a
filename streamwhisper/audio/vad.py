"""Voice activity: a per-frame classifier behind the :class:`Vad` protocol and a state machine.

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


class Vad(Protocol):
    """Classifies frames of ``frame_samples`` float32 samples at 16 kHz as speech or not.

    ``classify`` takes a batch of consecutive frames, shape (n, frame_samples), in stream
    order (so a stateful classifier may adapt), and returns one bool per frame.
    """

    @property
    def frame_samples(self) -> int: ...

    def classify(self, frames: np.ndarray) -> Sequence[bool]: ...


class WebRtcVad:
    """webrtcvad (the WebRTC GMM classifier) on 10, 20 or 30 ms frames."""

    def __init__(self, aggressiveness: int = 3, frame_ms: int = 30) -> None:
        if frame_ms not in (10, 20, 30):
            raise ValueError(f"webrtcvad takes 10, 20 or 30 ms frames, got {frame_ms}")
        self._vad = webrtcvad.Vad(aggressiveness)
        self._frame_samples = SAMPLE_RATE * frame_ms // 1000

    @property
    def frame_samples(self) -> int:
        """Samples per frame."""
        return self._frame_samples

    def classify(self, frames: np.ndarray) -> list[bool]:
        """webrtcvad's verdict per frame; all-zero (digital silence) frames skip the call."""
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
