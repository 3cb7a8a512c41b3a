"""Time ``WhisperRecognizer.recognize`` on batches of real streaming requests (1, 4, 8, 16 rows).

The requests are the ones a Streamer issues over a few eval clips (windows of 3-10 s, with the
prompts and prefixes the commit policy gives them), as the server would batch them from
concurrent sessions. Prints the median of ``--runs`` timings per batch size; no asserts.

    .venv/bin/python benchmarks/batch_decode.py [--model tiny.en] [--runs 7] [--sizes 1,4,8,16]

``--sequential`` decodes the windows one at a time (``batch_decode=False``, the reference path);
``--requests FILE`` keeps the collected requests in FILE (pickle) and reuses them, so that two
versions of the code can be timed on the same requests.
"""

from __future__ import annotations

import argparse
import pickle
import statistics
import sys
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(1, str(REPO))

from benchmarks._common import load_wav, shared_data_dir  # noqa: E402

CLIPS = ("read_en/en_jfk", "read_en/en_lj_LJ001-0001", "read_en/en_lj_LJ001-0003", "read_en/en_lj_LJ001-0005",
         "read_en/en_ls_dev_1272-141231-0002", "read_en/en_ls_dev_2412-153948-0000")


class Recording:
    """A recogniser that keeps every request it serves."""

    def __init__(self, inner) -> None:  # type: ignore[no-untyped-def]
        self.inner, self.requests = inner, []

    def recognize(self, requests):  # type: ignore[no-untyped-def]
        self.requests.extend(requests)
        return self.inner.recognize(requests)


def streamed_requests(recognizer, clips: list[np.ndarray]) -> list:  # type: ignore[no-untyped-def]
    from streamwhisper.runtime.replay import replay
    from streamwhisper.streaming.streamer import Streamer

    recording = Recording(recognizer)
    for audio in clips:
        replay(Streamer(), recording, audio, aware=False)
    return recording.requests


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="tiny.en")
    parser.add_argument("--compute", default="default")
    parser.add_argument("--runs", type=int, default=7)
    parser.add_argument("--sizes", default="1,4,8,16")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--sequential", action="store_true", help="decode one window at a time")
    parser.add_argument("--requests", type=Path, help="pickle of the requests: reused if it exists, else written")
    args = parser.parse_args()

    import torch

    from streamwhisper.model.config import RecognizerConfig
    from streamwhisper.model.loading import load_model
    from streamwhisper.model.serving import WhisperRecognizer

    torch.set_num_threads(args.threads)
    model = load_model(args.model, compute_type=args.compute)
    options = RecognizerConfig(batch_decode=not args.sequential)
    recognizer = WhisperRecognizer(model, options)
    sizes = [int(s) for s in args.sizes.split(",")]
    if args.requests and args.requests.exists():
        pick = pickle.loads(args.requests.read_bytes())[: max(sizes)]
    else:
        audio = [load_wav(shared_data_dir() / "eval" / "wav" / f"{c}.wav") for c in CLIPS]
        requests = [r for r in streamed_requests(recognizer, audio) if 300 <= r.mel.shape[-1] <= 1000]
        # spread over the collected requests: varied lengths, prompts and prefixes
        pick = [requests[i] for i in np.linspace(0, len(requests) - 1, max(sizes)).round().astype(int)]
        if args.requests:
            args.requests.write_bytes(pickle.dumps(pick))
    secs = [r.mel.shape[-1] / 100 for r in pick]
    print(f"{len(pick)} requests: windows {min(secs):.1f}-{max(secs):.1f} s, "
          f"{sum(bool(r.prompt_text) for r in pick)} with a prompt, "
          f"{sum(bool(r.prefix_text) for r in pick)} with a prefix")
    recognizer.recognize(pick[:4])  # warm-up
    print(f"{'batch':>5} {'median s':>9} {'ms/request':>10} {'min s':>7}")
    for n in sizes:
        times = []
        for _ in range(args.runs):
            t0 = time.perf_counter()
            recognizer.recognize(pick[:n])
            times.append(time.perf_counter() - t0)
        med = statistics.median(times)
        print(f"{n:>5} {med:>9.3f} {1000 * med / n:>10.1f} {min(times):>7.3f}")


if __name__ == "__main__":
    main()
