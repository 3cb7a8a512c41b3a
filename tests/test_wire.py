"""The native protocol without a socket: every message, both directions, through JSON and back.

A server message encoded by the server half and decoded by the client half equals the original
up to what the protocol loses on purpose (times to milliseconds, probabilities to 3 decimals,
Whisper's leading space of a word); a client message survives exactly. Malformed input is a
ProtocolError with the close code and error kind the server would answer with.
"""

from __future__ import annotations

import dataclasses
import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from streamwhisper.audio.convert import MAX_SAMPLE_RATE, MIN_SAMPLE_RATE, PCM_ENCODINGS
from streamwhisper.errors import ProtocolError
from streamwhisper.events import Error, Final, Partial, SpeechEnded, SpeechStarted, Word
from streamwhisper.model.tokenizer import LANGUAGES
from streamwhisper.runtime.dialects.native import (
    SEND_ALL,
    Closed,
    NativeDialect,
    Ready,
    ServerMessage,
    Status,
    decode_client_message,
    decode_server_message,
    encode_client_message,
    encode_server_message,
)
from streamwhisper.runtime.session import SessionInfo
from streamwhisper.runtime.wire import (
    MAX_CHANNELS,
    MAX_LABEL,
    ClientMessage,
    ConfigMessage,
    Eof,
    Finalize,
    KeepAlive,
    SessionSettings,
    Unknown,
)

# ---------------------------------------------------------------- strategies

unicode = st.characters(codec="utf-8")  # any character a WebSocket text frame can carry
texts = st.text(unicode, max_size=30)
seconds = st.floats(0, 100_000, allow_nan=False)
words = st.builds(Word, word=texts, start=seconds, end=seconds, probability=st.floats(0, 1))
word_tuples = st.lists(words, max_size=5).map(tuple)
seqs = st.integers(0, 2**40)

session_settings = st.builds(
    SessionSettings,
    sample_rate=st.integers(MIN_SAMPLE_RATE, MAX_SAMPLE_RATE),
    encoding=st.sampled_from(sorted(PCM_ENCODINGS)),
    channels=st.integers(1, MAX_CHANNELS),
    language=st.none() | st.sampled_from(sorted(LANGUAGES)),
    task=st.sampled_from(["transcribe", "translate"]),
    interim_results=st.booleans(),
    word_timestamps=st.booleans(),
    endpointing_ms=st.none() | st.integers(100, 5000),
    model=st.none() | st.text(unicode, min_size=1, max_size=MAX_LABEL),
    label=st.text(unicode, max_size=MAX_LABEL),
)
limits = st.dictionaries(st.sampled_from(["max_message_bytes", "max_session_s", "idle_timeout_s"]), seconds | seqs)

server_messages: st.SearchStrategy[ServerMessage] = st.one_of(
    st.builds(Partial, text=texts, start=seconds, end=seconds, words=word_tuples, seq=seqs),
    st.builds(Final, text=texts, start=seconds, end=seconds, words=word_tuples, seq=seqs, endpoint=st.booleans()),
    st.builds(SpeechStarted, seconds),
    st.builds(SpeechEnded, seconds),
    st.builds(Error, code=texts, message=texts),
    st.builds(Ready, session_id=texts, model=texts, config=session_settings, limits=limits, protocol=texts),
    st.builds(Status, lag=seconds, step=seconds),
    st.builds(Closed, reason=texts, audio_seconds=seconds, words=seqs, finals=seqs),
)

json_scalars = st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False) | texts
setting_names = st.sampled_from([f.name for f in dataclasses.fields(SessionSettings)])
client_messages: st.SearchStrategy[ClientMessage] = st.one_of(
    st.builds(ConfigMessage, st.dictionaries(setting_names, json_scalars)),
    st.just(Finalize()),
    st.just(KeepAlive()),
    st.just(Eof()),
    st.builds(
        Unknown, st.text(min_size=1, max_size=40).filter(lambda t: t not in ("config", "finalize", "keepalive", "eof"))
    ),
)


def on_the_wire(message: ServerMessage, sent: SessionSettings = SEND_ALL) -> ServerMessage:
    """``message`` as the protocol carries it: rounded times, words stripped (or left out)."""

    def word(w: Word) -> Word:
        return Word(w.word.strip(), round(w.start, 3), round(w.end, 3), round(w.probability, 3))

    match message:
        case Partial() | Final():
            kept = tuple(map(word, message.words)) if sent.word_timestamps else ()
            return dataclasses.replace(message, start=round(message.start, 3), end=round(message.end, 3), words=kept)
        case SpeechStarted() | SpeechEnded():
            return dataclasses.replace(message, time=round(message.time, 3))
        case Status():
            return Status(round(message.lag, 3), round(message.step, 3))
        case Closed():
            return dataclasses.replace(message, audio_seconds=round(message.audio_seconds, 3))
    return message


# ---------------------------------------------------------------- roundtrips


@settings(deadline=None)  # timing is not what this checks; a busy CI host can be slow
@given(server_messages, session_settings)
def test_every_server_message_survives_the_wire(message: ServerMessage, sent: SessionSettings) -> None:
    text = encode_server_message(message, sent)
    if isinstance(message, Partial) and not sent.interim_results:
        assert text is None, "interim_results=false: no partials"
        return
    assert text is not None
    assert decode_server_message(text) == on_the_wire(message, sent)


@given(client_messages)
def test_every_client_message_survives_the_wire(message: ClientMessage) -> None:
    assert decode_client_message(encode_client_message(message)) == message


def test_the_wire_format_is_the_documented_one() -> None:
    """Exact text (docs/protocol.md), so that a client written against the docs keeps working."""
    ask = (Word(" ask", 2.2600004, 2.6, 0.9149), Word(" not", 2.6, 2.9, 0.5))
    partial = Partial("ask not", 2.2600004, 2.9, ask, 4)
    assert encode_server_message(partial) == (
        '{"type":"partial","seq":4,"text":"ask not","start":2.26,"end":2.9,"words":['
        '{"word":"ask","start":2.26,"end":2.6,"probability":0.915},'
        '{"word":"not","start":2.6,"end":2.9,"probability":0.5}]}'
    )
    final = Final("日本語", 1.0, 2.0, (Word("日本語", 1.0, 2.0, 1.0),), 5, endpoint=True)
    assert encode_server_message(final, SessionSettings(word_timestamps=False)) == (
        '{"type":"final","seq":5,"text":"日本語","start":1.0,"end":2.0,"endpoint":true}'
    )
    assert encode_server_message(SpeechStarted(1.2345)) == '{"type":"speech_started","time":1.234}'
    assert encode_server_message(SpeechEnded(4.56)) == '{"type":"speech_ended","time":4.56}'
    assert encode_server_message(Status(2.1, 1.5)) == '{"type":"status","lag":2.1,"step":1.5}'
    assert (
        encode_server_message(Error("invalid_audio", "odd"))
        == '{"type":"error","code":"invalid_audio","message":"odd"}'
    )
    assert encode_server_message(Closed("eof", 11.0, 22, 4)) == (
        '{"type":"closed","reason":"eof","audio_seconds":11.0,"words":22,"finals":4}'
    )
    ready = Ready("9f1c", "tiny.en", SessionSettings(label="Ann"), {"max_message_bytes": 1048576})
    assert json.loads(encode_server_message(ready) or "") == {
        "type": "ready",
        "protocol": "streamwhisper.v1",
        "session_id": "9f1c",
        "model": "tiny.en",
        "config": {
            "sample_rate": 16000,
            "encoding": "pcm_s16le",
            "channels": 1,
            "language": "auto",
            "task": "transcribe",
            "interim_results": True,
            "word_timestamps": True,
            "endpointing_ms": None,
            "eager_finals": False,
            "model": None,
            "label": "Ann",
        },
        "limits": {"max_message_bytes": 1048576},
    }
    assert encode_client_message(ConfigMessage({"sample_rate": 48000})) == '{"type":"config","sample_rate":48000}'
    assert [encode_client_message(m) for m in (Finalize(), KeepAlive(), Eof())] == [
        '{"type":"finalize"}',
        '{"type":"keepalive"}',
        '{"type":"eof"}',
    ]


def test_the_dialect_writes_what_the_client_reads() -> None:
    session = SessionInfo("s1", "tiny.en", SessionSettings(interim_results=False), {"idle_timeout_s": 60.0}, 3.5, 7, 2)
    dialect = NativeDialect()
    assert decode_server_message(dialect.ready(session) or "") == Ready(
        "s1", "tiny.en", session.settings, session.limits
    )
    assert dialect.event(Partial("a", 0.0, 1.0, (), 0), session) is None
    assert decode_server_message(dialect.status(-0.2, 1.5) or "") == Status(0.0, 1.5), "no negative lag"
    assert decode_server_message(dialect.closed(session, "eof") or "") == Closed("eof", 3.5, 7, 2)
    assert decode_server_message(dialect.error("idle_timeout", "60 s") or "") == Error("idle_timeout", "60 s")
    assert dialect.parse('{"type": "config", "config": {"label": "x"}}') == ConfigMessage({"label": "x"})


# ---------------------------------------------------------------- newer peers


def test_a_newer_servers_messages_and_fields_are_not_errors() -> None:
    assert decode_server_message('{"type": "translation", "text": "hallo"}') == Unknown("translation")
    newer = '{"type": "speech_started", "time": 1.5, "channel": 2}'
    assert decode_server_message(newer) == SpeechStarted(1.5)
    ready = json.loads(encode_server_message(Ready("s", "m", SessionSettings(), {})) or "")
    ready["config"]["diarize"] = True
    assert decode_server_message(json.dumps(ready)) == Ready("s", "m", SessionSettings(), {})


def test_a_newer_clients_message_is_unknown_to_the_server() -> None:
    assert decode_client_message('{"type": "pause"}') == Unknown("pause")
    assert decode_client_message(json.dumps({"type": "x" * 100})) == Unknown("x" * 40), "echoed in an error: cut"


# ---------------------------------------------------------------- malformed input

FINAL = {"type": "final", "seq": 1, "text": "hi", "start": 0.5, "end": 0.9, "endpoint": False, "words": []}
WORD = {"word": "hi", "start": 0.5, "end": 0.9, "probability": 0.9}
READY = json.loads(encode_server_message(Ready("s", "m", SessionSettings(), {})) or "")


def without(data: dict[str, Any], name: str) -> dict[str, Any]:
    return {k: v for k, v in data.items() if k != name}


@pytest.mark.parametrize(
    ("text", "kind"),
    [
        ('{"type": "final", "seq": 1', "invalid_json"),
        ("NaN-", "invalid_json"),
        ("[1, 2]", "invalid_message"),
        ('{"seq": 1}', "invalid_message"),
        ('{"type": 7}', "invalid_message"),
        (json.dumps(FINAL | {"seq": "1"}), "invalid_message"),
        (json.dumps(FINAL | {"seq": True}), "invalid_message"),
        (json.dumps(FINAL | {"seq": 1.5}), "invalid_message"),
        (json.dumps(FINAL | {"start": "0.5"}), "invalid_message"),
        (json.dumps(FINAL | {"text": None}), "invalid_message"),
        (json.dumps(FINAL | {"endpoint": 1}), "invalid_message"),
        (json.dumps(without(FINAL, "endpoint")), "invalid_message"),
        (json.dumps(without(FINAL, "seq")), "invalid_message"),
        (json.dumps(FINAL | {"words": {"word": "hi"}}), "invalid_message"),
        (json.dumps(FINAL | {"words": ["hi"]}), "invalid_message"),
        (json.dumps(FINAL | {"words": [without(WORD, "probability")]}), "invalid_message"),
        (json.dumps(FINAL | {"words": [WORD | {"end": [1]}]}), "invalid_message"),
        ('{"type": "speech_ended"}', "invalid_message"),
        ('{"type": "status", "lag": 1, "step": false}', "invalid_message"),
        ('{"type": "error", "code": "x"}', "invalid_message"),
        ('{"type": "closed", "reason": "eof", "audio_seconds": 1.0, "words": 1.5, "finals": 1}', "invalid_message"),
        (json.dumps(READY | {"config": []}), "invalid_message"),
        (json.dumps(READY | {"config": READY["config"] | {"language": "klingon"}}), "invalid_message"),
        (json.dumps(READY | {"config": READY["config"] | {"sample_rate": 1}}), "invalid_message"),
        (json.dumps(without(READY, "limits")), "invalid_message"),
    ],
)
def test_a_malformed_server_message_is_a_protocol_error(text: str, kind: str) -> None:
    with pytest.raises(ProtocolError) as raised:
        decode_server_message(text)
    assert (raised.value.code, raised.value.kind) == (1007, kind)


@pytest.mark.parametrize(
    ("text", "kind"),
    [
        ('{"type": "eof"', "invalid_json"),
        ("[" * 100_000, "invalid_json"),
        # JSON has no NaN or infinities (Python's json reads them, and 1e400 as infinity)
        ('{"type": "config", "sample_rate": NaN}', "invalid_json"),
        ('{"type": "config", "label": [-Infinity]}', "invalid_json"),
        ('{"type": "config", "endpointing_ms": 1e400}', "invalid_json"),
        ('"eof"', "invalid_message"),
        ('{"eof": 1}', "invalid_message"),
        ('{"type": null}', "invalid_message"),
        ('{"type": "finalize", "now": true}', "invalid_message"),
    ],
)
def test_a_malformed_client_message_is_a_protocol_error(text: str, kind: str) -> None:
    with pytest.raises(ProtocolError) as raised:
        decode_client_message(text)
    assert (raised.value.code, raised.value.kind) == (1007, kind)
