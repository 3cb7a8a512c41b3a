"""The configuration of an OpenAI Realtime transcription session: what ``session.update`` (GA) and
``transcription_session.update`` (beta) may set, how it maps onto the native session settings,
and the session object echoed in ``session.created`` / ``session.updated``.

An update changes only the fields it names ("a field left out keeps its previous value"); an
invalid one raises :class:`RealtimeError` and changes nothing.

Mapping (the choices the protocol leaves to a server):

- ``audio/pcm`` (beta ``pcm16``) is 16-bit little-endian mono PCM at 24 kHz only;
  ``audio/pcmu`` / ``audio/pcma`` (beta ``g711_ulaw`` / ``g711_alaw``) are G.711 at 8 kHz.
- ``turn_detection: null`` is manual turns (the client commits). ``server_vad`` (the default) and
  ``semantic_vad`` are our own VAD: ``silence_duration_ms`` (OpenAI's default 500) becomes its
  endpoint silence, clamped to [100, 5000] ms; ``semantic_vad`` uses 500 ms whatever its
  ``eagerness``. ``threshold`` is not used (the VAD's aggressiveness is the server's);
  ``prefix_padding_ms`` only shifts the reported ``audio_start_ms`` (recognition keeps the
  server's own pre-roll). The echo shows what the client set, with the silence as applied.
- ``transcription.model`` may be the served model's name or one of OpenAI's transcription model
  names, which all mean the served model; ``language`` is a code or name (absent: detection);
  ``prompt``, ``noise_reduction``, ``include``, ``delay``, ``keywords`` are accepted, echoed and
  not used.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from streamwhisper.errors import ProtocolError

from .. import wire

#: GA format type -> (native encoding, sample rate)
FORMATS = {"audio/pcm": ("pcm_s16le", 24_000), "audio/pcmu": ("pcm_mulaw", 8_000), "audio/pcma": ("pcm_alaw", 8_000)}
BETA_FORMATS = {"pcm16": "audio/pcm", "g711_ulaw": "audio/pcmu", "g711_alaw": "audio/pcma"}
# Names OpenAI clients send; each means the one model this daemon serves.
MODEL_ALIASES = (
    "whisper-1",
    "gpt-4o-transcribe",
    "gpt-4o-mini-transcribe",
    "gpt-4o-mini-transcribe-2025-12-15",
    "gpt-transcribe",
    "gpt-live-transcribe",
    "gpt-realtime-whisper",
)
VAD_TYPES = ("server_vad", "semantic_vad")
DEFAULT_VAD: Mapping[str, Any] = {
    "type": "server_vad",
    "threshold": 0.5,
    "prefix_padding_ms": 300,
    "silence_duration_ms": 500,
}
SILENCE_RANGE_MS = (100, 5000)
MAX_PROMPT = 4096


class RealtimeError(Exception):
    """A client event the server refuses: an ``error`` event with this ``code`` and ``param``."""

    def __init__(self, code: str, message: str, param: str | None = None) -> None:
        super().__init__(message)
        self.code, self.message, self.param = code, message, param


@dataclass(frozen=True)
class RealtimeConfig:
    """What the client configured (as echoed back to it)."""

    format: str = "audio/pcm"
    model: str | None = None  # the name the client asked for; None: the served model
    language: str | None = None  # None: detect
    prompt: str = ""
    turn_detection: Mapping[str, Any] | None = dataclasses.field(default_factory=lambda: dict(DEFAULT_VAD))
    noise_reduction: Mapping[str, Any] | None = None
    include: tuple[str, ...] = ()

    @property
    def vad(self) -> bool:
        """Turns end by our VAD (``server_vad``/``semantic_vad``), not only by commits."""
        return self.turn_detection is not None

    @property
    def prefix_padding_ms(self) -> int:
        return int((self.turn_detection or {}).get("prefix_padding_ms", 300))

    @property
    def bytes_per_second(self) -> int:
        encoding, rate = FORMATS[self.format]
        return rate * (2 if encoding == "pcm_s16le" else 1)

    def settings(self, base: wire.SessionSettings) -> wire.SessionSettings:
        """The native session settings this configuration needs."""
        encoding, rate = FORMATS[self.format]
        endpointing = None
        if self.turn_detection is not None:
            endpointing = int(self.turn_detection.get("silence_duration_ms", 500))
        return dataclasses.replace(
            base, sample_rate=rate, encoding=encoding, language=self.language, endpointing_ms=endpointing
        )

    def as_ga(self, session_id: str, model: str) -> dict[str, Any]:
        """The GA session object (``session.created``, ``session.updated``)."""
        encoding, rate = FORMATS[self.format]
        fmt: dict[str, Any] = {"type": self.format} | ({"rate": rate} if encoding == "pcm_s16le" else {})
        return {
            "object": "realtime.session",
            "type": "transcription",
            "id": session_id,
            "audio": {
                "input": {
                    "format": fmt,
                    "noise_reduction": self.noise_reduction,
                    "transcription": self._transcription(model),
                    "turn_detection": self.turn_detection,
                }
            },
            "include": list(self.include),
        }

    def as_beta(self, session_id: str, model: str) -> dict[str, Any]:
        """The beta transcription session object (``transcription_session.updated``)."""
        beta_format = next(k for k, v in BETA_FORMATS.items() if v == self.format)
        return {
            "id": session_id,
            "object": "realtime.transcription_session",
            "input_audio_format": beta_format,
            "input_audio_transcription": self._transcription(model),
            "turn_detection": self.turn_detection,
            "input_audio_noise_reduction": self.noise_reduction,
            "include": list(self.include),
            "modalities": ["text"],
            "client_secret": None,
        }

    def _transcription(self, model: str) -> dict[str, Any]:
        return {"model": self.model or model, "language": self.language, "prompt": self.prompt}


def check_model(name: Any, served: str, param: str) -> str | None:
    """A model name a client sent -> None (the served model); RealtimeError when not served."""
    if name is None or name == served or name in MODEL_ALIASES:
        return None if name in (None, served) else str(name)
    names = ", ".join((served, *MODEL_ALIASES))
    raise RealtimeError("model_not_found", f"model {name!r} is not served here (use one of {names})", param)


def update_ga(config: RealtimeConfig, session: Any, served: str) -> RealtimeConfig:
    """``config`` with a ``session.update``'s ``session`` object applied."""
    _need(session, dict, "session")
    if session.get("type", "transcription") != "transcription":
        raise RealtimeError("invalid_value", "only transcription sessions are served here", "session.type")
    changes: dict[str, Any] = {}
    audio = _need(session.get("audio", {}), dict, "session.audio")
    inputs = _need(audio.get("input", {}), dict, "session.audio.input")
    at = "session.audio.input."
    if "format" in inputs:
        fmt = _need(inputs["format"], dict, at + "format")
        kind = fmt.get("type", "audio/pcm")
        if not isinstance(kind, str) or kind not in FORMATS:
            known = ", ".join(FORMATS)
            raise RealtimeError(
                "invalid_value", f"unsupported audio format {kind!r} (supported: {known})", at + "format.type"
            )
        rate = FORMATS[kind][1]
        if fmt.get("rate", rate) != rate:
            raise RealtimeError("invalid_value", f"{kind} is {rate} Hz only", at + "format.rate")
        changes["format"] = kind
    if inputs.get("transcription") is not None:
        changes |= _transcription(_need(inputs["transcription"], dict, at + "transcription"), served, at)
    if "turn_detection" in inputs:
        changes["turn_detection"] = _turn_detection(config, inputs["turn_detection"], at + "turn_detection")
    if "noise_reduction" in inputs:
        changes["noise_reduction"] = _noise(inputs["noise_reduction"], at + "noise_reduction")
    if "include" in session:
        changes["include"] = _include(session["include"], "session.include")
    return dataclasses.replace(config, **changes)


def update_beta(config: RealtimeConfig, session: Any, served: str) -> RealtimeConfig:
    """``config`` with a beta ``transcription_session.update``'s ``session`` object applied."""
    _need(session, dict, "session")
    changes: dict[str, Any] = {}
    if "input_audio_format" in session:
        kind = session["input_audio_format"]
        if not isinstance(kind, str) or kind not in BETA_FORMATS:
            known = ", ".join(BETA_FORMATS)
            raise RealtimeError(
                "invalid_value", f"unsupported audio format {kind!r} (supported: {known})", "session.input_audio_format"
            )
        changes["format"] = BETA_FORMATS[kind]
    if session.get("input_audio_transcription") is not None:
        transcription = _need(session["input_audio_transcription"], dict, "session.input_audio_transcription")
        changes |= _transcription(transcription, served, "session.input_audio_")
    if "turn_detection" in session:
        changes["turn_detection"] = _turn_detection(config, session["turn_detection"], "session.turn_detection")
    if "input_audio_noise_reduction" in session:
        changes["noise_reduction"] = _noise(
            session["input_audio_noise_reduction"], "session.input_audio_noise_reduction"
        )
    if "include" in session:
        changes["include"] = _include(session["include"], "session.include")
    return dataclasses.replace(config, **changes)


def _need(value: Any, kind: type, param: str) -> Any:
    if not isinstance(value, kind) or isinstance(value, bool) and kind is not bool:
        raise RealtimeError("invalid_value", f"{param} must be {'an object' if kind is dict else kind.__name__}", param)
    return value


def _transcription(values: Mapping[str, Any], served: str, at: str) -> dict[str, Any]:
    at += "transcription."
    changes: dict[str, Any] = {}
    if "model" in values:
        changes["model"] = check_model(values["model"], served, at + "model")
    if "language" in values:
        try:
            changes["language"] = wire.normalize_language(values["language"])
        except ProtocolError as exc:
            raise RealtimeError("invalid_value", str(exc), at + "language") from None
    if values.get("prompt") is not None:
        prompt = _need(values["prompt"], str, at + "prompt")
        if len(prompt) > MAX_PROMPT:
            raise RealtimeError("invalid_value", f"the prompt is over {MAX_PROMPT} characters", at + "prompt")
        changes["prompt"] = prompt
    return changes


def _turn_detection(config: RealtimeConfig, value: Any, param: str) -> dict[str, Any] | None:
    if value is None:
        return None
    _need(value, dict, param)
    previous = config.turn_detection or {}
    kind = value.get("type", previous.get("type", "server_vad"))
    if kind not in VAD_TYPES:
        raise RealtimeError(
            "invalid_value", f"turn_detection type must be one of {', '.join(VAD_TYPES)}", param + ".type"
        )
    merged = dict(DEFAULT_VAD) | (dict(previous) if previous.get("type") == kind else {}) | dict(value)
    merged["type"] = kind
    for name in ("silence_duration_ms", "prefix_padding_ms"):
        _need(merged[name], int, f"{param}.{name}")
        if merged[name] < 0:
            raise RealtimeError("invalid_value", f"{name} must not be negative", f"{param}.{name}")
    if not isinstance(merged["threshold"], int | float) or not 0 <= merged["threshold"] <= 1:
        raise RealtimeError("invalid_value", "threshold must be a number in [0, 1]", param + ".threshold")
    low, high = SILENCE_RANGE_MS
    silence = 500 if kind == "semantic_vad" else merged["silence_duration_ms"]
    merged["silence_duration_ms"] = min(max(silence, low), high)
    return merged


def _noise(value: Any, param: str) -> dict[str, Any] | None:
    if value is None:
        return None
    if not isinstance(value, dict) or value.get("type", "near_field") not in ("near_field", "far_field"):
        raise RealtimeError("invalid_value", "noise_reduction must be null or {type: near_field|far_field}", param)
    return dict(value)


def _include(value: Any, param: str) -> tuple[str, ...]:
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise RealtimeError("invalid_value", "include must be a list of strings", param)
    return tuple(value)
