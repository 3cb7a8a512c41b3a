"""Test helper: write CTranslate2 ``model.bin`` files (binary version 6).

The format (see ``streamwhisper.model.weights``)::

    uint32 version, string spec name, uint32 revision, uint32 n_variables,
    n_variables x (string name, uint8 rank, rank x uint32 dim, uint8 dtype, uint32 nbytes, bytes),
    uint32 n_aliases, n_aliases x (string alias, string target)

strings are uint16 length (including the NUL) + UTF-8 bytes + NUL. Data type ids: 0 float32,
1 int8, 2 int16, 3 int32, 4 float16, 5 bfloat16. Quantised int8 weights carry a float32
``<name>_scale`` variable, one value per output row, with ``float = int8 / scale``.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

DTYPE_IDS = {
    np.dtype(np.float32): 0,
    np.dtype(np.int8): 1,
    np.dtype(np.int16): 2,
    np.dtype(np.int32): 3,
    np.dtype(np.float16): 4,
}
BFLOAT16 = 5


@dataclass(frozen=True)
class RawVariable:
    """A variable given as already-encoded bytes (e.g. bfloat16, which numpy lacks)."""

    dtype_id: int
    shape: tuple[int, ...]
    data: bytes


def bfloat16(array: np.ndarray) -> RawVariable:
    """``array`` rounded to bfloat16 (round to nearest even, as torch does)."""
    t = torch.from_numpy(np.ascontiguousarray(array, dtype=np.float32)).to(torch.bfloat16)
    return RawVariable(BFLOAT16, tuple(array.shape), t.view(torch.int16).numpy().astype("<i2").tobytes())


def quantize_int8_rows(weight: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per-row symmetric int8 quantisation: (int8 weights, float32 scale = 127 / max|row|)."""
    w = weight.astype(np.float32)
    amax = np.abs(w).max(axis=1)
    scale = np.where(amax > 0, 127.0 / np.where(amax > 0, amax, 1.0), 1.0).astype(np.float32)
    q = np.clip(np.rint(w * scale[:, None]), -127, 127).astype(np.int8)
    return q, scale


def split_aliases(variables: dict[str, np.ndarray]) -> tuple[dict[str, np.ndarray], dict[str, str]]:
    """Undo ``read_ct2_variables``' alias resolution: an alias shares its target's array object."""
    seen: dict[int, str] = {}
    plain: dict[str, np.ndarray] = {}
    aliases: dict[str, str] = {}
    for name, value in variables.items():
        target = seen.get(id(value))
        if target is not None:
            aliases[name] = target
        else:
            seen[id(value)] = name
            plain[name] = value
    return plain, aliases


def _string(text: str) -> bytes:
    raw = text.encode("utf-8") + b"\0"
    return struct.pack("<H", len(raw)) + raw


def encode_model(
    variables: dict[str, np.ndarray | RawVariable],
    aliases: dict[str, str] | None = None,
    spec: str = "WhisperSpec",
    version: int = 6,
    revision: int = 3,
) -> bytes:
    """The bytes of a model.bin holding ``variables`` (in order) and ``aliases`` (alias -> target)."""
    out = [struct.pack("<I", version), _string(spec), struct.pack("<II", revision, len(variables))]
    for name, value in variables.items():
        if isinstance(value, RawVariable):
            dtype_id, shape, data = value.dtype_id, value.shape, value.data
        else:
            array = np.asarray(value)
            dtype_id = DTYPE_IDS[array.dtype]
            shape = tuple(array.shape)
            data = np.ascontiguousarray(array).astype(array.dtype.newbyteorder("<"), copy=False).tobytes()
        out.append(_string(name))
        out.append(struct.pack(f"<B{len(shape)}I", len(shape), *shape))
        out.append(struct.pack("<BI", dtype_id, len(data)))
        out.append(data)
    aliases = aliases or {}
    out.append(struct.pack("<I", len(aliases)))
    for alias, target in aliases.items():
        out.append(_string(alias) + _string(target))
    return b"".join(out)


def write_model(
    path: Path,
    variables: dict[str, np.ndarray | RawVariable],
    aliases: dict[str, str] | None = None,
    **kwargs: object,
) -> Path:
    """Write ``encode_model(...)`` to ``path`` (a file, or a directory that gets ``model.bin``)."""
    path = Path(path)
    if path.is_dir():
        path = path / "model.bin"
    path.write_bytes(encode_model(variables, aliases, **kwargs))  # type: ignore[arg-type]
    return path


def is_linear_weight(name: str, value: np.ndarray) -> bool:
    """A 2-D weight of a linear layer (``.../linear_N/weight``), the ones CTranslate2 quantises."""
    parts = name.split("/")
    return value.ndim == 2 and parts[-1] == "weight" and len(parts) >= 2 and parts[-2].startswith("linear_")


def convert_variables(variables: dict[str, np.ndarray], compute_type: str) -> dict[str, np.ndarray | RawVariable]:
    """A copy of ``variables`` with float arrays stored as ``compute_type``.

    ``int8`` quantises every linear weight per row (adding ``<name>_scale``) and stores the other
    floats as float32; ``float32``/``float16``/``bfloat16`` convert every float array.
    """
    out: dict[str, np.ndarray | RawVariable] = {}
    for name, value in variables.items():
        if value.dtype.kind != "f":
            out[name] = value
        elif compute_type == "float32":
            out[name] = value.astype(np.float32)
        elif compute_type == "float16":
            out[name] = value.astype(np.float16)
        elif compute_type == "bfloat16":
            out[name] = bfloat16(value)
        elif compute_type == "int8":
            if is_linear_weight(name, value):
                q, scale = quantize_int8_rows(value)
                out[name] = q
                out[name + "_scale"] = scale
            else:
                out[name] = value.astype(np.float32)
        else:
            raise ValueError(compute_type)
    return out
