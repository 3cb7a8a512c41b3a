"""Deepgram's pre-recorded API: ``POST /v1/listen`` with the audio file as the request body.

Deepgram's SDKs (``listen.v1.media.transcribe_file``) and LiveKit's Deepgram plugin
(``recognize()``, a WAV body) use it. The query takes the live endpoint's options
(:func:`~.dialects.deepgram.parse_query`: ``language``, ``punctuate`` / ``smart_format``,
``encoding`` / ``sample_rate`` / ``channels`` for a raw ``linear16`` body, the rest accepted and
ignored) and ``utterances`` / ``utt_split``. The body is any audio PyAV decodes, or raw PCM when
``encoding`` is given. A JSON body (Deepgram's ``{"url": ...}``) is refused: this server fetches
nothing.

The answer is Deepgram's ``{"metadata": {...}, "results": {"channels": [{"alternatives":
[{"transcript", "confidence", "words"}]}], "utterances": [...]}}``; errors are Deepgram's REST
shape ``{"err_code", "err_msg", "request_id"}`` with the HTTP status. Uploads share the OpenAI
endpoints' admission (:class:`~.uploads.UploadGate`) and run on the shared worker after every
live request (:mod:`.offline`).
"""

from __future__ import annotations

import secrets
import uuid
from http import HTTPStatus
from typing import Any

import numpy as np
from aiohttp import web

from streamwhisper.audio.convert import pcm_to_float32, resample
from streamwhisper.errors import AudioFormatError, ConfigError, ProtocolError
from streamwhisper.events import Word

from . import wire
from .config import ServerConfig
from .dialects import deepgram
from .offline import FileRequest, FileTranscription, ModelInfo
from .session import ServerContext
from .uploads import ApiError, Upload, UploadGate, decode_upload, read_body, run_upload

PATH = deepgram.LISTEN_PATH
DEFAULT_UTT_SPLIT_S = 0.8  # Deepgram's default pause between utterances


class DeepgramPrerecorded:
    """``POST /v1/listen``, sharing the daemon's context, model facts and upload admission."""

    def __init__(self, ctx: ServerContext, model: ModelInfo, gate: UploadGate) -> None:
        self.ctx, self.model, self.gate = ctx, model, gate

    async def transcribe(self, request: web.Request) -> web.StreamResponse:
        request_id = str(uuid.uuid4())
        upload: Upload | None = None
        try:
            with self.gate.admit(request):
                query = {k: v for k, v in request.query.items()}
                options = _options(query)
                split_s = _utt_split(query)  # checked before the upload is read
                if request.content_type == "application/json":
                    raise ApiError(400, "this server fetches no URL: send the audio as the request body", "url")
                upload = await read_body(request, self.ctx.server)
                body = await self._transcribe(request, upload, query, options, request_id, split_s)
            self.ctx.metrics.uploads.labels("ok").inc()
            return web.json_response(body)
        except ApiError as exc:
            self.ctx.metrics.uploads.labels(exc.code or "error").inc()
            return _error(exc, request_id)
        finally:
            if upload is not None:
                upload.close()

    async def _transcribe(
        self,
        request: web.Request,
        upload: Upload,
        query: dict[str, str],
        options: tuple[wire.SessionSettings, deepgram.DeepgramOptions],
        request_id: str,
        split_s: float,
    ) -> dict[str, Any]:
        settings, dg = options
        sha256 = upload.sha256
        if "encoding" in query:
            audio = _raw_pcm(upload, settings, self.ctx.server)
        else:
            audio = await decode_upload(upload, self.ctx.server)
        file_request = FileRequest(language=settings.language, word_timestamps=True)
        try:
            job = FileTranscription(self.ctx.worker, self.model, audio, file_request, secrets.token_hex(6))
        except ConfigError as exc:
            raise ApiError(400, str(exc), "invalid_value", "language") from None
        await run_upload(request, job, self.ctx.shutdown)
        words = [Word(w.word, w.start, w.end, w.probability) for s in job.segments for w in (s.words or [])]
        alternative = _alternative(words, dg.punctuate)
        channel: dict[str, Any] = {"alternatives": [alternative]}
        if _flag(query, "detect_language"):
            channel["detected_language"] = job.language or "en"
        results: dict[str, Any] = {"channels": [channel]}
        if _flag(query, "utterances"):
            results["utterances"] = _utterances(words, dg.punctuate, split_s)
        meta = deepgram.metadata(request_id, deepgram.created_now(), sha256, job.duration, self.ctx.model_name)
        return {"metadata": meta, "results": results}


def _options(query: dict[str, str]) -> tuple[wire.SessionSettings, deepgram.DeepgramOptions]:
    try:
        return deepgram.parse_query(query)
    except ProtocolError as exc:
        raise ApiError(400, str(exc), exc.kind) from None


def _flag(query: dict[str, str], name: str) -> bool:
    return query.get(name, "").strip().lower() in ("true", "1", "yes", "on")


def _utt_split(query: dict[str, str]) -> float:
    text = query.get("utt_split", "").strip()
    try:
        value = float(text) if text else DEFAULT_UTT_SPLIT_S
    except ValueError:
        value = -1.0
    if not 0.0 < value <= 60.0:
        raise ApiError(400, f"utt_split must be seconds in (0, 60], got {text!r}", "invalid_value", "utt_split")
    return value


def _raw_pcm(upload: Upload, settings: wire.SessionSettings, server: ServerConfig) -> np.ndarray:
    """A raw ``linear16`` body at the query's ``sample_rate`` and ``channels``, as 16 kHz mono."""
    assert upload.file is not None
    data = upload.file.read()
    upload.close()
    try:
        samples = pcm_to_float32(data, settings.encoding, settings.channels)
    except AudioFormatError as exc:
        raise ApiError(400, f"the body is not {settings.encoding} audio: {exc}", "invalid_audio") from None
    if len(samples) > server.max_upload_s * settings.sample_rate:
        raise ApiError(413, f"the audio is longer than {server.max_upload_s:g} s", "audio_too_long")
    return resample(samples, settings.sample_rate)


def _alternative(words: list[Word], punctuate: bool) -> dict[str, Any]:
    items = [item for w in words if (item := deepgram.word_json(w, punctuate)) is not None]
    if punctuate:
        transcript = " ".join(w.word.strip() for w in words if w.word.strip())
    else:
        transcript = " ".join(item["word"] for item in items)
    confidence = sum(w.probability for w in words) / len(words) if words else 0.0
    return {"transcript": transcript, "confidence": round(confidence, 3), "words": items}


def _utterances(words: list[Word], punctuate: bool, split_s: float) -> list[dict[str, Any]]:
    """The words in runs separated by pauses of at least ``split_s`` (Deepgram's ``utt_split``)."""
    runs: list[list[Word]] = []
    for word in words:
        if runs and word.start - runs[-1][-1].end < split_s:
            runs[-1].append(word)
        else:
            runs.append([word])
    out = []
    for run in runs:
        alternative = _alternative(run, punctuate)
        out.append(
            {
                "start": round(run[0].start, 3),
                "end": round(run[-1].end, 3),
                "confidence": alternative["confidence"],
                "channel": 0,
                "transcript": alternative["transcript"],
                "words": alternative["words"],
                "id": str(uuid.uuid4()),
            }
        )
    return out


def _error(exc: ApiError, request_id: str) -> web.Response:
    try:
        code = "INVALID_AUTH" if exc.status == 401 else HTTPStatus(exc.status).phrase
    except ValueError:  # 499: the client went away
        code = "Client Closed Request"
    body = {"err_code": code, "err_msg": exc.message, "request_id": request_id, "variant": exc.code}
    return web.json_response(body, status=exc.status, headers={"Cache-Control": "no-store"})
