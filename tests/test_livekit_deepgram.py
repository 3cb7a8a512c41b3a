"""LiveKit's Deepgram plugin (``livekit-plugins-deepgram``) as LiveKit agents use it, against a
real daemon with tiny.en: ``recognize()`` (``POST /v1/listen`` with a WAV body) and a live stream
with the plugin's default ``endpointing_ms=25``, headless, with no LiveKit server."""

from __future__ import annotations

import asyncio
from typing import Any

import aiohttp
import numpy as np
import pytest
from conftest import LJ, joined
from live_server import LiveServer

from benchmarks.scoring import word_error_rate
from streamwhisper.audio.convert import float32_to_pcm_s16le

pytestmark = pytest.mark.slow  # end to end: the real model

rtc = pytest.importorskip("livekit.rtc")
plugin = pytest.importorskip("livekit.plugins.deepgram")
agents_stt = pytest.importorskip("livekit.agents.stt")

JFK = "And so, my fellow Americans, ask not what your country can do for you, ask what you can do for your country."
TOKEN = "lk-local"


@pytest.fixture(scope="module")
def server(serving_model):  # type: ignore[no-untyped-def]
    with LiveServer(serving_model, auth_token=TOKEN) as live:
        yield live


def frame(audio: np.ndarray) -> Any:
    pcm = np.frombuffer(float32_to_pcm_s16le(audio), np.int16)
    return rtc.AudioFrame(pcm.tobytes(), 16000, 1, len(pcm))


def test_recognize_posts_a_wav(server, jfk_audio) -> None:  # type: ignore[no-untyped-def]
    async def recognize() -> str:
        async with aiohttp.ClientSession() as http:
            stt = plugin.STT(api_key=TOKEN, base_url=server.http + "/v1/listen", http_session=http)
            event = await stt.recognize(frame(jfk_audio))
            await stt.aclose()
        return str(event.alternatives[0].text)

    text = asyncio.run(recognize())
    assert word_error_rate([JFK], [text]) <= 0.2, text


async def _stream(url: str, audio: np.ndarray, endpointing_ms: int, speed: float = 2.0) -> list[Any]:
    """Stream ``audio`` through the plugin at ``speed`` x real time (a live source); its events."""
    events: list[Any] = []
    async with aiohttp.ClientSession() as http:
        stt = plugin.STT(api_key=TOKEN, base_url=url, http_session=http, endpointing_ms=endpointing_ms)
        stream = stt.stream()

        async def read() -> None:
            async for event in stream:
                events.append(event)

        reader = asyncio.create_task(read())
        chunk = 1600  # 100 ms
        for i in range(0, len(audio), chunk):
            stream.push_frame(frame(audio[i : i + chunk]))
            await asyncio.sleep(chunk / 16000 / speed)  # the source's pace, not a wait for a result
        stream.end_input()
        await asyncio.wait_for(reader, 120)
        await stt.aclose()
    return events


def test_a_stream_with_endpointing_25_is_as_accurate_as_the_default(server) -> None:  # type: ignore[no-untyped-def]
    """LiveKit's default endpointing_ms=25 gets a final marked speech_final at pauses (END_OF_SPEECH
    events), and the words are the ones the server's own 500 ms endpoint gives: the pauses are not
    decoded alone."""
    audio, reference = joined(LJ, 0.8)
    url = server.http + "/v1/listen"
    texts, ends = {}, {}
    for endpointing in (25, 500):  # LiveKit's default, and the server's own endpoint
        events = asyncio.run(_stream(url, audio, endpointing))
        finals = [e for e in events if e.type == agents_stt.SpeechEventType.FINAL_TRANSCRIPT]
        texts[endpointing] = " ".join(e.alternatives[0].text for e in finals if e.alternatives[0].text)
        ends[endpointing] = sum(e.type == agents_stt.SpeechEventType.END_OF_SPEECH for e in events)
    short, long = texts[25], texts[500]
    assert word_error_rate([reference], [short]) <= 0.12, short
    assert word_error_rate([reference], [short]) <= word_error_rate([reference], [long]) + 0.04, (short, long)
    # (sentence marks at breaths: test_streaming_e2e's replayed schedules)
    # a speech_final at each 0.8 s pause between the clips at least (the stream's end has none:
    # the plugin stops reading after its input ended)
    assert ends[25] >= len(LJ) - 1, ends
