"""Compatible endpoints end to end: a real daemon, real speech (jfk), tiny.en.

- Deepgram live streaming on ``/v1/listen``, driven by the official Deepgram Python SDK
  (``deepgram-sdk``, pointed at the daemon with a custom environment), plus a plain websockets
  client for malformed input and close codes;
- vosk-server on ``/``, driven like vosk-server's own ``test.py``: config, audio frames each
  answered by one message, ``{"eof": 1}``, the last result, close;
- the native endpoint and the page at ``GET /`` next to them.
"""

from __future__ import annotations

import asyncio
import importlib
import json
import queue
import threading
import time
import urllib.error
import urllib.request
import warnings
from typing import Any

import numpy as np
import pytest
from live_server import LiveServer, raw_session
from websockets.asyncio.client import connect
from websockets.exceptions import ConnectionClosed, ConnectionClosedOK
from websockets.sync.client import connect as sync_connect

from benchmarks.scoring import word_error_rate
from streamwhisper.audio.convert import float32_to_pcm_s16le, resample
from streamwhisper.client import Closed, Ready, stream_file
from streamwhisper.events import Final
from streamwhisper.runtime.dialects.deepgram import bare_word

pytestmark = pytest.mark.slow  # end to end: the real model

JFK = "And so, my fellow Americans, ask not what your country can do for you, ask what you can do for your country."
TOKEN = "s3cret"


def _deepgram_sdk() -> Any:
    """The Deepgram SDK's modules, imported with its websockets deprecation warnings silenced
    (it still imports ``websockets.legacy``; the sync client it uses at run time is current)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        pytest.importorskip("deepgram")
        importlib.import_module("deepgram.listen.v1.client")  # imported lazily by the SDK; warns
        from deepgram import DeepgramClient
        from deepgram.environment import DeepgramClientEnvironment
        from deepgram.listen.v1.types import (
            ListenV1Metadata,
            ListenV1Results,
            ListenV1SpeechStarted,
            ListenV1UtteranceEnd,
        )
    return type(
        "SDK",
        (),
        {
            "client": DeepgramClient,
            "environment": DeepgramClientEnvironment,
            "Results": ListenV1Results,
            "Metadata": ListenV1Metadata,
            "SpeechStarted": ListenV1SpeechStarted,
            "UtteranceEnd": ListenV1UtteranceEnd,
        },
    )


@pytest.fixture(scope="module")
def dg_server(serving_model):  # type: ignore[no-untyped-def]
    with LiveServer(serving_model, auth_token=TOKEN) as server:
        yield server


@pytest.fixture(scope="module")
def server(serving_model):  # type: ignore[no-untyped-def]
    with LiveServer(serving_model) as server:
        yield server


def pcm(audio: np.ndarray, silence_s: float = 0.0, rate: int = 16000) -> bytes:
    return float32_to_pcm_s16le(np.concatenate([audio, np.zeros(int(silence_s * rate), np.float32)]))


class DeepgramStream:
    """One Deepgram SDK connection whose messages a thread collects (``messages``, ``inbox``)."""

    def __init__(self, server: LiveServer, **options: Any) -> None:
        self.sdk = _deepgram_sdk()
        env = self.sdk.environment(base=server.http, production=server.url, agent=server.url, agent_rest=server.http)
        self._client = self.sdk.client(api_key=TOKEN, environment=env)  # sends "Authorization: Token ..."
        self._options = options
        self.messages: list[Any] = []
        self.inbox: queue.Queue[Any] = queue.Queue()

    def __enter__(self) -> DeepgramStream:
        self._cm = self._client.listen.v1.connect(**self._options)
        self.conn = self._cm.__enter__()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()
        return self

    def _read(self) -> None:
        for message in self.conn:  # ends when the server closes
            self.messages.append(message)
            self.inbox.put(message)

    def send(self, data: bytes, speed: float = 2.0, chunk_s: float = 0.1) -> None:
        """Send s16le 16 kHz audio at ``speed`` x real time."""
        step = int(chunk_s * 16000) * 2
        began = time.monotonic()
        for i in range(0, len(data), step):
            self.conn.send_media(data[i : i + step])
            time.sleep(max(0.0, began + (i + step) / 32000 / speed - time.monotonic()))

    def wait_for(self, predicate: Any, timeout: float = 60) -> Any:
        deadline = time.monotonic() + timeout
        while True:
            message = self.inbox.get(timeout=max(deadline - time.monotonic(), 0.01))
            if predicate(message):
                return message

    def close(self) -> None:
        """CloseStream, then wait until the server closed the connection."""
        self.conn.send_close_stream()
        self._reader.join(timeout=120)
        assert not self._reader.is_alive(), "the server did not close the stream"

    def __exit__(self, *exc: object) -> None:
        self._cm.__exit__(*exc)
        self._reader.join(timeout=10)


def finals_transcript(results: list[Any]) -> str:
    return " ".join(r.channel.alternatives[0].transcript for r in results if r.is_final).strip()


def test_deepgram_sdk_streams_jfk(dg_server, jfk_audio) -> None:
    options = dict(
        model="nova-3",  # Deepgram parameters with no meaning here are accepted and ignored
        smart_format=True,
        diarize=False,
        version="latest",
        tag="compat-test",
        language="en-US",
        encoding="linear16",
        sample_rate=16000,
        channels=1,
        interim_results=True,
        punctuate=True,
        vad_events=True,
        utterance_end_ms="1000",
        endpointing=300,
        request_options={"additional_query_parameters": {"tier": "nova", "numerals": "true"}},
    )
    with DeepgramStream(dg_server, **options) as stream:
        stream.send(pcm(jfk_audio, silence_s=1.5))
        stream.close()
    sdk, messages = stream.sdk, stream.messages

    results = [m for m in messages if isinstance(m, sdk.Results)]
    finals = [r for r in results if r.is_final]
    text = finals_transcript(results)
    assert word_error_rate([JFK], [text]) <= 0.2, text
    assert any(not r.is_final for r in results), "interim results were asked for"
    assert all(r.speech_final is False for r in results if not r.is_final)
    assert any(r.speech_final for r in finals) and finals[-1].speech_final, "the last final ends its utterance"
    assert not any(r.from_finalize for r in results)
    for r in results:
        assert r.type == "Results" and r.channel_index == [0, 1]
        assert r.metadata.model_info.name == "tiny.en" and r.metadata.request_id and r.metadata.model_uuid
    # Final results tile the stream: each starts where the one before ended.
    for before, after in zip(finals, finals[1:], strict=False):
        assert after.start == pytest.approx(before.start + before.duration, abs=0.002)
    words = [w for r in finals for w in r.channel.alternatives[0].words]
    assert all(w.punctuated_word and bare_word(w.punctuated_word) == w.word for w in words)
    assert any(w.punctuated_word != w.word for w in words), "punctuate=true: cased and punctuated"
    assert all(w.word == w.word.lower() and w.word.isalnum() for w in words if w.word.isascii())
    assert all(0 <= w.start <= w.end and 0 <= w.confidence <= 1 for w in words)
    assert [w.end for w in words] == sorted(w.end for w in words)
    assert all(0 <= r.channel.alternatives[0].confidence <= 1 for r in results)

    started = [m for m in messages if isinstance(m, sdk.SpeechStarted)]
    assert started and started[0].channel == [0] and started[0].timestamp < words[0].end
    ends = [m for m in messages if isinstance(m, sdk.UtteranceEnd)]
    assert ends and all(e.channel == [0, 1] for e in ends)
    assert ends[-1].last_word_end == pytest.approx(words[-1].end, abs=1.0)

    metadata = messages[-1]
    assert isinstance(metadata, sdk.Metadata), "Metadata comes last"
    assert metadata.duration == pytest.approx(len(jfk_audio) / 16000 + 1.5, abs=0.01)
    assert metadata.channels == 1 and metadata.request_id == results[0].metadata.request_id
    assert metadata.created.endswith("Z")
    extra = metadata.model_dump()
    assert extra["models"] == [results[0].metadata.model_uuid]
    assert extra["model_info"][extra["models"][0]]["name"] == "tiny.en"


def test_deepgram_sdk_finalize_keepalive_and_defaults(dg_server, jfk_audio) -> None:
    """Without interim_results only final results come; Finalize cuts the utterance at once."""
    audio = pcm(jfk_audio)
    with DeepgramStream(dg_server, model="nova-2", encoding="linear16", sample_rate=16000) as stream:
        sdk = stream.sdk
        stream.send(audio[: int(2.4 * 32000)])  # "And so, my fellow Americans" (still in speech)
        stream.conn.send_finalize()
        finalized = stream.wait_for(lambda m: isinstance(m, sdk.Results) and m.from_finalize)
        stream.conn.send_keep_alive()
        stream.send(audio[int(5.0 * 32000) : int(8.2 * 32000)])  # "what your country can do for you"
        stream.close()
    messages = stream.messages
    results = [m for m in messages if isinstance(m, sdk.Results)]
    assert results and all(r.is_final for r in results), "interim_results defaults to false"
    assert [r for r in results if r.from_finalize] == [finalized]
    assert finalized.is_final and not finalized.speech_final, "a Finalize in speech is no pause"
    before = finals_transcript(results[: results.index(finalized) + 1])
    assert "fellow americans" in before, before  # short phrases: tiny.en varies with the load
    after = finals_transcript(results[results.index(finalized) + 1 :])
    # the audio jumps from 2.4 s to 5.0 s: the word after the splice varies ("what your" was
    # heard as "like you are" in 1 of 6 runs with the float32 encoder)
    assert "country can do for you" in after and "americans" not in after, after
    assert not any(isinstance(m, sdk.SpeechStarted | sdk.UtteranceEnd) for m in messages), "not asked for"
    assert "," not in after and after == after.lower(), "no punctuation unless punctuate=true"
    assert isinstance(messages[-1], sdk.Metadata)
    assert messages[-1].duration == pytest.approx(2.4 + 3.2, abs=0.01)


def _deepgram_raw(url: str, query: str, send: list[str | bytes]) -> tuple[list[dict], int | None]:
    return raw_session(f"{url}/v1/listen?{query}", TOKEN, send)


def test_deepgram_malformed_input(dg_server, jfk_audio) -> None:
    url = dg_server.url
    speech = pcm(jfk_audio[: 16000 * 2])
    # An encoding this server cannot decode: refused before any audio.
    messages, code = _deepgram_raw(url, "encoding=opus&sample_rate=48000", [])
    assert code == 1003 and messages[0]["type"] == "Error" and messages[0]["variant"] == "unsupported_encoding"
    assert "linear16" in messages[0]["description"]
    # Malformed query values.
    for query in ("endpointing=soon", "interim_results=maybe", "sample_rate=12", "language=xx-XX"):
        messages, code = _deepgram_raw(url, query, [])
        assert code == 1007 and messages[0]["type"] == "Error", query
    # Bad JSON mid-stream: an Error, the finals of the audio heard, Metadata, 1007.
    messages, code = _deepgram_raw(url, "encoding=linear16&sample_rate=16000", [speech, "{not json"])
    assert code == 1007
    types = [m["type"] for m in messages]
    assert types.count("Error") == 1 and types[-1] == "Metadata" and set(types) == {"Error", "Results", "Metadata"}
    assert next(m for m in messages if m["type"] == "Error")["variant"] == "invalid_json"
    text = " ".join(m["channel"]["alternatives"][0]["transcript"] for m in messages if m["type"] == "Results")
    assert "fellow" in text, text
    # An unknown message type is reported and ignored; a message without type is malformed.
    messages, code = _deepgram_raw(url, "", [json.dumps({"type": "Configure"}), json.dumps({"type": "CloseStream"})])
    assert code == 1000 and [m["type"] for m in messages] == ["Error", "Metadata"]
    assert messages[0]["variant"] == "unknown_message" and messages[1]["duration"] == 0
    messages, code = _deepgram_raw(url, "", [json.dumps({"Finalize": True})])
    assert code == 1007 and messages[0]["type"] == "Error"
    # Without the token (Deepgram clients send "Authorization: Token <key>").
    with sync_connect(url + "/v1/listen") as ws:
        error = json.loads(ws.recv())
        with pytest.raises(ConnectionClosed):
            ws.recv()
    assert error["type"] == "Error" and error["variant"] == "unauthorized" and ws.close_code == 1008


async def _vosk_lockstep(url: str, audio: bytes, rate: int, frame_s: float = 0.2) -> tuple[list[dict], int, int]:
    """vosk-server's test.py: config, then each frame answered by one message, eof, last result."""
    replies: list[dict] = []
    async with connect(url) as ws:
        await ws.send('{ "config" : { "sample_rate" : ' + str(rate) + " } }")
        step = int(rate * frame_s) * 2
        frames = 0
        for i in range(0, len(audio), step):
            await ws.send(audio[i : i + step])
            frames += 1
            replies.append(json.loads(await asyncio.wait_for(ws.recv(), 60)))
            await asyncio.sleep(frame_s / 2)  # twice real time
        await ws.send('{"eof" : 1}')
        replies.append(json.loads(await asyncio.wait_for(ws.recv(), 60)))
        with pytest.raises(ConnectionClosedOK):
            await asyncio.wait_for(ws.recv(), 60)
        assert ws.close_code == 1000
    return replies, frames, ws.close_code


def test_vosk_protocol_8khz_lockstep_client(server, jfk_audio) -> None:
    audio8 = pcm(resample(jfk_audio, 16000, 8000), silence_s=1.0, rate=8000)
    replies, frames, _ = asyncio.run(_vosk_lockstep(server.url, audio8, 8000))
    assert len(replies) == frames + 1, "one answer per audio frame, then the last result"
    *answers, last = replies
    assert all(set(r) in ({"partial"}, {"text", "result"}, {"text"}) for r in answers)
    assert "partial" not in last and "text" in last
    results = [r for r in replies if "text" in r]
    text = " ".join(r["text"] for r in results if r["text"])
    assert word_error_rate([JFK], [text]) <= 0.2, text
    assert len([r for r in answers if "text" in r]) >= 1, "utterances end before eof"
    partials = [r["partial"] for r in answers if "partial" in r]
    assert any(p for p in partials) and partials[0] == ""
    words = [w for r in results for w in r.get("result", [])]
    assert words and all(set(w) == {"conf", "end", "start", "word"} for w in words)
    assert all(0 <= w["start"] <= w["end"] and 0 <= w["conf"] <= 1 for w in words)
    assert [w["end"] for w in words] == sorted(w["end"] for w in words)
    assert "".join(w["word"] for w in words) == "".join(text.split())
    assert answers[answers.index(results[0]) - 1]["partial"], "partials show the utterance before its result"


def test_vosk_config_options_and_an_eager_client(server, jfk_audio) -> None:
    """No lockstep: all audio at once (no config rate: 16 kHz), words off, alternatives on."""

    async def run() -> list[dict]:
        async with connect(server.url + "/") as ws:
            await ws.send(json.dumps({"config": {"words": 0, "max_alternatives": 1, "phrase_list": ["ask"]}}))
            audio = pcm(jfk_audio[: int(2.4 * 16000)], silence_s=1.0)
            for i in range(0, len(audio), 8000):
                await ws.send(audio[i : i + 8000])
            await ws.send(json.dumps({"config": {"sample_rate": 8000}}))  # after audio: ignored
            await ws.send(json.dumps({"eof": 1}))
            return [json.loads(m) async for m in ws]

    replies = asyncio.run(run())
    assert replies and all("partial" in r or "alternatives" in r for r in replies)
    last = replies[-1]["alternatives"]
    assert len(last) == 1 and set(last[0]) == {"text", "confidence"}
    text = " ".join(r["alternatives"][0]["text"] for r in replies if "alternatives" in r)
    assert "fellow americans" in text.lower(), text


def test_vosk_malformed_input(server, jfk_audio) -> None:
    speech = pcm(jfk_audio[: 16000 * 2])

    def session(*send: str | bytes) -> tuple[list[dict], int | None]:
        with sync_connect(server.url) as ws:
            messages = []
            for item in send:
                ws.send(item)
                if isinstance(item, bytes):
                    messages.append(json.loads(ws.recv(timeout=60)))
            try:
                while True:
                    messages.append(json.loads(ws.recv(timeout=60)))
            except ConnectionClosed:
                pass
            return messages, ws.close_code

    messages, code = session(speech, "{eof")
    assert code == 1007 and "partial" in messages[0] and "error" in messages[1]
    assert "fellow" in messages[-1]["text"].lower(), "the audio heard still becomes a result"
    for bad in ('{"type": "eof"}', '{"config": 16000}', '{"config": {"sample_rate": "fast"}}', "[1]"):
        messages, code = session(bad)
        assert code == 1007 and "error" in messages[0] and messages[-1] == {"text": ""}, bad


def test_native_endpoint_and_page_still_served(server, jfk_audio) -> None:
    messages = asyncio.run(stream_file(server.url, jfk_audio[: 16000 * 3], speed=0))
    assert isinstance(messages[0], Ready) and isinstance(messages[-1], Closed)
    assert any(isinstance(m, Final) and m.text for m in messages)

    def get(path: str) -> tuple[int, str]:
        try:
            with urllib.request.urlopen(server.http + path, timeout=10) as r:
                return r.status, r.headers.get("Content-Type", "")
        except urllib.error.HTTPError as e:
            e.close()
            return e.code, ""

    has_page = server.inspect(lambda d: "/" in d._web)
    assert get("/") == ((200, "text/html; charset=utf-8") if has_page else (404, ""))
    assert get("/v1/listen")[0] == 404, "a WebSocket endpoint, not a page"
