"""Whisper's log-mel front end: Slaney mel filters, the one-shot reference and the incremental one.

The input constants (``SAMPLE_RATE``, ``HOP_LENGTH``, ``N_FRAMES`` ...) are
:mod:`streamwhisper.whisper_input`'s, re-exported here for the streaming core.

The reference ``log_mel`` reproduces Whisper's ``log_mel_spectrogram``: a centred, reflect-padded
400-point Hann STFT with hop 160, power spectrum, Slaney-normalised mel filters, ``log10`` with a
1e-10 floor, a clamp to ``max - 8`` and ``(x + 4) / 4``.
"""

from __future__ import annotations

from functools import lru_cache

import numpy as np

from streamwhisper.whisper_input import (
    FRAMES_PER_SECOND,
    HOP_LENGTH,
    N_FFT,
    N_FRAMES,
    N_SAMPLES,
    SAMPLE_RATE,
)

from .ring import RingBuffer

__all__ = [
    "FRAMES_PER_SECOND",
    "HOP_LENGTH",
    "N_FFT",
    "N_FRAMES",
    "N_SAMPLES",
    "SAMPLE_RATE",
    "IncrementalLogMel",
    "log_mel",
    "mel_filters",
    "pad_or_trim",
]


LOG_FLOOR = 1e-10
# Frames :func:`log_mel` computes at a time (30 s): its temporaries stay near 10 MB at any length.
MEL_BLOCK_FRAMES = 3000


def _hz_to_mel(freq: np.ndarray) -> np.ndarray:
    """Slaney's mel scale: linear below 1 kHz, logarithmic above."""
    f_sp = 200.0 / 3
    mels = freq / f_sp
    min_log_hz = 1000.0
    min_log_mel = min_log_hz / f_sp
    logstep = np.log(6.4) / 27.0
    log_region = freq >= min_log_hz
    mels = np.where(
        log_region, min_log_mel + np.log(np.maximum(freq, min_log_hz) / min_log_hz) / logstep, mels
    )
    return mels


def _mel_to_hz(mels: np.ndarray) -> np.ndarray:
    f_sp = 200.0 / 3
    freqs = f_sp * mels
    min_log_hz = 1000.0
    min_log_mel = min_log_hz / f_sp
    logstep = np.log(6.4) / 27.0
    log_region = mels >= min_log_mel
    return np.where(log_region, min_log_hz * np.exp(logstep * (mels - min_log_mel)), freqs)


@lru_cache(maxsize=4)
def mel_filters(n_mels: int) -> np.ndarray:
    """Slaney-normalised triangular mel filters, shape (n_mels, N_FFT // 2 + 1), float32."""
    if n_mels not in (80, 128):
        raise ValueError(f"n_mels must be 80 or 128, got {n_mels}")
    fft_freqs = np.linspace(0, SAMPLE_RATE / 2, N_FFT // 2 + 1)
    mel_points = _mel_to_hz(np.linspace(_hz_to_mel(np.array(0.0)), _hz_to_mel(np.array(SAMPLE_RATE / 2.0)), n_mels + 2))
    fdiff = np.diff(mel_points)
    ramps = mel_points[:, None] - fft_freqs[None, :]
    lower = -ramps[:-2] / fdiff[:-1, None]
    upper = ramps[2:] / fdiff[1:, None]
    weights = np.maximum(0.0, np.minimum(lower, upper))
    enorm = 2.0 / (mel_points[2 : n_mels + 2] - mel_points[:n_mels])
    weights *= enorm[:, None]
    weights.flags.writeable = False
    return weights.astype(np.float32)


@lru_cache(maxsize=1)
def hann_window() -> np.ndarray:
    """Periodic Hann window of N_FFT samples (torch.hann_window's default)."""
    n = np.arange(N_FFT)
    return (0.5 - 0.5 * np.cos(2 * np.pi * n / N_FFT)).astype(np.float32)


def power_frames(frames: np.ndarray) -> np.ndarray:
    """Power spectra of windowed frames: (n, N_FFT) samples -> (n, N_FFT // 2 + 1)."""
    spec = np.fft.rfft(frames * hann_window(), axis=-1)
    return (spec.real**2 + spec.imag**2).astype(np.float32)


def raw_log_mel(power: np.ndarray, n_mels: int) -> np.ndarray:
    """log10 mel energies (n, n_mels) of power spectra (n, n_fft bins), before clamping/scaling."""
    mel = power @ mel_filters(n_mels).T
    return np.log10(np.maximum(mel, LOG_FLOOR)).astype(np.float32)


def normalize_log_mel(log_spec: np.ndarray) -> np.ndarray:
    """Whisper's dynamic-range clamp (max - 8) and scaling to roughly [-1, 1]."""
    log_spec = np.maximum(log_spec, log_spec.max() - 8.0)
    return ((log_spec + 4.0) / 4.0).astype(np.float32)


def stft_frames(audio: np.ndarray) -> np.ndarray:
    """All centred STFT frames of ``audio`` as Whisper takes them (the last frame dropped)."""
    audio = np.asarray(audio, dtype=np.float32)
    pad = N_FFT // 2
    if audio.shape[0] <= pad:
        padded = np.pad(audio, (pad, pad), mode="reflect" if audio.shape[0] > 1 else "constant")
    else:
        padded = np.pad(audio, (pad, pad), mode="reflect")
    # a strided view, not a copy: 400 samples a frame would be 10x the audio's size
    return np.lib.stride_tricks.sliding_window_view(padded, N_FFT)[::HOP_LENGTH][:-1]


def log_mel(audio: np.ndarray, n_mels: int = 80, padding: int = 0) -> np.ndarray:
    """One-shot log-mel of 16 kHz mono float32 audio, shape (n_mels, n_frames).

    ``padding`` appends that many zero samples first, as Whisper's transcribe does with N_SAMPLES.
    """
    audio = np.asarray(audio, dtype=np.float32)
    if padding:
        audio = np.pad(audio, (0, padding))
    frames = stft_frames(audio)
    raw = np.empty((frames.shape[0], n_mels), dtype=np.float32)
    # block by block: the spectra of a whole hour at once would be about 2 GB of temporaries
    for i in range(0, frames.shape[0], MEL_BLOCK_FRAMES):
        raw[i : i + MEL_BLOCK_FRAMES] = raw_log_mel(power_frames(frames[i : i + MEL_BLOCK_FRAMES]), n_mels)
    return normalize_log_mel(raw).T.copy()


def pad_or_trim(mel: np.ndarray, length: int = N_FRAMES) -> np.ndarray:
    """Pad (with zeros) or trim a (n_mels, n) mel along time to ``length`` frames."""
    n = mel.shape[-1]
    if n > length:
        return mel[..., :length]
    if n < length:
        return np.pad(mel, [(0, 0)] * (mel.ndim - 1) + [(0, length - n)])
    return mel


class IncrementalLogMel:
    """Log-mel of a growing stream, computing each STFT frame once.

    Frame ``i`` (absolute) is centred on sample ``i * HOP_LENGTH`` and needs the 400 samples
    around it, so it is computed as soon as they have arrived. Like the reference, the stream
    is reflect-padded at its beginning (the sample passed to :meth:`reset`) and, after
    :meth:`finish`, at its end; the frames then equal ``log_mel`` of the same samples. Before
    ``finish`` every reference frame exists except, when fewer than 40 samples follow the last
    hop boundary, the final one (it needs the end padding).

    Raw log10-mel frames are cached on their absolute index in a preallocated ring of
    ``max_frames``; :meth:`window` applies Whisper's clamp to the *window's own* maximum and
    the ``(x + 4) / 4`` scaling, exactly as the model sees a window cut from a file.
    """

    def __init__(self, n_mels: int = 80, max_frames: int = N_FRAMES, start: int = 0) -> None:
        mel_filters(n_mels)  # validates n_mels
        self._n_mels = n_mels
        self._cache = RingBuffer(max_frames, (n_mels,))
        self.reset(start)

    def reset(self, start: int) -> None:
        """Start a new stream at absolute sample ``start`` (a multiple of HOP_LENGTH)."""
        if start % HOP_LENGTH:
            raise ValueError(f"a stream must start on a hop boundary, got sample {start}")
        self._origin = start
        self._received = 0
        self._head = np.zeros(0, dtype=np.float32)  # the first samples, until reflect-padding
        self._buf: np.ndarray | None = None  # padded samples from the next frame's window on
        self._finished = False
        self._cache.reset(start // HOP_LENGTH)

    @property
    def sample_end(self) -> int:
        """Absolute index one past the last sample fed."""
        return self._origin + self._received

    @property
    def start_frame(self) -> int:
        """Absolute index of the oldest cached frame."""
        return self._cache.start

    @property
    def end_frame(self) -> int:
        """Absolute index one past the newest computed frame."""
        return self._cache.end

    @property
    def finished(self) -> bool:
        """True after :meth:`finish` (until the next :meth:`reset`)."""
        return self._finished

    @property
    def nbytes(self) -> int:
        """Bytes of the preallocated frame cache (constant)."""
        return self._cache.nbytes

    def feed(self, samples: np.ndarray) -> int:
        """Append samples; computes the frames they complete and returns how many."""
        if self._finished:
            raise RuntimeError("feed() after finish(); reset() first")
        samples = np.asarray(samples, dtype=np.float32).reshape(-1)
        self._received += samples.shape[0]
        if self._buf is None:
            self._head = np.concatenate([self._head, samples])
            if self._head.shape[0] <= N_FFT // 2:  # reflect-padding needs one more sample
                return 0
            self._buf = np.concatenate([self._head[1 : N_FFT // 2 + 1][::-1], self._head])
            self._head = np.zeros(0, dtype=np.float32)
        else:
            self._buf = np.concatenate([self._buf, samples])
        return self._compute(self._buf)

    def finish(self) -> int:
        """End the stream: compute the last frames from Whisper's end reflect-padding."""
        if self._finished:
            return 0
        self._finished = True
        if self._buf is None:  # too short for reflect-padding: the reference's own short path
            if self._received == 0:
                return 0
            raw = raw_log_mel(power_frames(stft_frames(self._head)), self._n_mels)
            self._cache.append(raw)
            return int(raw.shape[0])
        n_total = self._received // HOP_LENGTH  # the reference drops the last centred frame
        pad = self._buf[-(N_FFT // 2 + 1) : -1][::-1]
        return self._compute(np.concatenate([self._buf, pad]), limit=n_total - self._relative_end)

    @property
    def _relative_end(self) -> int:
        return self._cache.end - self._origin // HOP_LENGTH

    def _compute(self, buf: np.ndarray, limit: int | None = None) -> int:
        n = 0 if buf.shape[0] < N_FFT else 1 + (buf.shape[0] - N_FFT) // HOP_LENGTH
        if limit is not None:
            n = max(0, min(n, limit))
        if n:
            windows = np.lib.stride_tricks.sliding_window_view(buf, N_FFT)[::HOP_LENGTH][:n]
            self._cache.append(raw_log_mel(power_frames(windows), self._n_mels))
            self._buf = buf[n * HOP_LENGTH :]
        return n

    def raw(self, start_frame: int, end_frame: int) -> np.ndarray:
        """Cached log10-mel frames ``[start_frame, end_frame)``, shape (n_mels, n)."""
        return self._cache.read(start_frame, end_frame).T

    def window(self, start_frame: int, end_frame: int) -> np.ndarray:
        """Normalised mel of frames ``[start_frame, end_frame)`` as the encoder takes it.

        The clamp uses the maximum of these frames only, so a window equals ``log_mel`` of a
        file holding the same audio (up to the reflect-padding at the file's edges).
        """
        return np.ascontiguousarray(normalize_log_mel(self.raw(start_frame, end_frame)))

    def trim_before(self, frame: int) -> None:
        """Forget cached frames before ``frame``."""
        self._cache.trim_before(frame)
