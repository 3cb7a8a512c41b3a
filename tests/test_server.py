"""The daemon end to end: a real server on port 0, real websockets clients, real speech, tiny.en."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import os
import re
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request

import jiwer
import numpy as np
import pytest
from live_server import LiveServer
from websockets.asyncio.client import connect
from websockets.exceptions import ConnectionClosed
from websockets.sync.client import connect as sync_connect

from benchmarks.scoring import Clip, normalize, word_error_rate
from streamwhisper.audio.convert import float32_to_pcm_s16le
from streamwhisper.audio.files import load_audio
from streamwhisper.client import Closed, ConfigMessage, Ready, ServerMessage, StreamClient, Unknown, stream_file
from streamwhisper.events import Final, Partial

pytestmark = pytest.mark.slow  # end to end: the real model

CLIPS = [
    "en_jfk",
    "en_lj_LJ001-0016",
    "en_arctic_aew_a0001",
    "en_ps_librivox_sense_0890",
    "en_picovoice_cheetah_test_en",
    "en_ls_dev_1272-128104-0000",
    "en_lj_LJ001-0028",
    "en_ps_librivox_sense_0920",
]


@pytest.fixture(scope="module")
def clips(clips: dict[str, Clip]) -> dict[str, Clip]:
    return {name: clips[name] for name in CLIPS}


def transcript(messages: list[ServerMessage | Unknown]) -> str:
    return " ".join(m.text for m in messages if isinstance(m, Final) and m.text)


def check_stream(messages: list[ServerMessage | Unknown]) -> Closed:
    """Protocol invariants of one session's messages; returns its ``closed`` summary."""
    assert isinstance(messages[0], Ready)
    seqs = [m.seq for m in messages if isinstance(m, (Partial, Final))]
    assert seqs == sorted(set(seqs)), "seq must increase"
    ends = [w.end for m in messages if isinstance(m, Final) for w in m.words]
    assert ends == sorted(ends), "final words must follow each other in time"
    closed = [m for m in messages if isinstance(m, Closed)]
    assert len(closed) == 1 and messages[-1] is closed[0]
    return closed[0]


def check_own_transcripts(clips: dict[str, Clip], results: dict[str, list[ServerMessage | Unknown]]) -> None:
    """Each client got its own clip's transcript (its own reference explains it at least twice as
    well as any other's), and together they are as accurate as the daemon under load must be.

    The accuracy bound is on the corpus, not each clip: on a 14-word clip one word decides it,
    and a window decoded in a batch is decoded greedily at a fitted audio context, alone with
    beam search at 30 s (RecognizerConfig). en_ps_librivox_sense_0890's last window, read that way
    in a batch, says "ill-disposed" as "old-asposed" (alone: as said), 4 or 5 of its 14 words
    wrong, so whether it passed a bound of 0.35 depended on whether its final window shared a
    batch."""
    for name, messages in results.items():
        wer = {other: word_error_rate([clips[other].reference], [transcript(messages)]) for other in results}
        nearest = min(w for other, w in wer.items() if other != name)
        assert wer[name] <= nearest / 2, f"{name}: WER {wer[name]:.2f}: {transcript(messages)!r}"
    refs = [clips[name].reference for name in results]
    assert word_error_rate(refs, [transcript(m) for m in results.values()]) <= 0.15


def http_get(url: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=10) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()


def test_eight_concurrent_clients_get_their_own_transcripts(serving_model, clips) -> None:
    audio = {name: load_audio(c.wav) for name, c in clips.items()}

    async def run(url: str) -> dict[str, list[dict]]:
        results = await asyncio.gather(*(stream_file(url, audio[n], speed=1.0, label=n) for n in CLIPS))
        return dict(zip(CLIPS, results, strict=True))

    with LiveServer(serving_model, max_sessions=8) as server:
        results = asyncio.run(run(server.url))
        status, body = http_get(server.http + "/metrics")
    for name, messages in results.items():
        closed = check_stream(messages)
        assert isinstance(messages[0], Ready) and messages[0].config.label == name
        assert closed.reason == "eof"
        assert closed.audio_seconds == pytest.approx(len(audio[name]) / 16000, abs=0.01)
    check_own_transcripts(clips, results)
    assert status == 200
    assert re.search(r"^streamwhisper_sessions_accepted_total 8\.0$", body, re.M)
    batches = re.search(r"^streamwhisper_batch_size_count (\S+)$", body, re.M)
    mean = re.search(r"^streamwhisper_batch_size_sum (\S+)$", body, re.M)
    assert batches and mean and float(mean[1]) / float(batches[1]) > 1.0, "requests of sessions were batched"


def test_two_inference_workers_serve_concurrent_clients(serving_model, clips) -> None:
    """``server.workers = 2``: two threads call the one real recogniser at once (its fallback
    generators are per thread) and every client still gets its own transcript.

    The eight clips, as above. With four (56 words) the test failed about one run in 30: their
    windows were served now alone, now crowded, and en_ps_librivox_sense_0890 came out 5 to 8
    of its 14 words wrong (two partials agreeing on "I'd less" for "Unless", the crowded final's
    "old as opposed"), past the corpus bound or the identity one. With eight clients the
    windows are crowded throughout and that clip was 0 or 2 words wrong in 20 runs."""
    names = CLIPS
    audio = {name: load_audio(clips[name].wav) for name in names}

    async def run(url: str) -> list[list]:
        return list(await asyncio.gather(*(stream_file(url, audio[n], speed=1.0, label=n) for n in names)))

    with LiveServer(serving_model, max_sessions=len(names), workers=2) as server:
        # two batches at once, each slot with a spare thread for turns' finals
        assert server.inspect(lambda d: sum(t.is_alive() for t in d.ctx.worker._threads)) == 4
        results = asyncio.run(run(server.url))
        batches = server.inspect(lambda d: d.ctx.worker.stats.batches)
    for messages in results:
        assert check_stream(messages).reason == "eof"
    check_own_transcripts(clips, dict(zip(names, results, strict=True)))
    assert batches > len(names)


def test_a_vanishing_client_affects_no_one_else(serving_model, clips) -> None:
    jfk, other = load_audio(clips["en_jfk"].wav), load_audio(clips["en_lj_LJ001-0016"].wav)

    async def vanish(url: str) -> None:
        async with connect(url + "/v1/stream") as ws:
            await ws.recv()
            for i in range(0, 16000 * 4, 1600):  # mid-utterance...
                await ws.send(float32_to_pcm_s16le(other[i : i + 1600]))
                await asyncio.sleep(0.1)
            ws.transport.abort()  # ...the TCP connection drops without a close frame

    async def run(url: str) -> list[ServerMessage | Unknown]:
        results = await asyncio.gather(stream_file(url, jfk), vanish(url))
        return results[0]

    with LiveServer(serving_model) as server:
        messages = asyncio.run(run(server.url))
        time.sleep(0.5)
        # the vanished session waits resume_grace_s for its client, without a connection
        assert server.inspect(lambda d: [s.connected for s in d.ctx.sessions]) == [False]
        status, body = http_get(server.http + "/readyz")
    check_stream(messages)
    assert word_error_rate([clips["en_jfk"].reference], [transcript(messages)]) <= 0.2
    assert status == 200 and json.loads(body)["ready"] is True


def test_health_readiness_and_capacity(serving_model, jfk_audio) -> None:
    with LiveServer(serving_model, max_sessions=1) as server:
        assert http_get(server.http + "/healthz") == (200, "ok\n")
        assert http_get(server.http + "/nowhere")[0] == 404
        with sync_connect(server.url + "/v1/stream") as first:
            assert json.loads(first.recv())["type"] == "ready"
            status, body = http_get(server.http + "/readyz")
            assert status == 503 and json.loads(body) | {"mean_lag_s": 0} == json.loads(body) | {
                "ready": False,
                "sessions": 1,
                "free": 0,
                "mean_lag_s": 0,
            }
            with sync_connect(server.url + "/v1/stream") as second:
                error = json.loads(second.recv())
                assert error["type"] == "error" and error["code"] == "over_capacity"
                with pytest.raises(ConnectionClosed):
                    second.recv()
                assert second.close_code == 1013
            first.send(float32_to_pcm_s16le(jfk_audio[: 16000 * 3]))
            first.send(json.dumps({"type": "eof"}))
            messages = [json.loads(m) for m in first]
        assert messages[-1]["type"] == "closed" and first.close_code == 1000
        assert http_get(server.http + "/readyz")[0] == 200
        metrics = http_get(server.http + "/metrics")[1]
        assert re.search(r'^streamwhisper_sessions_refused_total\{reason="over_capacity"\} 1\.0$', metrics, re.M)
        assert re.search(r"^streamwhisper_audio_seconds_total 3\.0$", metrics, re.M)


def test_token_auth_origins_and_models(serving_model) -> None:
    with LiveServer(serving_model, auth_token="s3cret", allowed_origins=("https://ok.example",)) as server:
        url = server.url + "/v1/stream"
        for kwargs, code in [
            ({}, "unauthorized"),
            ({"additional_headers": {"Authorization": "Bearer wrong"}}, "unauthorized"),
            (
                {"additional_headers": {"Authorization": "Bearer s3cret"}, "origin": "https://evil.example"},
                "origin_not_allowed",
            ),
        ]:
            with sync_connect(url, **kwargs) as ws:
                error = json.loads(ws.recv())
                assert error == error | {"type": "error", "code": code}
                with pytest.raises(ConnectionClosed):
                    ws.recv()
                assert ws.close_code == 1008
        with sync_connect(url + "?token=s3cret&model=/etc/passwd") as ws:
            error = json.loads(ws.recv())
            assert error["code"] == "model_not_enabled" and "tiny.en" in error["message"]
            with pytest.raises(ConnectionClosed):
                ws.recv()
            assert ws.close_code == 1008
        with sync_connect(
            url, additional_headers={"Authorization": "Bearer s3cret"}, origin="https://ok.example"
        ) as ws:
            assert json.loads(ws.recv())["type"] == "ready"
        with sync_connect(url + "?token=s3cret") as ws:
            assert json.loads(ws.recv())["type"] == "ready"


def test_config_message_resampling_finalize_and_eof(serving_model, clips) -> None:
    """48 kHz stereo float32 audio, a config message, a forced endpoint mid-stream."""
    from streamwhisper.audio.convert import resample

    clip = clips["en_jfk"]
    audio48 = resample(load_audio(clip.wav), 16000, 48000)
    stereo = np.repeat(audio48[:, None], 2, axis=1).astype("<f4")

    async def run(url: str) -> list[ServerMessage | Unknown]:
        async with StreamClient.connect(url) as client:
            config = {"sample_rate": 48000, "encoding": "pcm_f32le", "channels": 2, "interim_results": False}
            await client.send(ConfigMessage(config))
            ready = await client.recv()
            assert isinstance(ready, Ready) and client.ready is ready
            assert dataclasses.asdict(ready.config) | config == dataclasses.asdict(ready.config)
            half = len(stereo) // 2
            for i in range(0, len(stereo), 4800):
                await client.send_audio(stereo[i : i + 4800, :].ravel())  # float32 as the config says
                if i <= half < i + 4800:
                    await client.finalize()
            await client.eof()
            return [ready] + [m async for m in client]

    with LiveServer(serving_model) as server:
        messages = asyncio.run(run(server.url))
    closed = check_stream(messages)
    assert closed.audio_seconds == pytest.approx(11.0, abs=0.01)
    assert not [m for m in messages if isinstance(m, Partial)], "interim_results=false sends no partials"
    finals = [m for m in messages if isinstance(m, Final)]
    # the forced endpoint's final ends with the last word before 5.5 s; the word cut there is
    # heard whole by the next utterance, which starts a second earlier
    forced = [m for m in finals if m.endpoint and 3.5 <= m.end <= 5.5]
    assert forced, (
        f"finalize at 5.5 s must end an utterance there: {[(m.start, m.end, m.endpoint, m.text) for m in finals]}"
    )
    assert word_error_rate([clip.reference], [transcript(messages)]) <= 0.2
    assert transcript(messages).lower().count("what") == 2  # "ask not what your country": nothing lost


def test_sigterm_mid_stream_delivers_finals_for_all_audio_sent(clips, tmp_path) -> None:
    """A real `streamwhisper serve` process; SIGTERM while clients are mid-utterance."""
    env = dict(os.environ, STREAMWHISPER_SERVER_PORT="0", STREAMWHISPER_MODEL_THREADS="1")
    proc = subprocess.Popen(
        [sys.executable, "-m", "streamwhisper", "serve"], stderr=subprocess.PIPE, text=True, env=env
    )
    try:
        assert proc.stderr is not None
        line = proc.stderr.readline()
        found = re.search(r"(ws://\S+):(\d+)/v1/stream", line)
        assert found, line + proc.stderr.read()
        url = f"{found[1]}:{found[2]}"
        names = ["en_jfk", "en_lj_LJ001-0016", "en_ps_librivox_sense_0890"]
        audio = {n: load_audio(clips[n].wav) for n in names}

        async def client(name: str, sent_all: asyncio.Event) -> tuple[list[ServerMessage | Unknown], int | None]:
            # resume=False: this test reads the server's own shutdown; a resuming client would go
            # on in a new session (tests/test_resume_live.py)
            async with StreamClient.connect(url, resume=False) as c:
                assert c.ready is not None
                x = audio[name]
                for i in range(0, len(x), 1600):
                    await c.send_audio(x[i : i + 1600])
                    await asyncio.sleep(0.025)  # 4x real time
                sent_all.set()
                messages = [c.ready] + [m async for m in c]  # no eof: the server ends it
                return messages, c.close_code

        async def run() -> list[tuple[list[ServerMessage | Unknown], int | None]]:
            events = [asyncio.Event() for _ in names]
            tasks = [asyncio.create_task(client(n, e)) for n, e in zip(names, events, strict=True)]
            for e in events:
                await e.wait()
            await asyncio.sleep(0.2)  # the tails of the clips are still pending
            proc.send_signal(signal.SIGTERM)
            return await asyncio.gather(*tasks)

        results = asyncio.run(run())
        assert proc.wait(timeout=60) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        assert proc.stderr is not None
        proc.stderr.close()
    for name, (messages, code) in zip(names, results, strict=True):
        closed = check_stream(messages)
        assert code == 1001 and closed.reason == "shutdown"
        assert closed.audio_seconds == pytest.approx(len(audio[name]) / 16000, abs=0.01)
        # every word heard arrives: few deletions (a lost tail); a misheard word is the model's
        reference, hypothesis = normalize(clips[name].reference), normalize(transcript(messages))
        deleted = jiwer.process_words(reference, hypothesis).deletions / len(reference.split())
        assert deleted <= 0.15, f"{name}: the tail was lost? {deleted:.2f} deleted: {transcript(messages)!r}"
        wer = word_error_rate([clips[name].reference], [transcript(messages)])
        assert wer <= 0.4, f"{name}: WER {wer:.2f}: {transcript(messages)!r}"
