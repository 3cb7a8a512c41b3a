"""Reading a ``multipart/form-data`` upload into a bounded spool, with OpenAI-shaped errors.

The file part is copied as it arrives into a :class:`tempfile.SpooledTemporaryFile` that keeps
up to ``SPOOL_MEMORY`` bytes in memory and moves to a temporary file beyond; the moment the
upload passes ``max_upload_bytes`` reading stops with 413. The other fields are small texts,
each bounded. A body that stops arriving for ``idle_timeout_s`` ends the request with 408.
"""

from __future__ import annotations

import asyncio
import json
import tempfile
from dataclasses import dataclass, field
from typing import IO, Any

from aiohttp import BodyPartReader, web

from .config import ServerConfig

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

    def get(self, name: str, default: str | None = None) -> str | None:
        values = self.fields.get(name)
        return values[-1] if values else default

    def close(self) -> None:
        if self.file is not None:
            self.file.close()


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
    # closed by Upload.close(), whoever ends the request
    upload.file = tempfile.SpooledTemporaryFile(max_size=SPOOL_MEMORY)  # noqa: SIM115
    upload.filename = part.filename or "upload"
    while chunk := await _timed(part.read_chunk(CHUNK), server):
        upload.size += len(chunk)
        if upload.size > server.max_upload_bytes:
            raise _too_large(server.max_upload_bytes)
        upload.file.write(chunk)
    upload.file.seek(0)


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
