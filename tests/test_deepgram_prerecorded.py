"""Deepgram's pre-recorded ``POST /v1/listen``: the real Deepgram SDK (``transcribe_file``)
against a real daemon with tiny.en and real speech; refusals in Deepgram's REST error shape, next
to a live session, without the model. LiveKit's ``recognize()``: tests/test_livekit_deepgram.py."""

from __future__ import annotations

import hashlib
import importlib
import io
import json
import threading
import urllib.error
import urllib.parse
import urllib.request
import warnings
import wave
from typing import Any

import aiohttp
import httpx
import numpy as np
import pytest
from live_server import LiveServer
from runtime_fakes import TimedRecognizer, on_clock_loop, read_until, recv_json, running_daemon, send_audio, stream_url
from websockets.asyncio.client import connect

from benchmarks.scoring import word_error_rate
from streamwhisper.audio.convert import float32_to_pcm_s16le, resample
from streamwhisper.runtime.dialects.deepgram import bare_word
from streamwhisper.runtime.server import Daemon

JFK = "And so, my fellow Americans, ask not what your country can do for you, ask what you can do for your country."
TOKEN = "dg-local"


def wav_bytes(audio: np.ndarray, rate: int = 16000) -> bytes:
    out = io.BytesIO()
    with wave.open(out, "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(rate)
        w.writeframes(float32_to_pcm_s16le(audio))
    return out.getvalue()


# -- refusals, without the model ---------------------------------------------------------------


async def _post(daemon: Daemon, body: bytes, query: str = "", **headers: str) -> tuple[int, dict[str, Any]]:
    url = f"http://127.0.0.1:{daemon.port}/v1/listen?{query}"
    headers.setdefault("Content-Type", "audio/wav")
    async with aiohttp.ClientSession() as http, http.post(url, data=body, headers=headers) as r:
        return r.status, await r.json()


def _refusal(answer: tuple[int, dict[str, Any]]) -> tuple[int, str, str]:
    status, body = answer
    assert set(body) == {"err_code", "err_msg", "request_id", "variant"} and body["err_msg"] and body["request_id"]
    return status, body["err_code"], body["variant"]


@on_clock_loop
async def test_refusals_are_deepgram_errors_and_leave_a_live_session_alone(jfk_audio: np.ndarray) -> None:
    async with running_daemon(TimedRecognizer(), auth_token="k", max_upload_bytes=40_000, max_upload_s=1) as daemon:
        async with connect(stream_url(daemon, "token=k")) as ws:
            await recv_json(ws)
            await send_audio(ws, jfk_audio[: 3 * 16000])
            auth = {"Authorization": "Token k"}
            assert _refusal(await _post(daemon, b"RIFF", Authorization="Token no")) == (
                401,
                "INVALID_AUTH",
                "invalid_api_key",
            )
            assert _refusal(await _post(daemon, b"", **auth)) == (400, "Bad Request", "empty_body")
            url_body = json.dumps({"url": "https://example.com/a.wav"}).encode()
            answer = await _post(daemon, url_body, **(auth | {"Content-Type": "application/json"}))
            assert _refusal(answer) == (400, "Bad Request", "url")
            garbage = b"\x00garbage" * 100
            assert _refusal(await _post(daemon, garbage, **auth)) == (400, "Bad Request", "invalid_file_format")
            assert _refusal(await _post(daemon, b"\x00" * 50_000, **auth)) == (
                413,
                "Request Entity Too Large",
                "file_too_large",
            )
            long_pcm = b"\x00\x00" * 2 * 8000  # 2 s of raw audio, over max_upload_s
            answer = await _post(daemon, long_pcm, "encoding=linear16&sample_rate=8000", **auth)
            assert _refusal(answer) == (413, "Request Entity Too Large", "audio_too_long")
            odd = await _post(daemon, b"\x00\x01\x02", "encoding=linear16&sample_rate=16000", **auth)
            assert _refusal(odd) == (400, "Bad Request", "invalid_audio")
            for query in ("encoding=opus", "sample_rate=abc", "utt_split=-1", "language=xx-YY"):
                status, code, _ = _refusal(await _post(daemon, b"RIFF", query, **auth))
                assert (status, code) == (400, "Bad Request"), query
            # the live session saw none of it
            await ws.send('{"type": "nonsense"}')
            assert (await read_until(ws, lambda m: m["type"] == "error"))[-1]["code"] == "unknown_message"
        assert daemon.uploads.active == 0


# -- real clients, the real model ---------------------------------------------------------------


@pytest.fixture(scope="module")
def server(serving_model):  # type: ignore[no-untyped-def]
    with LiveServer(serving_model, auth_token=TOKEN) as live:
        yield live


def _deepgram_client(server: LiveServer, http: httpx.Client) -> Any:
    with warnings.catch_warnings():  # the SDK still imports websockets.legacy
        warnings.simplefilter("ignore", DeprecationWarning)
        pytest.importorskip("deepgram")
        importlib.import_module("deepgram.listen.v1.client")  # imported lazily by the SDK; warns
        from deepgram import DeepgramClient
        from deepgram.environment import DeepgramClientEnvironment
    env = DeepgramClientEnvironment(base=server.http, production=server.url, agent=server.url, agent_rest=server.http)
    return DeepgramClient(api_key=TOKEN, environment=env, httpx_client=http)


@pytest.mark.slow
def test_deepgram_sdk_transcribes_a_file(server, jfk_audio) -> None:  # type: ignore[no-untyped-def]
    body = wav_bytes(jfk_audio)
    with httpx.Client(timeout=120) as http:
        _transcribe_file(_deepgram_client(server, http), body, jfk_audio)


def _transcribe_file(client: Any, body: bytes, jfk_audio: np.ndarray) -> None:
    response = client.listen.v1.media.transcribe_file(
        request=body, model="nova-3", punctuate=True, utterances=True, language="en-US", detect_language=True
    )
    alternative = response.results.channels[0].alternatives[0]
    assert word_error_rate([JFK], [alternative.transcript]) <= 0.2, alternative.transcript
    assert "," in alternative.transcript, "punctuate=true keeps Whisper's punctuation"
    words = alternative.words
    assert [bare_word(w.punctuated_word) for w in words] == [w.word for w in words]
    assert all(0 <= w.start < w.end <= 11.1 and 0 <= w.confidence <= 1 for w in words)
    assert [w.start for w in words] == sorted(w.start for w in words)
    assert response.results.channels[0].detected_language == "en"
    utterances = response.results.utterances
    assert utterances and " ".join(u.transcript for u in utterances) == alternative.transcript
    meta = response.metadata
    assert meta.sha256 == hashlib.sha256(body).hexdigest()
    assert meta.duration == pytest.approx(11.0, abs=0.01) and meta.channels == 1
    assert meta.model_info[meta.models[0]]["name"] == "tiny.en"

    # raw linear16 at 8 kHz, no container, and no punctuation asked for
    pcm = float32_to_pcm_s16le(resample(jfk_audio, 16000, 8000))
    rate = {"additional_query_parameters": {"sample_rate": "8000"}}
    raw = client.listen.v1.media.transcribe_file(request=pcm, encoding="linear16", request_options=rate)
    text = raw.results.channels[0].alternatives[0].transcript
    assert word_error_rate([JFK], [text]) <= 0.2 and text == text.lower() and "," not in text, text


QUERY_NAMES = ["encoding", "sample_rate", "channels", "punctuate", "utterances", "utt_split", "language", "model", "x"]
QUERY_VALUES = ["linear16", "opus", "16000", "8000", "7", "0", "2", "-1", "true", "false", "en-US", "xx", "0.5", ""]


@pytest.mark.slow
def test_malformed_prerecorded_requests_get_deepgram_errors_while_a_live_stream_goes_on(  # type: ignore[no-untyped-def]
    serving_model, clips
) -> None:
    """Random bodies and options on POST /v1/listen, next to a live Deepgram stream of jfk: every
    answer is 200 or a Deepgram error with its status, and the live transcript is unharmed."""
    from hypothesis import HealthCheck, given, settings
    from hypothesis import strategies as st
    from websockets.sync.client import connect as sync_connect

    from streamwhisper.audio.files import load_audio

    flac = (clips["en_jfk"].wav).read_bytes()
    limit = 128 * 1024
    jfk = load_audio(clips["en_jfk"].wav)
    with LiveServer(serving_model, auth_token="t", max_upload_bytes=limit, max_uploads=4) as live:
        heard: list[str] = []

        def stream() -> None:
            query = "encoding=linear16&sample_rate=16000&endpointing=25&token=t"
            with sync_connect(f"{live.url}/v1/listen?{query}") as ws:
                pcm = float32_to_pcm_s16le(np.concatenate([jfk, np.zeros(16000, np.float32)]))
                for i in range(0, len(pcm), 6400):
                    ws.send(pcm[i : i + 6400])
                ws.send('{"type": "CloseStream"}')
                for text in ws:
                    message = json.loads(text)
                    if message.get("type") == "Results" and message["is_final"]:
                        heard.append(message["channel"]["alternatives"][0]["transcript"])

        good = threading.Thread(target=stream)
        good.start()

        @settings(
            max_examples=80, deadline=None, database=None, derandomize=True, suppress_health_check=list(HealthCheck)
        )
        @given(
            query=st.dictionaries(st.sampled_from(QUERY_NAMES), st.sampled_from(QUERY_VALUES), max_size=4),
            auth=st.sampled_from(["Token t", "Token t", "Bearer t", "Token no", ""]),
            kind=st.sampled_from(["audio/flac", "audio/wav", "application/octet-stream", "application/json", ""]),
            body=st.one_of(
                st.binary(max_size=3000),
                st.integers(1, len(flac)).map(lambda n: flac[: min(n, 48_000)]),
                st.just(b"\0" * (limit + 1)),
            ),
        )
        def fuzz(query: dict[str, str], auth: str, kind: str, body: bytes) -> None:
            headers = {"Authorization": auth} if auth else {}
            if kind:
                headers["Content-Type"] = kind
            url = f"{live.http}/v1/listen?{urllib.parse.urlencode(query)}"
            request = urllib.request.Request(url, data=body, headers=headers, method="POST")
            try:
                with urllib.request.urlopen(request, timeout=120) as r:
                    status, content = r.status, json.loads(r.read())
            except urllib.error.HTTPError as exc:
                with exc:
                    status, content = exc.code, json.loads(exc.read())
            except (ConnectionError, urllib.error.URLError):  # the server stopped reading a large body
                assert len(body) > limit
                return
            if status == 200:
                assert content["results"]["channels"][0]["alternatives"][0]["transcript"] is not None
            else:
                assert status in (400, 401, 413, 429), (status, content)
                assert content["err_code"] and content["err_msg"] and content["request_id"], content

        fuzz()
        good.join(timeout=180)
        assert word_error_rate([JFK], [" ".join(heard)]) <= 0.2, heard
        assert live.inspect(lambda d: d.uploads.active) == 0
