"""Soak benchmark: sessions that come and go for a long time, in every protocol; RSS over time.

`load.py --hour` streams one session for an hour. A server in production sees sessions open
and close all day, in several protocols, some of them ended badly. This runs a real
`streamwhisper serve` process and ``--users`` clients for ``--minutes``, each opening one
session after another, in turn:

- ``native``: a read_en clip at real time over ``/v1/stream``, then ``eof``;
- ``native_drop``: half a clip, then the connection dropped without a close (the session waits
  ``resume_grace_s`` for its client, then is finalised);
- ``deepgram``: a clip over ``/v1/listen`` (linear16), then ``CloseStream``;
- ``wyoming``: a clip to the Wyoming port, as Home Assistant sends it;
- ``realtime``: a clip at 24 kHz over OpenAI Realtime (``/v1/realtime``), committed by the client;
- ``upload``: a clip posted to ``/v1/audio/transcriptions`` (multipart, as the openai SDK does);
- ``malformed``: a native session whose first message is not JSON (closed with 1007).

It prints the sessions of each kind, how many were refused for capacity (uploads: 429; streams
closed 1013 or a Wyoming error when the live sessions lag) and how many went wrong, the server's
RSS over time, and the drift: the median RSS of the last fifth against that of the second fifth
(after warm-up), and a least-squares slope over the second half in MB an hour. At the end it
waits out the resume grace and reads ``streamwhisper_sessions`` from ``/metrics``: 0 when every
session was let go. Figures only, never asserts.

    .venv/bin/python benchmarks/soak.py                   # 4 users, 40 minutes
    .venv/bin/python benchmarks/soak.py --users 6 --minutes 120
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import io
import itertools
import json
import os
import re
import sys
import time
import wave
from collections import Counter
from pathlib import Path

import aiohttp
import numpy as np
import psutil
import soxr
import websockets
from wyoming.asr import Transcribe, Transcript
from wyoming.audio import AudioChunk, AudioStart, AudioStop
from wyoming.client import AsyncTcpClient
from wyoming.error import Error

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.load import MANIFEST, start_server  # noqa: E402
from benchmarks.scoring import read_manifest  # noqa: E402
from streamwhisper.audio.convert import float32_to_pcm_s16le as pcm16  # noqa: E402
from streamwhisper.audio.files import load_audio  # noqa: E402
from streamwhisper.bench import cpu_name  # noqa: E402
from streamwhisper.client import StreamClient  # noqa: E402

KINDS = ("native", "native_drop", "deepgram", "wyoming", "realtime", "upload", "malformed")
CHUNK = 1600  # samples a message: 100 ms


def wav_bytes(audio: np.ndarray) -> bytes:
    buf = io.BytesIO()
    with wave.open(buf, "wb") as w:
        w.setparams((1, 2, 16000, 0, "NONE", "not compressed"))
        w.writeframes(pcm16(audio))
    return buf.getvalue()


async def paced(audio: np.ndarray):
    """``audio`` in 100 ms chunks at real time."""
    began = time.monotonic()
    for i in range(0, len(audio), CHUNK):
        yield audio[i : i + CHUNK]
        await asyncio.sleep(max(0.0, began + (i + CHUNK) / 16000 - time.monotonic()))


async def native(base: str, audio: np.ndarray) -> bool:
    async with StreamClient.connect(base, sample_rate=16000) as c:
        reader = asyncio.create_task(_drain(c))
        async for chunk in paced(audio):
            await c.send_audio(chunk)
        await c.eof()
        return bool(await reader)


async def _drain(client: StreamClient) -> int:
    return len([m async for m in client])


async def native_drop(base: str, audio: np.ndarray) -> bool:
    ws = await websockets.connect(base + "/v1/stream?sample_rate=16000&encoding=pcm_s16le")
    ready = json.loads(await ws.recv())
    async for chunk in paced(audio[: len(audio) // 2]):
        await ws.send(pcm16(chunk))
    ws.transport.abort()  # no close frame: the session is detached, not ended
    return ready.get("type") == "ready"


async def deepgram(base: str, audio: np.ndarray) -> bool:
    url = base + "/v1/listen?encoding=linear16&sample_rate=16000&interim_results=true"
    async with websockets.connect(url) as ws:

        async def read() -> int:
            return len([m async for m in ws if json.loads(m).get("is_final")])

        reader = asyncio.create_task(read())
        try:
            async for chunk in paced(audio):
                await ws.send(pcm16(chunk))
            await ws.send(json.dumps({"type": "CloseStream"}))
        finally:
            await asyncio.wait([reader])  # (its outcome is the session's, closed or not)
        return await reader > 0


async def wyoming(port: int, audio: np.ndarray) -> bool | str:
    async with AsyncTcpClient("127.0.0.1", port) as client:
        await client.write_event(Transcribe().event())
        await client.write_event(AudioStart(rate=16000, width=2, channels=1).event())
        async for chunk in paced(audio):
            await client.write_event(AudioChunk(rate=16000, width=2, channels=1, audio=pcm16(chunk)).event())
        await client.write_event(AudioStop().event())
        while (event := await client.read_event()) is not None:
            if Transcript.is_type(event.type):
                return bool(Transcript.from_event(event).text)
            if Error.is_type(event.type):
                return str(Error.from_event(event).code)
    return False


async def realtime(base: str, audio: np.ndarray) -> bool:
    """As the openai SDK's ``client.realtime.connect`` talks, with the client's commit."""
    async with websockets.connect(base + "/v1/realtime?intent=transcription") as ws:
        await ws.recv()  # session.created
        update = {"type": "transcription", "audio": {"input": {"turn_detection": None}}}
        await ws.send(json.dumps({"type": "session.update", "session": update}))
        async for chunk in paced(audio):
            pcm = base64.b64encode(pcm16(soxr.resample(chunk, 16000, 24000))).decode()
            await ws.send(json.dumps({"type": "input_audio_buffer.append", "audio": pcm}))
        await ws.send(json.dumps({"type": "input_audio_buffer.commit"}))
        async for message in ws:
            event = json.loads(message)
            if event["type"] == "conversation.item.input_audio_transcription.completed":
                return bool(event["transcript"])
            if event["type"] == "error":
                return False
    return False


async def upload(http: aiohttp.ClientSession, base: str, audio: np.ndarray) -> bool | str:
    """True when transcribed; the error's code when refused for capacity (429, which the
    openai SDK retries): ``max_uploads`` are at once, or the live sessions lag."""
    form = aiohttp.FormData()
    form.add_field("model", "whisper-1")
    form.add_field("file", wav_bytes(audio), filename="clip.wav", content_type="audio/wav")
    async with http.post(base.replace("ws", "http", 1) + "/v1/audio/transcriptions", data=form) as r:
        body = await r.json()
        if r.status == 429:
            return str(body["error"]["code"])
        return r.status == 200 and bool(body.get("text"))


async def malformed(base: str) -> bool:
    async with websockets.connect(base + "/v1/stream?sample_rate=16000") as ws:
        await ws.recv()  # ready
        await ws.send("{not json")
        try:
            async for _ in ws:
                pass
        except websockets.ConnectionClosed:
            pass
        return ws.close_code == 1007


async def session(
    kind: str, http: aiohttp.ClientSession, base: str, wyoming_port: int, audio: np.ndarray
) -> bool | str:
    """One session of ``kind``: did it go as it should (or why was it refused)?"""
    if kind == "native":
        return await native(base, audio)
    if kind == "native_drop":
        return await native_drop(base, audio)
    if kind == "deepgram":
        return await deepgram(base, audio)
    if kind == "wyoming":
        return await wyoming(wyoming_port, audio)
    if kind == "realtime":
        return await realtime(base, audio)
    if kind == "upload":
        return await upload(http, base, audio)
    return await malformed(base)


def overloaded(exc: Exception) -> bool:
    """Whether the server refused or closed the session as overloaded (1013: its live sessions
    lag), as it should under more load than the machine carries."""
    if isinstance(exc, websockets.ConnectionClosed):
        return exc.rcvd is not None and exc.rcvd.code == 1013
    return isinstance(exc, ConnectionError) and "(1013)" in str(exc)


async def user(n: int, base: str, wyoming_port: int, clips: list[np.ndarray], until: float, tally: Counter) -> None:
    pick = itertools.count(n * 7)
    async with aiohttp.ClientSession() as http:
        for turn in itertools.count(n):
            if time.monotonic() >= until:
                return
            kind = KINDS[turn % len(KINDS)]
            try:
                ok = await session(kind, http, base, wyoming_port, clips[next(pick) % len(clips)])
            except (OSError, websockets.WebSocketException, aiohttp.ClientError) as exc:
                ok = False
                if overloaded(exc):
                    ok = "overloaded (1013)"
                else:
                    tally[f"{kind} error {type(exc).__name__}"] += 1
            if isinstance(ok, str):
                tally[f"{kind} refused {ok}"] += 1
            tally[(kind, "refused" if isinstance(ok, str) else "ok" if ok else "wrong")] += 1


async def watch_rss(pid: int, until: float, every: float, samples: list[tuple[float, float]]) -> None:
    proc, began = psutil.Process(pid), time.monotonic()
    while time.monotonic() < until:
        samples.append((time.monotonic() - began, proc.memory_info().rss / 2**20))
        await asyncio.sleep(every)


async def open_sessions(base: str) -> float | None:
    async with aiohttp.ClientSession() as http, http.get(base.replace("ws", "http", 1) + "/metrics") as r:
        found = re.search(r"^streamwhisper_sessions (\S+)$", await r.text(), re.M)
        return float(found[1]) if found else None


def drift(samples: list[tuple[float, float]]) -> dict[str, float]:
    rss = np.array([s for _, s in samples])
    t = np.array([t for t, _ in samples]) / 3600
    fifth = len(rss) // 5
    half = len(rss) // 2
    slope = np.polyfit(t[half:], rss[half:], 1)[0] if len(rss) - half >= 3 else float("nan")
    return {
        "second_fifth_mb": round(float(np.median(rss[fifth : 2 * fifth])), 1),
        "last_fifth_mb": round(float(np.median(rss[-fifth:])), 1),
        "peak_mb": round(float(rss.max()), 1),
        "slope_second_half_mb_per_hour": round(float(slope), 1),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--users", type=int, default=4, help="clients at once")
    parser.add_argument("--minutes", type=float, default=40.0)
    parser.add_argument("--every", type=float, default=5.0, help="seconds between RSS samples")
    parser.add_argument("server_args", nargs="*", help="extra `serve` flags (e.g. --model base)")
    args = parser.parse_args()
    clips = [load_audio(c.wav) for c in read_manifest(MANIFEST, ["read_en"]) if 2.5 <= c.seconds <= 12]
    os.environ["STREAMWHISPER_SERVER_WYOMING_PORT"] = "-1"
    proc, base, lines = start_server(args.server_args, log_lines=2)
    port = next((int(m[1]) for line in lines if (m := re.search(r"Wyoming .* on tcp://\S+:(\d+)", line))), None)
    if port is None:
        proc.kill()
        raise SystemExit(f"no Wyoming port in the server's log: {lines}")
    print(f"cpu: {cpu_name()}  users: {args.users}  minutes: {args.minutes}", flush=True)
    tally: Counter = Counter()
    samples: list[tuple[float, float]] = []
    try:

        async def run() -> float | None:
            until = time.monotonic() + args.minutes * 60
            await asyncio.gather(
                watch_rss(proc.pid, until, args.every, samples),
                *(user(n, base, port, clips, until, tally) for n in range(args.users)),
            )
            await asyncio.sleep(35)  # past resume_grace_s (30 s): detached sessions are let go
            return await open_sessions(base)

        still_open = asyncio.run(run())
    finally:
        proc.terminate()
        proc.wait(timeout=60)
    for kind in KINDS:
        counts = ", ".join(f"{tally[(kind, outcome)]} {outcome}" for outcome in ("ok", "refused", "wrong"))
        print(f"{kind}: {counts}", flush=True)
    for key, n in sorted((k, n) for k, n in tally.items() if isinstance(k, str)):
        print(f"  {key}: {n}")
    step = max(len(samples) // 16, 1)
    print("rss_mb over time (min, MB):", [(round(t / 60, 1), round(r)) for t, r in samples[::step]], flush=True)
    print(" ".join(f"{k}={v}" for k, v in drift(samples).items()), f"sessions_open_at_end={still_open}", flush=True)


if __name__ == "__main__":
    main()
