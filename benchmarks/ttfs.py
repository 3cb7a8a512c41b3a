"""TTFS: how soon each endpoint's client gets the final text of a turn, one stream and N at once.

A real ``streamwhisper serve`` process; each client streams eval read_en clips (one clip, one
turn) at real time over one protocol and, per turn, measures:

- ``finalize``: from the client's end-of-turn message, sent right after the clip's last sample
  (native ``finalize``, Deepgram ``Finalize``, OpenAI Realtime ``input_audio_buffer.commit``,
  Wyoming ``audio-stop``), to the final text of the turn;
- ``endpoint``: the client keeps sending silence; from the end of the turn's last word (its time
  in the stream, when that audio was sent) to the final the server's own endpointing makes.

REST endpoints (OpenAI ``/v1/audio/transcriptions``, Deepgram ``POST /v1/listen``) have no live
turn: their TTFS is from the request's last byte to the answer, for the clip as a WAV file.
Prints one JSON line per (endpoint, mode, streams) and a table. Figures only, never asserts.

    .venv/bin/python benchmarks/ttfs.py                              # every endpoint, 1 and 8 streams
    .venv/bin/python benchmarks/ttfs.py --endpoint deepgram --streams 1 --limit 10
"""

from __future__ import annotations

import argparse
import asyncio
import io
import json
import sys
import time
import wave
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import aiohttp
import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks._common import emit, shared_data_dir, table  # noqa: E402
from benchmarks.load import pct, start_server  # noqa: E402
from benchmarks.scoring import read_manifest  # noqa: E402
from streamwhisper.audio.convert import float32_to_pcm_s16le  # noqa: E402
from streamwhisper.audio.files import load_audio  # noqa: E402
from streamwhisper.bench import cpu_name  # noqa: E402

LastEnd = Callable[[dict], float | None]  # a final's last word end (stream seconds), or None
CHUNK = 1600  # 100 ms per message, as live clients send
GAP_S = 1.0  # silence between turns
ENDPOINT_WAIT_S = 5.0  # silence sent after a turn in endpoint mode, at most


class Turn:
    """One turn's clock: when each 100 ms of its audio was sent, and when its final came."""

    def __init__(self) -> None:
        self.sent: list[tuple[float, float]] = []  # (stream seconds, monotonic) at each chunk
        self.asked = 0.0  # finalize sent
        self.final_at = 0.0
        self.last_word_end = 0.0  # stream seconds

    def sent_at(self, stream_s: float) -> float:
        for audio_s, wall in self.sent:
            if audio_s >= stream_s - 1e-6:
                return wall
        return self.sent[-1][1]


async def _paced(send: Callable[[bytes], Awaitable[None]], pcm: bytes, clock: list[float], turn: Turn) -> None:
    """Send s16le audio at real time; ``clock`` = [stream seconds so far, start monotonic]."""
    for i in range(0, len(pcm), 2 * CHUNK):
        await send(pcm[i : i + 2 * CHUNK])
        clock[0] += len(pcm[i : i + 2 * CHUNK]) / 32000
        turn.sent.append((clock[0], time.monotonic()))
        await asyncio.sleep(max(0.0, clock[1] + clock[0] - time.monotonic()))


async def native_turns(base: str, clips: list[np.ndarray], mode: str) -> list[float]:
    """The native protocol at /v1/stream."""
    from websockets.asyncio.client import connect

    out: list[float] = []
    async with connect(base + "/v1/stream?sample_rate=16000&interim_results=false") as ws:
        await ws.recv()  # ready
        clock = [0.0, time.monotonic()]
        for audio in clips:
            turn = Turn()
            await _paced(ws.send, float32_to_pcm_s16le(audio), clock, turn)
            if mode == "finalize":
                turn.asked = time.monotonic()
                await ws.send('{"type":"finalize"}')
            final = await _until(ws, _native_final, mode, clock, turn, _native_last_end)
            out.append(_ttfs(turn, final, mode, _native_last_end))
            await _paced(ws.send, bytes(int(GAP_S * 32000)), clock, Turn())
        await ws.send('{"type":"eof"}')
    return out


async def deepgram_turns(base: str, clips: list[np.ndarray], mode: str) -> list[float]:
    """Deepgram's live API at /v1/listen, as LiveKit's plugin configures it (endpointing=25)."""
    from websockets.asyncio.client import connect

    out: list[float] = []
    query = "encoding=linear16&sample_rate=16000&punctuate=true&interim_results=true&endpointing=25"
    async with connect(f"{base}/v1/listen?{query}") as ws:
        clock = [0.0, time.monotonic()]
        for audio in clips:
            turn = Turn()
            await _paced(ws.send, float32_to_pcm_s16le(audio), clock, turn)
            if mode == "finalize":
                turn.asked = time.monotonic()
                await ws.send('{"type":"Finalize"}')
            done = _deepgram_finalized if mode == "finalize" else _deepgram_speech_final
            final = await _until(ws, done, mode, clock, turn, _deepgram_last_end)
            out.append(_ttfs(turn, final, mode, _deepgram_last_end))
            await _paced(ws.send, bytes(int(GAP_S * 32000)), clock, Turn())
        await ws.send('{"type":"CloseStream"}')
    return out


def _native_final(m: dict) -> bool:
    return m.get("type") == "final" and bool(m.get("endpoint"))


def _native_last_end(m: dict) -> float | None:
    return m["words"][-1]["end"] if m.get("words") else None


def _deepgram_finalized(m: dict) -> bool:
    return m.get("type") == "Results" and bool(m.get("from_finalize"))


def _deepgram_speech_final(m: dict) -> bool:
    return m.get("type") == "Results" and bool(m.get("speech_final"))


def _deepgram_last_end(m: dict) -> float | None:
    words = m["channel"]["alternatives"][0]["words"]
    return words[-1]["end"] if words else None


async def _until(
    ws: Any, done: Callable[[dict], bool], mode: str, clock: list[float], turn: Turn, last_end: LastEnd
) -> dict | None:
    """Read until ``done``; in endpoint mode keep sending silence meanwhile, and wait for the
    final whose last word is in the turn's last second (an earlier pause in the clip has its own)."""
    turn_end = clock[0]
    silence: asyncio.Task[None] | None = None
    if mode == "endpoint":
        silence = asyncio.create_task(_paced(ws.send, bytes(int(ENDPOINT_WAIT_S * 32000)), clock, Turn()))
    try:
        async with asyncio.timeout(ENDPOINT_WAIT_S + 30):
            while True:
                message = json.loads(await ws.recv())
                end = last_end(message) if mode == "endpoint" and done(message) else None
                if done(message) and (mode == "finalize" or (end is not None and end >= turn_end - 1.0)):
                    turn.final_at = time.monotonic()
                    return message
    except TimeoutError:
        return None
    finally:
        if silence is not None:
            silence.cancel()


def _ttfs(turn: Turn, final: dict | None, mode: str, last_end: LastEnd) -> float:
    if final is None:
        return float("nan")
    if mode == "finalize":
        return turn.final_at - turn.asked
    end = last_end(final)
    return turn.final_at - turn.sent_at(end) if end is not None else float("nan")


def _wav(audio: np.ndarray) -> bytes:
    buf = io.BytesIO()
    with wave.open(buf, "wb") as w:
        w.setnchannels(1), w.setsampwidth(2), w.setframerate(16000)
        w.writeframes(float32_to_pcm_s16le(audio))
    return buf.getvalue()


async def _rest(clips: list[np.ndarray], post: Callable[[aiohttp.ClientSession, bytes], Awaitable[Any]]) -> list[float]:
    out = []
    async with aiohttp.ClientSession() as http:
        for audio in clips:
            began = time.monotonic()
            await post(http, _wav(audio))
            out.append(time.monotonic() - began)
    return out


async def openai_rest_turns(base: str, clips: list[np.ndarray], mode: str) -> list[float]:
    async def post(http: aiohttp.ClientSession, body: bytes) -> Any:
        form = aiohttp.FormData()
        form.add_field("file", body, filename="turn.wav", content_type="audio/wav")
        form.add_field("model", "whisper-1")
        async with http.post(base.replace("ws", "http", 1) + "/v1/audio/transcriptions", data=form) as r:
            return await r.json()

    return await _rest(clips, post)


async def deepgram_rest_turns(base: str, clips: list[np.ndarray], mode: str) -> list[float]:
    async def post(http: aiohttp.ClientSession, body: bytes) -> Any:
        url = base.replace("ws", "http", 1) + "/v1/listen?punctuate=true"
        async with http.post(url, data=body, headers={"Content-Type": "audio/wav"}) as r:
            return await r.json()

    return await _rest(clips, post)


#: endpoint -> (turn driver, modes it has)
ENDPOINTS: dict[str, tuple[Callable[[str, list[np.ndarray], str], Awaitable[list[float]]], tuple[str, ...]]] = {
    "native": (native_turns, ("finalize", "endpoint")),
    "deepgram": (deepgram_turns, ("finalize", "endpoint")),
    "openai-rest": (openai_rest_turns, ("upload",)),
    "deepgram-rest": (deepgram_rest_turns, ("upload",)),
}


async def run(base: str, driver: Any, clips: list[np.ndarray], mode: str, streams: int) -> list[float]:
    """``streams`` clients at once, each with the clips rotated (no two say the same at once)."""
    jobs = [driver(base, clips[i:] + clips[:i], mode) for i in range(streams)]
    results = await asyncio.gather(*jobs)
    return [t for r in results for t in r]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--endpoint", action="append", choices=sorted(ENDPOINTS), help="repeatable; default all")
    parser.add_argument("--streams", type=int, action="append", help="concurrent clients (repeatable; default 1 8)")
    parser.add_argument("--limit", type=int, default=20, help="read_en clips per client (default 20)")
    parser.add_argument("--server-arg", action="append", default=[], help="passed to streamwhisper serve")
    args = parser.parse_args()
    manifest = shared_data_dir() / "eval" / "manifest.tsv"
    clips = [load_audio(c.wav) for c in read_manifest(manifest, ["read_en"])[: args.limit]]
    proc, base = start_server(args.server_arg)
    rows = []
    try:
        for name in args.endpoint or list(ENDPOINTS):
            driver, modes = ENDPOINTS[name]
            for streams in args.streams or [1, 8]:
                for mode in modes:
                    times = asyncio.run(run(base, driver, clips, mode, streams))
                    ok = [t for t in times if t == t]
                    record = {
                        "endpoint": name,
                        "mode": mode,
                        "streams": streams,
                        "turns": len(times),
                        "missing": len(times) - len(ok),
                        "ttfs_p50": round(pct(ok, 50) or float("nan"), 3),
                        "ttfs_p95": round(pct(ok, 95) or float("nan"), 3),
                        "cpu": cpu_name(),
                    }
                    emit(record)
                    rows.append([name, mode, streams, len(ok), record["ttfs_p50"], record["ttfs_p95"]])
    finally:
        proc.terminate()
        proc.wait(timeout=60)
    print(table(["endpoint", "mode", "streams", "turns", "p50 s", "p95 s"], rows), file=sys.stderr)


if __name__ == "__main__":
    main()
