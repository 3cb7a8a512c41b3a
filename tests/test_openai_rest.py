"""OpenAI-compatible REST end to end: the real ``openai`` SDK against a real daemon on port 0,
tiny.en, real speech (jfk). Every answer is scored against the clip's transcript."""

from __future__ import annotations

import json
import re
import threading
import urllib.error
import urllib.request
import warnings
import wave
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from live_server import LiveServer

from benchmarks.scoring import word_error_rate
from streamwhisper.audio.convert import float32_to_pcm_s16le
from streamwhisper.client import Closed, stream_file
from streamwhisper.events import Final

pytestmark = pytest.mark.slow  # end to end: the real model

openai = pytest.importorskip("openai")

JFK = "And so, my fellow Americans, ask not what your country can do for you, ask what you can do for your country."
TOKEN = "sk-local"
LIMIT = 2 * 1024 * 1024  # max_upload_bytes of the daemon here


@pytest.fixture(scope="module")
def server(serving_model):  # type: ignore[no-untyped-def]
    with LiveServer(serving_model, auth_token=TOKEN, max_upload_bytes=LIMIT) as live:
        yield live


@pytest.fixture(scope="module")
def client(server):  # type: ignore[no-untyped-def]
    with openai.OpenAI(base_url=server.http + "/v1", api_key=TOKEN, max_retries=0, timeout=300) as sdk:
        yield sdk


@pytest.fixture(scope="module")
def jfk_path(clips) -> Path:  # type: ignore[no-untyped-def]
    return Path(clips["en_jfk"].wav)


LONG = ("en_jfk", "en_lj_LJ001-0003", "en_lj_LJ001-0014", "en_lj_LJ001-0016")


@pytest.fixture(scope="module")
def long_clip(clips, tmp_path_factory) -> tuple[Path, str]:  # type: ignore[no-untyped-def]
    """Four clips, half a second apart, as one 16-bit wav over 30 s (two windows), and its transcript."""
    from streamwhisper.audio.files import load_audio

    gap = np.zeros(8000, dtype=np.float32)
    audio = np.concatenate([part for name in LONG for part in (load_audio(clips[name].wav), gap)])
    assert len(audio) > 30 * 16000
    path = tmp_path_factory.mktemp("audio") / "long.wav"
    with wave.open(str(path), "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(16000)
        w.writeframes(float32_to_pcm_s16le(audio))
    return path, " ".join(clips[name].reference for name in LONG)


def _wer(text: str, reference: str = JFK) -> float:
    return word_error_rate([reference], [text])


def _cues(body: str) -> list[tuple[str, str, str]]:
    """(start, end, text) of every cue of an srt or vtt body."""
    pattern = r"([\d:.,]+) --> ([\d:.,]+)\n(.+?)(?:\n\n|\Z)"
    return re.findall(pattern, body, flags=re.S)


def test_json_text_srt_and_vtt(client, jfk_path) -> None:  # type: ignore[no-untyped-def]
    with jfk_path.open("rb") as f:
        result = client.audio.transcriptions.create(model="whisper-1", file=f)
    assert _wer(result.text) <= 0.05, result.text
    with jfk_path.open("rb") as f:
        text = client.audio.transcriptions.create(model="tiny.en", file=f, response_format="text")
    assert isinstance(text, str) and _wer(text) <= 0.05, text
    for fmt in ("srt", "vtt"):
        with jfk_path.open("rb") as f:
            body = client.audio.transcriptions.create(model="gpt-4o-transcribe", file=f, response_format=fmt)
        assert isinstance(body, str)
        assert body.startswith("WEBVTT\n\n" if fmt == "vtt" else "1\n00:00:00,000 --> ")
        cues = _cues(body)
        assert cues, body
        assert _wer(" ".join(c[2] for c in cues)) <= 0.05, body


def test_verbose_json_with_word_and_segment_timestamps(client, jfk_path, jfk_audio) -> None:  # type: ignore[no-untyped-def]
    with jfk_path.open("rb") as f:
        result = client.audio.transcriptions.create(
            model="whisper-1",
            file=f,
            response_format="verbose_json",
            timestamp_granularities=["word", "segment"],
        )
    duration = len(jfk_audio) / 16000
    assert result.language == "english"
    assert result.duration == pytest.approx(duration, abs=0.05)
    assert _wer(result.text) <= 0.05, result.text
    words = result.words
    assert _wer(" ".join(w.word for w in words)) <= 0.05, words
    for w in words:
        assert 0.0 <= w.start <= w.end <= duration + 0.01, w
    starts = [w.start for w in words]
    assert starts == sorted(starts), "word times increase"
    segments = result.segments
    assert segments and _wer(" ".join(s.text for s in segments)) <= 0.05
    assert [s.id for s in segments] == list(range(len(segments)))
    for previous, current in zip(segments, segments[1:], strict=False):
        assert previous.end <= current.start + 0.01
    assert all(0.0 <= s.start < s.end <= duration + 0.01 for s in segments)
    with jfk_path.open("rb") as f:  # words only
        only_words = client.audio.transcriptions.create(
            model="whisper-1", file=f, response_format="verbose_json", timestamp_granularities=["word"]
        )
    assert only_words.words and not only_words.segments


def test_stream_sends_append_only_deltas_as_windows_are_decoded(client, long_clip) -> None:  # type: ignore[no-untyped-def]
    path, reference = long_clip
    deltas: list[str] = []
    done: Any = None
    with path.open("rb") as f:
        stream = client.audio.transcriptions.create(model="whisper-1", file=f, stream=True)
        for event in stream:
            if event.type == "transcript.text.delta":
                assert done is None
                deltas.append(event.delta)
            elif event.type == "transcript.text.done":
                done = event
    assert done is not None
    assert len(deltas) >= 2, "one delta per decoded window: the file has two"
    assert "".join(deltas) == done.text
    assert _wer(done.text, reference) <= 0.1, done.text
    with path.open("rb") as f:  # the same file without streaming: the same text
        whole = client.audio.transcriptions.create(model="whisper-1", file=f)
    assert whole.text == done.text


def test_models_list_and_translations_on_an_english_only_model(client, jfk_path) -> None:  # type: ignore[no-untyped-def]
    assert [m.id for m in client.models.list()] == ["tiny.en"]
    assert client.models.retrieve("whisper-1").id == "whisper-1"
    with jfk_path.open("rb") as f, pytest.raises(openai.BadRequestError) as caught, warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # the SDK marks translations deprecated
        client.audio.translations.create(model="whisper-1", file=f)
    assert caught.value.status_code == 400 and caught.value.code == "translation_not_supported"
    assert "English-only" in caught.value.message


def _raw_post(server, body: bytes, content_type: str) -> tuple[int, dict[str, Any]]:  # type: ignore[no-untyped-def]
    request = urllib.request.Request(
        server.http + "/v1/audio/transcriptions",
        data=body,
        headers={"Content-Type": content_type, "Authorization": f"Bearer {TOKEN}"},
    )
    try:
        with urllib.request.urlopen(request, timeout=60) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as exc:
        with exc:
            return exc.code, json.loads(exc.read())


def test_malformed_requests_get_openai_errors_while_a_live_session_goes_on(  # type: ignore[no-untyped-def]
    server, client, jfk_path, jfk_audio
) -> None:
    import asyncio

    live: dict[str, Any] = {}

    def stream() -> None:
        live["messages"] = asyncio.run(stream_file(server.url + "/v1/stream", jfk_audio, speed=1.0, token=TOKEN))

    streaming = threading.Thread(target=stream)
    streaming.start()

    def refused(error: type[Exception], **kwargs: Any) -> Any:
        with pytest.raises(error) as caught:
            client.audio.transcriptions.create(**({"model": "whisper-1"} | kwargs))
        assert set(caught.value.body) == {"message", "type", "param", "code"}, caught.value.body
        return caught.value

    exc = refused(openai.BadRequestError, file=("noise.wav", b"\x00\xff garbage " * 500))
    assert (exc.status_code, exc.code, exc.type) == (400, "invalid_file_format", "invalid_request_error")
    exc = refused(openai.BadRequestError, file=jfk_path.read_bytes(), response_format="docx")
    assert (exc.status_code, exc.code, exc.param) == (400, "invalid_value", "response_format")
    exc = refused(openai.APIStatusError, file=("big.wav", b"\x00" * (LIMIT + 1)))
    assert (exc.status_code, exc.code, exc.type) == (413, "file_too_large", "invalid_request_error")
    with (
        openai.OpenAI(base_url=server.http + "/v1", api_key="sk-wrong", max_retries=0) as wrong,
        pytest.raises(openai.AuthenticationError) as caught,
    ):
        wrong.audio.transcriptions.create(model="whisper-1", file=jfk_path.read_bytes())
    assert (caught.value.status_code, caught.value.code) == (401, "invalid_api_key")
    status, body = _raw_post(server, b'{"file": "x"}', "application/json")
    assert (status, body["error"]["code"]) == (400, "invalid_content_type")
    boundary = "b0undary"
    form = f'--{boundary}\r\nContent-Disposition: form-data; name="model"\r\n\r\nwhisper-1\r\n--{boundary}--\r\n'
    status, body = _raw_post(server, form.encode(), f"multipart/form-data; boundary={boundary}")
    assert (status, body["error"]["code"], body["error"]["param"]) == (400, "missing_required_parameter", "file")
    status, body = _raw_post(server, b"--x\r\nbroken", "multipart/form-data; boundary=x")
    assert status == 400 and body["error"]["type"] == "invalid_request_error"

    streaming.join(timeout=120)
    messages = live["messages"]
    assert isinstance(messages[-1], Closed)
    assert _wer(" ".join(m.text for m in messages if isinstance(m, Final))) <= 0.2
    with jfk_path.open("rb") as f:  # and the endpoint still answers
        assert _wer(client.audio.transcriptions.create(model="whisper-1", file=f).text) <= 0.05


def test_a_multilingual_model_detects_the_language_and_translates(base_model, clips) -> None:  # type: ignore[no-untyped-def]
    german = clips["ml_de_picovoice"]
    with (
        LiveServer(base_model, name="base") as server,
        openai.OpenAI(base_url=server.http + "/v1", api_key="anything", max_retries=0, timeout=300) as sdk,
    ):
        with open(german.wav, "rb") as f:
            heard = sdk.audio.transcriptions.create(model="whisper-1", file=f, response_format="verbose_json")
        assert heard.language == "german"
        assert word_error_rate([german.reference], [heard.text]) <= 0.3, heard.text
        with open(german.wav, "rb") as f, warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)  # the SDK marks translations deprecated
            translated = sdk.audio.translations.create(model="base", file=f)
    words = translated.text.lower()
    assert "portal" in words and "used" in words, translated.text
