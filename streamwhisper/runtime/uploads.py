"""Uploads to the REST endpoints: who may upload (:class:`UploadGate`), and reading the body
into a bounded spool, with errors as :class:`ApiError`.

A ``multipart/form-data`` form's file part (OpenAI) or a whole raw body (Deepgram's pre-recorded
``POST /v1/listen``) is copied as it arrives into a :class:`tempfile.SpooledTemporaryFile` that
keeps up to ``SPOOL_MEMORY`` bytes in memory and moves to a temporary file beyond; the moment the
upload passes ``max_upload_bytes`` reading stops with 413. A form's other fields are small
texts, each bounded. A body that stops arriving for ``idle_timeout_s`` ends the request with 408.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import tempfile
from collections.abc import Awaitable, Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import IO, Any

import numpy as np
from aiohttp import BodyPartReader, web

from streamwhisper.audio.files import load_audio_stream
from streamwhisper.errors import AudioFormatError, AudioTooLongError

from .config import ServerConfig
from .http import check_token
from .offline import FileTranscription, Unavailable

SPOOL_MEMORY = 1 << 20  # upload bytes kept in memory before the spool moves to a temporary file
MAX_FIELD = 64 * 1024  # bytes of one text field (a prompt is at most a few hundred tokens)
MAX_PARTS = 64
CHUNK = 64 * 1024


class ApiError(Exception):
    """An error answered in OpenAI's shape: ``{"error": {"message", "type", "param", "code"}}``."""

    def __init__(
        self,
        status: int,
        message: str,
        code: str | None,
        param: str | None = None,
        kind: str = "invalid_request_error",
    ) -> None:
        super().__init__(message)
        self.status, self.message, self.code, self.param, self.kind = status, message, code, param, kind

    def body(self) -> dict[str, Any]:
        return {"error": {"message": self.message, "type": self.kind, "param": self.param, "code": self.code}}

    def response(self) -> web.Response:
        return web.Response(
            status=self.status,
            text=json.dumps(self.body()),
            content_type="application/json",
            headers={"Cache-Control": "no-store"},
        )


@dataclass
class Upload:
    """A parsed form: its text fields (repeated names keep every value) and the spooled file."""

    fields: dict[str, list[str]] = field(default_factory=dict)
    file: IO[bytes] | None = None
    filename: str = "upload"
    size: int = 0
    sha256: str = ""  # of the file's bytes

    def get(self, name: str, default: str | None = None) -> str | None:
        values = self.fields.get(name)
        return values[-1] if values else default

    def close(self) -> None:
        if self.file is not None:
            self.file.close()


class UploadGate:
    """Admission for uploads, shared by every REST endpoint: the token, the shutdown, and
    capacity: at most ``max_uploads`` files at once, none while the live sessions lag past
    ``refuse_lag_s``. ``with gate.admit(request):`` holds a slot for the block."""

    def __init__(self, server: ServerConfig, shutdown: asyncio.Event, lag: Callable[[], float]) -> None:
        self.server, self.shutdown, self.lag = server, shutdown, lag
        self.active = 0  # uploads being read or transcribed

    def authorize(self, headers: Mapping[str, str], query: Mapping[str, str]) -> None:
        if not check_token(self.server, headers, query):
            raise ApiError(401, "missing or wrong API key", "invalid_api_key")

    @contextlib.contextmanager
    def admit(self, request: web.Request) -> Iterator[None]:
        """Authorise ``request`` and hold an upload slot (ApiError 401, 429 or 503)."""
        self.authorize(request.headers, request.query)
        server = self.server
        if self.shutdown.is_set():
            raise ApiError(503, "the server is shutting down", "shutting_down", kind="server_error")
        if self.active >= server.max_uploads:
            raise ApiError(
                429,
                f"all {server.max_uploads} upload slots are in use; try again later",
                "rate_limit_exceeded",
                kind="rate_limit_error",
            )
        lag = self.lag()
        if lag > server.refuse_lag_s:
            raise ApiError(
                429,
                f"the server is overloaded (live transcripts lag {lag:.1f} s); try again later",
                "overloaded",
                kind="rate_limit_error",
            )
        self.active += 1
        try:
            yield
        finally:
            self.active -= 1


async def read_body(request: web.Request, server: ServerConfig) -> Upload:
    """The whole body of ``request`` as the upload's file (400, 408, 413 as :func:`read_upload`)."""
    length = request.content_length
    if length is not None and length > server.max_upload_bytes:
        raise _too_large(server.max_upload_bytes)
    upload = Upload()
    try:
        await _spool_stream(request.content.read, upload, server)
    except ApiError:
        upload.close()
        raise
    except Exception as exc:  # aiohttp's payload errors: a truncated or broken body
        upload.close()
        raise ApiError(400, f"unreadable request body: {type(exc).__name__}", "invalid_body") from None
    if upload.size == 0:
        upload.close()
        raise ApiError(400, "the request body is empty: send the audio as the body", "empty_body")
    return upload


async def read_upload(request: web.Request, server: ServerConfig) -> Upload:
    """The form of ``request``; raises :class:`ApiError` (400, 408, 413) on a bad or large one."""
    limit = server.max_upload_bytes
    if request.content_type != "multipart/form-data":
        raise ApiError(
            400,
            f"expected a multipart/form-data body (with a file part), not {request.content_type or 'none'}",
            "invalid_content_type",
        )
    length = request.content_length
    if length is not None and length > limit + MAX_PARTS * MAX_FIELD:
        raise _too_large(limit)
    upload = Upload()
    try:
        reader = await request.multipart()
        parts = 0
        while True:
            part = await _timed(reader.next(), server)
            if part is None:
                break
            parts += 1
            if parts > MAX_PARTS or not isinstance(part, BodyPartReader):
                raise ApiError(400, "too many or nested form parts", "invalid_multipart")
            name = part.name or ""
            if name == "file":
                await _spool(part, upload, server)
            else:
                upload.fields.setdefault(name, []).append(await _field(part, name, server))
    except ApiError:
        upload.close()
        raise
    except (ValueError, AssertionError, LookupError, ConnectionError, web.HTTPException) as exc:
        upload.close()
        raise ApiError(400, f"malformed multipart body: {exc or type(exc).__name__}", "invalid_multipart") from None
    except Exception as exc:  # aiohttp's payload errors: a truncated or broken body
        upload.close()
        raise ApiError(400, f"unreadable request body: {type(exc).__name__}", "invalid_multipart") from None
    return upload


async def _spool(part: BodyPartReader, upload: Upload, server: ServerConfig) -> None:
    if upload.file is not None:
        raise ApiError(400, "more than one file part", "invalid_multipart", "file")
    upload.filename = part.filename or "upload"
    await _spool_stream(part.read_chunk, upload, server)


async def _spool_stream(read: Callable[[int], Awaitable[bytes]], upload: Upload, server: ServerConfig) -> None:
    """Copy chunks from ``read`` into the upload's spool until it returns nothing."""
    # closed by Upload.close(), whoever ends the request
    upload.file = tempfile.SpooledTemporaryFile(max_size=SPOOL_MEMORY)  # noqa: SIM115
    digest = hashlib.sha256()
    while chunk := await _timed(read(CHUNK), server):
        upload.size += len(chunk)
        if upload.size > server.max_upload_bytes:
            raise _too_large(server.max_upload_bytes)
        upload.file.write(chunk)
        digest.update(chunk)
    upload.file.seek(0)
    upload.sha256 = digest.hexdigest()


async def _field(part: BodyPartReader, name: str, server: ServerConfig) -> str:
    data = bytearray()
    while chunk := await _timed(part.read_chunk(CHUNK), server):
        data += chunk
        if len(data) > MAX_FIELD:
            raise ApiError(400, f"form field {name!r} is over {MAX_FIELD} bytes", "invalid_value", name)
    try:
        return data.decode(part.get_charset("utf-8"))
    except (UnicodeDecodeError, LookupError):
        raise ApiError(400, f"form field {name!r} is not text", "invalid_value", name) from None


async def _timed(awaitable: Any, server: ServerConfig) -> Any:
    """``awaitable``, unless the body stalls for ``idle_timeout_s`` (408)."""
    try:
        async with asyncio.timeout(server.idle_timeout_s or None):
            return await awaitable
    except TimeoutError:
        raise ApiError(408, f"the upload stalled for {server.idle_timeout_s:g} s", "timeout") from None


def _too_large(limit: int) -> ApiError:
    return ApiError(413, f"the upload is over this server's limit of {limit} bytes", "file_too_large", "file")


async def decode_upload(upload: Upload, server: ServerConfig) -> np.ndarray:
    """The upload's audio as 16 kHz mono samples (PyAV, off the event loop); closes the spool.
    ApiError 413 past ``max_upload_s``, 400 for what is not audio."""
    assert upload.file is not None
    try:
        return await asyncio.to_thread(load_audio_stream, upload.file, upload.filename, max_seconds=server.max_upload_s)
    except AudioTooLongError as exc:
        raise ApiError(413, str(exc), "audio_too_long", "file") from None
    except AudioFormatError as exc:
        raise ApiError(400, f"the file is not audio we can decode: {exc}", "invalid_file_format", "file") from None
    finally:
        upload.close()  # the samples are all that is needed now


async def run_upload(request: web.Request, job: FileTranscription, shutdown: asyncio.Event) -> None:
    """Transcribe every window of ``job``; ApiError 503 on shutdown or failure, 499 when the
    client went away."""
    try:
        async with contextlib.aclosing(job.run()) as windows:
            async for _ in windows:
                if shutdown.is_set():
                    raise ApiError(503, "the server is shutting down", "shutting_down", kind="server_error")
                if request.transport is None or request.transport.is_closing():
                    raise ApiError(499, "the client went away", "client_gone")
    except Unavailable as exc:
        raise ApiError(503, f"transcription failed: {exc}", "unavailable", kind="server_error") from None
