"""The upload endpoints' turns for ``benchmarks/ttfs.py``: OpenAI ``POST /v1/audio/transcriptions``
and Deepgram ``POST /v1/listen``, each turn's clip sent as a WAV file; TTFS from the request's
last byte to the answer."""

from __future__ import annotations

import io
import time
import wave
from collections.abc import Awaitable, Callable

import aiohttp
import numpy as np

from streamwhisper.audio.convert import float32_to_pcm_s16le

# a turn's audio up to the client's end-of-turn message, the rest, and where its speech ends (s)
Clip = tuple[np.ndarray, np.ndarray, float]


def _wav(audio: np.ndarray) -> bytes:
    buf = io.BytesIO()
    with wave.open(buf, "wb") as w:
        w.setnchannels(1), w.setsampwidth(2), w.setframerate(16000)
        w.writeframes(float32_to_pcm_s16le(audio))
    return buf.getvalue()


async def _rest(clips: list[Clip], post: Callable[[aiohttp.ClientSession, bytes], Awaitable[int]]) -> list[float]:
    """Upload each clip; the seconds to each answer, NaN for a refusal (``max_uploads``: 429)."""
    out = []
    async with aiohttp.ClientSession() as http:
        for head, tail, _ in clips:
            began = time.monotonic()
            status = await post(http, _wav(np.concatenate([head, tail])))
            out.append(time.monotonic() - began if status == 200 else float("nan"))
    return out


async def openai_rest_turns(base: str, clips: list[Clip], mode: str) -> list[float]:
    async def post(http: aiohttp.ClientSession, body: bytes) -> int:
        form = aiohttp.FormData()
        form.add_field("file", body, filename="turn.wav", content_type="audio/wav")
        form.add_field("model", "whisper-1")
        async with http.post(base.replace("ws", "http", 1) + "/v1/audio/transcriptions", data=form) as r:
            await r.read()
            return r.status

    return await _rest(clips, post)


async def deepgram_rest_turns(base: str, clips: list[Clip], mode: str) -> list[float]:
    async def post(http: aiohttp.ClientSession, body: bytes) -> int:
        url = base.replace("ws", "http", 1) + "/v1/listen?punctuate=true"
        async with http.post(url, data=body, headers={"Content-Type": "audio/wav"}) as r:
            await r.read()
            return r.status

    return await _rest(clips, post)
