"""The native protocol, version 1 (docs/protocol.md): both halves, the server's and the client's.

One function pair per direction, the only code that writes or reads the protocol's JSON::

    server -> client:  encode_server_message(message, settings) -> text -> decode_server_message(text)
    client -> server:  encode_client_message(message)           -> text -> decode_client_message(text)

Server messages are the events of :mod:`streamwhisper.events` (``Partial``, ``Final``,
``SpeechStarted``, ``SpeechEnded``, ``Error``) and :class:`Ready`, :class:`Resumed`,
:class:`Status` and :class:`Closed`. Client messages are ``wire``'s
:class:`~streamwhisper.runtime.wire.ConfigMessage`, ``Finalize``, ``KeepAlive``, ``Ack`` and ``Eof``.

What the encoding loses: times are rounded to milliseconds and word probabilities to three
decimals, words are sent without Whisper's leading space, and the session's settings may leave
out partials (``interim_results``) or words (``word_timestamps``). Otherwise a decoded message
equals the one encoded.

A message of a type the reader does not know (a newer peer's) decodes to
:class:`~streamwhisper.runtime.wire.Unknown`, and fields it does not know are ignored. Anything
else malformed raises :class:`~streamwhisper.errors.ProtocolError` (1007; ``invalid_json`` for
text that is not JSON, else ``invalid_message``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, TypeAlias, TypeVar

from streamwhisper.errors import ProtocolError
from streamwhisper.events import Error, Event, Final, Partial, SpeechEnded, SpeechStarted, Word

from ..wire import (
    Ack,
    ClientMessage,
    ConfigMessage,
    Eof,
    Finalize,
    KeepAlive,
    SessionSettings,
    Unknown,
    dumps,
    parse_json_object,
    settings_from_query,
)

PROTOCOL = "streamwhisper.v1"
STREAM_PATH = "/v1/stream"
# Query parameters of a resuming connection: the token of its ``ready``, and the seq of the last
# final it holds (-1: none).
RESUME_PARAM = "resume"
LAST_SEQ_PARAM = "last_seq"


@dataclass(frozen=True, slots=True)
class Ready:
    """The session is open (sent first, and again after a ``config`` message)."""

    session_id: str
    model: str
    config: SessionSettings  # the effective settings
    limits: Mapping[str, Any]  # max_message_bytes, max_session_s, idle_timeout_s
    protocol: str = PROTOCOL
    resume_token: str = ""  # "" when the server does not keep sessions for resume
    resume_grace_s: float = 0.0  # how long it keeps one after its connection is lost


@dataclass(frozen=True, slots=True)
class Resumed:
    """The first message on a resumed connection: the same session, and how much of the client's
    audio the server holds (sample frames at the session's rate; the client sends on from there).
    The finals after the client's ``last_seq`` follow."""

    session_id: str
    audio_frames: int
    audio_seconds: float


@dataclass(frozen=True, slots=True)
class Status:
    """Under load: seconds the transcript lags the audio, and the step the server now uses."""

    lag: float
    step: float


@dataclass(frozen=True, slots=True)
class Closed:
    """The session's last message: why it ended and what it transcribed."""

    reason: str
    audio_seconds: float
    words: int
    finals: int


# Settings that leave nothing out: partials are sent, with their words.
SEND_ALL = SessionSettings()

ServerMessage: TypeAlias = Ready | Resumed | Partial | Final | SpeechStarted | SpeechEnded | Status | Error | Closed


# Server -> client ---------------------------------------------------------------------------


def _t(seconds: float) -> float:
    return round(seconds, 3)


def _server_object(message: ServerMessage, settings: SessionSettings) -> dict[str, Any] | None:
    match message:
        case Partial() | Final():
            if isinstance(message, Partial) and not settings.interim_results:
                return None
            out: dict[str, Any] = {
                "type": "final" if isinstance(message, Final) else "partial",
                "seq": message.seq,
                "text": message.text,
                "start": _t(message.start),
                "end": _t(message.end),
            }
            if settings.word_timestamps:
                out["words"] = [
                    {
                        "word": w.word.strip(),
                        "start": _t(w.start),
                        "end": _t(w.end),
                        "probability": round(w.probability, 3),
                    }
                    for w in message.words
                ]
            if isinstance(message, Final):
                out["endpoint"] = message.endpoint
            return out
        case SpeechStarted(time=time):
            return {"type": "speech_started", "time": _t(time)}
        case SpeechEnded(time=time):
            return {"type": "speech_ended", "time": _t(time)}
        case Error(code=code, message=text):
            return {"type": "error", "code": code, "message": text}
        case Ready():
            ready: dict[str, Any] = {
                "type": "ready",
                "protocol": message.protocol,
                "session_id": message.session_id,
                "model": message.model,
                "config": message.config.as_json(),
                "limits": dict(message.limits),
            }
            if message.resume_token:
                ready |= {"resume_token": message.resume_token, "resume_grace_s": message.resume_grace_s}
            return ready
        case Resumed():
            return {
                "type": "resumed",
                "session_id": message.session_id,
                "audio_frames": message.audio_frames,
                "audio_seconds": _t(message.audio_seconds),
            }
        case Status(lag=lag, step=step):
            return {"type": "status", "lag": _t(lag), "step": _t(step)}
        case Closed():
            return {
                "type": "closed",
                "reason": message.reason,
                "audio_seconds": _t(message.audio_seconds),
                "words": message.words,
                "finals": message.finals,
            }
    raise TypeError(f"not a server message: {message!r}")


def encode_server_message(message: ServerMessage, settings: SessionSettings = SEND_ALL) -> str | None:
    """The JSON text of ``message`` for a session with ``settings``, or None when the client
    asked not to get it (a partial with ``interim_results`` false)."""
    out = _server_object(message, settings)
    return None if out is None else dumps(out)


_T = TypeVar("_T")


class _Fields:
    """The fields of one received message, each read with its type checked."""

    def __init__(self, data: Mapping[str, Any], where: str) -> None:
        self._data, self._where = data, where

    def _get(self, name: str, valid: Callable[[Any], bool], what: str) -> Any:
        if name not in self._data:
            raise ProtocolError(f"{self._where} has no {name!r}")
        value = self._data[name]
        if not valid(value):
            raise ProtocolError(f"{self._where}: {name!r} must be {what}, got {value!r:.80}")
        return value

    def has(self, name: str) -> bool:
        return name in self._data

    def text(self, name: str) -> str:
        return str(self._get(name, lambda v: isinstance(v, str), "a string"))

    def flag(self, name: str) -> bool:
        return bool(self._get(name, lambda v: isinstance(v, bool), "true or false"))

    def count(self, name: str) -> int:
        return int(self._get(name, lambda v: isinstance(v, int) and not isinstance(v, bool), "an integer"))

    def number(self, name: str) -> float:
        return float(self._get(name, lambda v: isinstance(v, (int, float)) and not isinstance(v, bool), "a number"))

    def object(self, name: str) -> Mapping[str, Any]:
        return dict(self._get(name, lambda v: isinstance(v, dict), "an object"))

    def each(self, name: str, read: Callable[[_Fields], _T]) -> tuple[_T, ...]:
        """``read`` applied to every object of the list ``name`` (empty when it is absent)."""
        items = self._data.get(name, [])
        if not isinstance(items, list) or not all(isinstance(item, dict) for item in items):
            raise ProtocolError(f"{self._where}: {name!r} must be a list of objects")
        return tuple(read(_Fields(item, f"{self._where}: {name}[{i}]")) for i, item in enumerate(items))


def _word(f: _Fields) -> Word:
    return Word(f.text("word"), f.number("start"), f.number("end"), f.number("probability"))


def _ready(f: _Fields) -> Ready:
    config = SessionSettings.from_json(f.object("config"))
    token, grace = (f.text("resume_token"), f.number("resume_grace_s")) if f.has("resume_token") else ("", 0.0)
    return Ready(f.text("session_id"), f.text("model"), config, f.object("limits"), f.text("protocol"), token, grace)


def _partial(f: _Fields) -> Partial:
    return Partial(f.text("text"), f.number("start"), f.number("end"), f.each("words", _word), f.count("seq"))


def _final(f: _Fields) -> Final:
    words = f.each("words", _word)
    return Final(f.text("text"), f.number("start"), f.number("end"), words, f.count("seq"), f.flag("endpoint"))


_SERVER_READERS: dict[str, Callable[[_Fields], ServerMessage]] = {
    "ready": _ready,
    "resumed": lambda f: Resumed(f.text("session_id"), f.count("audio_frames"), f.number("audio_seconds")),
    "partial": _partial,
    "final": _final,
    "speech_started": lambda f: SpeechStarted(f.number("time")),
    "speech_ended": lambda f: SpeechEnded(f.number("time")),
    "status": lambda f: Status(f.number("lag"), f.number("step")),
    "error": lambda f: Error(f.text("code"), f.text("message")),
    "closed": lambda f: Closed(f.text("reason"), f.number("audio_seconds"), f.count("words"), f.count("finals")),
}


def decode_server_message(text: str) -> ServerMessage | Unknown:
    """A server's JSON message as a typed value; :class:`Unknown` for a type this client does
    not know. Raises ProtocolError (1007) when it is malformed."""
    data = parse_json_object(text)
    kind = data.get("type")
    if not isinstance(kind, str):
        raise ProtocolError('a server message needs a string "type"')
    read = _SERVER_READERS.get(kind)
    return Unknown(kind) if read is None else read(_Fields(data, f"server message {kind!r}"))


# Client -> server ---------------------------------------------------------------------------


def encode_client_message(message: ClientMessage) -> str:
    """The JSON text of a control message."""
    match message:
        case ConfigMessage(settings=settings):
            return dumps({"type": "config", **settings})
        case Finalize():
            return dumps({"type": "finalize"})
        case KeepAlive():
            return dumps({"type": "keepalive"})
        case Ack(seq=seq):
            return dumps({"type": "ack", "seq": seq})
        case Eof():
            return dumps({"type": "eof"})
        case Unknown(type=kind):
            return dumps({"type": kind})
    raise TypeError(f"not a client message: {message!r}")


def decode_client_message(text: str) -> ClientMessage:
    """A client's JSON control message as a typed value (a config's settings are validated
    later, by :func:`~streamwhisper.runtime.wire.apply_settings`). Raises ProtocolError (1007)
    when it is malformed."""
    data = parse_json_object(text)
    kind = data.get("type")
    if not isinstance(kind, str):
        raise ProtocolError('a control message needs a string "type" (config, finalize, keepalive, ack or eof)')
    if kind == "config":
        settings = {k: v for k, v in data.items() if k != "type"}
        if isinstance(settings.get("config"), Mapping) and len(settings) == 1:
            settings = dict(settings["config"])  # {"type": "config", "config": {...}}
        return ConfigMessage(settings)
    if kind == "ack" and set(data) == {"type", "seq"}:
        return Ack(_Fields(data, "message 'ack'").count("seq"))
    if len(data) > 1:
        raise ProtocolError(f"message {kind!r} takes no fields")
    if kind == "finalize":
        return Finalize()
    if kind == "keepalive":
        return KeepAlive()
    if kind == "eof":
        return Eof()
    return Unknown(kind[:40])


class NativeDialect:
    """The native protocol as the session's Dialect (``session`` is a session.SessionInfo)."""

    name = "native"

    def settings(self, query: Mapping[str, str]) -> SessionSettings:
        return settings_from_query(query)

    def parse(self, text: str) -> ClientMessage:
        return decode_client_message(text)

    def ready(self, session: Any) -> str | None:
        info = session.id, session.model, session.settings, session.limits, PROTOCOL
        return encode_server_message(Ready(*info, session.resume_token, session.resume_grace_s))

    def resumed(self, session: Any, frames: int) -> str | None:
        return encode_server_message(Resumed(session.id, frames, session.audio_seconds))

    def event(self, event: Event, session: Any) -> str | None:
        return encode_server_message(event, session.settings)

    def audio(self, session: Any) -> None:
        return None

    def error(self, code: str, message: str) -> str | None:
        return encode_server_message(Error(code, message))

    def status(self, lag_s: float, step_s: float) -> str | None:
        return encode_server_message(Status(max(lag_s, 0.0), step_s))

    def closed(self, session: Any, reason: str) -> str | None:
        return encode_server_message(Closed(reason, session.audio_seconds, session.words, session.finals))
