"""The Wyoming protocol's speech-to-text events (Home Assistant) as a session :class:`Dialect`.

A Wyoming connection (``runtime/wyoming_server.py``) runs each request as one session:
``transcribe`` and ``audio-start`` become its settings (:func:`request_settings`),
``audio-chunk`` payloads its binary messages and ``audio-stop`` its end of stream. The events
are built with the ``wyoming`` package's own classes; this module only decides what to send:

- ``transcript-start`` when the session opens;
- ``transcript-chunk`` for each final as it is confirmed, appended: a chunk after the first
  starts with a space, so the chunks concatenate to the transcript exactly;
- ``transcript`` (the full text) and ``transcript-stop``, once: at the first endpoint that closes
  an utterance with text (the speaker stopped; the info says ``requires_external_vad: false``),
  or else when the session ends (``audio-stop``, an error, a limit, shutdown). Later finals are
  not sent; an early answer calls ``on_answer`` so that the connection ends the session;
- ``error`` (``text``, ``code``: our error kind) for bad input. An event of a type this server
  does not know (a newer client's, such as ``select-program``) is dropped without one, as the
  Wyoming convention asks: Home Assistant fails its request on any ``error``.

The silence that ends a voice command follows ``transcribe``'s ``vad_sensitivity`` with Home
Assistant's own values (:data:`SILENCE_MS`). Outgoing text is a JSON list of events
(``{"type", "data"}``) that the connection writes with the ``wyoming`` package; incoming text is
what the connection makes of an event: ``{"type": ...}``, or ``{"problem": {...}}`` for input it
refused.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from wyoming.asr import Transcript as TranscriptEvent
from wyoming.asr import TranscriptChunk, TranscriptStart, TranscriptStop
from wyoming.error import Error as ErrorEvent
from wyoming.event import Event as WyomingEvent
from wyoming.info import AsrModel, AsrProgram, Attribution, Info

from streamwhisper import __version__
from streamwhisper.errors import ProtocolError
from streamwhisper.events import Event, Final
from streamwhisper.model.tokenizer import LANGUAGES

from .. import wire

PROGRAM = "streamwhisper"
ATTRIBUTION = Attribution(name="streamwhisper", url="https://github.com/streamwhisper")
WHISPER = Attribution(name="OpenAI", url="https://github.com/openai/whisper")
#: The silence (ms) that ends a voice command, per ``vad_sensitivity``: Home Assistant's own
#: segmenter's values, which it no longer applies to a service that endpoints itself.
SILENCE_MS = {"default": 700, "relaxed": 1250, "aggressive": 250}
SAMPLE_WIDTH = 2  # bytes: signed 16-bit little-endian, the only width accepted
REQUEST_EVENTS = frozenset({"transcribe", "audio-start"})


def model_languages(recognizer: Any, name: str) -> list[str]:
    """The languages the served model transcribes: ``["en"]`` for an English-only model, else
    Whisper's language codes, as many as the model knows."""
    model = getattr(recognizer, "model", None)
    if model is None:  # a recogniser without a Whisper model (a test's fake): known by its name
        return ["en"] if name.endswith(".en") else list(LANGUAGES)
    return list(LANGUAGES)[: model.num_languages] if model.is_multilingual else ["en"]


def info_event(model: str, languages: list[str]) -> WyomingEvent:
    """The answer to ``describe``: one ASR program serving ``model`` in ``languages``."""
    asr = AsrProgram(
        name=PROGRAM,
        attribution=ATTRIBUTION,
        installed=True,
        description="Real-time streaming Whisper transcription",
        version=__version__,
        models=[
            AsrModel(
                name=model,
                attribution=WHISPER,
                installed=True,
                description=f"Whisper {model}",
                version=None,
                languages=list(languages),
            )
        ],
        supports_transcript_streaming=True,
        requires_external_vad=False,
    )
    return Info(asr=[asr]).event()


@dataclass(frozen=True)
class Request:
    """What a ``transcribe`` event asked for."""

    language: str | None = None  # None: the model's (English-only) or detection
    model: str | None = None  # ``name``: must be the served model when given
    silence_ms: int = SILENCE_MS["default"]


def _language(value: Any) -> str | None:
    """A Wyoming language ("en", "en-US", "en_US") -> a Whisper language code (None: detect)."""
    if value is None:
        return None
    if not isinstance(value, str) or len(value) > wire.MAX_LABEL:
        raise ProtocolError(f"transcribe 'language' must be a language code, got {value!r}")
    return wire.normalize_language(value.strip().replace("_", "-").split("-", 1)[0])


def parse_transcribe(data: Mapping[str, Any]) -> Request:
    """A ``transcribe`` event's data -> :class:`Request`; ProtocolError (1007) when malformed.
    ``context`` and the biasing lists are accepted and not used."""
    name = data.get("name")
    if name is not None and (not isinstance(name, str) or len(name) > wire.MAX_LABEL):
        raise ProtocolError(f"transcribe 'name' must be a model name, got {name!r}")
    sensitivity = data.get("vad_sensitivity") or "default"
    if not isinstance(sensitivity, str) or sensitivity not in SILENCE_MS:
        known = ", ".join(SILENCE_MS)
        raise ProtocolError(f"transcribe 'vad_sensitivity' must be one of {known}, got {sensitivity!r}")
    return Request(_language(data.get("language")), name or None, SILENCE_MS[sensitivity])


def audio_format(data: Mapping[str, Any]) -> tuple[int, int, int]:
    """``(rate, width, channels)`` of an ``audio-start`` or ``audio-chunk``; ProtocolError (1007)
    when a field is missing or not an integer."""
    values = []
    for name in ("rate", "width", "channels"):
        value = data.get(name)
        if isinstance(value, bool) or not isinstance(value, int):
            raise ProtocolError(f"audio event needs an integer {name!r}, got {value!r}", 1007, "invalid_audio")
        values.append(value)
    return values[0], values[1], values[2]


def request_settings(request: Request | None, start: Mapping[str, Any], languages: list[str]) -> wire.SessionSettings:
    """A request's session settings from its ``transcribe`` (if any) and ``audio-start``.

    Any rate and 1-8 channels of 16-bit samples are accepted; another width is refused (1003).
    """
    request = request or Request()
    rate, width, channels = audio_format(start)
    if width != SAMPLE_WIDTH:
        raise ProtocolError(
            f"audio of width {width} is not supported (send 16-bit samples, width 2)",
            wire.CLOSE_UNSUPPORTED,
            "unsupported_encoding",
        )
    language = request.language
    if language is None and languages == ["en"]:
        language = "en"
    values = {
        "sample_rate": rate,
        "channels": channels,
        "encoding": "pcm_s16le",
        "language": language,
        "interim_results": False,
        "endpointing_ms": request.silence_ms,
        "eager_finals": True,  # (aggressive's 250 ms) the first final ends the command: no stop to wait for
        "model": request.model,
    }
    try:
        return wire.apply_settings(wire.SessionSettings(), values)
    except ProtocolError as exc:
        raise ProtocolError(f"audio-start: {exc}", exc.code, exc.kind) from None


def problem(error: ProtocolError) -> str:
    """The text that hands input the connection refused to :meth:`WyomingDialect.parse`."""
    return wire.dumps({"problem": {"text": str(error), "code": error.code, "kind": error.kind}})


def _events(*events: WyomingEvent) -> str:
    return json.dumps([event.to_dict() for event in events], ensure_ascii=False, separators=(",", ":"))


def decode_events(text: str) -> list[WyomingEvent]:
    """The events of a text this dialect wrote."""
    return [WyomingEvent.from_dict(item) for item in json.loads(text)]


class WyomingDialect:
    """One Wyoming request (``session`` is a SessionInfo)."""

    name = "wyoming"

    def __init__(self, on_answer: Callable[[], None] | None = None) -> None:
        self._on_answer = on_answer
        self._pieces: list[str] = []
        self._language: str | None = None
        self.answered = False

    # -- client -> server ---------------------------------------------------------------------

    def settings(self, query: Mapping[str, str]) -> wire.SessionSettings:
        return wire.SessionSettings()  # a request's settings come from its events

    def parse(self, text: str) -> wire.ClientMessage:
        data = wire.parse_json_object(text)
        if "problem" in data:
            refused = data["problem"]
            raise ProtocolError(refused["text"], refused["code"], refused["kind"])
        kind = data.get("type")
        if kind == "audio-stop":
            return wire.Eof()
        if kind in REQUEST_EVENTS:
            raise ProtocolError(f"{kind} during a request: send audio-stop first", wire.CLOSE_INVALID, "out_of_order")
        return wire.Unknown(str(kind)[:40])

    # -- server -> client ---------------------------------------------------------------------

    def ready(self, session: Any) -> str:
        self._language = session.settings.language
        return _events(TranscriptStart(language=self._language).event())

    def event(self, event: Event, session: Any) -> str | None:
        if self.answered or not isinstance(event, Final):
            return None
        out = []
        if event.text:
            piece = (" " if self._pieces else "") + event.text
            self._pieces.append(piece)
            out.append(TranscriptChunk(piece).event())
        if event.endpoint and self._pieces:
            out.extend(self._answer())
            if self._on_answer is not None:
                self._on_answer()
        return _events(*out) if out else None

    def audio(self, session: Any) -> None:
        return None

    def error(self, code: str, message: str) -> str | None:
        if code == "unknown_message":
            return None  # Wyoming servers drop events they do not know; a client fails on an error
        return _events(ErrorEvent(text=message, code=code).event())

    def status(self, lag_s: float, step_s: float) -> None:
        return None

    def closed(self, session: Any, reason: str) -> str | None:
        return None if self.answered else _events(*self._answer())

    def _answer(self) -> list[WyomingEvent]:
        self.answered = True
        text = "".join(self._pieces)
        return [TranscriptEvent(text=text, language=self._language).event(), TranscriptStop().event()]
