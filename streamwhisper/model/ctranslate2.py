"""Reading CTranslate2 Whisper models: ``model.bin`` (or its split parts) and ``config.json``.

A CTranslate2 ``model.bin`` (binary version 6) is::

    uint32 version, string spec name, uint32 revision, uint32 n_variables,
    n_variables x (string name, uint8 rank, rank x uint32 dim, uint8 dtype, uint32 nbytes, bytes),
    uint32 n_aliases, n_aliases x (string alias, string target)

with strings as uint16 length (including a NUL) + UTF-8 bytes + NUL. Quantised weights carry a
``<name>_scale`` variable; the float value is ``int / scale`` per output row.
"""

from __future__ import annotations

import json
import struct
from pathlib import Path

import numpy as np
import torch

from ..errors import ModelLoadError
from .weights import LoadedWeights
from .whisper import ModelDimensions

# CTranslate2 DataType ids.
_CT2_DTYPES = {0: np.float32, 1: np.int8, 2: np.int16, 3: np.int32, 4: np.float16}
_CT2_BFLOAT16 = 5


class _Reader:
    def __init__(self, buf: memoryview, name: str) -> None:
        self.buf, self.pos, self.name = buf, 0, name

    def take(self, n: int) -> memoryview:
        if self.pos + n > len(self.buf):
            raise ModelLoadError(f"{self.name}: truncated model file (needs {self.pos + n} bytes, has {len(self.buf)})")
        out = self.buf[self.pos : self.pos + n]
        self.pos += n
        return out

    def unpack(self, fmt: str) -> tuple[int, ...]:
        return struct.unpack("<" + fmt, self.take(struct.calcsize("<" + fmt)))

    def string(self) -> str:
        (n,) = self.unpack("H")
        raw = bytes(self.take(n))
        if not raw.endswith(b"\0"):
            raise ModelLoadError(f"{self.name}: corrupt model file (bad string at byte {self.pos})")
        return raw[:-1].decode("utf-8", errors="strict")


def read_ct2_variables(parts: list[Path]) -> dict[str, np.ndarray]:
    """Parse a CTranslate2 model.bin (possibly split into consecutive parts) into numpy arrays."""
    name = str(parts[0]) if len(parts) == 1 else " + ".join(str(p) for p in parts)
    try:
        data = b"".join(p.read_bytes() for p in parts)
    except OSError as exc:
        raise ModelLoadError(f"{name}: cannot read model file: {exc.strerror or exc}") from None
    reader = _Reader(memoryview(data), name)
    try:
        (version,) = reader.unpack("I")
        if not 5 <= version <= 6:
            raise ModelLoadError(f"{name}: not a CTranslate2 model.bin (binary version {version})")
        spec = reader.string()
        if spec != "WhisperSpec":
            raise ModelLoadError(f"{name}: a {spec!r} model, not a Whisper model")
        reader.unpack("I")  # revision
        (count,) = reader.unpack("I")
        variables: dict[str, np.ndarray] = {}
        for _ in range(count):
            var = reader.string()
            (rank,) = reader.unpack("B")
            shape = reader.unpack(f"{rank}I") if rank else ()
            (dtype_id,) = reader.unpack("B")
            (nbytes,) = reader.unpack("I")
            raw = reader.take(nbytes)
            variables[var] = _decode_array(raw, dtype_id, shape, f"{name}: variable {var}")
        (n_alias,) = reader.unpack("I")
        for _ in range(n_alias):
            alias, target = reader.string(), reader.string()
            if target in variables:
                variables[alias] = variables[target]
    except (struct.error, UnicodeDecodeError, ValueError) as exc:
        raise ModelLoadError(f"{name}: corrupt model file ({exc})") from None
    return variables


def _decode_array(raw: memoryview, dtype_id: int, shape: tuple[int, ...], what: str) -> np.ndarray:
    if dtype_id == _CT2_BFLOAT16:
        ints = np.frombuffer(raw, dtype=np.uint16).astype(np.uint32) << 16
        array = ints.view(np.float32)
    elif dtype_id in _CT2_DTYPES:
        array = np.frombuffer(raw, dtype=_CT2_DTYPES[dtype_id])
    else:
        raise ModelLoadError(f"{what}: unknown data type id {dtype_id}")
    expected = int(np.prod(shape)) if shape else 1
    if array.size != expected:
        raise ModelLoadError(f"{what}: {array.size} values for shape {shape}")
    return array.reshape(shape)


def _dequantized(variables: dict[str, np.ndarray], key: str) -> torch.Tensor:
    value = variables[key]
    scale = variables.get(key + "_scale")
    if scale is not None:
        scale = np.asarray(scale, dtype=np.float32)
        value = value.astype(np.float32) / (scale[:, None] if value.ndim == 2 and scale.ndim == 1 else scale)
    return torch.from_numpy(np.array(value, dtype=np.float32))


def _ct2_layers(variables: dict[str, np.ndarray], prefix: str) -> int:
    n = 0
    while f"{prefix}/layer_{n}/ffn/linear_0/weight" in variables:
        n += 1
    return n


def ct2_to_state(variables: dict[str, np.ndarray], source: str) -> tuple[ModelDimensions, dict[str, torch.Tensor]]:
    """Map CTranslate2 Whisper variables onto our module layout (fused q/k/v, fused cross k/v)."""

    def get(key: str) -> torch.Tensor:
        if key not in variables:
            raise ModelLoadError(f"{source}: missing variable {key}")
        return _dequantized(variables, key)

    def scalar(key: str, default: int) -> int:
        return int(np.asarray(variables[key]).item()) if key in variables else default

    conv1 = get("encoder/conv1/weight")
    embed = get("decoder/embeddings/weight")
    n_audio_layer, n_text_layer = _ct2_layers(variables, "encoder"), _ct2_layers(variables, "decoder")
    dims = ModelDimensions(
        n_mels=conv1.shape[1],
        n_audio_ctx=get("encoder/position_encodings/encodings").shape[0],
        n_audio_state=conv1.shape[0],
        n_audio_head=scalar("encoder/num_heads", conv1.shape[0] // 64),
        n_audio_layer=n_audio_layer,
        n_vocab=embed.shape[0],
        n_text_ctx=get("decoder/position_encodings/encodings").shape[0],
        n_text_state=embed.shape[1],
        n_text_head=scalar("decoder/num_heads", embed.shape[1] // 64),
        n_text_layer=n_text_layer,
    )
    state: dict[str, torch.Tensor] = {}

    def linear(dst: str, src: str) -> None:
        state[f"{dst}.weight"] = get(f"{src}/weight")
        state[f"{dst}.bias"] = get(f"{src}/bias")

    def norm(dst: str, src: str) -> None:
        state[f"{dst}.weight"] = get(f"{src}/gamma")
        state[f"{dst}.bias"] = get(f"{src}/beta")

    for conv in ("conv1", "conv2"):
        linear(f"encoder.{conv}", f"encoder/{conv}")
    state["encoder.positional_embedding"] = get("encoder/position_encodings/encodings")
    norm("encoder.ln_post", "encoder/layer_norm")
    state["decoder.token_embedding.weight"] = embed
    state["decoder.positional_embedding"] = get("decoder/position_encodings/encodings")
    norm("decoder.ln", "decoder/layer_norm")
    for side, count in (("encoder", n_audio_layer), ("decoder", n_text_layer)):
        for i in range(count):
            src, dst = f"{side}/layer_{i}", f"{side}.blocks.{i}"
            norm(f"{dst}.attn_ln", f"{src}/self_attention/layer_norm")
            linear(f"{dst}.attn.qkv", f"{src}/self_attention/linear_0")
            linear(f"{dst}.attn.out", f"{src}/self_attention/linear_1")
            norm(f"{dst}.mlp_ln", f"{src}/ffn/layer_norm")
            linear(f"{dst}.mlp.0", f"{src}/ffn/linear_0")
            linear(f"{dst}.mlp.2", f"{src}/ffn/linear_1")
            if side == "decoder":
                norm(f"{dst}.cross_attn_ln", f"{src}/attention/layer_norm")
                linear(f"{dst}.cross_attn.query", f"{src}/attention/linear_0")
                linear(f"{dst}.cross_attn.kv", f"{src}/attention/linear_1")
                linear(f"{dst}.cross_attn.out", f"{src}/attention/linear_2")
    return dims, state


def ct2_model_parts(directory: Path) -> list[Path]:
    """model.bin, or model.bin.part1, model.bin.part2, ... in order."""
    single = directory / "model.bin"
    if single.is_file():
        return [single]
    parts = [p for p in directory.glob("model.bin.part*") if p.suffix.removeprefix(".part").isdigit()]
    parts.sort(key=lambda p: int(p.suffix.removeprefix(".part")))
    if not parts:
        raise ModelLoadError(f"{directory}: no model.bin (or model.bin.part*) in this directory")
    return parts


def load_ct2(parts: list[Path], config_file: Path | None = None) -> LoadedWeights:
    """Load a CTranslate2 Whisper model from its model.bin part(s) and optional config.json."""
    source = str(parts[0].parent)
    dims, state = ct2_to_state(read_ct2_variables(parts), source)
    weights = LoadedWeights(dims, state, source=source)
    if config_file is not None and config_file.is_file():
        try:
            config = json.loads(config_file.read_text())
        except (OSError, ValueError) as exc:
            raise ModelLoadError(f"{config_file}: unreadable config.json ({exc})") from None
        heads = config.get("alignment_heads")
        weights.alignment_heads = [(int(a), int(b)) for a, b in heads] if heads else None
        weights.suppress_ids = config.get("suppress_ids")
        weights.suppress_ids_begin = config.get("suppress_ids_begin")
    return weights
