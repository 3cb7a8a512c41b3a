"""Tests for streamwhisper.audio.files (PyAV decoding) and streamwhisper.audio.convert."""

from __future__ import annotations

import ast
import wave
from fractions import Fraction
from itertools import pairwise
from pathlib import Path

import av
import numpy as np
import pytest
import soxr
from hypothesis import given, settings
from hypothesis import strategies as st

from streamwhisper.audio import convert, files
from streamwhisper.audio.convert import (
    StreamResampler,
    float32_to_pcm_s16le,
    pcm_to_float32,
    resample,
)
from streamwhisper.audio.files import iter_audio_chunks, load_audio
from streamwhisper.audio.mel import SAMPLE_RATE
from streamwhisper.errors import AudioFormatError, ConfigError

CLIP_SECONDS = 4.0

# (file name, encoder, encoder sample rate); opus encodes at 48 kHz, the rest at 44.1 kHz or 16 kHz
# so that load_audio has to resample. The native vorbis encoder is "experimental" in FFmpeg,
# so ogg is tested with libopus.
FORMATS = [
    ("clip.wav", "pcm_s16le", 16_000),
    ("clip.flac", "flac", 44_100),
    ("clip.mp3", "libmp3lame", 44_100),
    ("clip.ogg", "libopus", 48_000),
    ("clip.opus", "libopus", 48_000),
    ("clip.m4a", "aac", 44_100),
    ("clip.webm", "libopus", 48_000),
]
LOSSLESS = {"clip.wav", "clip.flac"}


def _encode(path: Path, signal: np.ndarray, rate: int, codec: str) -> None:
    """Encode ``signal`` (shape (channels, n), float32 at ``rate``) with PyAV into ``path``."""
    layout = "mono" if signal.shape[0] == 1 else "stereo"
    with av.open(str(path), "w") as out:
        stream = out.add_stream(codec, rate=rate, layout=layout)
        for i in range(0, signal.shape[1], 1000):
            block = np.ascontiguousarray(signal[:, i : i + 1000], dtype=np.float32)
            frame = av.AudioFrame.from_ndarray(block, format="fltp", layout=layout)
            frame.sample_rate = rate
            frame.pts = i
            frame.time_base = Fraction(1, rate)
            for packet in stream.encode(frame):
                out.mux(packet)
        for packet in stream.encode(None):
            out.mux(packet)


def _encodable(codec: str) -> bool:
    try:
        av.codec.Codec(codec, "w")
    except Exception:
        return False
    return True


@pytest.fixture(scope="module")
def source(jfk_audio: np.ndarray) -> np.ndarray:
    """Four seconds of real speech (16 kHz mono)."""
    return jfk_audio[: int(CLIP_SECONDS * SAMPLE_RATE)]


@pytest.fixture(scope="module")
def encoded(tmp_path_factory: pytest.TempPathFactory, source: np.ndarray) -> dict[str, Path]:
    """Each test format encoded once from the source clip."""
    root = tmp_path_factory.mktemp("encoded")
    out: dict[str, Path] = {}
    for name, codec, rate in FORMATS:
        if not _encodable(codec):
            continue
        sig = source if rate == SAMPLE_RATE else soxr.resample(source, SAMPLE_RATE, rate)
        _encode(root / name, np.asarray(sig, dtype=np.float32)[None, :], rate, codec)
        out[name] = root / name
    return out


def _aligned_corr(y: np.ndarray, x: np.ndarray, max_lag: int = 800) -> float:
    """Correlation of ``y`` and ``x`` at the best lag within ±max_lag samples."""
    n = min(len(x), len(y))
    xs = x[max_lag : n - max_lag]
    c = np.correlate(y[:n], xs, mode="valid")
    lag = int(np.argmax(c)) - max_lag
    a = y[max(lag, 0) :][: n - abs(lag)]
    b = x[max(-lag, 0) :][: len(a)]
    return float(np.corrcoef(a, b)[0, 1])


def _rms(x: np.ndarray) -> float:
    return float(np.sqrt(np.mean(np.square(x, dtype=np.float64))))


# ----------------------------------------------------------------------------- load_audio


@pytest.mark.parametrize("name", [f[0] for f in FORMATS])
def test_load_audio_formats(name: str, encoded: dict[str, Path], source: np.ndarray) -> None:
    if name not in encoded:
        pytest.skip(f"bundled FFmpeg cannot encode {name}")
    y = load_audio(encoded[name])
    assert y.dtype == np.float32 and y.ndim == 1
    assert abs(len(y) - len(source)) <= 0.05 * SAMPLE_RATE
    assert np.isfinite(y).all()
    corr = _aligned_corr(y, source)
    ratio = _rms(y) / _rms(source)
    if name in LOSSLESS:
        assert corr > 0.999
        assert ratio == pytest.approx(1.0, abs=0.01)
    else:
        assert corr > 0.95
        assert ratio == pytest.approx(1.0, abs=0.15)


def test_load_audio_str_path_and_other_rate(
    encoded: dict[str, Path], source: np.ndarray
) -> None:
    y = load_audio(str(encoded["clip.flac"]), sample_rate=8000)
    assert y.dtype == np.float32
    assert abs(len(y) - len(source) // 2) <= 2


def test_load_audio_stereo_44k_downmix(tmp_path: Path, source: np.ndarray) -> None:
    left = soxr.resample(source, SAMPLE_RATE, 44_100).astype(np.float32)
    right = 0.5 * left
    path = tmp_path / "stereo.wav"
    _encode(path, np.stack([left, right]), 44_100, "pcm_s16le")
    y = load_audio(path)
    assert y.dtype == np.float32 and y.ndim == 1
    assert abs(len(y) - len(source)) <= 2
    assert _aligned_corr(y, source) > 0.999
    # the downmix averages the channels: (1 + 0.5) / 2 = 0.75 of the left channel
    assert _rms(y) / _rms(source) == pytest.approx(0.75, abs=0.01)
    assert np.abs(y).max() <= 1.0


def test_load_audio_sine_wav_via_wave_module(tmp_path: Path) -> None:
    t = np.arange(2 * 22_050) / 22_050
    tone = (0.5 * np.sin(2 * np.pi * 1000.0 * t) * 32767).astype("<i2")
    path = tmp_path / "tone.wav"
    with wave.open(str(path), "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(22_050)
        w.writeframes(tone.tobytes())
    y = load_audio(path)
    assert len(y) == 2 * SAMPLE_RATE
    assert _rms(y[1000:-1000]) == pytest.approx(0.5 / np.sqrt(2), rel=0.01)
    spectrum = np.abs(np.fft.rfft(y))
    assert np.argmax(spectrum) * SAMPLE_RATE / len(y) == pytest.approx(1000.0, abs=2.0)


def test_load_audio_empty_wav_gives_empty_array(tmp_path: Path) -> None:
    path = tmp_path / "silent.wav"
    with wave.open(str(path), "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(SAMPLE_RATE)
    y = load_audio(path)
    assert y.dtype == np.float32 and y.shape == (0,)


def test_iter_audio_chunks(encoded: dict[str, Path]) -> None:
    whole = load_audio(encoded["clip.flac"])
    chunks = list(iter_audio_chunks(encoded["clip.flac"], 1.5))
    assert [len(c) for c in chunks[:-1]] == [24_000] * (len(chunks) - 1)
    assert 0 < len(chunks[-1]) <= 24_000
    assert all(c.dtype == np.float32 for c in chunks)
    np.testing.assert_array_equal(np.concatenate(chunks), whole)


def test_iter_audio_chunks_missing_file_raises_at_call(tmp_path: Path) -> None:
    with pytest.raises(AudioFormatError, match="nope.wav"):
        iter_audio_chunks(tmp_path / "nope.wav", 30.0)


def _bad_file(tmp_path: Path, kind: str) -> Path:
    if kind == "missing":
        return tmp_path / "missing.wav"
    if kind == "directory":
        d = tmp_path / "a_directory.wav"
        d.mkdir()
        return d
    if kind == "random":
        p = tmp_path / "random.mp3"
        p.write_bytes(np.random.default_rng(1234).integers(0, 256, 4096, dtype=np.uint8).tobytes())
        return p
    if kind == "empty":
        p = tmp_path / "empty.wav"
        p.write_bytes(b"")
        return p
    if kind == "text":
        p = tmp_path / "notes.txt"
        p.write_text("These are not the samples you are looking for.\n" * 20, encoding="utf-8")
        return p
    if kind == "text_as_wav":
        p = tmp_path / "notes.wav"
        p.write_text("RIFF? no, just text\n" * 20, encoding="utf-8")
        return p
    raise AssertionError(kind)


@pytest.mark.parametrize("kind", ["missing", "directory", "random", "empty", "text", "text_as_wav"])
def test_load_audio_errors_name_the_file(tmp_path: Path, kind: str) -> None:
    path = _bad_file(tmp_path, kind)
    with pytest.raises(AudioFormatError) as info:
        load_audio(path)
    message = str(info.value)
    assert path.name in message
    assert "\n" not in message
    assert "Traceback" not in message
    assert len(message) < 300


def test_load_audio_truncated_m4a(tmp_path: Path, encoded: dict[str, Path]) -> None:
    if "clip.m4a" not in encoded:
        pytest.skip("no aac encoder")
    p = tmp_path / "cut.m4a"
    p.write_bytes(encoded["clip.m4a"].read_bytes()[:3000])
    with pytest.raises(AudioFormatError, match="cut.m4a"):
        load_audio(p)


def test_load_audio_no_audio_stream(tmp_path: Path) -> None:
    codec = next((c for c in ("mpeg4", "ffv1", "png") if _encodable(c)), None)
    if codec is None:
        pytest.skip("no video encoder available")
    path = tmp_path / "video_only.mkv"
    with av.open(str(path), "w") as out:
        stream = out.add_stream(codec, rate=10)
        stream.width, stream.height = 32, 32
        stream.pix_fmt = "rgb24" if codec == "png" else "yuv420p"
        for i in range(3):
            pixels = np.full((32, 32, 3), i * 40, np.uint8)
            frame = av.VideoFrame.from_ndarray(pixels, format="rgb24")
            frame.pts = i
            for packet in stream.encode(frame):
                out.mux(packet)
        for packet in stream.encode(None):
            out.mux(packet)
    with pytest.raises(AudioFormatError, match=r"video_only\.mkv.*no audio stream"):
        load_audio(path)


FORBIDDEN = {"asyncio", "threading", "socket", "websockets", "sounddevice", "time"}


@pytest.mark.parametrize("module", [files, convert])
def test_modules_avoid_forbidden_imports(module: object) -> None:
    source_file = Path(module.__file__)  # type: ignore[attr-defined]
    tree = ast.parse(source_file.read_text(encoding="utf-8"))
    imported: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            imported.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            imported.add(node.module.split(".")[0])
    assert not imported & FORBIDDEN


# ----------------------------------------------------------------------------- convert


def test_s16_round_trip() -> None:
    ints = np.array([-32768, -12345, -1, 0, 1, 12345, 32767], dtype="<i2")
    x = pcm_to_float32(ints.tobytes(), "pcm_s16le", 1)
    assert x.dtype == np.float32
    np.testing.assert_array_equal(x, ints.astype(np.float32) / 32768.0)
    assert float32_to_pcm_s16le(x) == ints.tobytes()


def test_float32_to_s16_clips_and_handles_nan() -> None:
    out = np.frombuffer(float32_to_pcm_s16le(np.array([2.0, -2.0, np.nan, 0.5], np.float32)), "<i2")
    np.testing.assert_array_equal(out, [32767, -32768, 0, 16384])


def test_f32_round_trip() -> None:
    x = np.random.default_rng(0).uniform(-1, 1, 1000).astype(np.float32)
    np.testing.assert_array_equal(pcm_to_float32(x.astype("<f4").tobytes(), "pcm_f32le", 1), x)


def test_downmix_averages_channels() -> None:
    frames = np.array([[1000, 3000], [-2000, 2000], [32767, 32767]], dtype="<i2")
    x = pcm_to_float32(frames.tobytes(), "pcm_s16le", 2)
    np.testing.assert_allclose(x, frames.astype(np.float32).mean(axis=1) / 32768.0)
    f = np.array([[0.5, -0.5, 1.0], [0.25, 0.25, 0.25]], dtype="<f4")
    got = pcm_to_float32(f.tobytes(), "pcm_f32le", 3)
    np.testing.assert_allclose(got, [1 / 3, 0.25], rtol=1e-6)


def test_empty_bytes() -> None:
    assert pcm_to_float32(b"", "pcm_s16le", 2).shape == (0,)
    assert float32_to_pcm_s16le(np.zeros(0, np.float32)) == b""


@pytest.mark.parametrize(
    ("data", "encoding", "channels"),
    [(b"\x00" * 3, "pcm_s16le", 1), (b"\x00" * 6, "pcm_s16le", 2), (b"\x00" * 6, "pcm_f32le", 1)],
)
def test_partial_frames_rejected(data: bytes, encoding: str, channels: int) -> None:
    with pytest.raises(AudioFormatError, match="whole number of frames"):
        pcm_to_float32(data, encoding, channels)


@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
def test_non_finite_f32_rejected(bad: float) -> None:
    data = np.array([0.0, bad, 0.1], dtype="<f4").tobytes()
    with pytest.raises(AudioFormatError, match="non-finite"):
        pcm_to_float32(data, "pcm_f32le", 1)


def test_unknown_encoding_and_bad_channels() -> None:
    with pytest.raises(AudioFormatError, match="pcm_u8"):
        pcm_to_float32(b"\x00\x00", "pcm_u8", 1)
    with pytest.raises(AudioFormatError, match="channel"):
        pcm_to_float32(b"\x00\x00", "pcm_s16le", 0)


@settings(max_examples=40, deadline=None)
@given(
    n_bytes=st.integers(0, 200),
    encoding=st.sampled_from(["pcm_s16le", "pcm_f32le"]),
    channels=st.integers(1, 4),
)
def test_byte_count_property(n_bytes: int, encoding: str, channels: int) -> None:
    frame = (2 if encoding == "pcm_s16le" else 4) * channels
    data = bytes(n_bytes)  # zeros: finite in both encodings
    if n_bytes % frame:
        with pytest.raises(AudioFormatError):
            pcm_to_float32(data, encoding, channels)
    else:
        out = pcm_to_float32(data, encoding, channels)
        assert out.dtype == np.float32 and out.shape == (n_bytes // frame,)


def _streamed(resampler: StreamResampler, x: np.ndarray, cuts: list[int]) -> np.ndarray:
    bounds = [0, *sorted(c for c in cuts if 0 < c < len(x)), len(x)]
    parts = [resampler.process(x[a:b]) for a, b in pairwise(bounds)]
    parts.append(resampler.flush())
    return np.concatenate(parts)


@pytest.fixture(scope="module")
def noise48k() -> np.ndarray:
    return (0.2 * np.random.default_rng(7).standard_normal(48_000)).astype(np.float32)


@settings(max_examples=15, deadline=None)
@given(cuts=st.lists(st.integers(0, 48_000), max_size=12))
def test_stream_resampler_matches_one_shot(noise48k: np.ndarray, cuts: list[int]) -> None:
    ref = resample(noise48k, 48_000)
    got = _streamed(StreamResampler(48_000), noise48k, cuts)
    assert abs(len(got) - len(ref)) <= 2
    n = min(len(got), len(ref))
    assert np.corrcoef(got[:n], ref[:n])[0, 1] > 0.999
    np.testing.assert_allclose(got[:n], ref[:n], atol=1e-3)


@pytest.mark.parametrize("rate", [8_000, 11_025, 22_050, 44_100, 48_000, 96_000, 192_000])
def test_resample_lengths(rate: int) -> None:
    x = np.zeros(rate, dtype=np.float32)  # one second
    assert abs(len(resample(x, rate)) - SAMPLE_RATE) <= 1
    r = StreamResampler(rate)
    assert abs(len(_streamed(r, x, [rate // 3, rate // 2])) - SAMPLE_RATE) <= 2


def test_stream_resampler_48k_sine() -> None:
    t = np.arange(48_000 * 2) / 48_000
    x = (0.5 * np.sin(2 * np.pi * 440.0 * t)).astype(np.float32)
    r = StreamResampler(48_000)
    y = _streamed(r, x, list(range(0, len(x), 4_800)))
    assert y.dtype == np.float32 and abs(len(y) - 32_000) <= 2
    t_out = np.arange(len(y)) / SAMPLE_RATE
    expected = (0.5 * np.sin(2 * np.pi * 440.0 * t_out)).astype(np.float32)
    np.testing.assert_allclose(y[200:-200], expected[200:-200], atol=2e-3)
    # reusable after flush
    y2 = _streamed(r, x, [1234])
    np.testing.assert_allclose(y2, y, atol=1e-5)


def test_stream_resampler_passthrough() -> None:
    r = StreamResampler(SAMPLE_RATE)
    assert r.passthrough
    x = np.arange(10, dtype=np.float32)
    np.testing.assert_array_equal(r.process(x), x)
    assert r.flush().shape == (0,)
    np.testing.assert_array_equal(resample(x, SAMPLE_RATE), x)


@pytest.mark.parametrize("rate", [0, 7_999, 192_001, -16_000, 44_100.5, True])
def test_rate_validation(rate: object) -> None:
    with pytest.raises(ConfigError):
        StreamResampler(rate)  # type: ignore[arg-type]
    with pytest.raises(ConfigError):
        resample(np.zeros(10, np.float32), rate)  # type: ignore[arg-type]


def test_resampler_rejects_multichannel_arrays() -> None:
    with pytest.raises(AudioFormatError, match="mono"):
        StreamResampler(48_000).process(np.zeros((2, 10), np.float32))
