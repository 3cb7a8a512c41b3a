"""What every wire dialect shares (the native protocol in ``dialects/native.py``, Deepgram's,
vosk's): session settings and their validation, the typed client messages every dialect parses
its control messages into, WebSocket close codes, and the JSON helpers.

Every malformed input raises :class:`~streamwhisper.errors.ProtocolError` carrying the close
code to answer with; the session turns it into an error message, finals for the audio it
already heard, and that close code.
"""

from __future__ import annotations

import dataclasses
import json
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, TypeAlias

from streamwhisper.audio.convert import MAX_SAMPLE_RATE, MIN_SAMPLE_RATE, PCM_ENCODINGS
from streamwhisper.errors import ProtocolError
from streamwhisper.model.tokenizer import LANGUAGES, TO_LANGUAGE_CODE

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
    # with an endpointing_ms shorter than the server's endpoint: a final at every such pause, even
    # one whose last full stop the decoder doubts (dropped); else that pause waits for the endpoint
    eager_finals: bool = False
    model: str | None = None  # None: the server's model; any other name must be enabled
    label: str = ""  # a name for the stream (a meeting participant), echoed in ready/closed

    def as_json(self) -> dict[str, Any]:
        """The settings as a JSON object (``language`` None is ``"auto"``)."""
        out = dataclasses.asdict(self)
        out["language"] = self.language or "auto"
        return out

    @classmethod
    def from_json(cls, values: Mapping[str, Any]) -> SessionSettings:
        """The reverse of :meth:`as_json`, validated as :func:`apply_settings` does; names this
        version does not know (a newer server's) are skipped."""
        return apply_settings(cls(), {k: v for k, v in values.items() if k in _FIELDS})


_FIELDS = {f.name: f for f in dataclasses.fields(SessionSettings)}
# Query parameters that are not settings (authentication is checked by the server).
QUERY_IGNORED = frozenset({"token", "api_key"})


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
        elif name in ("interim_results", "word_timestamps", "eager_finals"):
            changes[name] = _bool(name, value)
        elif name == "model":
            changes[name] = None if value in (None, "") else _text(name, value)
        else:
            changes[name] = _text(name, value)
    return dataclasses.replace(base, **changes)


def query_int(params: Mapping[str, str], name: str, default: int, low: int, high: int) -> int:
    """The integer query parameter ``name`` (``default`` when absent); ProtocolError when it is
    not an integer in [low, high]."""
    return _int(name, params[name], low, high) if name in params else default


def settings_from_query(params: Mapping[str, str], base: SessionSettings | None = None) -> SessionSettings:
    """``base`` (default: the defaults) with the query's settings applied (``token`` skipped)."""
    return apply_settings(base or SessionSettings(), {k: v for k, v in params.items() if k not in QUERY_IGNORED})


# Client control messages --------------------------------------------------------------------


@dataclass(frozen=True)
class ConfigMessage:
    """Session settings sent before any audio (as in :func:`apply_settings`, not yet validated)."""

    settings: Mapping[str, Any]


@dataclass(frozen=True)
class Finalize:
    """Force an endpoint: the current utterance becomes final now."""


@dataclass(frozen=True)
class KeepAlive:
    """Resets the idle timer; nothing else."""


@dataclass(frozen=True)
class Ack:
    """The client holds every final up to ``seq``: the session need not keep them for a resume."""

    seq: int


@dataclass(frozen=True)
class Eof:
    """No more audio: finalise everything, send ``closed``, close with 1000."""


@dataclass(frozen=True)
class Audio:
    """Audio carried inside a text message (base64 in JSON, decoded by the dialect): the session
    feeds it exactly as it feeds a binary message."""

    data: bytes


@dataclass(frozen=True)
class Reply:
    """A dialect's own answer to a client message (an acknowledgement, or an error after which
    its protocol keeps the session open): the session sends ``texts`` and goes on. ``error``
    names the error's kind for the metrics."""

    texts: tuple[str, ...]
    error: str | None = None


@dataclass(frozen=True)
class Unknown:
    """A message of a type this end does not know, from a newer peer: the server answers it with
    an error and goes on, the native client hands it on for its caller to skip."""

    type: str


ClientMessage: TypeAlias = ConfigMessage | Finalize | KeepAlive | Ack | Eof | Audio | Reply | Unknown


def _not_json(constant: str) -> Any:
    raise ValueError(f"{constant} is not a JSON number")


def _finite(text: str) -> float:
    if not math.isfinite(value := float(text)):
        raise ValueError(f"{text[:20]} is beyond a float's range")
    return value


def loads(text: str | bytes) -> Any:
    """A client's JSON, NaN and infinities refused (ValueError): JSON has no such numbers, but
    Python's ``json`` reads ``NaN`` and ``Infinity``, and 1e400 as infinity, and a client's
    value echoed back (a Flux keyterm, a Realtime session's settings) could not be sent."""
    return json.loads(text, parse_constant=_not_json, parse_float=_finite)


def parse_json_object(text: str) -> dict[str, Any]:
    """The JSON object in ``text``; ProtocolError (1007) when it is not JSON (:func:`loads`) or
    not an object."""
    try:
        data = loads(text)
    except (ValueError, RecursionError) as exc:
        raise ProtocolError(f"malformed JSON: {exc}", 1007, "invalid_json") from None
    if not isinstance(data, dict):
        raise ProtocolError(f"a message must be a JSON object, got {type(data).__name__}")
    return data


def dumps(message: Mapping[str, Any]) -> str:
    """Compact JSON text, non-ASCII kept as is; NaN and infinity refused."""
    return json.dumps(message, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
