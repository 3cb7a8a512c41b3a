"""Deepgram Flux (``/v2/listen``), the turn-based dialect voice agents speak, as a session :class:`Dialect`.

Clients: the Deepgram SDK's ``listen.v2``, LiveKit's ``deepgram.STTv2`` and Pipecat's Flux
service, pointed at this server's URL. Settings come as query parameters (``model``,
``encoding``, ``sample_rate``, ``eager_eot_threshold``, ``eot_threshold``, ``eot_timeout_ms``,
``language_hint``; the rest, such as ``keyterm``, ``tag`` or ``mip_opt_out``, are accepted and
ignored), audio as binary frames, control messages as JSON (``Configure``, ``ForceEndTurn``,
``CloseStream``, and ``KeepAlive``). The server answers ``Connected`` first, then ``TurnInfo``
messages, ``ConfigureSuccess`` / ``ConfigureFailure``, ``Warning`` and ``Error``; every message
carries ``sequence_id``, counting from 0.

Mapping onto the native event stream (``streamwhisper.events``), one turn per utterance:

- A turn starts with the first words heard after the last turn ended (``StartOfTurn``, with
  them as its transcript): audio the VAD let through that holds no word starts no turn.
- Each ``Partial`` or ``Final`` inside a turn is an ``Update``: ``transcript`` and ``words`` are
  the turn's final words followed by the partial ones (punctuated and cased, as Flux's).
- The turn ends (``EndOfTurn``, ``end_of_turn_confidence`` 1) with the endpoint final of an
  utterance the VAD ended (``trigger`` ``model``: our endpointing plays Flux's end-of-turn
  model), or of the utterance a ``ForceEndTurn`` cut (``trigger`` ``manual``; it is the native
  ``finalize``), or when the stream ends.
- With ``eager_eot_threshold``, a pause of ``EAGER_PAUSE_MS`` inside the turn is a pause final
  (the session's ``pause_final``): its words become final at once and are sent as
  ``EagerEndOfTurn`` (``end_of_turn_confidence`` the threshold asked for); words after it send
  ``TurnResumed`` and the turn goes on, decoded in the same window; the VAD's endpoint, when the
  speaker stays quiet, sends ``EndOfTurn`` at once with the same transcript.
- ``eot_threshold`` and ``eot_timeout_ms`` are validated and echoed: the VAD ends a turn after
  ``vad.endpoint_ms`` of silence (500 ms), sooner than any ``eot_timeout_ms`` Flux accepts.

Malformed input raises :class:`~streamwhisper.errors.ProtocolError`: the session answers with an
``Error`` and the close code; an unknown message type gets a ``Warning`` and the stream goes on.
"""

from __future__ import annotations

import contextlib
import math
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

from streamwhisper.errors import ProtocolError
from streamwhisper.events import Error, Event, Final, Partial, SpeechEnded, SpeechStarted, Word

from .. import wire
from . import Texts
from .deepgram import control_message, language_code

PATH = "/v2/listen"
#: Flux encodings this server decodes, and the native encoding each one is.
ENCODINGS = {"linear16": "pcm_s16le", "mulaw": "pcm_mulaw", "alaw": "pcm_alaw"}
#: With ``eager_eot_threshold``, a pause this long inside a turn is an ``EagerEndOfTurn``.
EAGER_PAUSE_MS = 150
#: Flux's documented ranges and defaults.
THRESHOLDS = {"eager_eot_threshold": (0.3, 0.9), "eot_threshold": (0.5, 0.9), "eot_timeout_ms": (500, 10_000)}
DEFAULTS = {"eot_threshold": 0.7, "eot_timeout_ms": 5000}


@dataclass(frozen=True)
class FluxOptions:
    """The turn thresholds a Flux client asked for (``eager_eot_threshold`` None: no eager turns)."""

    eager_eot_threshold: float | None = None
    eot_threshold: float = DEFAULTS["eot_threshold"]
    eot_timeout_ms: int = int(DEFAULTS["eot_timeout_ms"])

    def as_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"eot_threshold": self.eot_threshold, "eot_timeout_ms": self.eot_timeout_ms}
        if self.eager_eot_threshold is not None:
            out["eager_eot_threshold"] = self.eager_eot_threshold
        return out


def _threshold(name: str, value: Any) -> float:
    low, high = THRESHOLDS[name]
    try:
        number = float(value)
    except (TypeError, ValueError):
        raise ProtocolError(f"{name} must be a number, got {value!r}") from None
    if isinstance(value, bool) or not math.isfinite(number) or not low <= number <= high:
        raise ProtocolError(f"{name} must be in [{low}, {high}], got {value!r}")
    return number


def with_thresholds(options: FluxOptions, values: Mapping[str, Any]) -> FluxOptions:
    """``options`` with the thresholds in ``values`` (query strings or JSON numbers), validated."""
    changes: dict[str, Any] = {}
    for name in THRESHOLDS:
        if values.get(name) is not None and values[name] != "":
            number = _threshold(name, values[name])
            changes[name] = int(number) if name == "eot_timeout_ms" else number
    options = replace(options, **changes)
    if options.eager_eot_threshold is not None and options.eager_eot_threshold > options.eot_threshold:
        eager, eot = options.eager_eot_threshold, options.eot_threshold
        raise ProtocolError(f"eager_eot_threshold ({eager}) must not exceed eot_threshold ({eot})")
    return options


def parse_query(query: Mapping[str, str]) -> tuple[wire.SessionSettings, FluxOptions]:
    """Flux query parameters -> (native session settings, Flux options); ProtocolError (1007 for
    malformed values, 1003 for an unsupported encoding)."""
    native: dict[str, Any] = {"language": "en", "word_timestamps": True, "interim_results": True}
    encoding = query.get("encoding", "linear16").strip().lower()
    if encoding not in ENCODINGS:
        known = ", ".join(ENCODINGS)
        raise ProtocolError(
            f"unsupported encoding {encoding!r} (supported: {known})", wire.CLOSE_UNSUPPORTED, "unsupported_encoding"
        )
    native["encoding"] = ENCODINGS[encoding]
    if "sample_rate" in query:
        native["sample_rate"] = query["sample_rate"]
    if query.get("model", "").strip().lower().endswith("-multi"):
        native["language"] = None  # flux-general-multi: detect, unless hinted
    if query.get("language_hint", "").strip():
        native["language"] = language_code(query["language_hint"])
    options = with_thresholds(FluxOptions(), query)
    if options.eager_eot_threshold is not None:
        native["endpointing_ms"] = EAGER_PAUSE_MS  # the session's pause finals, at every such pause
        native["eager_finals"] = True
    return wire.apply_settings(wire.SessionSettings(), native), options


def word_json(word: Word) -> dict[str, Any] | None:
    """One word as Flux writes it (punctuated and cased), or None for an empty one."""
    text = word.word.strip()
    if not text:
        return None
    start, end = round(word.start, 3), round(word.end, 3)
    return {"word": text, "confidence": round(word.probability, 3), "start": start, "end": end}


class FluxDialect:
    """Deepgram Flux for one session (``session`` is a SessionInfo)."""

    name = "deepgram-flux"

    def __init__(self) -> None:
        self.options = FluxOptions()
        self._request_id = str(uuid.uuid4())
        self._sequence = 0
        self._turn = 0  # index of the current turn, or of the next one between turns
        self._in_turn = False
        self._words: list[Word] = []  # the current turn's final words
        self._turn_start = 0.0
        self._ending = False  # the VAD ended the turn's speech: its next endpoint final ends it
        self._eager = False  # EagerEndOfTurn sent, no word since
        self._forced = False  # ForceEndTurn: the next endpoint final ends the turn
        self._info: Any = None

    # -- client -> server ---------------------------------------------------------------------

    def settings(self, query: Mapping[str, str]) -> wire.SessionSettings:
        settings, self.options = parse_query(query)
        return settings

    def parse(self, text: str) -> wire.ClientMessage:
        data, kind = control_message(text, "Configure, ForceEndTurn or CloseStream")
        if kind == "KeepAlive":
            return wire.KeepAlive()
        if kind == "CloseStream":
            return wire.Eof()
        if kind == "ForceEndTurn":
            self._forced = True  # the turn ends with the final of the utterance it cuts (words may come first)
            if self._info is not None:
                self._info.marks.append(self._forced_done)
            return wire.Finalize()
        if kind == "Configure":
            return self._configure(data)
        return wire.Unknown(kind[:40])

    def _configure(self, data: dict[str, Any]) -> wire.Reply:
        thresholds = data.get("thresholds") or {}
        try:
            if not isinstance(thresholds, dict):
                raise ProtocolError('"thresholds" must be an object')
            options = with_thresholds(self.options, thresholds)
            if (options.eager_eot_threshold is None) != (self.options.eager_eot_threshold is None):
                raise ProtocolError("eager_eot_threshold can be turned on or off only when the stream opens")
            keyterms = data.get("keyterms", [])  # accepted and echoed, as Flux does; not used
            keyterms = [] if keyterms is None else keyterms
            if not isinstance(keyterms, list) or not all(isinstance(term, str) for term in keyterms):
                raise ProtocolError('"keyterms" must be a list of strings')
        except ProtocolError as exc:
            failure = {"type": "ConfigureFailure", "request_id": self._request_id, "code": "INVALID_CONFIGURE"}
            return wire.Reply((self._dump({**failure, "description": str(exc)}),), "invalid_configure")
        self.options = options
        success = {"type": "ConfigureSuccess", "request_id": self._request_id, "thresholds": options.as_json()}
        return wire.Reply((self._dump({**success, "keyterms": keyterms}),))

    # -- server -> client ---------------------------------------------------------------------

    def ready(self, session: Any) -> str:
        self._info = session
        with contextlib.suppress(ValueError):  # our ids are hex: the request id names the session
            self._request_id = str(uuid.UUID(session.id.rjust(32, "0")))
        return self._dump({"type": "Connected", "request_id": self._request_id})

    def event(self, event: Event, session: Any) -> Texts:
        if isinstance(event, Partial):
            if event.words:
                return self._words_heard(event.words, (), event.end)
            if self._in_turn and not self._words:  # the turn's only words were withdrawn
                return self._end_turn("model", event.end) if self._ending else self._turn_info("Update", event.end, 0.0)
            return None
        if isinstance(event, Final):
            return self._final(event)
        if isinstance(event, SpeechEnded):
            if not self._in_turn:
                return None
            if self._eager:  # every word of the turn is final: it ends now
                return self._end_turn("model", event.time)
            self._ending = True
            return None
        if isinstance(event, SpeechStarted):
            return None  # a turn starts with its first words
        if isinstance(event, Error):
            return self.error(event.code, event.message)
        raise TypeError(f"not an event: {event!r}")

    def audio(self, session: Any) -> None:
        return None

    def error(self, code: str, message: str) -> str:
        if code == "unknown_message":  # the stream goes on
            return self._dump(
                {"type": "Warning", "request_id": self._request_id, "code": "UNKNOWN_MESSAGE", "description": message}
            )
        return self._dump({"type": "Error", "code": code.upper(), "description": message})

    def status(self, lag_s: float, step_s: float) -> None:
        return None

    def closed(self, session: Any, reason: str) -> str | None:
        return self._end_turn("model", None) if self._in_turn else None

    # -- turns --------------------------------------------------------------------------------

    def _final(self, event: Final) -> list[str]:
        ends = event.endpoint and (self._forced or self._ending or self.options.eager_eot_threshold is None)
        texts = self._words_heard((), event.words, event.end, update=not ends) if event.words else []
        if event.endpoint and self._in_turn:
            if ends:
                texts.append(self._end_turn("manual" if self._forced else "model", event.end))
            elif not self._eager:
                self._eager = True
                texts.append(self._turn_info("EagerEndOfTurn", event.end, self.options.eager_eot_threshold or 0.0))
        return texts

    def _words_heard(
        self, partial: tuple[Word, ...], final: tuple[Word, ...], end: float, update: bool = True
    ) -> list[str]:
        """A StartOfTurn when these words open a turn, a TurnResumed when they follow an
        EagerEndOfTurn, then an Update (unless ``update`` is false: an EndOfTurn follows)."""
        texts = []
        kind = "Update"
        if not self._in_turn:
            self._in_turn, kind, update = True, "StartOfTurn", True
            self._turn_start = (partial or final)[0].start
        elif self._eager:
            self._eager = False
            texts.append(self._turn_info("TurnResumed", end, 0.0))
        self._words.extend(final)
        if update:
            texts.append(self._turn_info(kind, end, 0.0, partial))
        return texts

    def _forced_done(self) -> str | None:
        """A ForceEndTurn's mark: every utterance it cut is closed. A turn still open (its words
        were final before) ends now; with none, the next turn owes it nothing."""
        if self._in_turn:
            return self._end_turn("manual", None)
        self._forced = False
        return None

    def _end_turn(self, trigger: str, end: float | None) -> str:
        """The EndOfTurn of the open turn; the next one starts with the next words."""
        end = self._words[-1].end if end is None and self._words else end
        text = self._turn_info("EndOfTurn", end if end is not None else self._turn_start, 1.0, trigger=trigger)
        self._turn += 1
        self._in_turn = self._ending = self._eager = self._forced = False
        self._words = []
        return text

    def _turn_info(
        self, kind: str, end: float, confidence: float, partial: tuple[Word, ...] = (), trigger: str | None = None
    ) -> str:
        heard = (*self._words, *partial)
        words = [item for w in heard if (item := word_json(w)) is not None]
        message: dict[str, Any] = {
            "type": "TurnInfo",
            "request_id": self._request_id,
            "event": kind,
            "turn_index": self._turn,
            "audio_window_start": round(self._turn_start, 3),
            "audio_window_end": round(max(end, self._turn_start), 3),
            "transcript": "".join(w.word for w in heard).strip(),
            "words": words,
            "end_of_turn_confidence": confidence,
        }
        if trigger is not None:
            message["trigger"] = trigger
        return self._dump(message)

    def _dump(self, message: dict[str, Any]) -> str:
        text = wire.dumps({**message, "sequence_id": self._sequence})
        self._sequence += 1
        return text
