"""Bad input on the Wyoming port of a real daemon: the server stays up and a Home Assistant-like
client beside the fuzz keeps its transcripts (the sibling of tests/test_server_fuzz.py)."""

from __future__ import annotations

import asyncio
import contextlib
import io
import json
import socket
import threading
import time

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from live_server import LiveServer
from wyoming.asr import Transcribe, Transcript
from wyoming.audio import AudioChunk, AudioStart, AudioStop
from wyoming.client import AsyncTcpClient
from wyoming.event import Event, read_event, write_event

from benchmarks.scoring import word_error_rate
from streamwhisper.audio.convert import float32_to_pcm_s16le
from streamwhisper.audio.files import load_audio

pytestmark = pytest.mark.slow  # end to end: the real model

LIMIT = 4096  # max_message_bytes of the fuzzed server: the largest payload it reads
ANSWERS = {"info", "pong", "error", "transcript-start", "transcript-chunk", "transcript", "transcript-stop"}


class Frame(bytes):
    """Bytes on the wire, whose repr stays short in hypothesis' reports."""

    def __repr__(self) -> str:
        return f"<{len(self)} bytes {bytes(self[:80])!r}>"


def frame(event: Event) -> Frame:
    """An event as the wyoming package writes it."""
    out = io.BytesIO()
    write_event(event, out)
    return Frame(out.getvalue())


def raw_frame(header: dict, section: bytes = b"") -> Frame:
    return Frame(json.dumps(header).encode() + b"\n" + section)


odd_values = st.one_of(st.none(), st.booleans(), st.integers(-5, 10**10), st.text(max_size=8), st.just([1]))
rates = st.one_of(st.sampled_from([8000, 16000, 22050, 44100, 48000]), odd_values)
widths = st.one_of(st.sampled_from([1, 2, 2, 2, 3, 4]), odd_values)
channel_counts = st.one_of(st.sampled_from([1, 1, 2, 8, 9]), odd_values)

# (frame bytes, whether the stream can be followed past it)
in_sync = st.one_of(
    st.just(Event("describe")),
    st.builds(lambda text: Event("ping", {"text": text}), st.text(max_size=10)),
    st.just(AudioStop().event()),
    st.builds(
        lambda language, name, sensitivity: Event(
            "transcribe", {"language": language, "name": name, "vad_sensitivity": sensitivity}
        ),
        st.one_of(st.sampled_from(["en", "en-US", "de", "klingon"]), odd_values),
        st.one_of(st.sampled_from(["tiny.en", "other"]), odd_values),
        st.one_of(st.sampled_from(["default", "relaxed", "aggressive", "loud"]), odd_values),
    ),
    st.just(Transcribe(language="en").event()),
    st.builds(
        lambda r, w, c: Event("audio-start", {"rate": r, "width": w, "channels": c}), rates, widths, channel_counts
    ),
    st.just(AudioStart(16000, 2, 1).event()),
    st.builds(
        lambda r, w, c, p: Event("audio-chunk", {"rate": r, "width": w, "channels": c}, p),
        rates,
        widths,
        channel_counts,
        st.binary(max_size=LIMIT),
    ),
    st.builds(lambda p: AudioChunk(16000, 2, 1, p).event(), st.binary(max_size=600)),
    st.builds(lambda kind: Event(kind, {"x": 1}), st.sampled_from(["select-program", "synthesize", "", "transcript"])),
).map(lambda e: (frame(e), True))
broken = st.one_of(
    st.binary(max_size=200).map(lambda b: Frame(b.replace(b"\n", b"") + b"\n")),  # garbage line
    st.just(raw_frame({"type": "audio-chunk", "payload_length": LIMIT + 1})),
    st.just(raw_frame({"type": "transcribe", "data_length": 2**40})),
    st.just(raw_frame({"type": "audio-stop", "data": [1]})),
    st.just(raw_frame({"data_length": 2})),
    st.just(Frame(b"[" * 50_000 + b"\n")),
    st.just(Frame(b"{" + b" " * 70_000)),  # a header line over the limit
).map(lambda b: (b, False))
bad_data = st.just((raw_frame({"type": "transcribe", "data_length": 5}, b"nope!"), True))  # a section, not JSON
steps_strategy = st.lists(st.one_of(in_sync, in_sync, broken, bad_data), min_size=1, max_size=5)


END = Event("pong", {"text": "end of the steps"})


def exchange(port: int, steps: list[tuple[bytes, bool]]) -> list[Event]:
    """Send the steps, then audio-stop and a ping; read until its pong (or the close)."""
    payload = b"".join(b for b, _ in steps) + frame(AudioStop().event()) + frame(Event("ping", END.data))
    received = bytearray()
    events: list[Event] = []
    with socket.create_connection(("127.0.0.1", port), timeout=120) as sock:
        sender = threading.Thread(target=lambda: _send_all(sock, payload))
        sender.start()
        while not events or events[-1] != END:
            data = sock.recv(65536)
            if not data:
                break
            received += data
            events = parse(bytes(received))
        sender.join()
    return events


def parse(received: bytes) -> list[Event]:
    """The whole events in what was received, read by the wyoming package."""
    stream = io.BytesIO(received)
    events = []
    while (event := read_event(stream)) is not None:
        events.append(event)
    return events


def _send_all(sock: socket.socket, data: bytes) -> None:
    with contextlib.suppress(OSError):  # the server closed after a broken frame
        sock.sendall(data)


def check_answer(events: list[Event], steps: list[tuple[bytes, bool]]) -> None:
    kinds = [e.type for e in events]
    assert set(kinds) <= ANSWERS, kinds
    for event in events:
        if event.type == "error":
            assert isinstance(event.data["text"], str) and event.data["text"]
            assert isinstance(event.data["code"], str) and event.data["code"] != "internal_error", event.data
    open_request = False
    for kind, nxt in zip(kinds, [*kinds[1:], ""], strict=False):
        if kind == "transcript-start":
            assert not open_request, kinds
            open_request = True
        elif kind in ("transcript-chunk", "transcript"):
            assert open_request, kinds
        if kind == "transcript":
            assert nxt == "transcript-stop", kinds
            open_request = False
    if all(follows for _, follows in steps):
        assert events[-1:] == [END] and not open_request, f"the connection must go on: {kinds}"


def home_assistant(port: int, speech: list[np.ndarray], out: dict[str, object]) -> None:
    """Requests as Home Assistant makes them, in real time, beside the fuzz: their transcripts in ``out``."""

    async def run() -> list[str]:
        texts = []
        async with AsyncTcpClient("127.0.0.1", port) as client:
            for audio in speech:
                data = float32_to_pcm_s16le(np.concatenate([audio, np.zeros(16000, np.float32)]))
                await client.write_event(Transcribe(language="en").event())
                await client.write_event(AudioStart(16000, 2, 1).event())
                answer = asyncio.create_task(_transcript(client))
                began = time.monotonic()
                for i in range(0, len(data), 2048):
                    await client.write_event(AudioChunk(16000, 2, 1, data[i : i + 2048]).event())
                    await asyncio.sleep(max(0.0, began + (i + 2048) / 32000 - time.monotonic()))
                await client.write_event(AudioStop().event())
                texts.append(await answer)
        return texts

    out["texts"] = asyncio.run(asyncio.wait_for(run(), 300))


async def _transcript(client: AsyncTcpClient) -> str:
    while True:
        event = await client.read_event()
        assert event is not None and event.type != "error", event
        if Transcript.is_type(event.type):
            return Transcript.from_event(event).text


def test_malformed_wyoming_input_leaves_the_server_and_home_assistant_unharmed(  # type: ignore[no-untyped-def]
    serving_model, clips, caplog: pytest.LogCaptureFixture
) -> None:
    spoken = [clips[n] for n in ("en_jfk", "en_lj_LJ001-0016", "en_ps_librivox_sense_0890")]
    healthy: dict[str, object] = {}
    with LiveServer(serving_model, wyoming_port=-1, max_message_bytes=LIMIT, max_sessions=8) as server:
        port = server.daemon.wyoming_port if server.daemon is not None else None
        assert port is not None
        good = threading.Thread(target=home_assistant, args=(port, [load_audio(c.wav) for c in spoken], healthy))
        good.start()
        count = 0

        @settings(
            max_examples=1000, deadline=None, database=None, derandomize=True, suppress_health_check=list(HealthCheck)
        )
        @given(steps=steps_strategy)
        def fuzz(steps: list[tuple[bytes, bool]]) -> None:
            nonlocal count
            count += 1
            check_answer(exchange(port, steps), steps)

        fuzz()
        good.join(timeout=300)

        async def drained() -> None:
            assert server.daemon is not None
            while server.daemon.ctx.sessions:  # noqa: ASYNC110  (the fuzz's closed connections end theirs)
                await asyncio.sleep(0.01)

        server.call(asyncio.wait_for(drained(), 30))
        events = exchange(port, [])  # still serving
    assert count >= 1000
    texts = healthy["texts"]
    assert isinstance(texts, list) and len(texts) == 3
    for clip, text in zip(spoken, texts, strict=True):
        assert word_error_rate([clip.reference], [text]) <= 0.35, text
    assert word_error_rate([" ".join(c.reference for c in spoken)], [" ".join(texts)]) <= 0.2, texts
    assert [e.type for e in events] == ["error", "pong"], "the audio-stop exchange() adds, then the pong"
    assert not [r for r in caplog.records if r.levelname == "ERROR"], "no connection or session failed"
