"""vosk-server-compatible streaming (WebSocket on ``/``) as a session :class:`Dialect`.

vosk-server's protocol (alphacep/vosk-server, ``websocket/asr_server.py``): the client may send
``{"config": {"sample_rate": 16000, ...}}`` first, then binary frames of s16le mono audio, then
``{"eof": 1}``. The server answers **every** audio frame with exactly one message (clients such
as vosk-server's ``test.py`` wait for it before they send the next frame):

- ``{"text": "...", "result": [{"conf", "end", "start", "word"}, ...]}`` once per utterance,
  when it ended, or else
- ``{"partial": "..."}``: the utterance's committed text and the current partial;

and answers ``{"eof": 1}`` with a last result (the rest of the audio), then closes (1000). A
config message gets no answer; one sent after audio is ignored (vosk creates its recogniser at
the first audio frame).

Our finals that do not end an utterance are accumulated until the endpoint ``Final``; results
are queued and each audio frame's answer takes the oldest, so none is lost when recognition
lags. Config keys: ``sample_rate``; ``words`` (false: no ``result`` list); ``max_alternatives``
(> 0: results as ``{"alternatives": [{"text", "confidence", "result"}]}``, with our single
hypothesis); others (``phrase_list``, ...) are ignored. Query parameters ``sample_rate`` and
``language`` are read too (vosk has none; the default rate is 16 kHz). The text is Whisper's,
punctuation and casing included.

Malformed input (bad JSON, other messages, a bad config value) raises
:class:`~streamwhisper.errors.ProtocolError` (1007): the client gets ``{"error": "..."}``, the
last result and that close code. The answer to each audio frame comes from
:meth:`VoskDialect.audio`, which the session calls after every binary frame.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from streamwhisper.errors import ProtocolError
from streamwhisper.events import Error, Event, Final, Partial, SpeechEnded, SpeechStarted, Word

from .. import wire

PATH = "/"
QUERY_SETTINGS = ("sample_rate", "language")
MAX_ALTERNATIVES = 100
# Error kinds after which the session goes on: no message then (it would break the one
# answer per audio frame that clients count on).
_NOT_FATAL = frozenset({"unknown_message"})


def _t(seconds: float) -> float:
    return round(seconds, 3)


@dataclass
class _Utterance:
    """Text and words of one utterance (its finals so far)."""

    texts: list[str]
    words: list[Word]

    @property
    def text(self) -> str:
        return " ".join(t for t in self.texts if t)


class VoskDialect:
    """vosk-server's protocol for one session (``session`` is a SessionInfo)."""

    name = "vosk"

    def __init__(self) -> None:
        self.show_words = True
        self.max_alternatives = 0
        self.audio_started = False  # set at the first audio frame
        self._done: deque[_Utterance] = deque()  # ended utterances not yet sent
        self._current = _Utterance([], [])  # finals of the utterance going on
        self._partial = ""

    # -- client -> server ---------------------------------------------------------------------

    def settings(self, query: Mapping[str, str]) -> wire.SessionSettings:
        values = {k: v for k, v in query.items() if k in QUERY_SETTINGS}
        return wire.apply_settings(wire.SessionSettings(), values)

    def parse(self, text: str) -> wire.ClientMessage:
        data = wire.parse_json_object(text)
        if "config" in data:
            config = data["config"]
            if not isinstance(config, Mapping):
                raise ProtocolError('"config" must be a JSON object')
            if self.audio_started:
                return wire.KeepAlive()  # vosk ignores config once audio flows
            if "words" in config:
                self.show_words = bool(config["words"])
            if "max_alternatives" in config:
                value = config["max_alternatives"]
                if isinstance(value, bool) or not isinstance(value, int | float) or not 0 <= value <= MAX_ALTERNATIVES:
                    raise ProtocolError(f"config 'max_alternatives' must be an integer in [0, {MAX_ALTERNATIVES}]")
                self.max_alternatives = int(value)
            return wire.ConfigMessage({k: config[k] for k in ("sample_rate",) if k in config})
        if "eof" in data:
            return wire.Eof()
        raise ProtocolError('unknown message: vosk clients send {"config": {...}}, audio and {"eof": 1}')

    # -- server -> client ---------------------------------------------------------------------

    def ready(self, session: Any) -> None:
        return None  # vosk-server answers no config

    def event(self, event: Event, session: Any) -> None:
        """Collect the transcript; what the client gets is sent per audio frame (:meth:`reply`)."""
        if isinstance(event, Partial):
            self._partial = event.text
        elif isinstance(event, Final):
            self._current.texts.append(event.text)
            self._current.words.extend(event.words)
            self._partial = ""
            if event.endpoint:
                self._done.append(self._current)
                self._current = _Utterance([], [])
        elif not isinstance(event, SpeechStarted | SpeechEnded | Error):
            raise TypeError(f"not an event: {event!r}")
        return None

    def audio(self, session: Any) -> tuple[str, bool]:
        """The answer to an audio frame, and whether it is a partial (a newer one may replace it)."""
        self.audio_started = True
        if self._done:
            return self._result(self._done.popleft()), False
        partial = " ".join(t for t in (self._current.text, self._partial) if t)
        return wire.dumps({"partial": partial}), True

    def error(self, code: str, message: str) -> str | None:
        return None if code in _NOT_FATAL else wire.dumps({"error": message})

    def status(self, lag_s: float, step_s: float) -> None:
        return None

    def closed(self, session: Any, reason: str) -> str:
        """The last result: every utterance not sent yet and the one going on, as one."""
        rest = _Utterance([], [])
        for utterance in (*self._done, self._current):
            rest.texts.extend(utterance.texts)
            rest.words.extend(utterance.words)
        self._done.clear()
        self._current = _Utterance([], [])
        return self._result(rest)

    def _result(self, utterance: _Utterance) -> str:
        spoken = [w for w in utterance.words if w.word.strip()]
        words: list[dict[str, Any]] = [
            {"conf": round(w.probability, 6), "end": _t(w.end), "start": _t(w.start), "word": w.word.strip()}
            for w in spoken
        ]
        if self.max_alternatives > 0:
            confidence = sum(w.probability for w in spoken) / len(spoken) if spoken else 0.0
            alternative: dict[str, Any] = {"confidence": round(confidence, 6), "text": utterance.text}
            if self.show_words and words:
                alternative["result"] = [{k: w[k] for k in ("end", "start", "word")} for w in words]
            return wire.dumps({"alternatives": [alternative]})
        if self.show_words and words:
            return wire.dumps({"result": words, "text": utterance.text})
        return wire.dumps({"text": utterance.text})
