"""OpenAI-compatible REST: ``POST /v1/audio/transcriptions``, ``POST /v1/audio/translations``,
``GET /v1/models``.

Requests are OpenAI's multipart forms (``file``, ``model``, ``language``, ``prompt``,
``response_format``, ``temperature``, ``timestamp_granularities[]``, ``stream``); answers are
``json``, ``text``, ``srt``, ``vtt`` or ``verbose_json`` bodies, or with ``stream=true``
Server-Sent Events (``transcript.text.delta`` per decoded window, append-only, then
``transcript.text.done``). Errors are OpenAI's ``{"error": {...}}`` with a 4xx/5xx status.

Admission is the daemon's :class:`~.uploads.UploadGate`, shared with Deepgram's pre-recorded
endpoint: the token, the shutdown, at most ``max_uploads`` files at once (one more gets 429),
none while the live sessions lag past ``refuse_lag_s`` (429). The windows run on the shared
worker after every live request (:mod:`.offline`).
"""

from __future__ import annotations

import contextlib
import json
import logging
import secrets
from collections.abc import Awaitable, Callable
from typing import Any

from aiohttp import web

from streamwhisper.errors import ConfigError
from streamwhisper.model.tokenizer import LANGUAGES
from streamwhisper.outputs import to_srt, to_vtt
from streamwhisper.window_loop import Segment

from .offline import FileRequest, FileTranscription, ModelInfo, Unavailable
from .session import ServerContext
from .uploads import ApiError, Upload, UploadGate, decode_upload, read_upload, run_upload

logger = logging.getLogger(__name__)

TRANSCRIPTIONS = "/v1/audio/transcriptions"
TRANSLATIONS = "/v1/audio/translations"
MODELS = "/v1/models"
FORMATS = ("json", "text", "srt", "vtt", "verbose_json")
# Names OpenAI clients send; each means the one model this daemon serves.
MODEL_ALIASES = ("whisper-1", "gpt-4o-transcribe", "gpt-4o-mini-transcribe")

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


class OpenAIRest:
    """The endpoints, sharing the daemon's context (settings, worker, metrics, shutdown)."""

    def __init__(self, ctx: ServerContext, model: ModelInfo, gate: UploadGate) -> None:
        self.ctx, self.model, self.gate = ctx, model, gate

    def handler(self, method: str, path: str) -> Handler | None:
        """The handler of a request to ``path``, or None when the path is not one of ours."""
        if path in (TRANSCRIPTIONS, TRANSLATIONS):
            return self.transcribe if method == "POST" else _not_allowed
        if path == MODELS or path.startswith(MODELS + "/"):
            return self.models if method in ("GET", "HEAD") else _not_allowed
        return None

    async def models(self, request: web.Request) -> web.StreamResponse:
        try:
            self.gate.authorize(request.headers, request.query)
        except ApiError as exc:
            return exc.response()
        entry = {"id": self.ctx.model_name, "object": "model", "created": 0, "owned_by": "streamwhisper"}
        if request.path == MODELS:
            return web.json_response({"object": "list", "data": [entry]})
        name = request.path[len(MODELS) + 1 :]
        if name != self.ctx.model_name and name not in MODEL_ALIASES:
            return ApiError(404, f"model {name!r} does not exist", "model_not_found", "model").response()
        return web.json_response(entry | {"id": name})

    async def transcribe(self, request: web.Request) -> web.StreamResponse:
        metrics = self.ctx.metrics
        upload: Upload | None = None
        try:
            with self.gate.admit(request):
                upload = await read_upload(request, self.ctx.server)
                response = await self._answer(request, upload)
            metrics.uploads.labels("ok").inc()
            return response
        except ApiError as exc:
            metrics.uploads.labels(exc.code or "error").inc()
            return exc.response()
        finally:
            if upload is not None:
                upload.close()

    async def _answer(self, request: web.Request, upload: Upload) -> web.StreamResponse:
        translate = request.path == TRANSLATIONS
        fmt = upload.get("response_format") or "json"
        if fmt not in FORMATS:
            raise ApiError(
                400,
                f"response_format must be one of {', '.join(FORMATS)}, not {fmt!r}",
                "invalid_value",
                "response_format",
            )
        model = upload.get("model") or self.ctx.model_name
        if model != self.ctx.model_name and model not in MODEL_ALIASES:
            names = ", ".join((self.ctx.model_name, *MODEL_ALIASES))
            raise ApiError(400, f"model {model!r} is not served here (use one of {names})", "model_not_found", "model")
        if translate and not self.model.multilingual:
            raise ApiError(
                400,
                f"model {self.ctx.model_name} is English-only and cannot translate; serve a multilingual model "
                "(such as base) for /v1/audio/translations, or use /v1/audio/transcriptions for English audio",
                "translation_not_supported",
                "model",
            )
        granularities = set(upload.fields.get("timestamp_granularities[]", []))
        granularities |= set(upload.fields.get("timestamp_granularities", []))
        if granularities - {"word", "segment"}:
            bad = sorted(granularities - {"word", "segment"})
            raise ApiError(400, f"unknown timestamp granularities {bad}", "invalid_value", "timestamp_granularities")
        file_request = FileRequest(
            language=None if translate else (upload.get("language") or None),
            task="translate" if translate else "transcribe",
            prompt=upload.get("prompt"),
            temperature=_temperature(upload.get("temperature")),
            word_timestamps=fmt == "verbose_json" and "word" in granularities,
        )
        if upload.file is None:
            raise ApiError(400, "the form has no file part", "missing_required_parameter", "file")
        audio = await decode_upload(upload, self.ctx.server)
        try:
            job = FileTranscription(self.ctx.worker, self.model, audio, file_request, secrets.token_hex(6))
        except ConfigError as exc:
            raise ApiError(400, str(exc), "invalid_value", "language") from None
        if (upload.get("stream") or "").lower() == "true":
            return await self._stream(request, job)
        await run_upload(request, job, self.ctx.shutdown)
        return _render(job, fmt, granularities)

    async def _stream(self, request: web.Request, job: FileTranscription) -> web.StreamResponse:
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream", "Cache-Control": "no-store"})
        await response.prepare(request)
        sent = ""
        try:
            async with contextlib.aclosing(job.run()) as windows:
                async for added in windows:
                    delta = "".join(s.text for s in added)
                    delta = delta.lstrip() if not sent else delta
                    if delta:
                        sent += delta
                        await _event(response, {"type": "transcript.text.delta", "delta": delta})
                    if self.ctx.shutdown.is_set():
                        raise Unavailable("the server is shutting down")
            done = {"type": "transcript.text.done", "text": sent, "usage": _usage(job)}
            await _event(response, done)
        except Unavailable as exc:
            error = ApiError(503, f"transcription failed: {exc}", "unavailable", kind="server_error")
            await _event(response, error.body())
        except ConnectionError:  # the client went away: stop transcribing for it
            return response
        await response.write_eof()
        return response


async def _not_allowed(request: web.Request) -> web.StreamResponse:
    return ApiError(405, f"{request.method} is not allowed on {request.path}", "method_not_allowed").response()


async def _event(response: web.StreamResponse, data: dict[str, Any]) -> None:
    await response.write(b"data: " + json.dumps(data).encode() + b"\n\n")


def _temperature(value: str | None) -> float:
    try:
        temperature = float(value) if value not in (None, "") else 0.0
    except ValueError:
        temperature = -1.0
    if not 0.0 <= temperature <= 1.0:
        raise ApiError(400, f"temperature must be a number from 0 to 1, not {value!r}", "invalid_value", "temperature")
    return temperature


def _usage(job: FileTranscription) -> dict[str, Any]:
    return {"type": "duration", "seconds": round(job.duration, 2)}


def _text(segments: list[Segment]) -> str:
    return "".join(s.text for s in segments).strip()


def _render(job: FileTranscription, fmt: str, granularities: set[str]) -> web.StreamResponse:
    segments = job.segments
    if fmt == "text":
        return web.Response(text=_text(segments) + "\n", content_type="text/plain")
    if fmt == "srt":
        return web.Response(text=to_srt(segments), content_type="application/x-subrip")
    if fmt == "vtt":
        return web.Response(text=to_vtt(segments), content_type="text/vtt")
    body: dict[str, Any] = {"text": _text(segments), "usage": _usage(job)}
    if fmt == "verbose_json":
        language = job.language or "en"
        body = {
            "task": job.request.task,
            "language": LANGUAGES.get(language, language),
            "duration": round(job.duration, 2),
            "text": body["text"],
        }
        if "segment" in granularities or not granularities:
            body["segments"] = [_segment(i, s) for i, s in enumerate(segments)]
        if "word" in granularities:
            words = [w for s in segments for w in (s.words or [])]
            body["words"] = [{"word": w.word.strip(), "start": w.start, "end": w.end} for w in words]
        body["usage"] = _usage(job)
    return web.json_response(body)


def _segment(index: int, segment: Segment) -> dict[str, Any]:
    return {
        "id": index,
        "seek": segment.seek,
        "start": round(segment.start, 2),
        "end": round(segment.end, 2),
        "text": segment.text,
        "tokens": segment.tokens,
        "temperature": segment.temperature,
        "avg_logprob": segment.avg_logprob,
        "compression_ratio": segment.compression_ratio,
        "no_speech_prob": segment.no_speech_prob,
    }
