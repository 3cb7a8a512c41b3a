"""TTFS turn drivers beside the live WebSocket ones of :mod:`benchmarks.ttfs`: the client's clock
(audio at real time in 100 ms messages, the quiet between turns) and the OpenAI Realtime and
Wyoming sessions."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import time
from collections.abc import Awaitable, Callable

from benchmarks.ttfs_uploads import Clip
from streamwhisper.audio.convert import float32_to_pcm_s16le, resample

GAP_S = 1.0  # silence between turns


class Turn:
    """One turn's clock: when each 100 ms of its audio was sent."""

    def __init__(self) -> None:
        self.sent: list[tuple[float, float]] = []  # (stream seconds, monotonic) at each chunk

    def sent_at(self, stream_s: float) -> float:
        for audio_s, wall in self.sent:
            if audio_s >= stream_s - 1e-6:
                return wall
        return self.sent[-1][1]


async def paced(
    send: Callable[[bytes], Awaitable[None]], pcm: bytes, clock: list[float], turn: Turn, rate: int = 16000
) -> None:
    """Send s16le audio at real time in 100 ms messages; ``clock`` = [stream seconds so far,
    start monotonic]."""
    step = 2 * rate // 10
    for i in range(0, len(pcm), step):
        await send(pcm[i : i + step])
        clock[0] += len(pcm[i : i + step]) / (2 * rate)
        turn.sent.append((clock[0], time.monotonic()))
        await asyncio.sleep(max(0.0, clock[1] + clock[0] - time.monotonic()))


async def quiet_gap(clock: list[float]) -> None:
    """The pause between turns, in which a client with its own VAD sends nothing; then the
    stream's ``clock`` (as :func:`paced`'s) restarts from now, so that the next turn goes at real
    time however long the last answer took."""
    await asyncio.sleep(GAP_S)
    clock[1] = time.monotonic() - clock[0]


async def realtime_turns(base: str, clips: list[Clip], mode: str) -> list[float]:
    """OpenAI Realtime transcription with manual turns (LiveKit's local VAD + commit, Pipecat's
    default): PCM16 at 24 kHz in ``input_audio_buffer.append``; TTFS from ``commit`` to the
    item's ``...transcription.completed``."""
    from websockets.asyncio.client import connect

    out: list[float] = []
    update = {
        "type": "session.update",
        "session": {"type": "transcription", "audio": {"input": {"turn_detection": None}}},
    }
    async with connect(base + "/v1/realtime?intent=transcription") as ws:
        await ws.recv()  # session.created
        await ws.send(json.dumps(update))

        async def append(data: bytes) -> None:
            await ws.send(json.dumps({"type": "input_audio_buffer.append", "audio": base64.b64encode(data).decode()}))

        clock = [0.0, time.monotonic()]
        for head, _, _ in clips:
            await paced(append, float32_to_pcm_s16le(resample(head, 16000, 24000)), clock, Turn(), rate=24000)
            asked = time.monotonic()
            await ws.send('{"type":"input_audio_buffer.commit"}')
            got = float("nan")
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(30):
                    while True:
                        event = json.loads(await ws.recv())
                        if event["type"] == "conversation.item.input_audio_transcription.completed":
                            got = time.monotonic() - asked
                            break
            out.append(got)
            await quiet_gap(clock)
    return out


async def wyoming_turns(base: str, clips: list[Clip], mode: str) -> list[float]:
    """Wyoming (Home Assistant's client): one request per turn; TTFS from ``audio-stop``."""
    from wyoming.asr import Transcribe, Transcript
    from wyoming.audio import AudioChunk, AudioStart, AudioStop
    from wyoming.client import AsyncTcpClient

    host, port = WYOMING[0].rsplit(":", 1)
    out: list[float] = []
    async with AsyncTcpClient(host, int(port)) as client:
        clock = [0.0, time.monotonic()]
        for audio, _, _ in clips:
            await client.write_event(Transcribe(language="en").event())
            await client.write_event(AudioStart(rate=16000, width=2, channels=1).event())

            async def chunk(data: bytes) -> None:
                await client.write_event(AudioChunk(rate=16000, width=2, channels=1, audio=data).event())

            await paced(chunk, float32_to_pcm_s16le(audio), clock, Turn())
            asked = time.monotonic()
            await client.write_event(AudioStop().event())
            got = float("nan")
            while (event := await client.read_event()) is not None:
                if Transcript.is_type(event.type):
                    got = time.monotonic() - asked
                    break
            out.append(got)
            await quiet_gap(clock)
    return out


WYOMING: list[str] = []  # host:port of the daemon's Wyoming listener, once started
