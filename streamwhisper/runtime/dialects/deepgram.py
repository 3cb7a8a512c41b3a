"""Deepgram-compatible live streaming (``/v1/listen``) as a session :class:`Dialect`.

Existing Deepgram clients (the official SDKs included) connect here unchanged: settings come as
query parameters, audio as binary frames of ``linear16`` PCM, control messages as JSON
(``KeepAlive``, ``Finalize``, ``CloseStream``); the server answers with ``Results``,
``SpeechStarted`` (``vad_events=true``), ``UtteranceEnd`` (``utterance_end_ms=N``), ``Error``
and, last, ``Metadata``. The only place that protocol is parsed or serialised.

Mapping onto the native event stream (``streamwhisper.events``):

- ``Partial`` -> ``Results`` with ``is_final: false`` (only with ``interim_results=true``;
  Deepgram's default is false). ``Final`` -> ``Results`` with ``is_final: true``;
  ``speech_final`` is true on an endpoint ``Final`` (a VAD endpoint, the end of the stream, or
  a pause as long as ``endpointing``), never with ``endpointing=false``.
- ``start``/``duration`` of a ``Results`` cover the audio from the end of the previous final
  result to the end of its last word, so consecutive final results tile the stream.
- ``Finalize`` forces an endpoint; the final result that closes the utterance it cut is marked
  ``from_finalize: true`` (with ``speech_final: false`` unless the VAD had already ended the
  speech; an empty transcript when no word was heard). Nothing is marked when there was nothing
  to finalise, as Deepgram documents.
- ``endpointing`` (ms, else ``utterance_end_ms``, clamped to [100, 5000] ms) becomes the
  session's ``endpointing_ms``: the VAD's endpoint when it is longer than the server's, else
  finals at pauses inside utterances the server's endpoint cuts (the session's
  ``_streaming_config``; docs/protocol.md). ``UtteranceEnd`` is sent when the VAD ends speech
  (``SpeechEnded``), with ``last_word_end`` the end of the last voiced frame.
- ``punctuate`` (or ``smart_format``) keeps Whisper's punctuation and casing in ``transcript``
  and adds ``punctuated_word``; otherwise the transcript is the lower-case words without
  punctuation, as Deepgram's. ``word`` is always lower case without punctuation.
- ``language`` takes BCP-47 tags (``en-US`` -> ``en``); ``multi`` means detection; the default is
  English, as Deepgram's. ``encoding`` must be ``linear16`` when given (the default). Other
  Deepgram parameters (``model``, ``tier``, ``version``, ``diarize``, ``keywords``, ...) are
  accepted and ignored; ``multichannel=true`` with several channels is refused (1003): the
  channels are mixed to one, so ``channel_index`` is always ``[0, 1]``.

Malformed input raises :class:`~streamwhisper.errors.ProtocolError` as in ``wire.py``; the
session answers with an ``Error`` message (``variant`` = our error kind), the finals for the
audio it already had, ``Metadata`` and the close code.
"""

from __future__ import annotations

import contextlib
import hashlib
import math
import unicodedata
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from streamwhisper import __version__
from streamwhisper.errors import ProtocolError
from streamwhisper.events import Error, Event, Final, Partial, SpeechEnded, SpeechStarted, Word

from .. import wire

LISTEN_PATH = "/v1/listen"

#: Deepgram encodings this server decodes, and the native encoding each one is.
ENCODINGS = {"linear16": "pcm_s16le"}
ENDPOINT_RANGE_MS = (100, 5000)
MAX_UTTERANCE_END_MS = 60_000
_MODEL_NAMESPACE = uuid.uuid5(uuid.NAMESPACE_URL, "https://github.com/streamwhisper")
_EMPTY_SHA256 = hashlib.sha256(b"").hexdigest()
_TRUE = ("true", "1", "yes", "on")
_FALSE = ("false", "0", "no", "off")


@dataclass(frozen=True)
class DeepgramOptions:
    """What a Deepgram client asked for beyond the native session settings."""

    interim_results: bool = False
    punctuate: bool = False
    speech_final: bool = True  # False with endpointing=false
    utterance_end_ms: int | None = None
    vad_events: bool = False


def _flag(name: str, value: str) -> bool:
    text = value.strip().lower()
    if text in _TRUE or text in _FALSE:
        return text in _TRUE
    raise ProtocolError(f"query parameter {name!r} must be true or false, got {value!r}")


def _ms(name: str, value: str, high: int) -> int:
    try:
        number = int(value.strip())
    except ValueError:
        raise ProtocolError(f"query parameter {name!r} must be milliseconds or false, got {value!r}") from None
    if not 0 <= number <= high:
        raise ProtocolError(f"query parameter {name!r} must be in [0, {high}] ms, got {number}")
    return number


def _clamp_endpoint(ms: int) -> int:
    low, high = ENDPOINT_RANGE_MS
    return min(max(ms, low), high)


def language_code(value: str) -> str | None:
    """A BCP-47 tag ("en-US"), a code or "multi" -> a Whisper language code, or None to detect."""
    text = value.strip().lower()
    if text in ("multi", "auto", ""):
        return None
    return wire.normalize_language(text.replace("_", "-").split("-", 1)[0])


def parse_query(query: Mapping[str, str]) -> tuple[wire.SessionSettings, DeepgramOptions]:
    """Deepgram query parameters -> (native session settings, Deepgram options).

    Raises ProtocolError: 1007 for malformed values, 1003 for an encoding or a mode this server
    does not support. Unknown parameters are ignored, as Deepgram SDKs send many.
    """
    native: dict[str, Any] = {"language": "en", "word_timestamps": True, "interim_results": False}
    encoding = query.get("encoding")
    if encoding is not None:
        if encoding.strip().lower() not in ENCODINGS:
            known = ", ".join(ENCODINGS)
            raise ProtocolError(
                f"unsupported encoding {encoding!r} (supported: {known})",
                wire.CLOSE_UNSUPPORTED,
                "unsupported_encoding",
            )
        native["encoding"] = ENCODINGS[encoding.strip().lower()]
    for name in ("sample_rate", "channels"):
        if name in query:
            native[name] = query[name]
    if "language" in query:
        native["language"] = language_code(query["language"])
    interim = _flag("interim_results", query["interim_results"]) if "interim_results" in query else False
    native["interim_results"] = interim
    punctuate = any(_flag(name, query[name]) for name in ("punctuate", "smart_format") if name in query)
    vad_events = _flag("vad_events", query["vad_events"]) if "vad_events" in query else False

    utterance_end: int | None = None
    if query.get("utterance_end_ms", "").strip():
        utterance_end = _ms("utterance_end_ms", query["utterance_end_ms"], MAX_UTTERANCE_END_MS)
    speech_final = True
    endpoint_ms: int | None = None
    endpointing = query.get("endpointing", "").strip().lower()
    if endpointing == "false":
        speech_final = False
    elif endpointing and endpointing != "true":
        endpoint_ms = _clamp_endpoint(_ms("endpointing", endpointing, MAX_UTTERANCE_END_MS))
    if endpoint_ms is None and utterance_end is not None:
        endpoint_ms = _clamp_endpoint(utterance_end)
    native["endpointing_ms"] = endpoint_ms

    settings = wire.apply_settings(wire.SessionSettings(), native)
    if "multichannel" in query and _flag("multichannel", query["multichannel"]) and settings.channels > 1:
        raise ProtocolError(
            "multichannel=true is not supported (channels are mixed into one)", wire.CLOSE_UNSUPPORTED, "unsupported"
        )
    options = DeepgramOptions(interim, punctuate, speech_final, utterance_end, vad_events)
    return settings, options


def control_message(text: str, kinds: str) -> tuple[dict[str, Any], str]:
    """A control message's JSON object and its ``type`` (ProtocolError 1007 without a string
    one; ``kinds`` names the types the protocol knows, for the error)."""
    data = wire.parse_json_object(text)
    kind = data.get("type")
    if not isinstance(kind, str):
        raise ProtocolError(f'a control message needs a string "type" ({kinds})')
    return data, kind


def bare_word(word: str) -> str:
    """A word without surrounding punctuation, lower case (Deepgram's ``word``)."""
    text = word.strip()
    start, end = 0, len(text)
    while start < end and unicodedata.category(text[start])[0] in "PS":
        start += 1
    while end > start and unicodedata.category(text[end - 1])[0] in "PS":
        end -= 1
    return text[start:end].lower()


def _t(seconds: float) -> float:
    return round(seconds, 3)


def created_now() -> str:
    """The time now as Deepgram writes ``created`` (ISO 8601, milliseconds, Z)."""
    return datetime.now(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def model_info(model: str) -> dict[str, str]:
    return {"name": model, "version": __version__, "arch": "whisper"}


def model_uuid(model: str) -> str:
    """A stable id of the served model and version (Deepgram names models by UUID)."""
    return str(uuid.uuid5(_MODEL_NAMESPACE, f"{model}/{__version__}"))


def metadata(request_id: str, created: str, sha256: str, duration: float, model: str) -> dict[str, Any]:
    """Deepgram's ``metadata`` of a request (the live ``Metadata`` message adds its type)."""
    uid = model_uuid(model)
    return {
        "transaction_key": "deprecated",
        "request_id": request_id,
        "sha256": sha256,
        "created": created,
        "duration": _t(duration),
        "channels": 1,
        "models": [uid],
        "model_info": {uid: model_info(model)},
    }


def word_json(word: Word, punctuate: bool) -> dict[str, Any] | None:
    """One word as Deepgram writes it, or None for a word that is only punctuation."""
    bare = bare_word(word.word)
    if not bare:
        return None
    item: dict[str, Any] = {"word": bare, "start": _t(word.start), "end": _t(word.end)}
    item["confidence"] = round(word.probability, 3)
    if punctuate:
        item["punctuated_word"] = word.word.strip()
    return item


class DeepgramDialect:
    """Deepgram's live streaming protocol for one session (``session`` is a SessionInfo)."""

    name = "deepgram"

    def __init__(self) -> None:
        self.options = DeepgramOptions()
        self._info: Any = None  # the session's SessionInfo (read for the audio clock)
        self._request_id = str(uuid.uuid4())
        self._created = created_now()
        self._model = model_info("")
        self._model_uuid = ""
        self._cursor = 0.0  # end of the audio covered by final results
        self._speaking = False
        self._finalize_at: float | None = None  # audio clock at the last Finalize
        self._finalize_in_speech = False

    # -- client -> server ---------------------------------------------------------------------

    def settings(self, query: Mapping[str, str]) -> wire.SessionSettings:
        settings, self.options = parse_query(query)
        return settings

    def parse(self, text: str) -> wire.ClientMessage:
        _, kind = control_message(text, "KeepAlive, Finalize or CloseStream")
        if kind == "KeepAlive":
            return wire.KeepAlive()
        if kind == "Finalize":
            self._finalize_at = self._info.audio_seconds if self._info is not None else math.inf
            self._finalize_in_speech = self._speaking
            return wire.Finalize()
        if kind == "CloseStream":
            return wire.Eof()
        return wire.Unknown(kind[:40])

    # -- server -> client ---------------------------------------------------------------------

    def ready(self, session: Any) -> None:
        """Deepgram sends nothing when a stream opens; remember the session for later."""
        self._info = session
        with contextlib.suppress(ValueError):  # our ids are hex: the request id names the session
            self._request_id = str(uuid.UUID(session.id.rjust(32, "0")))
        self._model = model_info(session.model)
        self._model_uuid = model_uuid(session.model)
        return None

    def event(self, event: Event, session: Any) -> str | None:
        if isinstance(event, Partial):
            return self._results(event, is_final=False) if self.options.interim_results else None
        if isinstance(event, Final):
            return self._results(event, is_final=True)
        if isinstance(event, SpeechStarted):
            self._speaking = True
            if not self.options.vad_events:
                return None
            return wire.dumps({"type": "SpeechStarted", "channel": [0], "timestamp": _t(event.time)})
        if isinstance(event, SpeechEnded):
            self._speaking = False
            if self.options.utterance_end_ms is None:
                return None
            return wire.dumps({"type": "UtteranceEnd", "channel": [0, 1], "last_word_end": _t(event.time)})
        if isinstance(event, Error):
            return self.error(event.code, event.message)
        raise TypeError(f"not an event: {event!r}")

    def audio(self, session: Any) -> None:
        return None

    def error(self, code: str, message: str) -> str:
        return wire.dumps({"type": "Error", "variant": code, "description": message, "message": message})

    def status(self, lag_s: float, step_s: float) -> None:
        return None  # Deepgram has no such message

    def closed(self, session: Any, reason: str) -> str:
        # the dialect never sees the audio bytes: the sha256 is the empty input's
        meta = metadata(self._request_id, self._created, _EMPTY_SHA256, session.audio_seconds, session.model)
        return wire.dumps({"type": "Metadata", **meta, "channels": session.settings.channels})

    # -- helpers ------------------------------------------------------------------------------

    def _words(self, words: tuple[Word, ...]) -> list[dict[str, Any]]:
        return [item for w in words if (item := word_json(w, self.options.punctuate)) is not None]

    def _results(self, event: Partial | Final, *, is_final: bool) -> str:
        words = self._words(event.words)
        transcript = event.text if self.options.punctuate else " ".join(w["word"] for w in words)
        confidence = sum(w.probability for w in event.words) / len(event.words) if event.words else 0.0
        start = self._cursor
        end = max(event.end, start)
        from_finalize = False
        speech_final = False
        if isinstance(event, Final):
            self._cursor = end
            if event.endpoint:
                # The final of the utterance a Finalize cut starts before the Finalize; a later
                # utterance's starts after it (then the Finalize had nothing to finalise).
                if self._finalize_at is not None and event.start <= self._finalize_at + 1e-3:
                    from_finalize = True
                speech_final = self.options.speech_final and not (from_finalize and self._finalize_in_speech)
                self._finalize_at = None
        return wire.dumps(
            {
                "type": "Results",
                "channel_index": [0, 1],
                "duration": _t(end - start),
                "start": _t(start),
                "is_final": is_final,
                "speech_final": speech_final,
                "from_finalize": from_finalize,
                "channel": {
                    "alternatives": [{"transcript": transcript, "confidence": round(confidence, 3), "words": words}]
                },
                "metadata": {
                    "request_id": self._request_id,
                    "model_info": dict(self._model),
                    "model_uuid": self._model_uuid,
                },
            }
        )
