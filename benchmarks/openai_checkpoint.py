"""Write an OpenAI-format Whisper checkpoint (.pt) from the weights streamwhisper loads.

openai-whisper needs a ``.pt``; converting our loaded weights makes it run the very same weights
as our engine and faster-whisper (the packaged CTranslate2 models), with no download::

    python benchmarks/openai_checkpoint.py tiny.en /tmp/tiny.en.pt

Our layout fuses self-attention query/key/value into ``attn.qkv`` and cross-attention key/value
into ``cross_attn.kv``; OpenAI's has them apart, and its key projections have no bias (ours carry
zeros there, checked below). Tensors are saved in float32.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import _common  # noqa: F401  (puts the repository on sys.path)


def openai_state_dict(name: str) -> tuple[dict[str, int], dict]:  # type: ignore[type-arg]
    """(dims, state dict) in OpenAI's layout for a streamwhisper model name or path."""
    import torch

    from streamwhisper.model.sources import resolve_weights

    weights = resolve_weights(name)
    dims = weights.dims.as_dict()
    state = {k: v.detach().to(torch.float32).contiguous() for k, v in weights.state.items()}

    def check_zero(bias: torch.Tensor, what: str) -> None:
        if bias.abs().max().item() > 1e-6:
            raise SystemExit(f"{name}: {what} has a non-zero key bias, which OpenAI's layout cannot hold")

    for side, count in (("encoder", dims["n_audio_layer"]), ("decoder", dims["n_text_layer"])):
        for i in range(count):
            p = f"{side}.blocks.{i}.attn"
            q, k, v = state.pop(f"{p}.qkv.weight").chunk(3, dim=0)
            qb, kb, vb = state.pop(f"{p}.qkv.bias").chunk(3, dim=0)
            check_zero(kb, p)
            state.update({f"{p}.query.weight": q, f"{p}.key.weight": k, f"{p}.value.weight": v})
            state.update({f"{p}.query.bias": qb, f"{p}.value.bias": vb})
            if side == "decoder":
                c = f"decoder.blocks.{i}.cross_attn"
                k, v = state.pop(f"{c}.kv.weight").chunk(2, dim=0)
                kb, vb = state.pop(f"{c}.kv.bias").chunk(2, dim=0)
                check_zero(kb, c)
                state.update({f"{c}.key.weight": k, f"{c}.value.weight": v, f"{c}.value.bias": vb})
    state = {k: v.clone() for k, v in state.items()}  # own storage: chunks of a fused tensor would save it whole
    return dims, state


def write_checkpoint(name: str, out: str | Path) -> Path:
    import torch

    dims, state = openai_state_dict(name)
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(out.name + ".tmp")
    torch.save({"dims": dims, "model_state_dict": state}, tmp)
    tmp.replace(out)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("model", help="model name (tiny.en, base) or path our loader accepts")
    parser.add_argument("out", help="where to write the .pt")
    args = parser.parse_args(argv)
    print(write_checkpoint(args.model, args.out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
