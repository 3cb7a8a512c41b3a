"""streamwhisper: real-time streaming speech transcription with our own PyTorch Whisper.

Public API (imported lazily, so ``import streamwhisper`` loads neither torch nor a model)::

    load_model(name="tiny.en", device="cpu", compute_type="default") -> Whisper
    Transcriber(model).transcribe(audio, TranscribeOptions(...)) -> TranscriptionResult
    WhisperRecognizer(model)                 # the model behind the streaming seam
    Streamer(config)                         # the pure streaming core
    load_audio(path) -> np.ndarray           # any common audio file, 16 kHz mono float32
    load_config(path, env, overrides) -> Config
"""

from __future__ import annotations

from importlib import import_module
from typing import Any

__version__ = "0.1.0"

_EXPORTS = {
    "load_model": "streamwhisper.model.loading",
    "Transcriber": "streamwhisper.transcribe",
    "TranscribeOptions": "streamwhisper.transcribe",
    "DecodeOptions": "streamwhisper.model.decoding",
    "WhisperRecognizer": "streamwhisper.model.serving",
    "Streamer": "streamwhisper.streaming.streamer",
    "StreamingConfig": "streamwhisper.streaming.config",
    "load_audio": "streamwhisper.audio.files",
    "load_config": "streamwhisper.config",
    "Config": "streamwhisper.config",
}

__all__ = [*_EXPORTS, "__version__"]


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'streamwhisper' has no attribute {name!r}")
    return getattr(import_module(module), name)
