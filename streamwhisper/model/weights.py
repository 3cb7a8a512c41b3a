"""Whisper weights in this package's layout: :class:`LoadedWeights`, OpenAI ``.pt`` checkpoints,
and :func:`build_model`, which puts them into a :class:`~streamwhisper.model.whisper.Whisper`.

CTranslate2 directories are read by :mod:`~streamwhisper.model.ctranslate2`; which file a model
name stands for (a packaged model, a downloaded official checkpoint, a path) is decided by
:mod:`~streamwhisper.model.sources`.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import torch

from ..errors import ModelLoadError
from .whisper import ModelDimensions, Whisper


@dataclass
class LoadedWeights:
    """Everything a checkpoint tells us: dims, a state dict in our layout, alignment heads."""

    dims: ModelDimensions
    state: dict[str, torch.Tensor]
    alignment_heads: list[tuple[int, int]] | None = None
    suppress_ids: list[int] | None = None
    suppress_ids_begin: list[int] | None = None
    source: str = ""


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
    """Load an OpenAI ``.pt`` checkpoint (its dims and state dict)."""
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


def build_model(weights: LoadedWeights) -> Whisper:
    """An fp32 Whisper module holding ``weights``."""
    # Built on the meta device (no memory), then given the state's tensors themselves (assign)
    # rather than copies of them: the weights are held once while loading, not twice.
    with torch.device("meta"):
        model = Whisper(weights.dims)
    try:
        missing, unexpected = model.load_state_dict(weights.state, strict=False, assign=True)
    except RuntimeError as exc:
        lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
        detail = next((line for line in lines if line.startswith("size mismatch")), lines[-1] if lines else "")
        raise ModelLoadError(f"{weights.source}: weights do not fit the model ({detail})") from None
    if missing or unexpected:
        raise ModelLoadError(
            f"{weights.source}: weights do not fit the model (missing {missing[:3]}, unexpected {unexpected[:3]})"
        )
    if weights.alignment_heads:
        model.set_alignment_heads(weights.alignment_heads)
    else:
        model.set_alignment_heads(
            [
                (layer, h)
                for layer in range(weights.dims.n_text_layer // 2, weights.dims.n_text_layer)
                for h in range(weights.dims.n_text_head)
            ]
        )
    return model.requires_grad_(False).eval()
