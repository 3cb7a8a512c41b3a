"""Deepgram Flux (``/v2/listen``): the dialect's turns from native events, then a real daemon with
tiny.en driven by the official Deepgram SDK (``listen.v2``), LiveKit's ``deepgram.STTv2`` and a
plain websockets client sending what a broken client sends."""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import importlib
import json
import threading
import time
import warnings
from typing import Any

import numpy as np
import pytest
from conftest import LJ
from hypothesis import example, given, settings
from hypothesis import strategies as st
from live_server import LiveServer, raw_session, wait_until
from websockets.exceptions import ConnectionClosed
from websockets.sync.client import connect as sync_connect

from benchmarks.scoring import word_error_rate
from streamwhisper.audio.convert import float32_to_pcm_s16le
from streamwhisper.audio.files import load_audio
from streamwhisper.config import Config
from streamwhisper.errors import ProtocolError
from streamwhisper.events import Final, Partial, SpeechEnded, SpeechStarted, Word
from streamwhisper.runtime import wire
from streamwhisper.runtime.dialects import SessionInfo
from streamwhisper.runtime.dialects.deepgram_flux import FluxDialect

TOKEN = "flux-local"


def words(*spec: tuple[str, float, float]) -> tuple[Word, ...]:
    return tuple(Word(f" {w}", start, end, 0.9) for w, start, end in spec)


def final(ws: tuple[Word, ...], endpoint: bool = False) -> Final:
    return Final(
        "".join(w.word for w in ws).strip(), ws[0].start if ws else 0.0, ws[-1].end if ws else 0.0, ws, 0, endpoint
    )


def partial(ws: tuple[Word, ...]) -> Partial:
    return Partial("".join(w.word for w in ws).strip(), ws[0].start, ws[-1].end, ws, 0)


def opened(query: dict[str, str]) -> tuple[FluxDialect, SessionInfo, list[dict]]:
    dialect = FluxDialect()
    info = SessionInfo("ab12", "tiny.en", dialect.settings(query), {})
    return dialect, info, [json.loads(str(dialect.ready(info)))]


def sent(texts: Any) -> list[dict]:
    texts = [] if texts is None else [texts] if isinstance(texts, str) else list(texts)
    return [json.loads(t) for t in texts]


def test_a_turn_opens_with_its_first_words_and_ends_with_the_vads_endpoint() -> None:
    dialect, info, out = opened({"model": "flux-general-en", "encoding": "linear16", "sample_rate": "16000"})
    hello, world = words(("Hello", 0.5, 0.8)), words(("world.", 0.8, 1.2))
    for event in (
        SpeechStarted(0.4),
        partial(hello),
        final(hello),
        partial(world),
        SpeechEnded(1.3),
        final(world, endpoint=True),
        SpeechStarted(3.0),  # noise the VAD let through: no words, no turn
        SpeechEnded(3.5),
        final((), endpoint=True),
    ):
        out += sent(dialect.event(event, info))
    assert out[0]["type"] == "Connected" and [m["sequence_id"] for m in out] == list(range(len(out)))
    turns = [(m["event"], m["turn_index"], m["transcript"]) for m in out[1:]]
    assert turns == [
        ("StartOfTurn", 0, "Hello"),
        ("Update", 0, "Hello"),
        ("Update", 0, "Hello world."),
        ("EndOfTurn", 0, "Hello world."),
    ]
    end = out[-1]
    assert end["trigger"] == "model" and end["end_of_turn_confidence"] == 1.0
    assert (end["audio_window_start"], end["audio_window_end"]) == (0.5, 1.2)
    assert [w["word"] for w in end["words"]] == ["Hello", "world."]
    assert dialect.settings({}).endpointing_ms is None  # without eager turns: the server's endpoint


def test_a_turn_whose_words_were_all_withdrawn_ends_when_its_speech_does() -> None:
    dialect, info, out = opened({})
    for event in (SpeechStarted(0.1), partial(words(("Mm", 0.2, 0.5))), SpeechEnded(0.8)):
        out += sent(dialect.event(event, info))
    out += sent(dialect.event(Partial("", 0.8, 0.8, (), 1), info))  # the utterance closed: nothing final
    out += sent(dialect.event(final(words(("Next.", 2.0, 2.4)), endpoint=True), info))
    assert [(m["event"], m["turn_index"], m["transcript"]) for m in out[1:]] == [
        ("StartOfTurn", 0, "Mm"),
        ("EndOfTurn", 0, ""),
        ("StartOfTurn", 1, "Next."),
        ("EndOfTurn", 1, "Next."),
    ]


def test_eager_end_of_turn_at_a_pause_then_resumed_then_ended() -> None:
    dialect, info, out = opened({"eager_eot_threshold": "0.5", "eot_threshold": "0.8"})
    assert info.settings.endpointing_ms == 150  # pause finals at a 150 ms pause (docs/design.md)
    first, second = words(("I", 0.2, 0.4), ("think", 0.4, 0.7)), words(("so.", 1.5, 1.9))
    for event in (
        SpeechStarted(0.1),
        partial(first),
        final(first, endpoint=True),  # a pause final: the speaker is quiet
        partial(second),  # speech resumes in the same utterance
        final(second, endpoint=True),  # another pause final
        SpeechEnded(2.0),  # the VAD's endpoint: every word is final already
        final((), endpoint=True),
    ):
        out += sent(dialect.event(event, info))
    events = [(m["event"], m["transcript"]) for m in out[1:]]
    assert events == [
        ("StartOfTurn", "I think"),
        ("Update", "I think"),
        ("EagerEndOfTurn", "I think"),
        ("TurnResumed", "I think"),
        ("Update", "I think so."),
        ("Update", "I think so."),
        ("EagerEndOfTurn", "I think so."),
        ("EndOfTurn", "I think so."),
    ]
    assert out[3]["end_of_turn_confidence"] == 0.5 and out[-1]["audio_window_end"] == 2.0


def test_an_empty_pause_final_is_an_eager_end_of_turn_with_the_turns_words() -> None:
    """Agreement made every word final before the pause's hypothesis came back: that pause's
    final is empty, and still the eager end of the turn."""
    dialect, info, out = opened({"eager_eot_threshold": "0.5"})
    said = words(("I", 0.2, 0.4), ("think.", 0.4, 0.7))
    for event in (SpeechStarted(0.1), partial(said), final(said), final((), endpoint=True)):
        out += sent(dialect.event(event, info))
    assert [(m["event"], m["transcript"]) for m in out[1:]] == [
        ("StartOfTurn", "I think."),
        ("Update", "I think."),
        ("EagerEndOfTurn", "I think."),
    ]


def test_force_end_turn_ends_the_turn_once_its_words_are_final() -> None:
    dialect, info, out = opened({})
    hi = words(("Hi", 0.2, 0.5))
    out += sent(dialect.event(partial(hi), info))
    assert isinstance(dialect.parse('{"type": "ForceEndTurn"}'), wire.Finalize)
    out += sent(dialect.event(final(hi, endpoint=True), info))  # the forced endpoint's final
    assert [m["event"] for m in out[1:]] == ["StartOfTurn", "EndOfTurn"] and out[-1]["trigger"] == "manual"
    assert [mark() for mark in info.marks] == [None]  # its mark finds the turn ended
    # A ForceEndTurn before any word was shown: the forced final opens the turn and ends it.
    info.marks.clear()
    dialect.parse('{"type": "ForceEndTurn"}')
    out = sent(dialect.event(final(words(("Stop.", 0.7, 0.9)), endpoint=True), info))
    assert [(m["event"], m.get("trigger")) for m in out] == [("StartOfTurn", None), ("EndOfTurn", "manual")]
    assert [mark() for mark in info.marks] == [None]
    # A ForceEndTurn whose forced final holds no word (all were final): the mark ends the turn.
    info.marks.clear()
    out = sent(dialect.event(final(words(("Yes.", 1.0, 1.3))), info))
    dialect.parse('{"type": "ForceEndTurn"}')
    out += sent([mark() for mark in info.marks])
    assert [(m["event"], m["turn_index"], m.get("trigger")) for m in out] == [
        ("StartOfTurn", 2, None),
        ("EndOfTurn", 2, "manual"),
    ]
    # With no turn open, its mark only clears it: the next turn ends by the VAD, not "manual".
    info.marks.clear()
    assert dialect.parse('{"type": "ForceEndTurn"}') == wire.Finalize()
    assert [mark() for mark in info.marks] == [None]
    out = sent(dialect.event(final(words(("Later.", 5.0, 5.4)), endpoint=True), info))
    assert [(m["event"], m.get("trigger")) for m in out] == [("StartOfTurn", None), ("EndOfTurn", "model")]


def test_configure_and_bad_queries() -> None:
    dialect, info, _ = opened({"eager_eot_threshold": "0.4"})
    reply = dialect.parse(
        json.dumps({"type": "Configure", "thresholds": {"eot_threshold": 0.9, "eot_timeout_ms": 3000}})
    )
    assert isinstance(reply, wire.Reply) and reply.error is None
    success = json.loads(reply.texts[0])
    assert success["type"] == "ConfigureSuccess" and success["sequence_id"] == 1
    assert success["thresholds"] == {"eager_eot_threshold": 0.4, "eot_threshold": 0.9, "eot_timeout_ms": 3000}
    for bad in ({"eot_threshold": 2}, {"eager_eot_threshold": None, "eot_timeout_ms": "soon"}, [1]):
        reply = dialect.parse(json.dumps({"type": "Configure", "thresholds": bad}))
        assert isinstance(reply, wire.Reply) and json.loads(reply.texts[0])["type"] == "ConfigureFailure", bad
    # keyterms are echoed: an infinity among them made the reply unsendable (a ValueError from
    # wire.dumps, found by fuzzing); it is not JSON, and keyterms are strings
    with pytest.raises(ProtocolError) as refused:
        dialect.parse(json.dumps({"type": "Configure", "keyterms": [float("inf")]}))
    assert (refused.value.code, refused.value.kind) == (1007, "invalid_json")
    for keyterms in ([1], "fjord", {"a": "b"}, 0, False):
        reply = dialect.parse(
            json.dumps({"type": "Configure", "thresholds": {"eot_threshold": 0.5}, "keyterms": keyterms})
        )
        assert isinstance(reply, wire.Reply) and reply.error == "invalid_configure", keyterms
        assert "keyterms" in json.loads(reply.texts[0])["description"], keyterms
    reply = dialect.parse(json.dumps({"type": "Configure", "keyterms": ["fjord", "Skagerrak"]}))
    assert isinstance(reply, wire.Reply) and json.loads(reply.texts[0])["keyterms"] == ["fjord", "Skagerrak"]
    reply = dialect.parse(json.dumps({"type": "Configure", "keyterms": None}))
    assert isinstance(reply, wire.Reply) and json.loads(reply.texts[0])["keyterms"] == []
    assert dialect.options.eot_threshold == 0.9  # unchanged by the failures
    off = FluxDialect()
    off.settings({})
    reply = off.parse(json.dumps({"type": "Configure", "thresholds": {"eager_eot_threshold": 0.5}}))
    assert isinstance(reply, wire.Reply) and "only when the stream opens" in json.loads(reply.texts[0])["description"]
    assert isinstance(dialect.parse('{"type": "Frobnicate"}'), wire.Unknown)
    assert json.loads(dialect.error("unknown_message", "x"))["type"] == "Warning"
    for query in (
        {"eager_eot_threshold": "0.95"},
        {"eot_threshold": "nan"},
        {"eager_eot_threshold": "0.8", "eot_threshold": "0.6"},
        {"eot_timeout_ms": "100"},
        {"sample_rate": "12"},
    ):
        with pytest.raises(ProtocolError) as refused:
            FluxDialect().settings(query)
        assert refused.value.code == 1007, query
    with pytest.raises(ProtocolError) as refused:
        FluxDialect().settings({"encoding": "opus"})
    assert refused.value.code == 1003
    assert FluxDialect().settings({"model": "flux-general-multi"}).language is None
    assert FluxDialect().settings({"model": "flux-general-multi", "language_hint": "de"}).language == "de"


JSON = st.recursive(
    st.none() | st.booleans() | st.floats(allow_nan=True) | st.integers() | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=12), inner, max_size=3),
    max_leaves=8,
)
FIELDS = st.sampled_from(["type", "thresholds", "eot_threshold", "eager_eot_threshold", "eot_timeout_ms", "keyterms"])
KINDS = st.sampled_from(["Configure", "ForceEndTurn", "CloseStream", "KeepAlive", "Finalize", "", 3, None])


# no deadline: a busy CI host once took over 200 ms for one example (1 run in about 17)
@settings(deadline=None)
@given(st.dictionaries(FIELDS, JSON | KINDS, max_size=4), st.booleans())
@example({"keyterms": [float("inf")], "thresholds": {}}, False)
def test_any_control_message_is_a_message_or_a_protocol_error(data: dict, eager: bool) -> None:
    """Whatever JSON a client sends, the dialect answers with a typed message (a Configure's
    success or failure) or refuses it with ProtocolError: never another exception."""
    if isinstance(data.get("thresholds"), dict):
        data["type"] = "Configure"
    dialect, info, _ = opened({"eager_eot_threshold": "0.4"} if eager else {})
    try:
        message = dialect.parse(json.dumps(data))
    except ProtocolError as refused:
        assert refused.code == 1007
        return
    if isinstance(message, wire.Reply):
        answer = json.loads(message.texts[0])
        assert answer["type"] in ("ConfigureSuccess", "ConfigureFailure") and answer["sequence_id"] == 1
        assert (message.error is None) == (answer["type"] == "ConfigureSuccess")
    else:
        assert isinstance(message, wire.Finalize | wire.Eof | wire.KeepAlive | wire.Unknown), message


# -- a real daemon --------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def flux_server(serving_model):  # type: ignore[no-untyped-def]
    with LiveServer(serving_model, auth_token=TOKEN) as server:
        yield server


@pytest.fixture(scope="module")
def lj(clips) -> tuple[np.ndarray, list[str]]:  # type: ignore[no-untyped-def]
    """Four LJ Speech sentences, each followed by 0.8 s of silence, and their references."""
    gap = np.zeros(int(0.8 * 16000), np.float32)
    audio = np.concatenate([part for name in LJ for part in (load_audio(clips[name].wav), gap)])
    return audio, [clips[name].reference for name in LJ]


def _sdk() -> tuple[Any, Any]:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        pytest.importorskip("deepgram")
        importlib.import_module("deepgram.listen.v2.client")  # imported lazily by the SDK; warns
        from deepgram import DeepgramClient
        from deepgram.environment import DeepgramClientEnvironment
    return DeepgramClient, DeepgramClientEnvironment


@pytest.mark.slow
def test_deepgram_sdk_streams_turns(flux_server, lj) -> None:  # type: ignore[no-untyped-def]
    client_type, environment = _sdk()
    server = flux_server
    env = environment(base=server.http, production=server.url, agent=server.url, agent_rest=server.http)
    client = client_type(api_key=TOKEN, environment=env)
    audio, references = lj
    data = float32_to_pcm_s16le(np.concatenate([audio, np.zeros(16000, np.float32)]))
    messages: list[Any] = []
    with client.listen.v2.connect(model="flux-general-en", encoding="linear16", sample_rate=16000) as conn:
        reader = threading.Thread(target=lambda: messages.extend(conn), daemon=True)
        reader.start()
        step, began = 3200, time.monotonic()
        for i in range(0, len(data), step):  # 100 ms messages at twice real time, a live source's pace
            conn.send_media(data[i : i + step])
            time.sleep(max(0.0, began + (i + step) / 32000 / 2 - time.monotonic()))
        conn.send_close_stream()
        reader.join(timeout=120)
    assert not reader.is_alive(), "the server did not close the stream"
    assert type(messages[0]).__name__ == "ListenV2Connected"
    assert [m.sequence_id for m in messages] == list(range(len(messages)))
    turns = [m for m in messages if type(m).__name__ == "ListenV2TurnInfo"]
    ends = [m for m in turns if m.event == "EndOfTurn"]
    assert [m.turn_index for m in ends] == list(range(len(ends))) and len(ends) >= len(LJ)  # a turn per sentence
    assert all(m.trigger == "model" for m in ends)
    assert sum(m.event == "StartOfTurn" for m in turns) == len(ends)
    transcript = " ".join(m.transcript for m in ends)
    assert word_error_rate([" ".join(references)], [transcript]) <= 0.12, transcript
    assert all(w.start is not None and w.end is not None and w.end >= w.start for m in ends for w in m.words)


@pytest.mark.slow
def test_deepgram_sdk_force_end_turn(flux_server, jfk_audio) -> None:  # type: ignore[no-untyped-def]
    """A voice agent's own VAD decides the user stopped: ForceEndTurn ends the turn at once
    (trigger manual), before the server's endpoint would have, with the words heard so far."""
    client_type, environment = _sdk()
    server = flux_server
    env = environment(base=server.http, production=server.url, agent=server.url, agent_rest=server.http)
    client = client_type(api_key=TOKEN, environment=env)
    head = float32_to_pcm_s16le(np.concatenate([jfk_audio[: int(2.4 * 16000)], np.zeros(3200, np.float32)]))
    messages: list[Any] = []
    with client.listen.v2.connect(model="flux-general-en", encoding="linear16", sample_rate=16000) as conn:
        reader = threading.Thread(target=lambda: messages.extend(conn), daemon=True)
        reader.start()
        for i in range(0, len(head), 3200):
            conn.send_media(head[i : i + 3200])
            time.sleep(0.05)
        conn.send_force_end_turn()
        deadline = time.monotonic() + 60
        while not any(getattr(m, "event", None) == "EndOfTurn" for m in messages) and time.monotonic() < deadline:
            conn.send_media(bytes(3200))  # the client goes on streaming (silence)
            time.sleep(0.1)
        conn.send_close_stream()
        reader.join(timeout=60)
    ends = [m for m in messages if getattr(m, "event", None) == "EndOfTurn"]
    assert len(ends) == 1 and ends[0].trigger == "manual" and ends[0].turn_index == 0, messages
    assert "fellow americans" in ends[0].transcript.lower(), ends[0].transcript


def _recognised(server: LiveServer, samples: int) -> bool:
    """Whether the server's session has been fed ``samples`` samples and has no request out:
    every event of the audio sent so far is on its way to the client."""

    def caught_up(pumps) -> bool:  # type: ignore[no-untyped-def]
        return len(pumps) == 1 and pumps[0].streamer.audio.end >= samples and pumps[0].inflight is None

    return bool(server.inspect_pumps(caught_up))


@pytest.mark.slow
def test_livekit_flux_plugin_with_eager_turns(serving_model, clips) -> None:  # type: ignore[no-untyped-def]
    """LiveKit's ``deepgram.STTv2`` with ``eager_eot_threshold``, on a server whose endpoint is
    2 s: at each 3 s pause the words are final (a preflight transcript: the agent may start its
    answer) well before the turn ends (a final transcript and an end of speech per sentence).

    The source is paced in real time, except that 0.6 s into each pause it waits until the
    server has recognised all it was sent: "before the turn ends" is then a fact of the audio
    (the server has heard 0.6 s of the 2 s), not a race between this host's speed and the clock."""
    aiohttp = pytest.importorskip("aiohttp")
    rtc = pytest.importorskip("livekit.rtc")
    plugin = pytest.importorskip("livekit.plugins.deepgram")
    agents_stt = pytest.importorskip("livekit.agents.stt")
    names = LJ[:2]
    gap, chunk = np.zeros(3 * 16000, np.float32), 1600  # 100 ms frames: whole chunks of the plugin's 50 ms
    before_wait = 16000 * 6 // 10  # of each pause
    parts: list[np.ndarray | None] = []
    for name in names:
        said = load_audio(clips[name].wav)
        lead = before_wait + -len(said) % chunk  # the audio sent before the wait fills whole frames
        parts.extend((said, gap[:lead], None, gap[before_wait:]))
    references = [clips[name].reference for name in names]
    base = Config().streaming
    streaming = dataclasses.replace(base, vad=dataclasses.replace(base.vad, endpoint_ms=2000))

    async def stream() -> list[Any]:
        events: list[Any] = []
        async with aiohttp.ClientSession() as http:
            stt = plugin.STTv2(api_key=TOKEN, base_url=url + "/v2/listen", http_session=http, eager_eot_threshold=0.4)
            speech = stt.stream()

            async def read() -> None:
                async for event in speech:
                    events.append(event)

            reader = asyncio.create_task(read())
            sent = 0
            for audio in parts:
                if audio is None:  # in the pause: the source waits until the server caught up
                    await asyncio.to_thread(wait_until, functools.partial(_recognised, server, sent), 120, "recognised")
                    continue
                for i in range(0, len(audio), chunk):
                    pcm = np.frombuffer(float32_to_pcm_s16le(audio[i : i + chunk]), np.int16)
                    speech.push_frame(rtc.AudioFrame(pcm.tobytes(), 16000, 1, len(pcm)))
                    sent += len(pcm)
                    await asyncio.sleep(chunk / 16000)  # the source's pace (real time), not a wait for a result
            speech.end_input()
            await asyncio.wait_for(reader, 120)
            await stt.aclose()
        return events

    with LiveServer(serving_model, streaming=streaming, auth_token=TOKEN) as server:
        url = server.url
        events = asyncio.run(stream())
    kinds = agents_stt.SpeechEventType
    shown = [e for e in events if e.type not in (kinds.INTERIM_TRANSCRIPT, kinds.RECOGNITION_USAGE)]
    turns: list[list[Any]] = [[]]
    for event in shown:
        turns[-1].append(event)
        if event.type == kinds.END_OF_SPEECH:
            turns.append([])
    assert turns.pop() == [] and len(turns) == len(names), [e.type for e in shown]
    for turn in turns:  # a breath inside a sentence may be an eager end of its own (the turn resumed)
        kinds_seen = [e.type for e in turn]
        assert kinds_seen[0] == kinds.START_OF_SPEECH and kinds_seen[-2:] == [
            kinds.FINAL_TRANSCRIPT,
            kinds.END_OF_SPEECH,
        ]
        assert set(kinds_seen[1:-2]) == {kinds.PREFLIGHT_TRANSCRIPT}, kinds_seen
        # the speaker stayed quiet after the last eager end: the turn's text is its preflight's
        assert turn[-3].alternatives[0].text == turn[-2].alternatives[0].text
    finals = [turn[-2].alternatives[0].text for turn in turns]
    assert word_error_rate([" ".join(references)], [" ".join(finals)]) <= 0.12, finals


def _raw(url: str, query: str, send: list[str | bytes]) -> tuple[list[dict], int | None]:
    return raw_session(f"{url}/v2/listen?{query}", TOKEN, send)


@pytest.mark.slow
def test_flux_malformed_input(flux_server, jfk_audio) -> None:  # type: ignore[no-untyped-def]
    url = flux_server.url
    messages, code = _raw(url, "encoding=opus", [])
    assert code == 1003 and messages[0]["type"] == "Error" and messages[0]["code"] == "UNSUPPORTED_ENCODING"
    messages, code = _raw(url, "eot_threshold=2", [])
    assert code == 1007 and messages[0]["type"] == "Error" and "eot_threshold" in messages[0]["description"]
    # Bad JSON mid-stream: an Error, the turn of the audio heard (ended), the close.
    speech = float32_to_pcm_s16le(jfk_audio[: 16000 * 3])
    messages, code = _raw(url, "encoding=linear16&sample_rate=16000", [speech, "{not json"])
    assert code == 1007 and messages[0]["type"] == "Connected"
    assert [m["type"] for m in messages].count("Error") == 1 and messages[-1]["event"] == "EndOfTurn"
    assert "fellow" in messages[-1]["transcript"].lower(), messages
    # A Configure refused, an unknown type warned of: the stream goes on to its CloseStream.
    configure = json.dumps({"type": "Configure", "thresholds": {"eot_threshold": "high"}})
    messages, code = _raw(url, "", [configure, '{"type": "Frobnicate"}', '{"type": "CloseStream"}'])
    assert code == 1000 and [m["type"] for m in messages] == ["Connected", "ConfigureFailure", "Warning"]
    with sync_connect(url + "/v2/listen") as ws:  # no token
        error = json.loads(ws.recv())
        with pytest.raises(ConnectionClosed):
            ws.recv()
    assert error["type"] == "Error" and error["code"] == "UNAUTHORIZED" and ws.close_code == 1008
