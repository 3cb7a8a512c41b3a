"""OpenAI's Realtime transcription WebSocket (``/v1/realtime?intent=transcription``).

End to end (slow): the real ``openai`` SDK, GA ``client.realtime.connect`` and the beta
``client.beta.realtime.connect``, against a real daemon on port 0 with tiny.en and real speech
(jfk as 24 kHz PCM16, and as G.711 mu-law at 8 kHz), with manual commits and with server VAD.
Each transcript is scored against the clip's; deltas only append, and joined they are the
completed text.

The protocol's rules over real sockets with the fake recogniser (fast): malformed events get
their own error codes and the session goes on; a message over the limit closes the session
(1009) after the transcript of what it had heard; clear, turns, session updates, refusals.
"""

from __future__ import annotations

import asyncio
import base64
import json
import re
from collections import defaultdict
from typing import Any

import numpy as np
import pytest
from live_server import LiveServer
from runtime_fakes import (
    SR,
    TimedRecognizer,
    on_clock_loop,
    read_to_close,
    recv_json,
    running_daemon,
    spoken_in_speech,
)
from websockets.asyncio.client import ClientConnection, connect

from benchmarks.scoring import word_error_rate
from streamwhisper.audio.convert import float32_to_pcm, resample
from streamwhisper.runtime.dialects import openai_realtime
from streamwhisper.runtime.server import Daemon

JFK = "And so, my fellow Americans, ask not what your country can do for you, ask what you can do for your country."
TOKEN = "sk-local"
CHUNK = 9600  # bytes of 24 kHz PCM16 per append: 200 ms
DELTA = "conversation.item.input_audio_transcription.delta"
COMPLETED = "conversation.item.input_audio_transcription.completed"
FAILED = "conversation.item.input_audio_transcription.failed"
COMMITTED = "input_audio_buffer.committed"
COMMIT = json.dumps({"type": "input_audio_buffer.commit"})
COMMIT_EMPTY = "input_audio_buffer_commit_empty"
MANUAL = {"type": "transcription", "audio": {"input": {"turn_detection": None}}}
FAST = pytest.mark.timeout(30)  # a broken session hangs its test instead of failing it


def pcm24(audio: np.ndarray) -> bytes:
    """16 kHz float samples as OpenAI's ``audio/pcm``: 24 kHz PCM16."""
    return float32_to_pcm(resample(audio, SR, 24_000), "pcm_s16le")


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def update(session: dict[str, Any], **event: Any) -> str:
    return json.dumps({"type": "session.update", "session": {"type": "transcription", **session}, **event})


def audio_input(**fields: Any) -> str:
    """A session.update of ``session.audio.input``'s ``fields``."""
    return update({"audio": {"input": fields}})


def appended(audio: str | bytes) -> str:
    return json.dumps({"type": "input_audio_buffer.append", "audio": audio if isinstance(audio, str) else b64(audio)})


def numbers(text: str) -> list[int]:
    """The fake speaker's word numbers in a transcript ("w3 w4" -> [3, 4])."""
    return [int(n) for n in re.findall(r"w(\d+)", text)]


def check_items(events: list[dict[str, Any]]) -> dict[str, str]:
    """Per item: its deltas come after it was named (committed or speech_started) and before its
    completed, and joined they are its completed transcript. Returns item id -> transcript."""
    named: set[str] = set()
    deltas: dict[str, list[str]] = defaultdict(list)
    completed: dict[str, str] = {}
    for e in events:
        if e["type"] in (COMMITTED, "input_audio_buffer.speech_started"):
            named.add(e["item_id"])
        elif e["type"] == DELTA:
            assert e["item_id"] in named and e["item_id"] not in completed, e
            deltas[e["item_id"]].append(e["delta"])
        elif e["type"] == COMPLETED:
            assert e["item_id"] in named and e["item_id"] not in completed, e
            completed[e["item_id"]] = e["transcript"]
            assert "".join(deltas[e["item_id"]]) == e["transcript"], "the deltas joined are the transcript"
    return completed


def realtime_url(daemon: Daemon, query: str = "intent=transcription") -> str:
    return f"ws://127.0.0.1:{daemon.port}/v1/realtime?{query}"


async def append(ws: ClientConnection, pcm: bytes) -> None:
    for i in range(0, len(pcm), CHUNK):
        await ws.send(appended(pcm[i : i + CHUNK]))


async def until(ws: ClientConnection, kind: str, count: int = 1) -> list[dict[str, Any]]:
    """Events up to and including the ``count``-th of type ``kind``."""
    out: list[dict[str, Any]] = []
    while sum(m["type"] == kind for m in out) < count:
        out.append(await recv_json(ws))
    return out


async def manual_session(ws: ClientConnection) -> None:
    assert (await recv_json(ws))["type"] == "session.created"
    await ws.send(update(MANUAL))
    assert (await recv_json(ws))["session"]["audio"]["input"]["turn_detection"] is None


# -- the protocol's rules, with the fake recogniser -------------------------------------------------


@FAST
@on_clock_loop
async def test_malformed_events_get_their_own_error_codes_and_the_session_goes_on(jfk_audio: np.ndarray) -> None:
    at = "session.audio.input."
    cases = [  # (client text, error code, param, event_id the error names)
        ("{not json", "invalid_json", None, None),
        ("[1, 2]", "invalid_json", None, None),
        (json.dumps({"event_id": "e1"}), "invalid_event", "type", "e1"),
        (json.dumps({"type": "response.create", "event_id": "e2"}), "unknown_event", "type", "e2"),
        (json.dumps({"type": "input_audio_buffer.append", "audio": 5}), "invalid_event", "audio", None),
        (appended("not base64!"), "invalid_base64", "audio", None),
        (appended(b"\x00" * 4801), "invalid_audio", "audio", None),  # not whole 16-bit samples
        (json.dumps({"type": "input_audio_buffer.commit", "event_id": "e3"}), COMMIT_EMPTY, None, "e3"),
        (audio_input(format={"type": "audio/opus"}), "invalid_value", at + "format.type", None),
        (audio_input(format={"type": ["audio/pcm"]}), "invalid_value", at + "format.type", None),
        # settings are echoed, what is not JSON cannot be (fuzzing found both of these)
        (audio_input(turn_detection={"type": "server_vad", "eagerness": float("inf")}), "invalid_json", None, None),
        (json.dumps({"type": "transcription_session.update", "session": {"input_audio_format": {}}}),
         "invalid_value", "session.input_audio_format", None),
        (audio_input(format={"type": "audio/pcm", "rate": 16000}), "invalid_value", at + "format.rate", None),
        (audio_input(transcription={"model": "gpt-9"}), "model_not_found", at + "transcription.model", None),
        (audio_input(transcription={"language": "xx"}), "invalid_value", at + "transcription.language", None),
        (audio_input(turn_detection={"type": "ptt"}), "invalid_value", at + "turn_detection.type", None),
        (audio_input(turn_detection={"threshold": 2}), "invalid_value", at + "turn_detection.threshold", None),
        (update({"type": "realtime"}), "invalid_value", "session.type", None),
        (json.dumps({"type": "session.update", "session": []}), "invalid_value", "session", None),
    ]  # fmt: skip
    async with running_daemon(TimedRecognizer()) as daemon, connect(realtime_url(daemon)) as ws:
        await manual_session(ws)
        for text, code, param, event_id in cases:
            await ws.send(text)
            error = await recv_json(ws)
            assert error["type"] == "error" and error["event_id"].startswith("event_"), (text, error)
            details = error["error"]
            assert (details["code"], details["param"], details["event_id"]) == (code, param, event_id), (text, error)
            assert details["type"] == "invalid_request_error" and details["message"]
        # the session serves on: a turn of speech is transcribed (the refused audio was not taken)
        await append(ws, pcm24(jfk_audio[: 3 * SR]))
        await ws.send(COMMIT)
        events = await until(ws, COMPLETED)
        metrics = daemon.metrics.render().decode()
    (transcript,) = check_items(events).values()
    assert numbers(transcript) == list(range(len(numbers(transcript)))) and len(numbers(transcript)) >= 5
    assert 'streamwhisper_errors_total{kind="invalid_base64"} 1.0' in metrics


@FAST
@on_clock_loop
async def test_a_message_over_the_limit_closes_1009_after_the_transcript_of_what_was_heard(
    jfk_audio: np.ndarray,
) -> None:
    async with running_daemon(TimedRecognizer(), max_message_bytes=65_536) as daemon:
        async with connect(realtime_url(daemon)) as ws:
            await manual_session(ws)
            await append(ws, pcm24(jfk_audio[: 4 * SR]))  # heard, never committed
            await ws.send(appended("A" * 70_000))
            messages = await read_to_close(ws)
            assert ws.close_code == 1009
        async with connect(realtime_url(daemon)) as other:  # the server serves on
            assert (await recv_json(other))["type"] == "session.created"
    error, committed, *_, completed = messages
    assert error["type"] == "error" and error["error"]["code"] == "message_too_big"
    assert committed["type"] == COMMITTED and completed["type"] == COMPLETED
    transcript = check_items(messages)[committed["item_id"]]
    assert numbers(transcript) == list(range(len(numbers(transcript)))) and len(numbers(transcript)) >= 6
    assert completed["usage"] == {"type": "duration", "seconds": 4.0}


@FAST
@on_clock_loop
async def test_clear_discards_the_audio_not_yet_committed(jfk_audio: np.ndarray) -> None:
    async with running_daemon(TimedRecognizer()) as daemon, connect(realtime_url(daemon)) as ws:
        await manual_session(ws)
        await append(ws, pcm24(jfk_audio[: 3 * SR]))
        await ws.send(json.dumps({"type": "input_audio_buffer.clear"}))
        cleared = await until(ws, "input_audio_buffer.cleared")
        await ws.send(COMMIT)  # nothing is left to commit
        assert (await recv_json(ws))["error"]["code"] == "input_audio_buffer_commit_empty"
        await append(ws, pcm24(jfk_audio[3 * SR : 7 * SR]))
        await ws.send(COMMIT)
        events = await until(ws, COMPLETED)
    assert not any(m["type"] in (DELTA, COMPLETED) for m in cleared)
    (transcript,) = check_items(events).values()
    words = numbers(transcript)
    assert words == sorted(set(words)) and min(words) >= 5 and max(words) >= 12, transcript
    assert events[-1]["usage"]["seconds"] == 4.0


@FAST
@on_clock_loop
async def test_each_commit_is_an_item_whose_words_are_those_of_its_audio(jfk_audio: np.ndarray) -> None:
    async with running_daemon(TimedRecognizer()) as daemon, connect(realtime_url(daemon)) as ws:
        await manual_session(ws)
        await append(ws, pcm24(jfk_audio[: 5 * SR]))
        await ws.send(COMMIT)
        await append(ws, pcm24(jfk_audio[5 * SR :]))
        await ws.send(COMMIT)
        events = await until(ws, COMPLETED, 2)
    first, second = [m for m in events if m["type"] == COMMITTED]
    assert first["previous_item_id"] is None and second["previous_item_id"] == first["item_id"]
    transcripts = check_items(events)
    one, two = numbers(transcripts[first["item_id"]]), numbers(transcripts[second["item_id"]])
    assert one == sorted(set(one)) and max(one) <= 9, "the first turn holds the words of its 5 s"
    assert two == sorted(set(two)) and min(two) > max(one) and max(two) >= 19
    # every word in speech, once: w9 (4.6-4.9 s) lies in a pause of JFK's, where the first turn
    # may close on the hypothesis of the pause (the worker's timing decides)
    assert set(spoken_in_speech(jfk_audio)) <= {*one, *two}
    assert [m["usage"]["seconds"] for m in events if m["type"] == COMPLETED] == [5.0, 6.0]


@FAST
@on_clock_loop
async def test_an_item_never_committed_is_committed_by_the_server_once_its_text_is_long(
    jfk_audio: np.ndarray, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(openai_realtime, "MAX_ITEM_CHARS", 20)  # about seven of the fake words
    recognizer = TimedRecognizer()
    async with running_daemon(recognizer) as daemon, connect(realtime_url(daemon)) as ws:
        await manual_session(ws)
        recognizer.hold()  # every result comes after the last message
        await append(ws, pcm24(jfk_audio))
        await ws.send(update({}))
        events = await until(ws, "session.updated")
        recognizer.release()
        events += await until(ws, COMPLETED)  # no commit from the client
        await ws.send(COMMIT)
        await ws.send(update({}))  # answered after the commit was: its item is named by then
        events += await until(ws, "session.updated")
        while sum(m["type"] == COMMITTED for m in events) > sum(m["type"] == COMPLETED for m in events):
            events.append(await recv_json(ws))
    items = [m["item_id"] for m in events if m["type"] == COMMITTED]
    transcripts = check_items(events)
    # every item the server committed is long; the client's commit took the rest
    assert (
        len(items) >= 2 and all(len(transcripts[item]) > 20 for item in items[:-1]) and numbers(transcripts[items[-1]])
    ), transcripts
    words = [n for item in items for n in numbers(transcripts[item])]
    assert words == sorted(set(words)) and set(spoken_in_speech(jfk_audio)) <= set(words) and words[-1] >= 19


@FAST
@on_clock_loop
async def test_server_vad_announces_commits_and_completes_each_utterance(jfk_audio: np.ndarray) -> None:
    async with running_daemon(TimedRecognizer()) as daemon, connect(realtime_url(daemon)) as ws:
        created = await recv_json(ws)
        assert created["session"]["audio"]["input"]["turn_detection"]["type"] == "server_vad"
        await append(ws, pcm24(np.concatenate([jfk_audio, np.zeros(SR, np.float32)])))
        await ws.send(update({}))  # answered once every append before it was fed
        events = await until(ws, "session.updated")
        while sum(m["type"] == COMMITTED for m in events) > sum(m["type"] == COMPLETED for m in events):
            events.append(await recv_json(ws))
    vad = [m for m in events if m["type"].startswith("input_audio_buffer.speech_")]
    assert vad and [m["type"].rsplit("_", 1)[1] for m in vad] == ["started", "stopped"] * (len(vad) // 2)
    for started, stopped in zip(vad[::2], vad[1::2], strict=True):
        assert started["item_id"] == stopped["item_id"] and started["audio_start_ms"] < stopped["audio_end_ms"]
        after = events[events.index(stopped) + 1]
        assert after["type"] == COMMITTED and after["item_id"] == stopped["item_id"]
    assert 0 <= vad[0]["audio_start_ms"] < 1000 and 10_000 <= vad[-1]["audio_end_ms"] <= 11_100
    transcripts = check_items(events)
    words = [n for text in transcripts.values() for n in numbers(text)]
    assert words == sorted(set(words)) and words[-1] >= 19
    # each word went to the turn it was said in (the audio was sent at once: the streamer was
    # behind and merged turns, which the items do not show)
    turns = [
        (a["audio_start_ms"] + 300, b["audio_end_ms"], a["item_id"]) for a, b in zip(vad[::2], vad[1::2], strict=True)
    ]
    assert len(turns) >= 2 and all(transcripts[item] for _, _, item in turns)
    for k, (_, _, item) in enumerate(turns):
        after = turns[k - 1][1] if k else 0
        before = turns[k + 1][0] if k + 1 < len(turns) else 20_000
        assert all(after <= 500 * n + 100 < before for n in numbers(transcripts[item])), (turns, transcripts)


@FAST
@on_clock_loop
async def test_a_commit_inside_server_vad_speech_ends_that_turn_there(jfk_audio: np.ndarray) -> None:
    async with running_daemon(TimedRecognizer()) as daemon, connect(realtime_url(daemon)) as ws:
        await recv_json(ws)
        await append(ws, pcm24(jfk_audio[: 2 * SR]))
        await ws.send(COMMIT)
        events = await until(ws, COMPLETED)
        await append(ws, pcm24(np.concatenate([jfk_audio[2 * SR :], np.zeros(SR, np.float32)])))
        await ws.send(update({}))
        events += await until(ws, "session.updated")
        while sum(m["type"] == COMMITTED for m in events) > sum(m["type"] == COMPLETED for m in events):
            events.append(await recv_json(ws))
    started = [m for m in events if m["type"] == "input_audio_buffer.speech_started"]
    committed = [m["item_id"] for m in events if m["type"] == COMMITTED]
    stopped = [m["item_id"] for m in events if m["type"] == "input_audio_buffer.speech_stopped"]
    assert committed[0] == started[0]["item_id"] and committed[0] not in stopped, "the commit was its turn's end"
    assert stopped == committed[1:], "the VAD ends the turns after it"
    transcripts = check_items(events)
    first = numbers(transcripts[committed[0]])
    assert first and max(first) <= 3, "the first item holds the words of its 2 s"
    words = [n for item in committed for n in numbers(transcripts[item])]
    assert words == sorted(set(words)) and words[-1] >= 19


@FAST
@on_clock_loop
async def test_session_updates_keep_what_they_leave_out_and_beta_is_answered_in_its_shape(
    jfk_audio: np.ndarray,
) -> None:
    async with running_daemon(TimedRecognizer()) as daemon, connect(realtime_url(daemon)) as ws:
        await recv_json(ws)
        await ws.send(
            update({"audio": {"input": {"turn_detection": {"type": "server_vad", "silence_duration_ms": 800}}}})
        )
        assert (await recv_json(ws))["session"]["audio"]["input"]["turn_detection"]["silence_duration_ms"] == 800
        await ws.send(update({"audio": {"input": {"transcription": {"language": "en"}}}}))
        inputs = (await recv_json(ws))["session"]["audio"]["input"]
        assert inputs["transcription"]["language"] == "en" and inputs["turn_detection"]["silence_duration_ms"] == 800
        assert inputs["format"] == {"type": "audio/pcm", "rate": 24000}
        await ws.send(update({"audio": {"input": {"turn_detection": {"silence_duration_ms": 20}}}}))
        clamped = (await recv_json(ws))["session"]["audio"]["input"]["turn_detection"]["silence_duration_ms"]
        assert clamped == 100, "the server's bounds"
        beta = {"type": "transcription_session.update", "session": {"input_audio_format": "g711_ulaw"}}
        await ws.send(json.dumps(beta))
        updated = await recv_json(ws)
        assert updated["type"] == "transcription_session.updated"
        assert updated["session"]["input_audio_format"] == "g711_ulaw"
        assert updated["session"]["turn_detection"]["silence_duration_ms"] == 100
        (session,) = daemon.ctx.sessions
        settings = session.info.settings
        assert (settings.sample_rate, settings.encoding, settings.language, settings.endpointing_ms) == (
            8000,
            "pcm_mulaw",
            "en",
            100,
        )
        await ws.send(appended(float32_to_pcm(resample(jfk_audio[:SR], SR, 8000), "pcm_mulaw")))
        await ws.send(update({"audio": {"input": {"format": {"type": "audio/pcm"}}}}))
        error = (await until(ws, "error"))[-1]  # after the VAD's events for that audio
        assert error["error"]["code"] == "session_update_after_audio"
        await ws.send(update({"audio": {"input": {"noise_reduction": {"type": "far_field"}}}}))
        inputs = (await until(ws, "session.updated"))[-1]["session"]["audio"]["input"]
        assert inputs["noise_reduction"] == {"type": "far_field"} and inputs["format"] == {"type": "audio/pcmu"}


@FAST
@on_clock_loop
async def test_connections_are_refused_with_the_right_code_and_keys_come_as_clients_send_them() -> None:
    async with running_daemon(TimedRecognizer(), auth_token=TOKEN) as daemon:

        async def refused(query: str, code: int, kind: str) -> None:
            async with connect(realtime_url(daemon, query)) as ws:
                messages = await read_to_close(ws)
            assert ws.close_code == code and [m["error"]["code"] for m in messages] == [kind], (query, messages)

        await refused("intent=transcription", 1008, "unauthorized")
        await refused("intent=transcription&api_key=wrong", 1008, "unauthorized")
        await refused(f"intent=conversation&api_key={TOKEN}", 1003, "unsupported_intent")
        await refused(f"intent=transcription&model=gpt-9&api_key={TOKEN}", 1008, "model_not_enabled")
        headers = {"Authorization": f"Bearer {TOKEN}", "OpenAI-Beta": "realtime=v1"}
        for query, extra in ((f"api_key={TOKEN}", None), ("intent=transcription&model=gpt-4o-transcribe", headers)):
            async with connect(realtime_url(daemon, query), additional_headers=extra) as ws:
                created = await recv_json(ws)
            assert created["type"] == "session.created" and created["session"]["type"] == "transcription"
        assert created["session"]["audio"]["input"]["transcription"]["model"] == "gpt-4o-transcribe"


@FAST
@on_clock_loop
async def test_a_recognition_failure_ends_the_session_and_its_item_with_failed(jfk_audio: np.ndarray) -> None:
    recognizer = TimedRecognizer()
    async with running_daemon(recognizer) as daemon, connect(realtime_url(daemon)) as ws:
        await manual_session(ws)
        await append(ws, pcm24(jfk_audio[: 3 * SR]))
        await ws.send(COMMIT)
        first = await until(ws, COMPLETED)
        (session,) = daemon.ctx.sessions
        recognizer.fail_on.add(session.info.id)
        await append(ws, pcm24(jfk_audio[3 * SR : 6 * SR]))
        await ws.send(COMMIT)
        rest = await read_to_close(ws)
    assert ws.close_code == 1011
    (transcript,) = check_items(first).values()
    assert numbers(transcript), "the turn before the failure was transcribed"
    committed = [m for m in rest if m["type"] == COMMITTED]
    errors = [m["error"] for m in rest if m["type"] == "error"]
    failed = [m for m in rest if m["type"] == FAILED]
    assert [(e["type"], e["code"]) for e in errors] == [("server_error", "internal_error")]
    assert [m["item_id"] for m in failed] == [committed[0]["item_id"]]
    assert failed[0]["error"]["code"] == "internal_error"
    assert not any(m["type"] == COMPLETED for m in rest)


# -- the real SDK, tiny.en, real speech ---------------------------------------------------------------

openai = pytest.importorskip("openai")


@pytest.fixture(scope="module")
def server(serving_model):  # type: ignore[no-untyped-def]
    with LiveServer(serving_model, auth_token=TOKEN) as live:
        yield live


def sdk_client(server: LiveServer) -> Any:
    """The SDK pointed at the daemon (the beta client needs the WebSocket URL given)."""
    return openai.AsyncOpenAI(
        api_key=TOKEN, base_url=server.http + "/v1", websocket_base_url=server.url + "/v1", max_retries=0
    )


async def sdk_session(
    server: LiveServer, audio: bytes, chunk: int, *, beta: bool = False, session: dict[str, Any], manual: bool
) -> list[Any]:
    """Configure, append ``audio`` in chunks, commit (manual) or wait for the VAD's commits;
    every event the SDK parsed, up to the last completed."""
    client = sdk_client(server)
    query = {"intent": "transcription"}
    if beta:
        manager = client.beta.realtime.connect(model="gpt-4o-transcribe", extra_query=query)
    else:
        manager = client.realtime.connect(model="gpt-4o-transcribe", extra_query=query)
    events: list[Any] = []
    async with manager as conn:

        async def recv_until(done: Any) -> None:
            while not done():
                events.append(await asyncio.wait_for(conn.recv(), 120))

        def count(kind: str) -> int:
            return sum(e.type == kind for e in events)

        updated = "transcription_session.updated" if beta else "session.updated"
        if beta:
            await conn.transcription_session.update(session=session)  # type: ignore[arg-type]
        else:
            await conn.session.update(session=session)  # type: ignore[arg-type]
        await recv_until(lambda: count(updated) == 1)
        for i in range(0, len(audio), chunk):
            await conn.input_audio_buffer.append(audio=b64(audio[i : i + chunk]))
        if manual:
            await conn.input_audio_buffer.commit()
            await recv_until(lambda: count(COMPLETED) == 1)
        else:  # an update is answered once the audio before it was fed: the VAD has committed all
            if beta:
                await conn.transcription_session.update(session={})
            else:
                await conn.session.update(session={"type": "transcription"})
            await recv_until(lambda: count(updated) == 2 and count(COMMITTED) == count(COMPLETED))
    await client.close()
    return events


def check_sdk_transcript(events: list[Any], max_wer: float = 0.2) -> str:
    """No errors; every completed has its duration; deltas as :func:`check_items` wants them; the
    completed transcripts joined score within ``max_wer`` of jfk's."""
    assert events[0].type == "session.created"
    dumped = [e.model_dump() for e in events]
    assert not [e for e in dumped if e["type"] == "error"], dumped
    completed = [e for e in dumped if e["type"] == COMPLETED]
    assert completed and all(e["usage"]["type"] == "duration" and e["usage"]["seconds"] > 0 for e in completed)
    transcripts = check_items(dumped)
    assert list(transcripts.values()) == [e["transcript"] for e in completed]
    text = " ".join(e["transcript"] for e in completed)
    assert word_error_rate([JFK], [text]) <= max_wer, text
    return text


@pytest.mark.slow
def test_sdk_manual_commit_transcribes_jfk(server, jfk_audio) -> None:  # type: ignore[no-untyped-def]
    events = asyncio.run(sdk_session(server, pcm24(jfk_audio), CHUNK, session=MANUAL, manual=True))
    from openai.types.realtime import RealtimeTranscriptionSessionCreateRequest, SessionCreatedEvent

    assert isinstance(events[0], SessionCreatedEvent)
    assert isinstance(events[0].session, RealtimeTranscriptionSessionCreateRequest)
    check_sdk_transcript(events)
    (committed,) = [e for e in events if e.type == COMMITTED]
    assert events[-1].item_id == committed.item_id
    assert events[-1].usage.seconds == pytest.approx(len(jfk_audio) / SR, abs=0.01)


@pytest.mark.slow
def test_sdk_server_vad_transcribes_jfk(server, jfk_audio) -> None:  # type: ignore[no-untyped-def]
    audio = pcm24(np.concatenate([jfk_audio, np.zeros(SR, np.float32)]))
    vad = {"type": "transcription", "audio": {"input": {"turn_detection": {"type": "server_vad"}}}}
    events = asyncio.run(sdk_session(server, audio, CHUNK, session=vad, manual=False))
    check_sdk_transcript(events)
    kinds = [e.type for e in events]
    started, stopped = (
        kinds.count("input_audio_buffer.speech_started"),
        kinds.count("input_audio_buffer.speech_stopped"),
    )
    assert started == stopped == kinds.count(COMMITTED) >= 2, "jfk's pauses end turns"
    assert all(e.transcript for e in events if e.type == COMPLETED), "every turn has the words said in it"


@pytest.mark.slow
def test_sdk_beta_client_through_g711_mulaw_at_8khz(server, jfk_audio) -> None:  # type: ignore[no-untyped-def]
    audio = float32_to_pcm(resample(np.concatenate([jfk_audio, np.zeros(SR, np.float32)]), SR, 8000), "pcm_mulaw")
    session = {"input_audio_format": "g711_ulaw", "input_audio_transcription": {"model": "whisper-1"}}
    events = asyncio.run(sdk_session(server, audio, 1600, beta=True, session=session, manual=False))
    updated = [e for e in events if e.type == "transcription_session.updated"]
    assert updated[0].session.input_audio_format == "g711_ulaw"
    check_sdk_transcript(events, max_wer=0.25)
