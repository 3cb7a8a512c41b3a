"""OpenAI's Realtime transcription WebSocket (``/v1/realtime?intent=transcription``) as a session
:class:`Dialect`.

OpenAI SDKs and the clients built on them (LiveKit, Pipecat) connect unchanged: the key comes as
``Authorization: Bearer`` (or ``?api_key=`` / ``?token=``), ``model`` in the query is accepted
(see :mod:`.realtime_config`), ``OpenAI-Beta: realtime=v1`` is tolerated. Client events:
``session.update`` (GA) and ``transcription_session.update`` (beta), ``input_audio_buffer.append``
(base64 audio in the session's format), ``input_audio_buffer.commit`` and ``.clear``. Server
events: ``session.created`` first, ``session.updated`` / ``transcription_session.updated``,
``input_audio_buffer.committed`` / ``.cleared`` / ``.speech_started`` / ``.speech_stopped``,
``conversation.item.input_audio_transcription.delta`` / ``.completed`` / ``.failed``, ``error``.

Mapping onto the native event stream (``streamwhisper.events``):

- An item is the audio between two commits. With ``turn_detection: null`` the client commits
  (at least 100 ms of new audio, else ``input_audio_buffer_commit_empty``); with server VAD our
  VAD does: ``SpeechStarted`` announces the item (``speech_started``), ``SpeechEnded`` commits it
  (``speech_stopped``, ``committed``). A commit is a ``Finalize`` of the stream there.
- A ``delta`` carries the words of a ``Final`` (stable words, never revised), so the deltas of an
  item only ever append, and joined they are its ``completed`` transcript. Partials are not sent
  (the protocol cannot take text back). An item's deltas go out once it is committed, or, with
  server VAD, as soon as ``speech_started`` named it.
- ``completed`` follows the last final of the item: the session's mark (``SessionInfo.marks``)
  says when every utterance that had ended by the commit is closed, text or none.
- A recognition failure ends the session (``internal_error``, 1011): the item under way ends
  with ``failed`` instead of ``completed``.
- ``clear`` discards the uncommitted audio: its finals are dropped (the recogniser still heard
  it, and its words condition the next turn's decoding as any earlier words do).

Errors are OpenAI's ``error`` event (``{"type", "code", "message", "param", "event_id"}``).
Malformed client events (bad JSON, unknown types, bad base64, audio that is not whole samples,
bad values, an empty commit) are answered with one and the session goes on, as OpenAI's does;
what ends a session (limits, auth, shutdown, a message over the size limit) closes it with the
code the native protocol uses, after its ``error`` event and the transcripts of what was heard.
"""

from __future__ import annotations

import base64
import binascii
import functools
import itertools
import math
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from streamwhisper.errors import ProtocolError
from streamwhisper.events import Event, Final, SpeechEnded, SpeechStarted

from .. import wire
from . import SessionInfo, Texts
from .realtime_config import FORMATS, MODEL_ALIASES, RealtimeConfig, RealtimeError, update_beta, update_ga

PATH = "/v1/realtime"
MIN_COMMIT_MS = 100
MAX_PENDING_ITEMS = 32  # committed or cleared items still waiting for their transcripts
MAX_ITEM_CHARS = 100_000  # an open item with more text (over an hour of speech) is committed
SERVER_ERRORS = frozenset({"internal_error", "shutting_down", "over_capacity", "overloaded"})


@dataclass(eq=False)
class _Item:
    """One conversation item: the audio between two commits, and its transcript."""

    id: str
    start: float  # seconds on the session's audio clock
    end: float = 0.0
    cut: float = math.inf  # words that start before this are its own (the commit point; see _final)
    vad_end: bool = False  # committed by the VAD: its cut moves halfway into the quiet after it
    announced: bool = False  # speech_started named it: its deltas go out before the commit
    committed: bool = False
    discard: bool = False  # cleared: its finals are dropped
    pieces: list[str] = field(default_factory=list)  # deltas, sent or held
    chars: int = 0
    sent: int = 0
    failure: str | None = None


class RealtimeDialect:
    """OpenAI's Realtime transcription protocol for one session (``session`` is a SessionInfo)."""

    name = "openai_realtime"

    def __init__(self) -> None:
        self.config = RealtimeConfig()
        self._info: SessionInfo | None = None
        self._served = ""
        self._created = False
        self._updated_type = "session.updated"
        self._ids = itertools.count(1)
        self._audio_started = False
        self._appended = 0  # bytes of audio (the format is fixed from the first append on)
        self._uncommitted = 0  # of which since the last commit or clear
        self._open: _Item | None = None  # the item audio goes to now
        self._pending: deque[_Item] = deque()  # committed or cleared, waiting for their mark
        self._previous: str | None = None  # the last committed item
        self._speaking = False  # between the VAD's SpeechStarted and SpeechEnded
        self._stop_committed = False  # a client's commit inside speech took the VAD turn's place
        self._event_id: str | None = None  # the client event being handled
        self._handlers: Mapping[str, Callable[[dict[str, Any]], Any]] = {
            "session.update": lambda d: self._update(update_ga(self.config, d.get("session"), self._served), False),
            "transcription_session.update": lambda d: self._update(
                update_beta(self.config, d.get("session"), self._served), True
            ),
            "input_audio_buffer.append": self._append,
            "input_audio_buffer.commit": lambda d: self._commit(),
            "input_audio_buffer.clear": lambda d: self._clear(),
        }

    # -- client -> server ---------------------------------------------------------------------

    def settings(self, query: Mapping[str, str]) -> wire.SessionSettings:
        """The query: ``intent`` must be ``transcription`` (or absent); ``model`` an accepted
        name (others are refused by the session: not enabled); ``language`` as in an update."""
        intent = query.get("intent", "transcription")
        if intent != "transcription":
            raise ProtocolError(
                f"intent {intent[:40]!r} is not served here (only intent=transcription)",
                wire.CLOSE_UNSUPPORTED,
                "unsupported_intent",
            )
        model = query.get("model") or None
        alias = model if model in MODEL_ALIASES else None  # means the served model
        self.config = RealtimeConfig(language=wire.normalize_language(query.get("language")), model=alias)
        return self.config.settings(wire.SessionSettings(model=None if alias else model, interim_results=False))

    def parse(self, text: str) -> wire.ClientMessage | tuple[wire.ClientMessage, ...]:
        self._event_id = None
        try:
            data = wire.parse_json_object(text)
        except ProtocolError as exc:
            return self._refuse(RealtimeError("invalid_json", str(exc)))
        event_id = data.get("event_id")
        self._event_id = event_id[:64] if isinstance(event_id, str) else None
        kind = data.get("type")
        if not isinstance(kind, str):
            return self._refuse(RealtimeError("invalid_event", "The 'type' field is missing.", "type"))
        handler = self._handlers.get(kind)
        if handler is None:
            known = ", ".join(self._handlers)
            return self._refuse(
                RealtimeError("unknown_event", f"unknown event type {kind[:40]!r} (known: {known})", "type")
            )
        try:
            return handler(data)  # type: ignore[no-any-return]
        except RealtimeError as exc:
            return self._refuse(exc)

    def _refuse(self, error: RealtimeError) -> wire.Reply:
        return wire.Reply((self._error(error.code, error.message, error.param, self._event_id),), error.code)

    def _update(self, config: RealtimeConfig, beta: bool) -> wire.ClientMessage:
        base = wire.SessionSettings()
        native = config.settings(base)
        changed = native != self.config.settings(base)
        if changed and self._audio_started:
            raise RealtimeError(
                "session_update_after_audio",
                "the audio format, language and silence_duration_ms cannot change after the first audio",
                "session",
            )
        self.config = config
        self._updated_type = "transcription_session.updated" if beta else "session.updated"
        if not changed:
            return wire.Reply((self._session_event(self._updated_type),))
        keys = ("sample_rate", "encoding", "language", "endpointing_ms")
        return wire.ConfigMessage({k: getattr(native, k) for k in keys})  # answered by ready()

    def _append(self, data: dict[str, Any]) -> wire.ClientMessage:
        audio = data.get("audio")
        if not isinstance(audio, str):
            raise RealtimeError("invalid_event", "input_audio_buffer.append needs 'audio', a base64 string", "audio")
        try:
            raw = base64.b64decode(audio, validate=True)
        except (binascii.Error, ValueError):
            raise RealtimeError("invalid_base64", "'audio' is not valid base64", "audio") from None
        encoding, _ = FORMATS[self.config.format]
        if encoding == "pcm_s16le" and len(raw) % 2:
            raise RealtimeError(
                "invalid_audio", f"{len(raw)} bytes of audio/pcm are not a whole number of 16-bit samples", "audio"
            )
        if not raw:
            return wire.KeepAlive()
        self._audio_started = True
        if self._open is None:
            self._open = _Item(self._new_id("item"), self._clock)
        self._appended += len(raw)
        self._uncommitted += len(raw)
        return wire.Audio(raw)

    def _commit(self) -> tuple[wire.ClientMessage, ...]:
        buffered = self._uncommitted * 1000 / self.config.bytes_per_second
        if buffered < MIN_COMMIT_MS:
            raise RealtimeError(
                "input_audio_buffer_commit_empty",
                f"Error committing input audio buffer: buffer too small. Expected at least {MIN_COMMIT_MS}ms "
                f"of audio, but buffer only has {buffered:.2f}ms of audio.",
            )
        self._check_pending()
        self._stop_committed = self.config.vad and self._speaking  # no speech_stopped for it then
        return wire.Reply(tuple(self._commit_open(self._clock))), wire.Finalize()

    def _clear(self) -> wire.ClientMessage | tuple[wire.ClientMessage, ...]:
        cleared = wire.Reply((self._event("input_audio_buffer.cleared"),))
        self._uncommitted = 0
        item, self._open = self._open, None
        if item is None:
            return cleared
        self._check_pending()
        item.discard, item.cut = True, self._clock
        self._wait_for(item)
        return cleared, wire.Finalize()

    def _check_pending(self) -> None:
        if len(self._pending) >= MAX_PENDING_ITEMS:
            raise RealtimeError(
                "too_many_pending_items", f"{MAX_PENDING_ITEMS} items are still being transcribed; try again later"
            )

    @property
    def _clock(self) -> float:
        """Seconds of audio appended."""
        return self._appended / self.config.bytes_per_second

    # -- server -> client ---------------------------------------------------------------------

    def ready(self, session: SessionInfo) -> str:
        self._info, self._served = session, session.model
        if not self._created:
            self._created = True
            return self._session_event("session.created")
        return self._session_event(self._updated_type)

    def event(self, event: Event, session: SessionInfo) -> Texts:
        if isinstance(event, Final):
            return self._final(event)
        if isinstance(event, SpeechStarted | SpeechEnded):
            self._speaking = isinstance(event, SpeechStarted)
        if isinstance(event, SpeechStarted) and self.config.vad:
            item = self._current()
            item.announced = True
            before = self._pending[-1] if self._pending else None
            if before is not None and before.vad_end:
                before.cut, before.vad_end = (before.cut + event.time) / 2, False
            start_ms = max(round(event.time * 1000) - self.config.prefix_padding_ms, 0)
            item.start = start_ms / 1000
            started = self._event("input_audio_buffer.speech_started", audio_start_ms=start_ms, item_id=item.id)
            return [started, *self._deltas(item)]
        if isinstance(event, SpeechEnded) and self.config.vad:
            if self._stop_committed:  # the client's commit inside this speech was its turn's end
                self._stop_committed = False
                return None
            item = self._current()
            stopped = self._event(
                "input_audio_buffer.speech_stopped", audio_end_ms=round(event.time * 1000), item_id=item.id
            )
            texts = [stopped, *self._commit_open(event.time)]
            item.vad_end = True
            return texts
        return None  # partials; the VAD's events with manual turns

    def audio(self, session: SessionInfo) -> None:
        return None

    def error(self, code: str, message: str) -> str | None:
        if code == "internal_error":  # the session fails: its item ends with "failed", not "completed"
            self._target().failure = message
        return self._error(code, message, None, None)

    def status(self, lag_s: float, step_s: float) -> None:
        return None  # OpenAI's protocol has no such event

    def closed(self, session: SessionInfo, reason: str) -> Texts:
        """Items still pending when the session ends (its drain was cut short) fail; audio heard
        but never committed is committed now, so that its transcript is not lost."""
        message = f"the session ended ({reason}) before the transcript was complete"
        out = [self._failed(item, "session_ended", message) for item in self._pending if not item.discard]
        complete, self._pending = not self._pending, deque()
        item = self._open
        if complete and item is not None and item.pieces and not item.discard:
            out += self._commit_open(self._clock)
            completed = self._close(item)
            assert completed is not None  # not discarded
            out.append(completed)
        return out

    # -- items ----------------------------------------------------------------------------------

    def _current(self) -> _Item:
        if self._open is None:
            self._open = _Item(self._new_id("item"), self._clock)
        return self._open

    def _target(self) -> _Item:
        """The item that recognition results belong to now: the oldest one not yet complete."""
        return self._pending[0] if self._pending else self._current()

    def _commit_open(self, end: float) -> list[str]:
        """Commit the open item: ``committed`` and the deltas it held; its mark is asked for."""
        item = self._current()
        self._open, self._uncommitted = None, 0
        item.end, item.cut, item.committed = end, end, True
        self._wait_for(item)
        out = [self._event("input_audio_buffer.committed", previous_item_id=self._previous, item_id=item.id)]
        self._previous = item.id
        return out + self._deltas(item)

    def _wait_for(self, item: _Item) -> None:
        assert self._info is not None
        self._pending.append(item)
        self._info.marks.append(functools.partial(self._close, item))

    def _close(self, item: _Item) -> str | None:
        """The mark of ``item`` came: every final of its audio was handed over."""
        if item in self._pending:
            self._pending.remove(item)
        if item.discard:
            return None
        if item.failure is not None:
            return self._failed(item, "internal_error", item.failure)
        usage = {"type": "duration", "seconds": round(max(item.end - item.start, 0.0), 3)}
        transcript = "".join(item.pieces)
        return self._event(
            "conversation.item.input_audio_transcription.completed",
            item_id=item.id,
            content_index=0,
            transcript=transcript,
            usage=usage,
        )

    def _final(self, event: Final) -> list[str]:
        """Each word goes to the item whose audio it starts in: items end at their cut (their
        commit point), and no word goes to an item that is complete already. A streamer's
        utterance may span two VAD turns (it merges turns that end while it is behind)."""
        out: list[str] = []
        for item, words in itertools.groupby(event.words, key=lambda w: self._owner(w.start)):
            piece = "".join(w.word for w in words)
            piece = piece if item.pieces else piece.lstrip()
            if piece and not item.discard:
                item.pieces.append(piece)
                item.chars += len(piece)
                out += self._deltas(item) if item.committed or item.announced else []
            if item is self._open and item.chars > MAX_ITEM_CHARS:  # what the server holds stays bounded
                out += self._commit_open(event.end)  # the audio after the final's end stays uncommitted
                self._uncommitted = max(self._appended - round(event.end * self.config.bytes_per_second), 0)
                self._open = _Item(self._new_id("item"), event.end)
        return out

    def _owner(self, time: float) -> _Item:
        return next((item for item in self._pending if time < item.cut), None) or self._current()

    def _deltas(self, item: _Item) -> list[str]:
        out = [
            self._event(
                "conversation.item.input_audio_transcription.delta", item_id=item.id, content_index=0, delta=piece
            )
            for piece in item.pieces[item.sent :]
        ]
        item.sent = len(item.pieces)
        return out

    # -- messages -------------------------------------------------------------------------------

    def _new_id(self, kind: str) -> str:
        tag = self._info.id if self._info is not None else "0"
        return f"{kind}_{tag}{next(self._ids):05d}"

    def _event(self, kind: str, **fields: Any) -> str:
        return wire.dumps({"type": kind, "event_id": self._new_id("event"), **fields})

    def _session_event(self, kind: str) -> str:
        session_id = "sess_" + (self._info.id if self._info is not None else "")
        if kind == "transcription_session.updated":
            return self._event(kind, session=self.config.as_beta(session_id, self._served))
        return self._event(kind, session=self.config.as_ga(session_id, self._served))

    def _failed(self, item: _Item, code: str, message: str) -> str:
        error = {"type": "server_error", "code": code, "message": message, "param": None}
        return self._event(
            "conversation.item.input_audio_transcription.failed", item_id=item.id, content_index=0, error=error
        )

    def _error(self, code: str, message: str, param: str | None, event_id: str | None) -> str:
        kind = "server_error" if code in SERVER_ERRORS else "invalid_request_error"
        error = {"type": kind, "code": code, "message": message, "param": param, "event_id": event_id}
        return self._event("error", error=error)
