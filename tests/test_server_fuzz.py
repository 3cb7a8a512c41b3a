"""Bad input and bad clients against a real daemon: the server stays up, others are unaffected,
and every malformed input gets its own error code and close code (an oracle below predicts them
from the input, with docs/protocol.md's table of close codes)."""

from __future__ import annotations

import base64
import json
import socket
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import parse_qsl, urlencode

import numpy as np
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from live_server import LiveServer
from websockets.exceptions import ConnectionClosed
from websockets.sync.client import connect

from benchmarks.scoring import word_error_rate
from streamwhisper.audio.convert import PCM_ENCODINGS, float32_to_pcm_s16le, resample
from streamwhisper.audio.files import load_audio
from streamwhisper.errors import ProtocolError
from streamwhisper.runtime import wire

pytestmark = pytest.mark.slow  # end to end: the real model

LIMIT = 4096  # max_message_bytes of the fuzzed server
MODEL = "tiny.en"  # the one model the server has
EOF = '{"type": "eof"}'
# The close code of each error that ends a session, as docs/protocol.md's table gives them.
CLOSE_CODES = {
    "invalid_json": 1007,
    "invalid_message": 1007,
    "invalid_audio": 1007,
    "out_of_order": 1007,
    "unsupported_encoding": 1003,
    "model_not_enabled": 1008,
    "message_too_big": 1009,
}
JFK = "And so, my fellow Americans, ask not what your country can do for you, ask what you can do for your country."

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3),
    max_leaves=6,
)
setting_names = st.sampled_from(
    [
        "sample_rate",
        "encoding",
        "channels",
        "language",
        "task",
        "interim_results",
        "word_timestamps",
        "endpointing_ms",
        "eager_finals",
        "model",
        "label",
        "bogus",
    ]
)


class Big(str):
    """A long text whose repr stays short in hypothesis' reports."""

    def __repr__(self) -> str:
        return f"<{len(self)} chars {self[:10]!r}...>"


class Blob(bytes):
    def __repr__(self) -> str:
        return f"<{len(self)} bytes>"


def _float_audio(values: list[float]) -> bytes:
    return np.asarray(values, dtype="<f4").tobytes()


# One malformed (or merely odd) action each; sessions get a few of them in a row.
actions = st.one_of(
    st.binary(max_size=600).map(lambda b: ("bin", b)),  # random bytes, odd counts included
    st.binary(min_size=1, max_size=99).filter(lambda b: len(b) % 2).map(lambda b: ("bin", b)),
    st.integers(LIMIT + 1, 3 * LIMIT).map(lambda n: ("bin", Blob(n))),  # over the size limit
    st.integers(4 * LIMIT + 1, 6 * LIMIT).map(lambda n: ("bin", Blob(n))),  # over websockets' own limit
    st.text(max_size=60).map(lambda t: ("text", t)),  # text where audio is expected / bad JSON
    st.integers(LIMIT + 1, 2 * LIMIT).map(lambda n: ("text", Big("x" * n))),
    json_values.map(lambda v: ("text", json.dumps(v))),  # valid JSON, wrong shape
    st.dictionaries(setting_names, json_values, max_size=3).map(
        lambda d: ("text", json.dumps({"type": "config", **d}))
    ),
    st.sampled_from(["finalize", "keepalive", "eof", "config", "Finalize", "", "close"]).map(
        lambda t: ("text", json.dumps({"type": t}))
    ),
    st.just(("text", '{"type": "finalize", "extra": 1}')),
    st.just(("text", Big("[" * 100_000))),  # deeply nested JSON
)
queries = st.one_of(
    st.just(""),
    st.just("?encoding=pcm_f32le"),
    st.dictionaries(setting_names, st.text(max_size=8), max_size=2).map(lambda d: "?" + urlencode(d)),
)
nan_audio = st.lists(st.floats(allow_nan=True, allow_infinity=True, width=32), min_size=1, max_size=40).map(
    lambda v: ("bin", _float_audio(v))
)


def run_session(url: str, query: str, steps: list[tuple[str, object]]) -> tuple[list[dict], int | None]:
    """Send the steps (then eof), read everything until the close; (messages, close code)."""
    messages: list[dict] = []
    with connect(url + "/v1/stream" + query, max_size=None, close_timeout=10) as ws:
        try:
            for _kind, payload in steps + [("text", EOF)]:
                ws.send(payload)  # type: ignore[arg-type]
        except ConnectionClosed:
            pass
        try:
            for raw in ws:
                messages.append(json.loads(raw))
        except ConnectionClosed:
            pass
        return messages, ws.close_code


@dataclass(frozen=True)
class Answer:
    """What the server must answer: its error codes in order (an ``unknown_message`` is
    answered and ignored; any other ends the session), the close code, and the reason in the
    ``closed`` summary (None: refused before ``ready``, with only the error)."""

    errors: tuple[str, ...]
    code: int
    reason: str | None


def expected_answer(query: str, steps: list[tuple[str, object]]) -> Answer:
    """The protocol's answer to a session that sends ``steps`` and then eof. Settings are
    validated by the wire module's own rules (``wire.apply_settings``); everything else (sizes,
    frames, NaN, JSON, message shapes and order) is decided here."""
    try:
        settings = wire.settings_from_query(dict(parse_qsl(query.removeprefix("?"), keep_blank_values=True)))
        if settings.model not in (None, MODEL):
            raise ProtocolError("", 1008, "model_not_enabled")
    except ProtocolError as exc:
        return Answer((exc.kind,), CLOSE_CODES[exc.kind], None)
    errors: list[str] = []

    def ended(kind: str) -> Answer:
        return Answer((*errors, kind), CLOSE_CODES[kind], kind)

    audio_started = False
    for kind, payload in steps + [("text", EOF)]:
        data = payload if isinstance(payload, bytes) else str(payload).encode()
        if len(data) > LIMIT:
            return ended("message_too_big")
        if kind == "bin":
            frame = PCM_ENCODINGS[settings.encoding].itemsize * settings.channels
            if len(data) % frame:
                return ended("invalid_audio")
            if settings.encoding == "pcm_f32le" and not np.isfinite(np.frombuffer(data, "<f4")).all():
                return ended("invalid_audio")
            audio_started = True
            continue
        try:
            message = wire.loads(str(payload))
        except (ValueError, RecursionError):
            return ended("invalid_json")
        if not isinstance(message, dict) or not isinstance(message.get("type"), str):
            return ended("invalid_message")
        if message["type"] == "config":
            if audio_started:
                return ended("out_of_order")
            values = {k: v for k, v in message.items() if k != "type"}
            if isinstance(values.get("config"), dict) and len(values) == 1:
                values = values["config"]
            try:
                settings = wire.apply_settings(settings, values)
            except ProtocolError as exc:
                return ended(exc.kind)
            if settings.model not in (None, MODEL):
                return ended("model_not_enabled")
        elif len(message) > 1:
            return ended("invalid_message")  # only config takes fields
        elif message["type"] == "eof":
            return Answer(tuple(errors), 1000, "eof")
        elif message["type"] not in ("finalize", "keepalive"):
            errors.append("unknown_message")
    raise AssertionError("the last step is eof")


def check_answer(messages: list[dict], code: int | None, query: str, steps: list[tuple[str, object]]) -> None:
    want = expected_answer(query, steps)
    where = f"{query!r} {steps!r:.300} -> {code}: {messages!r:.400}"
    errors = [m for m in messages if m["type"] == "error"]
    assert (tuple(m["code"] for m in errors), code) == (want.errors, want.code), where
    assert all(isinstance(m["message"], str) and m["message"] for m in errors), where
    if want.reason is None:
        assert [m["type"] for m in messages] == ["error"], where
    else:
        assert messages[0]["type"] == "ready", where
        assert messages[-1] == messages[-1] | {"type": "closed", "reason": want.reason}, where


@pytest.fixture(scope="module")
def fuzz_server(serving_model):  # type: ignore[no-untyped-def]
    # refusals under lag have their test (test_limits.py); here a loaded machine must not turn
    # a fuzz session's answer into 1013 overloaded
    with LiveServer(serving_model, max_message_bytes=LIMIT, max_sessions=8, refuse_lag_s=3600.0) as server:
        yield server


def stream_real_speech(url: str, speech: np.ndarray, out: dict[str, object]) -> None:
    """A well-behaved client at real time (beside a fuzz run): its messages and close code in ``out``."""
    messages: list[dict] = []
    with connect(url, close_timeout=10) as ws:
        reader = threading.Thread(target=lambda: messages.extend(json.loads(m) for m in ws))
        reader.start()
        began = time.monotonic()
        for i in range(0, len(speech), 1600):
            ws.send(float32_to_pcm_s16le(speech[i : i + 1600]))
            time.sleep(max(0.0, began + (i + 1600) / 16000 - time.monotonic()))
        ws.send('{"type": "eof"}')
        reader.join(timeout=60)
    out["messages"], out["code"] = messages, ws.close_code


def test_a_thousand_malformed_inputs_leave_the_server_and_others_unharmed(fuzz_server, clips) -> None:
    server = fuzz_server
    clips = [clips[n] for n in ("en_jfk", "en_lj_LJ001-0016", "en_ps_librivox_sense_0890")]
    reference = " ".join(c.reference for c in clips)
    gap = np.zeros(16000, dtype=np.float32)
    speech = np.concatenate([part for c in clips for part in (load_audio(c.wav), gap)])
    healthy: dict[str, object] = {}
    good = threading.Thread(target=stream_real_speech, args=(server.url + "/v1/stream", speech, healthy))
    good.start()
    count = 0

    @settings(
        max_examples=1000, deadline=None, database=None, derandomize=True, suppress_health_check=list(HealthCheck)
    )
    @given(query=queries, steps=st.lists(st.one_of(actions, nan_audio), min_size=1, max_size=4))
    def fuzz(query: str, steps: list[tuple[str, object]]) -> None:
        nonlocal count
        count += 1
        messages, code = run_session(server.url, query, steps)
        check_answer(messages, code, query, steps)

    fuzz()
    good.join(timeout=120)
    assert count >= 1000
    assert healthy["code"] == 1000
    messages = healthy["messages"]
    assert isinstance(messages, list) and messages[-1]["type"] == "closed"
    text = " ".join(m["text"] for m in messages if m["type"] == "final")
    assert word_error_rate([reference], [text]) <= 0.2, text
    deadline = time.monotonic() + 30  # the last fuzzed sessions close as their clients leave
    while server.inspect(lambda d: len(d.ctx.sessions)) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert server.inspect(lambda d: len(d.ctx.sessions)) == 0
    with connect(server.url + "/v1/stream") as ws:  # still serving
        assert json.loads(ws.recv())["type"] == "ready"


def test_a_client_that_never_reads_cannot_grow_server_memory(serving_model, jfk_audio) -> None:
    """Messages for a client that stopped reading stay within the outbox and write limits,
    and its connection is closed (1008) once its outbox is full; the server serves on."""
    import urllib.request

    def shrink_send_buffers(daemon) -> None:  # type: ignore[no-untyped-def]
        # a stalled network in seconds instead of minutes: no multi-MB kernel buffer to fill
        for session in daemon.ctx.sessions:
            session.ws.transport.get_extra_info("socket").setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4096)

    def peaks(daemon) -> tuple[int, int, int]:  # type: ignore[no-untyped-def]
        sizes = [s.ws.transport.get_write_buffer_size() for s in daemon.ctx.sessions if s.connected]
        return 0, max(sizes, default=0), len(sizes)

    with LiveServer(serving_model, max_outbox=8, idle_timeout_s=0) as server:
        sock = socket.create_connection(("127.0.0.1", server.port))
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        speech = np.concatenate([jfk_audio, np.zeros(8000, dtype=np.float32)] * 30)
        peak_buffer = 0
        with connect(server.url + "/v1/stream", sock=sock, max_queue=1, close_timeout=1) as ws:
            server.inspect(shrink_send_buffers)
            outbox = server.inspect(lambda d: next(iter(d.ctx.sessions)).outbox)
            began = time.monotonic()
            for n, i in enumerate(range(0, len(speech), 4000)):
                try:
                    ws.send(float32_to_pcm_s16le(speech[i : i + 4000]))
                    for _ in range(50):  # each is answered with an error message it never reads
                        ws.send('{"type": "unheard-of"}')
                except (ConnectionClosed, OSError):
                    break
                time.sleep(max(0.0, began + (i + 4000) / 16000 / 4 - time.monotonic()))  # 4x real time
                if n % 8 == 0:
                    _, buffered, open_sessions = server.inspect(peaks)
                    peak_buffer = max(peak_buffer, buffered)
                    if not open_sessions:
                        break
        time.sleep(0.5)
        # its connection is closed; the session itself waits resume_grace_s for a resume
        assert server.inspect(lambda d: [s.connected for s in d.ctx.sessions]) == [False]
        with urllib.request.urlopen(server.http + "/metrics", timeout=10) as r:
            metrics = r.read().decode()
    assert 'streamwhisper_errors_total{kind="client_not_reading"} 1.0' in metrics
    assert outbox.peak == 8, "the outbox filled up to its bound, and no further"
    assert peak_buffer <= 64 * 1024 + 16 * 1024, peak_buffer


# --- the OpenAI-compatible REST endpoints -------------------------------------------------------

REST_LIMIT = 256 * 1024  # max_upload_bytes of the REST-fuzzed server
REST_STATUS = {200, 400, 401, 404, 405, 413, 429}
form_fields = st.sampled_from(
    ["model", "language", "prompt", "response_format", "temperature", "timestamp_granularities[]", "stream", "x"]
)
field_values = st.one_of(
    st.text(max_size=12),
    st.sampled_from(["json", "text", "srt", "vtt", "verbose_json", "word", "segment", "true", "en", "0", "2", "-1"]),
)


def _file_bodies(flac: bytes) -> st.SearchStrategy[bytes]:
    return st.one_of(
        st.binary(max_size=2000),  # garbage
        st.integers(1, len(flac)).map(lambda n: flac[: min(n, 48_000)]),  # a truncated real file (up to ~2 s)
        st.integers(REST_LIMIT + 1, 2 * REST_LIMIT).map(lambda n: Blob(b"\0" * n)),  # over the limit
    )


def _multipart(fields: list[tuple[str, str]], file: bytes | None, boundary: str = "fz0") -> bytes:
    out = b""
    for name, value in fields:
        out += f'--{boundary}\r\nContent-Disposition: form-data; name="{name}"\r\n\r\n'.encode()
        out += value.encode("utf-8", "surrogatepass") + b"\r\n"
    if file is not None:
        out += f'--{boundary}\r\nContent-Disposition: form-data; name="file"; filename="a.flac"\r\n'.encode()
        out += b"Content-Type: audio/flac\r\n\r\n" + file + b"\r\n"
    return out + f"--{boundary}--\r\n".encode()


def test_malformed_uploads_get_openai_errors_and_live_streams_keep_their_transcripts(  # type: ignore[no-untyped-def]
    serving_model, clips
) -> None:
    import urllib.error
    import urllib.request

    flac = Path(clips["en_jfk"].wav).read_bytes()
    spoken = [clips[n] for n in ("en_jfk", "en_lj_LJ001-0016", "en_ps_librivox_sense_0890")]
    reference = " ".join(c.reference for c in spoken)
    gap = np.zeros(16000, dtype=np.float32)
    speech = np.concatenate([part for c in spoken for part in (load_audio(c.wav), gap)])
    healthy: dict[str, object] = {}
    with LiveServer(serving_model, max_upload_bytes=REST_LIMIT, max_uploads=4, auth_token="t") as server:
        url = server.url + "/v1/stream?token=t"
        good = threading.Thread(target=stream_real_speech, args=(url, speech, healthy))
        good.start()

        @settings(
            max_examples=150, deadline=None, database=None, derandomize=True, suppress_health_check=list(HealthCheck)
        )
        @given(
            path=st.sampled_from(["/v1/audio/transcriptions", "/v1/audio/translations", "/v1/models", "/v1/models/x"]),
            method=st.sampled_from(["POST", "POST", "POST", "GET", "PUT"]),
            auth=st.sampled_from(["Bearer t", "Bearer t", "Bearer wrong", "", "Token t"]),
            kind=st.sampled_from(["multipart/form-data; boundary=fz0", "multipart/form-data", "application/json", ""]),
            fields=st.lists(st.tuples(form_fields, field_values), max_size=4),
            file=st.one_of(st.none(), _file_bodies(flac)),
        )
        def fuzz(path: str, method: str, auth: str, kind: str, fields: list, file: bytes | None) -> None:
            body = _multipart(fields, file) if "multipart" in kind or file is not None else b"{}"
            headers = {"Authorization": auth} if auth else {}
            if kind:
                headers["Content-Type"] = kind
            request = urllib.request.Request(server.http + path, data=body, headers=headers, method=method)
            try:
                with urllib.request.urlopen(request, timeout=120) as r:
                    status, content = r.status, r.read()
            except urllib.error.HTTPError as exc:
                with exc:
                    status, content = exc.code, exc.read()
            except (ConnectionError, urllib.error.URLError):  # the server stopped reading a large body
                assert file is not None and len(file) > REST_LIMIT
                return
            assert status in REST_STATUS, (status, content[:200])
            if status != 200:
                error = json.loads(content)["error"]
                assert set(error) == {"message", "type", "param", "code"} and error["message"], error

        fuzz()
        good.join(timeout=180)
        assert healthy["code"] == 1000
        messages = healthy["messages"]
        assert isinstance(messages, list) and messages[-1]["type"] == "closed"
        text = " ".join(m["text"] for m in messages if m["type"] == "final")
        assert word_error_rate([reference], [text]) <= 0.2, text
        assert server.inspect(lambda d: d.uploads.active) == 0
        with urllib.request.urlopen(server.http + "/readyz", timeout=10) as r:  # still serving
            assert json.loads(r.read())["ready"]


# --- the OpenAI Realtime endpoint -------------------------------------------------------------

REALTIME_TYPES = {f"input_audio_buffer.{k}" for k in ("append", "commit", "clear")} | {"session.update"}
COMMIT_EMPTY = "input_audio_buffer_commit_empty"


def _append(audio: object) -> str:
    return json.dumps({"type": "input_audio_buffer.append", "audio": audio})


def _session_update(session: dict[str, object]) -> str:
    return json.dumps({"type": "session.update", "session": {"type": "transcription", **session}})


# A step is (kind, client text[, error code]): an "event" gets the answer RealtimeState.expect
# predicts, an "update" its own code, "format" switches to G.711 mu-law (refused once audio came
# in another format); "big" and "huge" messages end the session.
REALTIME_UPDATES = [  # (session, the error code the update must get; None: none)
    ({"audio": {"input": {"format": {"type": "audio/opus"}}}}, "invalid_value"),
    ({"audio": {"input": {"format": {"type": "audio/pcm", "rate": 8000}}}}, "invalid_value"),
    ({"audio": {"input": {"transcription": {"model": "nope"}}}}, "model_not_found"),
    ({"audio": {"input": {"transcription": {"language": "xx"}}}}, "invalid_value"),
    ({"audio": {"input": {"turn_detection": {"type": "x"}}}}, "invalid_value"),
    ({"audio": {"input": {"turn_detection": {"threshold": "high"}}}}, "invalid_value"),
    ({"type": "realtime"}, "invalid_value"),
    ({"include": "all"}, "invalid_value"),
    ({"audio": {"input": {"noise_reduction": {"type": "far_field"}}}}, None),  # no stream setting changes
]
realtime_updates = st.sampled_from(REALTIME_UPDATES).map(lambda u: ("update", _session_update(u[0]), u[1]))
TO_MULAW = ("format", _session_update({"audio": {"input": {"format": {"type": "audio/pcmu"}}}}), None)


def _silence(n: int) -> tuple[str, str]:
    return "event", _append(base64.b64encode(bytes(n)).decode())


# every update, a turn, audio that is not whole samples, a format change after audio
EVERY_KIND = [
    *[("update", _session_update(session), code) for session, code in REALTIME_UPDATES],
    _silence(2880),
    _silence(2880),
    ("event", json.dumps({"type": "input_audio_buffer.commit"})),
    ("event", _append(base64.b64encode(b"odd").decode())),
    TO_MULAW,
]
silence = st.sampled_from([0, 960, 2880]).map(_silence)
realtime_actions = st.one_of(
    st.text(max_size=60).map(lambda t: ("event", t)),  # mostly not JSON
    json_values.map(lambda v: ("event", json.dumps(v))),  # JSON of any shape
    st.text(max_size=30).map(lambda t: ("event", json.dumps({"type": t, "event_id": "x"}))),  # unknown types
    st.binary(max_size=2000).map(lambda b: ("event", _append(base64.b64encode(b).decode()))),  # odd counts too
    silence,
    silence,  # twice as likely: two of them and a commit make a turn
    st.text(max_size=40).map(lambda t: ("event", _append(t))),  # not base64, mostly
    json_values.map(lambda v: ("event", _append(v))),  # audio that is not a string
    st.sampled_from(["commit", "commit", "clear"]).map(
        lambda k: ("event", json.dumps({"type": f"input_audio_buffer.{k}"}))
    ),
    st.just(("event", "[" * 3000)),  # deeply nested JSON
    realtime_updates,
    realtime_updates,
    st.just(TO_MULAW),
    st.integers(LIMIT + 1, 2 * LIMIT).map(lambda n: ("big", Big("x" * n))),  # over the size limit: the end
    st.integers(4 * LIMIT + 1, 5 * LIMIT).map(lambda n: ("huge", Big("x" * n))),  # far over the limit
)
realtime_queries = st.sampled_from(
    [
        *[("", None)] * 6,
        ("&model=whisper-1&language=en", None),
        ("&model=nope", ("model_not_enabled", 1008)),
        ("&intent=conversation", ("unsupported_intent", 1003)),
        ("&language=klingon", ("invalid_message", 1007)),
    ]
)


class RealtimeState:
    """What decides the answer to the next event: the audio format and the uncommitted bytes."""

    def __init__(self) -> None:
        self.width, self.rate, self.audio, self.uncommitted = 2, 24_000, False, 0

    def expect(self, step: tuple) -> str | None:  # type: ignore[type-arg]
        """The error code the server must answer ``step`` with (None: no error)."""
        kind, text = step[0], step[1]
        if kind == "update":
            return step[2]  # type: ignore[no-any-return]
        if kind == "format":  # to G.711 mu-law
            if self.audio and self.width != 1:
                return "session_update_after_audio"
            self.width, self.rate = 1, 8000
            return None
        try:
            data = wire.loads(text)
        except (ValueError, RecursionError):
            return "invalid_json"
        if not isinstance(data, dict):
            return "invalid_json"
        if not isinstance(data.get("type"), str):
            return "invalid_event"
        if data["type"] not in REALTIME_TYPES:
            return "unknown_event"
        if data["type"] == "input_audio_buffer.commit":
            if self.uncommitted * 1000 / (self.width * self.rate) < 100:
                return COMMIT_EMPTY
            self.uncommitted = 0
        elif data["type"] == "input_audio_buffer.clear":
            self.uncommitted = 0
        elif data["type"] == "input_audio_buffer.append":
            if not isinstance(data.get("audio"), str):
                return "invalid_event"
            try:
                audio = base64.b64decode(data["audio"], validate=True)
            except ValueError:
                return "invalid_base64"
            if len(audio) % self.width:
                return "invalid_audio"
            self.audio = self.audio or bool(audio)
            self.uncommitted += len(audio)
        return None


def run_realtime_session(url: str, query: str, steps: list[tuple]) -> tuple[list[dict], int | None]:  # type: ignore[type-arg]
    """Manual turns, the steps, then an unknown event named "end"; every message up to the error
    that names it (or to the close), and the close code (None while open)."""
    messages: list[dict] = []
    with connect(url + "/v1/realtime?intent=transcription" + query, max_size=None, close_timeout=10) as ws:
        messages.append(json.loads(ws.recv()))
        try:
            if messages[0]["type"] != "error":  # not refused at the connection
                ws.send(_session_update({"audio": {"input": {"turn_detection": None}}}))
                for step in steps:
                    ws.send(step[1])
                ws.send(json.dumps({"type": "end", "event_id": "end"}))
        except ConnectionClosed:  # the server closed the session: read what it sent before
            pass
        try:
            while not (messages[-1]["type"] == "error" and messages[-1]["error"]["event_id"] == "end"):
                messages.append(json.loads(ws.recv()))
        except ConnectionClosed:
            pass
        return messages, ws.close_code


def test_malformed_realtime_events_each_get_their_own_error_code(fuzz_server, jfk_audio) -> None:  # type: ignore[no-untyped-def]
    server = fuzz_server
    healthy: dict[str, object] = {}
    good = threading.Thread(target=stream_realtime_speech, args=(server.url, jfk_audio, healthy))
    good.start()

    seen: set[str] = set()  # error codes and event types the fuzz met

    @settings(max_examples=300, deadline=None, database=None, derandomize=True, suppress_health_check=list(HealthCheck))
    @given(query=realtime_queries, steps=st.lists(realtime_actions, min_size=1, max_size=6))
    @example(query=("", None), steps=EVERY_KIND)
    def fuzz(query: tuple[str, tuple[str, int] | None], steps: list[tuple]) -> None:  # type: ignore[type-arg]
        messages, code = run_realtime_session(server.url, query[0], steps)
        errors = [m["error"] for m in messages if m["type"] == "error"]
        seen.update([m["type"] for m in messages] + [e["code"] for e in errors])
        for error in errors:
            assert set(error) == {"type", "code", "message", "param", "event_id"} and error["message"], error
        if query[1] is not None:  # refused at the connection
            assert [e["code"] for e in errors] == [query[1][0]] and code == query[1][1], (query, messages)
            return
        state = RealtimeState()
        ending = next((step[0] for step in steps if step[0] in ("big", "huge")), None)
        answered = steps[: [step[0] for step in steps].index(ending)] if ending else steps
        expected = [code for code in map(state.expect, answered) if code is not None]
        got = [e["code"] for e in errors]
        if ending in ("big", "huge"):  # refused from its frame header, whatever its size
            assert got == [*expected, "message_too_big"] and code == 1009, (steps, messages)
        else:
            assert got == [*expected, "unknown_event"] and code is None, (steps, messages)

    fuzz()
    good.join(timeout=120)
    codes = {"invalid_json", "invalid_event", "unknown_event", "invalid_base64", "invalid_audio", COMMIT_EMPTY}
    codes |= {"invalid_value", "model_not_found", "session_update_after_audio", "message_too_big"}
    assert codes | {"input_audio_buffer.committed", "input_audio_buffer.cleared"} <= seen, seen
    completed = healthy["completed"]
    assert isinstance(completed, list) and completed, healthy
    text = " ".join(completed)
    assert word_error_rate([JFK], [text]) <= 0.2, text
    deadline = time.monotonic() + 30  # the last fuzzed sessions close as their clients leave
    while server.inspect(lambda d: len(d.ctx.sessions)) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert server.inspect(lambda d: len(d.ctx.sessions)) == 0


def stream_realtime_speech(url: str, speech: np.ndarray, out: dict[str, object]) -> None:
    """A well-behaved Realtime client beside the fuzz: jfk at real time in 20 ms appends (each
    within the fuzzed server's message limit), one commit; its completed transcripts in ``out``."""
    pcm = float32_to_pcm_s16le(resample(speech, 16000, 24000))
    with connect(url + "/v1/realtime?intent=transcription", close_timeout=10) as ws:
        json.loads(ws.recv())
        ws.send(_session_update({"audio": {"input": {"turn_detection": None}}}))
        began = time.monotonic()
        for i in range(0, len(pcm), 960):
            ws.send(_append(base64.b64encode(pcm[i : i + 960]).decode()))
            time.sleep(max(0.0, began + (i + 960) / 48000 - time.monotonic()))
        ws.send(json.dumps({"type": "input_audio_buffer.commit"}))
        completed: list[str] = []
        for raw in ws:
            message = json.loads(raw)
            if message["type"] == "error":
                out["error"] = message
            if message["type"] == "conversation.item.input_audio_transcription.completed":
                completed.append(message["transcript"])
                break
    out["completed"] = completed
