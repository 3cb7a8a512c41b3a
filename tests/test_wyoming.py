"""The Wyoming port (Home Assistant's speech-to-text), driven by the ``wyoming`` package's own client.

Fast tests: the real Daemon in the test's loop with the fake recogniser of ``runtime_fakes`` (it
hears the word ``w<i>`` every half second) and real speech for the real VAD; limits fire when the
test moves the loop's clock forward. Slow tests: a LiveServer with tiny.en and jfk, scored by WER.
Nothing sleeps.
"""

from __future__ import annotations

import asyncio
import socket
import struct
import sys
import types
from typing import Any

import numpy as np
import pytest
from live_server import LiveServer
from runtime_fakes import TimedRecognizer, advance, on_clock_loop, running_daemon
from wyoming.asr import Transcribe, Transcript
from wyoming.audio import AudioChunk, AudioStart, AudioStop
from wyoming.client import AsyncTcpClient
from wyoming.error import Error
from wyoming.event import Event, async_read_event
from wyoming.info import Describe, Info
from wyoming.ping import Ping

from benchmarks.scoring import word_error_rate
from streamwhisper import __version__
from streamwhisper.audio.convert import float32_to_pcm_s16le, resample
from streamwhisper.cli import build_parser, resolve_config
from streamwhisper.model.tokenizer import LANGUAGES
from streamwhisper.runtime.dialects.wyoming import model_languages
from streamwhisper.runtime.server import Daemon
from streamwhisper.runtime.wyoming_server import MAX_LINE

pytestmark = pytest.mark.timeout(60)  # a broken connection hangs its test instead of failing it

JFK = "And so, my fellow Americans, ask not what your country can do for you, ask what you can do for your country."
STREAMED = ["transcript-start", "transcript-chunk", "transcript", "transcript-stop"]


def pcm(audio: np.ndarray, silence_s: float = 0.0, rate: int = 16000, channels: int = 1) -> bytes:
    samples = np.concatenate([audio, np.zeros(int(silence_s * rate), np.float32)])
    return float32_to_pcm_s16le(np.repeat(samples, channels))


async def send_audio(client: AsyncTcpClient, audio: bytes, rate: int = 16000, channels: int = 1) -> None:
    """Audio as Home Assistant sends it: chunks of 1024 samples."""
    step = 1024 * 2 * channels
    for i in range(0, len(audio), step):
        await client.write_event(AudioChunk(rate, 2, channels, audio[i : i + step]).event())


async def send_request(
    client: AsyncTcpClient, audio: bytes, rate: int = 16000, channels: int = 1, stop: bool = True
) -> None:
    await client.write_event(Transcribe(language="en").event())
    await client.write_event(AudioStart(rate, 2, channels).event())
    await send_audio(client, audio, rate, channels)
    if stop:
        await client.write_event(AudioStop().event())


async def read_answer(client: AsyncTcpClient) -> list[Event]:
    """Events up to and including ``transcript-stop``."""
    events: list[Event] = []
    while not events or events[-1].type != "transcript-stop":
        event = await client.read_event()
        assert event is not None, f"closed after {events}"
        events.append(event)
    return events


def transcript_of(events: list[Event]) -> str:
    """The transcript of one answer, after checking the streaming events' order and that the
    chunks concatenate to it."""
    kinds = [e.type for e in events if e.type != "error"]
    assert kinds[0] == "transcript-start" and kinds[-2:] == ["transcript", "transcript-stop"], kinds
    assert set(kinds[1:-2]) <= {"transcript-chunk"}, kinds
    text = Transcript.from_event(events[-2]).text
    assert "".join(e.data["text"] for e in events if e.type == "transcript-chunk") == text
    return text


def error_codes(events: list[Event]) -> list[str | None]:
    return [Error.from_event(e).code for e in events if e.type == "error"]


def fake_words(text: str) -> list[int]:
    """The fake speaker's words in a transcript, each once and in order."""
    numbers = [int(w.removeprefix("w")) for w in text.split()]
    assert numbers and numbers == sorted(set(numbers)), text
    return numbers


async def describe(client: AsyncTcpClient) -> Info:
    await client.write_event(Describe().event())
    event = await client.read_event()
    assert event is not None and Info.is_type(event.type), event
    return Info.from_event(event)


async def pong(client: AsyncTcpClient) -> list[Event]:
    """A ping's round trip: the events before its pong (the server has read all that was sent)."""
    await client.write_event(Ping(text="barrier").event())
    events: list[Event] = []
    while True:
        event = await client.read_event()
        assert event is not None, f"closed after {events}"
        if event.type == "pong":
            return events
        events.append(event)


def wyoming(daemon: Daemon) -> AsyncTcpClient:
    assert daemon.wyoming_port is not None
    return AsyncTcpClient("127.0.0.1", daemon.wyoming_port)


# --- fast: the fake recogniser ------------------------------------------------------------------


def test_the_wyoming_port_is_off_by_default_and_a_flag_turns_it_on() -> None:
    args = build_parser().parse_args(["serve"])
    assert (resolve_config(args).server.wyoming_port, resolve_config(args).server.wyoming_zeroconf) == (0, False)
    args = build_parser().parse_args(["serve", "--wyoming-port", "10300", "--wyoming-zeroconf"])
    server = resolve_config(args).server
    assert (server.wyoming_port, server.wyoming_zeroconf) == (10300, True)


def test_info_lists_english_for_an_english_model_and_every_language_for_a_multilingual_one() -> None:
    def recognizer(multilingual: bool, languages: int) -> Any:
        return types.SimpleNamespace(model=types.SimpleNamespace(is_multilingual=multilingual, num_languages=languages))

    assert model_languages(recognizer(False, 99), "tiny.en") == ["en"]
    assert model_languages(recognizer(True, 99), "base") == list(LANGUAGES)[:99]
    assert model_languages(recognizer(True, 100), "large-v3")[-1] == "yue"


@on_clock_loop
async def test_requests_on_one_connection_get_start_chunks_transcript_and_stop(jfk_audio: np.ndarray) -> None:
    async with running_daemon(TimedRecognizer()) as daemon:
        assert daemon.wyoming_port is None, "off unless configured"
    async with running_daemon(TimedRecognizer(), wyoming_port=-1) as daemon, wyoming(daemon) as client:
        info = await describe(client)
        assert info.asr[0].models[0].name == "fake" and info.asr[0].supports_transcript_streaming
        await send_request(client, pcm(jfk_audio))
        first = fake_words(transcript_of(await read_answer(client)))
        assert first[0] <= 1 and first[-1] >= 20, first  # jfk's 11 s: w0 ... w21
        # the next request on the same connection, at another rate, in stereo
        await send_request(client, pcm(resample(jfk_audio, 16000, 22050), rate=22050, channels=2), 22050, 2)
        second = fake_words(transcript_of(await read_answer(client)))
        assert second == first
        assert (await describe(client)).asr[0].name == "streamwhisper"
        assert not daemon.ctx.sessions
        metrics = daemon.metrics.render().decode()
    assert "streamwhisper_sessions_accepted_total 2.0" in metrics


@on_clock_loop
async def test_the_transcript_comes_when_the_speaker_stops_before_audio_stop(jfk_audio: np.ndarray) -> None:
    async with running_daemon(TimedRecognizer(), wyoming_port=-1) as daemon, wyoming(daemon) as client:
        answer = asyncio.create_task(read_answer(client))
        await send_request(client, pcm(jfk_audio, silence_s=3.0), stop=False)
        events = await answer  # before any audio-stop: the endpoint after jfk ended the request
        assert fake_words(transcript_of(events))[-1] >= 20
        # the rest of the request's audio is dropped until its audio-stop; the connection goes on
        await send_audio(client, pcm(jfk_audio[: 3 * 16000]))
        await client.write_event(AudioStop().event())
        assert (await describe(client)).asr[0].name == "streamwhisper", "nothing else was sent"
        assert not daemon.ctx.sessions


@on_clock_loop
async def test_bad_events_get_an_error_and_the_connection_goes_on(jfk_audio: np.ndarray) -> None:
    audio = pcm(jfk_audio[: 3 * 16000])
    async with running_daemon(TimedRecognizer(), wyoming_port=-1) as daemon, wyoming(daemon) as client:

        async def error() -> Error:
            event = await client.read_event()
            assert event is not None and Error.is_type(event.type), event
            return Error.from_event(event)

        await send_audio(client, audio)  # audio-chunk before audio-start: one error, the rest dropped
        await client.write_event(AudioStop().event())
        assert (await error()).code == "out_of_order"
        await client.write_event(AudioStart(16000, 1, 1).event())  # 8-bit audio
        await send_audio(client, audio)
        await client.write_event(AudioStop().event())
        assert (await error()).code == "unsupported_encoding"
        await client.write_event(Transcribe(language="klingon").event())
        await client.write_event(AudioStart(16000, 2, 1).event())
        await send_audio(client, audio)
        await client.write_event(AudioStop().event())
        assert (await error()).code == "invalid_message"
        await client.write_event(Transcribe(name="large-v3").event())  # a model this server does not run
        await client.write_event(AudioStart(16000, 2, 1).event())
        await send_audio(client, audio)
        await client.write_event(AudioStop().event())
        assert (await error()).code == "model_not_enabled"
        await client.write_event(Event("select-program", {"name": "streamwhisper"}))  # unknown here: dropped
        await client.write_event(Ping(text="hi").event())
        pong = await client.read_event()
        assert pong is not None and pong.type == "pong" and pong.data["text"] == "hi"
        # a request whose chunks change format midway: an error, then the transcript of what was heard
        await client.write_event(AudioStart(16000, 2, 1).event())
        await send_audio(client, audio)
        await client.write_event(AudioChunk(16000, 2, 2, b"\0" * 4096).event())
        await send_audio(client, audio)
        await client.write_event(AudioStop().event())
        events = await read_answer(client)
        assert error_codes(events) == ["invalid_audio"]
        assert fake_words(transcript_of(events))[-1] >= 4
        # the connection, and the server, serve on
        await send_request(client, pcm(jfk_audio))
        assert fake_words(transcript_of(await read_answer(client)))[-1] >= 20
        metrics = daemon.metrics.render().decode()
    assert 'streamwhisper_errors_total{kind="unknown_message"} 1.0' in metrics


BROKEN = {
    "garbage": b"this is not json\n",
    "not_an_object": b"[1, 2]\n",
    "no_type": b'{"data": {"rate": 16000}}\n',
    "not_a_number": b'{"type": "ping", "data": {"text": NaN}}\n',  # not JSON; a pong would echo it
    "negative_length": b'{"type": "audio-chunk", "payload_length": -5}\n',
    "huge_data": b'{"type": "transcribe", "data_length": 1099511627776}\n',
    "huge_payload": b'{"type": "audio-chunk", "payload_length": 1099511627776}\n',
    "long_line": b"{" + b" " * (MAX_LINE + 10),
}


@pytest.mark.parametrize("name", list(BROKEN))
@on_clock_loop
async def test_broken_framing_gets_an_error_and_the_connection_is_closed(name: str, jfk_audio: np.ndarray) -> None:
    async with running_daemon(TimedRecognizer(), wyoming_port=-1) as daemon:
        reader, writer = await asyncio.open_connection("127.0.0.1", daemon.wyoming_port)
        writer.write(BROKEN[name])
        event = await async_read_event(reader)
        assert event is not None and Error.is_type(event.type), event
        assert Error.from_event(event).code in ("invalid_frame", "message_too_big")
        assert await reader.read() == b"", "then the connection is closed"
        writer.close()
        async with wyoming(daemon) as client:  # another client is served
            await send_request(client, pcm(jfk_audio[: 4 * 16000]))
            assert fake_words(transcript_of(await read_answer(client)))


@on_clock_loop
async def test_the_error_reaches_a_client_still_sending_after_broken_framing() -> None:
    """The server lingers at the close: what the client sends after the broken line is discarded,
    instead of a reset that would drop the error before the client reads it."""
    async with running_daemon(TimedRecognizer(), wyoming_port=-1) as daemon:
        for _ in range(5):
            reader, writer = await asyncio.open_connection("127.0.0.1", daemon.wyoming_port)
            writer.write(b"[" * 50_000 + b"\n" + b"x" * 4_000_000)
            event = await async_read_event(reader)
            assert event is not None and Error.from_event(event).code == "invalid_frame", event
            writer.close()  # the server sees the client's close and closes its side
            await writer.wait_closed()


@on_clock_loop
async def test_broken_framing_in_a_request_still_gets_the_transcript_of_the_audio_heard(
    jfk_audio: np.ndarray,
) -> None:
    async with running_daemon(TimedRecognizer(), wyoming_port=-1) as daemon, wyoming(daemon) as client:
        await send_request(client, pcm(jfk_audio[: 4 * 16000]), stop=False)
        assert client._writer is not None
        client._writer.write(BROKEN["garbage"])
        events = await read_answer(client)
        assert error_codes(events) == ["invalid_frame"]
        assert fake_words(transcript_of(events))[-1] >= 5
        assert await client.read_event() is None, "then the connection is closed"


@on_clock_loop
async def test_a_connection_that_sends_nothing_gets_an_error_and_is_closed(jfk_audio: np.ndarray) -> None:
    async with running_daemon(TimedRecognizer(), wyoming_port=-1, idle_timeout_s=60) as daemon:
        async with wyoming(daemon) as silent, wyoming(daemon) as stalled:
            await describe(silent)
            await send_request(stalled, pcm(jfk_audio[: 4 * 16000]), stop=False)  # then nothing more
            heard = await pong(stalled)  # every chunk was read: the idle timer runs
            advance(61)
            event = await silent.read_event()
            assert event is not None and Error.from_event(event).code == "idle_timeout"
            assert await silent.read_event() is None
            events = heard + await read_answer(stalled)
            assert error_codes(events) == ["idle_timeout"]
            assert fake_words(transcript_of(events))
            assert await stalled.read_event() is None
        async with wyoming(daemon) as client:
            assert (await describe(client)).asr


@on_clock_loop
async def test_a_client_that_resets_mid_request_ends_its_session_quietly(
    jfk_audio: np.ndarray, caplog: pytest.LogCaptureFixture
) -> None:
    async with running_daemon(TimedRecognizer(), wyoming_port=-1) as daemon:
        async with wyoming(daemon) as client:
            await send_request(client, pcm(jfk_audio[: 4 * 16000]), stop=False)
            await pong(client)
            assert client._writer is not None and len(daemon.ctx.sessions) == 1
            sock = client._writer.get_extra_info("socket")
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            client._writer.transport.abort()  # a TCP reset, not a close
            while daemon.ctx.sessions:  # the server's side of the reset, which no event announces  # noqa: ASYNC110
                await asyncio.sleep(0.01)
        async with wyoming(daemon) as client:  # the server serves on
            await send_request(client, pcm(jfk_audio[: 4 * 16000]))
            assert fake_words(transcript_of(await read_answer(client)))
    assert not [r for r in caplog.records if r.levelname == "ERROR"], caplog.text


@on_clock_loop
async def test_a_request_beyond_max_sessions_is_refused_and_the_next_one_served(jfk_audio: np.ndarray) -> None:
    audio = pcm(jfk_audio[: 4 * 16000])
    async with running_daemon(TimedRecognizer(), wyoming_port=-1, max_sessions=1) as daemon:
        async with wyoming(daemon) as first, wyoming(daemon) as second:
            await send_request(first, audio, stop=False)
            start = await first.read_event()
            assert start is not None and start.type == "transcript-start"
            await send_request(second, audio)
            event = await second.read_event()
            assert event is not None and Error.from_event(event).code == "over_capacity"
            await first.write_event(AudioStop().event())
            assert fake_words(transcript_of([start, *await read_answer(first)]))
            await describe(first)  # answered once the request's session has ended
            await send_request(second, audio)  # the place is free again
            assert fake_words(transcript_of(await read_answer(second)))
        metrics = daemon.metrics.render().decode()
    assert 'streamwhisper_sessions_refused_total{reason="over_capacity"} 1.0' in metrics


@on_clock_loop
async def test_shutdown_gives_a_request_its_transcript_then_closes(jfk_audio: np.ndarray) -> None:
    async with running_daemon(TimedRecognizer(), wyoming_port=-1) as daemon, wyoming(daemon) as client:
        await send_request(client, pcm(jfk_audio[: 6 * 16000]), stop=False)
        heard = await pong(client)  # all 6 s were read, mid-utterance
        shutdown = asyncio.create_task(daemon.shutdown())
        events = heard + await read_answer(client)
        await shutdown
        assert fake_words(transcript_of(events))[-1] == 11, "the pending audio was transcribed"
        assert await client.read_event() is None


class FakeZeroconf:
    """Stands in for the zeroconf package's AsyncZeroconf: records what is registered, sends nothing."""

    instances: list[Any] = []
    registered: list[Any] = []
    closed: list[Any] = []

    def __init__(self) -> None:
        FakeZeroconf.instances.append(self)

    async def async_register_service(self, info: Any) -> None:
        FakeZeroconf.registered.append(info)

    async def async_close(self) -> None:
        FakeZeroconf.closed.append(self)


@on_clock_loop
async def test_zeroconf_announces_the_wyoming_port_only_when_asked(monkeypatch: pytest.MonkeyPatch) -> None:
    package, module = types.ModuleType("zeroconf"), types.ModuleType("zeroconf.asyncio")
    module.AsyncZeroconf = FakeZeroconf  # type: ignore[attr-defined]
    module.AsyncServiceInfo = lambda *args, **kwargs: (args, kwargs)  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "zeroconf", package)
    monkeypatch.setitem(sys.modules, "zeroconf.asyncio", module)
    for cls in (FakeZeroconf.instances, FakeZeroconf.registered, FakeZeroconf.closed):
        cls.clear()
    async with running_daemon(TimedRecognizer(), wyoming_port=-1):
        pass
    assert not FakeZeroconf.instances, "no announcement by default"
    async with running_daemon(TimedRecognizer(), wyoming_port=-1, wyoming_zeroconf=True) as daemon:
        ((args, kwargs),) = FakeZeroconf.registered
        assert args[0] == "_wyoming._tcp.local." and args[1].endswith("._wyoming._tcp.local.")
        assert kwargs == {"addresses": [bytes([127, 0, 0, 1])], "port": daemon.wyoming_port}
        assert not FakeZeroconf.closed
    assert FakeZeroconf.closed == FakeZeroconf.instances, "withdrawn at shutdown"


# --- slow: tiny.en, jfk ---------------------------------------------------------------------------


@pytest.fixture(scope="module")
def server(serving_model):  # type: ignore[no-untyped-def]
    with LiveServer(serving_model, wyoming_port=-1) as server:
        yield server


def run(server: LiveServer, test: Any) -> Any:
    async def connected() -> Any:
        assert server.daemon is not None
        async with wyoming(server.daemon) as client:
            return await test(client)

    return asyncio.run(asyncio.wait_for(connected(), 300))


@pytest.mark.slow
def test_home_assistant_describes_then_transcribes_jfk(server: LiveServer, jfk_audio: np.ndarray) -> None:
    async def test(client: AsyncTcpClient) -> tuple[Info, list[Event], list[Event]]:
        info = await describe(client)
        await send_request(client, pcm(jfk_audio))
        first = await read_answer(client)
        await send_request(client, pcm(resample(jfk_audio, 16000, 44100), rate=44100, channels=2), 44100, 2)
        return info, first, await read_answer(client)

    info, first, second = run(server, test)
    (asr,) = info.asr
    assert (asr.name, asr.version, asr.installed) == ("streamwhisper", __version__, True)
    assert asr.supports_transcript_streaming and not asr.requires_external_vad
    assert asr.attribution.name and asr.attribution.url
    assert [(m.name, m.languages) for m in asr.models] == [("tiny.en", ["en"])]
    for events in (first, second):
        assert [e.type for e in events if e.type != "transcript-chunk"] == ["transcript-start", *STREAMED[2:]]
        text = transcript_of(events)
        assert word_error_rate([JFK], [text]) <= 0.2, text
        assert Transcript.from_event(events[-2]).language == "en"


@pytest.mark.slow
def test_the_transcript_of_jfk_comes_before_audio_stop_once_he_stops(server: LiveServer, jfk_audio: np.ndarray) -> None:
    async def test(client: AsyncTcpClient) -> tuple[list[Event], Info]:
        answer = asyncio.create_task(read_answer(client))
        await send_request(client, pcm(jfk_audio, silence_s=4.0), stop=False)  # as fast as it goes
        events = await answer  # no audio-stop was sent: the endpoint after jfk answered
        await client.write_event(AudioStop().event())
        return events, await describe(client)

    events, info = run(server, test)
    text = transcript_of(events)
    assert word_error_rate([JFK], [text]) <= 0.2, text
    assert info.asr[0].models[0].name == "tiny.en", "the connection serves on"
    assert server.inspect(lambda d: len(d.ctx.sessions)) == 0
    assert not error_codes(events)
