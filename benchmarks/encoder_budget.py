"""The encoder's physical budget on this CPU: its arithmetic per 30 s window against the rate this
CPU runs each kind of it at.

For each part of one encoder pass (the convolutions, the Linears of every block, the attention
over 1500 frames) it prints the GFLOP, the measured time of that part alone (median of --runs,
after a warm-up) in float32 and, for the Linears, as the ``int8_encoder`` compute type runs them,
and the GFLOP/s that gives; then the whole encoder as each compute type loads it. The sum of the
parts' best times is the floor of one streamed request's encoder cost without changing the
model's arithmetic.

    python benchmarks/encoder_budget.py [--model tiny.en] [--runs 9]
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import nn

from streamwhisper.bench import cpu_name
from streamwhisper.model.cpu_threads import configure_threads
from streamwhisper.model.int8 import TokenScaledInt8Linear
from streamwhisper.model.loading import load_model


def timed_ms(fn: Callable[[], object], runs: int) -> float:
    with torch.inference_mode():
        fn()
        times = []
        for _ in range(runs):
            t0 = time.perf_counter()
            fn()
            times.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="tiny.en")
    parser.add_argument("--runs", type=int, default=9)
    parser.add_argument("--threads", type=int, default=0, help="torch threads (0: one per core)")
    args = parser.parse_args()
    configure_threads(args.threads)
    model = load_model(args.model, compute_type="float32")
    dims = model.dims
    frames, d, heads, layers = dims.n_audio_ctx, dims.n_audio_state, dims.n_audio_head, dims.n_audio_layer
    print(f"cpu: {cpu_name()}; torch {torch.__version__}, {torch.get_num_threads()} threads; model {args.model}")
    rows: list[tuple[str, float, float, float | None]] = []  # part, GFLOP, float32 ms, int8 ms

    mel = torch.randn(1, dims.n_mels, 2 * frames)
    conv_gflop = 2 * (2 * frames * d * dims.n_mels * 3 + frames * d * d * 3) / 1e9
    rows.append(("convolutions", conv_gflop, timed_ms(lambda: model.encoder._convolve(mel), args.runs), None))

    block = model.encoder.blocks[0]
    linears = {"qkv": block.attn.qkv, "out": block.attn.out, "fc1": block.mlp[0], "fc2": block.mlp[2]}
    for name, linear in linears.items():
        assert isinstance(linear, nn.Linear)
        inp = torch.randn(frames, linear.in_features)
        gflop = layers * 2 * frames * linear.in_features * linear.out_features / 1e9
        int8 = TokenScaledInt8Linear(linear)
        f32_ms = layers * timed_ms(lambda linear=linear, inp=inp: linear(inp), args.runs)
        i8_ms = layers * timed_ms(lambda int8=int8, inp=inp: int8(inp), args.runs)
        rows.append((f"Linear {name} x{layers}", gflop, f32_ms, i8_ms))

    q, k, v = (torch.randn(1, heads, frames, d // heads) for _ in range(3))
    attn_gflop = layers * 2 * 2 * heads * frames * frames * (d // heads) / 1e9
    attn_ms = layers * timed_ms(lambda: F.scaled_dot_product_attention(q, k, v), args.runs)
    rows.append((f"attention x{layers} (fused)", attn_gflop, attn_ms, None))

    print(f"\n{'part':28s} {'GFLOP':>7s} {'float32 ms':>11s} {'GFLOP/s':>8s} {'int8 ms':>8s} {'GFLOP/s':>8s}")
    for part, gflop, f32, i8 in rows:
        int8_cols = f"{i8:8.1f} {gflop / i8 * 1e3:8.0f}" if i8 is not None else ""
        print(f"{part:28s} {gflop:7.2f} {f32:11.1f} {gflop / f32 * 1e3:8.0f} {int8_cols}")
    total = sum(r[1] for r in rows)
    f32_sum = sum(r[2] for r in rows)
    best_sum = sum(min(r[2], r[3] if r[3] is not None else r[2]) for r in rows)
    print(f"{'sum of the parts':28s} {total:7.2f} {f32_sum:11.1f} {total / f32_sum * 1e3:8.0f}")
    print(f"sum of the parts, the faster of float32 and int8 for each Linear: {best_sum:.1f} ms")

    print("\nwhole encoder, one 30 s window (layer norms, GELUs and additions included):")
    window = torch.randn(1, dims.n_mels, 2 * frames)
    for compute in ("mixed", "int8_encoder"):
        loaded = load_model(args.model, compute_type=compute)
        ms = timed_ms(lambda loaded=loaded: loaded.encoder(window), args.runs)
        print(f"  {compute:14s} {ms:7.1f} ms ({total / ms * 1e3:.0f} GFLOP/s over {total:.1f} GFLOP)")


if __name__ == "__main__":
    main()
