"""The native wire protocol, version 1 (docs/protocol.md): client settings and control messages
in, events as JSON out. The only place the native protocol is parsed or serialised.

Every malformed input raises :class:`~streamwhisper.errors.ProtocolError` carrying the close
code to answer with; the session turns it into an ``error`` message, finals for the audio it
already heard, and that close code.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, TypeAlias

from streamwhisper.audio.convert import MAX_SAMPLE_RATE, MIN_SAMPLE_RATE, PCM_ENCODINGS
from streamwhisper.errors import ProtocolError
from streamwhisper.events import Error, Event, Final, Partial, SpeechEnded, SpeechStarted, Word
from streamwhisper.model.tokenizer import LANGUAGES, TO_LANGUAGE_CODE

PROTOCOL = "streamwhisper.v1"
STREAM_PATH = "/v1/stream"

CLOSE_NORMAL = 1000
CLOSE_GOING_AWAY = 1001
CLOSE_UNSUPPORTED = 1003
CLOSE_INVALID = 1007
CLOSE_POLICY = 1008
CLOSE_TOO_BIG = 1009
CLOSE_INTERNAL = 1011
CLOSE_OVERLOADED = 1013

MAX_CHANNELS = 8
MAX_LABEL = 64


@dataclass(frozen=True)
class SessionSettings:
    """What a client chose for its stream (query parameters and/or a first ``config`` message)."""

    sample_rate: int = 16_000
    encoding: str = "pcm_s16le"
    channels: int = 1
    language: str | None = None  # None: detect ("auto")
    task: str = "transcribe"
    interim_results: bool = True
    word_timestamps: bool = True
    endpointing_ms: int | None = None  # None: the server's vad.endpoint_ms
    model: str | None = None  # None: the server's model; any other name must be enabled
    label: str = ""  # a name for the stream (a meeting participant), echoed in ready/closed

    def as_json(self) -> dict[str, Any]:
        out = dataclasses.asdict(self)
        out["language"] = self.language or "auto"
        return out


_FIELDS = {f.name: f for f in dataclasses.fields(SessionSettings)}
# Query parameters that are not settings (authentication is checked by the server).
QUERY_IGNORED = frozenset({"token"})


def _bool(name: str, value: Any) -> bool:
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.lower() in ("true", "1", "yes", "on", "false", "0", "no", "off"):
        return value.lower() in ("true", "1", "yes", "on")
    raise ProtocolError(f"setting {name!r} must be true or false, got {value!r}")


def _int(name: str, value: Any, low: int, high: int) -> int:
    if isinstance(value, str):
        try:
            value = int(value.strip())
        except ValueError:
            raise ProtocolError(f"setting {name!r} must be an integer, got {value!r}") from None
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int):
        raise ProtocolError(f"setting {name!r} must be an integer, got {value!r}")
    if not low <= value <= high:
        raise ProtocolError(f"setting {name!r} must be in [{low}, {high}], got {value}")
    return value


def _text(name: str, value: Any, limit: int = MAX_LABEL) -> str:
    if not isinstance(value, str) or len(value) > limit:
        raise ProtocolError(f"setting {name!r} must be a string of at most {limit} characters")
    return value


def normalize_language(value: Any) -> str | None:
    """A language code ("en"), name ("english") or "auto"/None; ProtocolError when unknown."""
    if value is None:
        return None
    text = _text("language", value).strip().lower()
    if text in ("", "auto"):
        return None
    if text in LANGUAGES:
        return text
    if text in TO_LANGUAGE_CODE:
        return TO_LANGUAGE_CODE[text]
    raise ProtocolError(f"unknown language {value!r} (a code such as 'en', a name, or 'auto')")


def apply_settings(base: SessionSettings, values: Mapping[str, Any]) -> SessionSettings:
    """``base`` with ``values`` applied (strings are accepted for every field, as in a query)."""
    changes: dict[str, Any] = {}
    for name, value in values.items():
        if name not in _FIELDS:
            raise ProtocolError(f"unknown setting {name!r} (known: {', '.join(sorted(_FIELDS))})")
        if name == "sample_rate":
            changes[name] = _int(name, value, MIN_SAMPLE_RATE, MAX_SAMPLE_RATE)
        elif name == "channels":
            changes[name] = _int(name, value, 1, MAX_CHANNELS)
        elif name == "endpointing_ms":
            changes[name] = None if value in (None, "") else _int(name, value, 100, 5000)
        elif name == "encoding":
            text = _text(name, value)
            if text not in PCM_ENCODINGS:
                known = ", ".join(sorted(PCM_ENCODINGS))
                raise ProtocolError(f"unsupported encoding {text!r} (supported: {known})", 1003, "unsupported_encoding")
            changes[name] = text
        elif name == "language":
            changes[name] = normalize_language(value)
        elif name == "task":
            if value not in ("transcribe", "translate"):
                raise ProtocolError(f"setting 'task' must be 'transcribe' or 'translate', got {value!r}")
            changes[name] = value
        elif name in ("interim_results", "word_timestamps"):
            changes[name] = _bool(name, value)
        elif name == "model":
            changes[name] = None if value in (None, "") else _text(name, value)
        else:
            changes[name] = _text(name, value)
    return dataclasses.replace(base, **changes)


def settings_from_query(params: Mapping[str, str], base: SessionSettings | None = None) -> SessionSettings:
    return apply_settings(base or SessionSettings(), {k: v for k, v in params.items() if k not in QUERY_IGNORED})


# Client control messages --------------------------------------------------------------------


@dataclass(frozen=True)
class ConfigMessage:
    settings: Mapping[str, Any]


@dataclass(frozen=True)
class Finalize:
    """Force an endpoint: the current utterance becomes final now."""


@dataclass(frozen=True)
class KeepAlive:
    """Resets the idle timer; nothing else."""


@dataclass(frozen=True)
class Eof:
    """No more audio: finalise everything, send ``closed``, close with 1000."""


@dataclass(frozen=True)
class Unknown:
    """A message type this server does not know (newer client): answered with an error, ignored."""

    type: str


ClientMessage: TypeAlias = ConfigMessage | Finalize | KeepAlive | Eof | Unknown


def parse_json_object(text: str) -> dict[str, Any]:
    try:
        data = json.loads(text)
    except (json.JSONDecodeError, RecursionError) as exc:
        raise ProtocolError(f"malformed JSON: {exc}", 1007, "invalid_json") from None
    if not isinstance(data, dict):
        raise ProtocolError(f"a control message must be a JSON object, got {type(data).__name__}")
    return data


def parse_client_text(text: str) -> ClientMessage:
    """A JSON control message -> ClientMessage. Raises ProtocolError (1007) when malformed."""
    data = parse_json_object(text)
    kind = data.get("type")
    if not isinstance(kind, str):
        raise ProtocolError('a control message needs a string "type" (config, finalize, keepalive or eof)')
    if kind == "config":
        settings = {k: v for k, v in data.items() if k != "type"}
        if isinstance(settings.get("config"), Mapping) and len(settings) == 1:
            settings = dict(settings["config"])  # {"type": "config", "config": {...}}
        return ConfigMessage(settings)
    if len(data) > 1:
        raise ProtocolError(f"message {kind!r} takes no fields")
    if kind == "finalize":
        return Finalize()
    if kind == "keepalive":
        return KeepAlive()
    if kind == "eof":
        return Eof()
    return Unknown(kind[:40])


# Server messages ----------------------------------------------------------------------------


def _t(seconds: float) -> float:
    return round(seconds, 3)


def _words(words: tuple[Word, ...]) -> list[dict[str, Any]]:
    return [
        {"word": w.word.strip(), "start": _t(w.start), "end": _t(w.end), "probability": round(w.probability, 3)}
        for w in words
    ]


def dumps(message: Mapping[str, Any]) -> str:
    return json.dumps(message, ensure_ascii=False, separators=(",", ":"), allow_nan=False)


def event_message(event: Event, settings: SessionSettings) -> dict[str, Any] | None:
    """The JSON object for an event, or None when the client asked not to get it."""
    if isinstance(event, (Partial, Final)):
        if isinstance(event, Partial) and not settings.interim_results:
            return None
        out: dict[str, Any] = {
            "type": "final" if isinstance(event, Final) else "partial",
            "seq": event.seq,
            "text": event.text,
            "start": _t(event.start),
            "end": _t(event.end),
        }
        if settings.word_timestamps:
            out["words"] = _words(event.words)
        if isinstance(event, Final):
            out["endpoint"] = event.endpoint
        return out
    if isinstance(event, SpeechStarted):
        return {"type": "speech_started", "time": _t(event.time)}
    if isinstance(event, SpeechEnded):
        return {"type": "speech_ended", "time": _t(event.time)}
    if isinstance(event, Error):
        return error_message(event.code, event.message)
    raise TypeError(f"not an event: {event!r}")


def ready_message(session_id: str, model: str, settings: SessionSettings, limits: Mapping[str, Any]) -> dict[str, Any]:
    return {
        "type": "ready",
        "protocol": PROTOCOL,
        "session_id": session_id,
        "model": model,
        "config": settings.as_json(),
        "limits": dict(limits),
    }


def error_message(code: str, message: str) -> dict[str, Any]:
    return {"type": "error", "code": code, "message": message}


def status_message(lag_s: float, step_s: float) -> dict[str, Any]:
    """How far the transcript lags the audio, and the step the server uses for this session."""
    return {"type": "status", "lag": _t(max(lag_s, 0.0)), "step": _t(step_s)}


def closed_message(audio_seconds: float, words: int, finals: int, reason: str) -> dict[str, Any]:
    return {
        "type": "closed",
        "reason": reason,
        "audio_seconds": _t(audio_seconds),
        "words": words,
        "finals": finals,
    }


class NativeDialect:
    """The native protocol as the session's Dialect (``session`` is a session.SessionInfo)."""

    name = "native"

    def settings(self, query: Mapping[str, str]) -> SessionSettings:
        return settings_from_query(query)

    def parse(self, text: str) -> ClientMessage:
        return parse_client_text(text)

    def ready(self, session: Any) -> str:
        return dumps(ready_message(session.id, session.model, session.settings, session.limits))

    def event(self, event: Event, session: Any) -> str | None:
        message = event_message(event, session.settings)
        return None if message is None else dumps(message)

    def audio(self, session: Any) -> None:
        return None

    def error(self, code: str, message: str) -> str:
        return dumps(error_message(code, message))

    def status(self, lag_s: float, step_s: float) -> str:
        return dumps(status_message(lag_s, step_s))

    def closed(self, session: Any, reason: str) -> str:
        return dumps(closed_message(session.audio_seconds, session.words, session.finals, reason))
