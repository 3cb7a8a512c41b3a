"""The ``streamwhisper`` command: serve | listen | transcribe | models | bench.

The only place that configures logging and turns errors into one line on stderr and an exit code.
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import logging
import sys
from collections.abc import Sequence
from pathlib import Path

from .config import Config, load_config
from .errors import AudioDeviceError, StreamWhisperError

log = logging.getLogger("streamwhisper")

EXIT_ERROR = 1
EXIT_USAGE = 2


class _Parser(argparse.ArgumentParser):
    """argparse that reports bad flags in one line (exit 2), without the usage block."""

    def error(self, message: str) -> None:  # type: ignore[override]
        self.exit(EXIT_USAGE, f"streamwhisper: error: {message} (see --help)\n")


def _temperatures(text: str) -> tuple[float, ...]:
    """``--temperatures 0,0.4`` -> (0.0, 0.4)."""
    try:
        return tuple(float(t) for t in text.split(",") if t.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a comma-separated list of numbers: {text!r}") from None


def _add_model_flags(p: argparse.ArgumentParser, device_flag: str = "--device", streaming: bool = True) -> None:
    """The [model] flags, and with ``streaming`` the common [recognizer] ones."""
    p.add_argument("--config", metavar="FILE", help="TOML settings file (see config/streamwhisper.toml)")
    p.add_argument("--model", help="model name, CTranslate2 directory or .pt file (default tiny.en)")
    p.add_argument(device_flag, dest="device", help="cpu, cuda or cuda:N")
    p.add_argument("--compute-type", help="default, float32, mixed, int8_encoder, int8_logits, int8, float16, bfloat16")
    p.add_argument("--threads", type=int, help="torch threads (0 = one per core)")
    if streaming:
        p.add_argument("--beam-size", type=int, help="beam search width of a lone window (default 5; 0 = greedy)")
        p.add_argument(
            "--temperatures", type=_temperatures, metavar="T,T...", help="fallback temperatures (default 0,0.4)"
        )
        p.add_argument(
            "--audio-ctx", choices=("auto", "fit", "full"), help="encode windows padded to 30 s (full) or fitted (fit)"
        )


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="streamwhisper", description="Real-time streaming speech transcription with Whisper.")
    parser.add_argument("-v", "--verbose", action="count", default=0, help="more logging (-vv for debug)")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)

    t = sub.add_parser("transcribe", help="transcribe audio files offline")
    t.add_argument("files", nargs="+", metavar="FILE")
    _add_model_flags(t, streaming=False)
    t.add_argument("--language", help="language code or name (default: detect; English-only models: en)")
    t.add_argument("--task", choices=("transcribe", "translate"), default="transcribe")
    t.add_argument("--beam-size", type=int, help="beam search width (default greedy)")
    t.add_argument(
        "--temperatures", type=_temperatures, metavar="T,T...", help="fallback temperatures (default 0,0.2,...,1)"
    )
    t.add_argument("--temperature-fallback", action=argparse.BooleanOptionalAction, default=True)
    t.add_argument("--initial-prompt", help="text to condition the first window on")
    t.add_argument("--condition-on-previous-text", action=argparse.BooleanOptionalAction, default=True)
    t.add_argument("--word-timestamps", action="store_true", help="per-word start/end times")
    t.add_argument("--format", choices=("txt", "srt", "vtt", "json"), default="txt")
    t.add_argument("--output-dir", type=Path, help="write <name>.<format> files here instead of stdout")
    t.add_argument(
        "--progress", action=argparse.BooleanOptionalAction, default=None, help="progress bar (default: on a terminal)"
    )

    m = sub.add_parser("models", help="list known and installed models")
    m.add_argument("--config", metavar="FILE", help=argparse.SUPPRESS)

    sv = sub.add_parser("serve", help="run the streaming transcription daemon (WebSocket)")
    _add_model_flags(sv)
    sv.add_argument("--host", help="address to listen on (default 127.0.0.1)")
    sv.add_argument("--port", type=int, help="port (default 8765; 0 = any free port)")
    sv.add_argument(
        "--max-upload-bytes", type=int, help="largest file POST /v1/audio/transcriptions accepts (default 25 MiB)"
    )
    sv.add_argument(
        "--workers",
        type=int,
        help="inference threads running batches at once (default 0: 2 on a CPU with 2 cores or more, else 1)",
    )
    sv.add_argument(
        "--wyoming-port",
        type=int,
        metavar="PORT",
        help="also serve the Wyoming protocol (Home Assistant) on this TCP port, e.g. 10300 (default off)",
    )
    sv.add_argument(
        "--agent-port",
        type=int,
        metavar="PORT",
        help="answer HAProxy's agent-check on this TCP port with the free capacity (default off)",
    )
    sv.add_argument(
        "--wyoming-zeroconf",
        action="store_true",
        default=None,
        help="announce the Wyoming port over mDNS for Home Assistant's discovery (needs streamwhisper[zeroconf])",
    )

    ls = sub.add_parser("listen", help="live captions from the microphone (in-process, or via a daemon)")
    ls.add_argument("--list-devices", action="store_true", help="list the audio input devices and exit")
    ls.add_argument(
        "--device", dest="input_device", metavar="N|NAME", help="input device index or name (default: default input)"
    )
    ls.add_argument("--server", metavar="URL", help="stream to a daemon (ws://host:port) instead of running the model")
    ls.add_argument("--token", help="the daemon's auth token (with --server)")
    ls.add_argument(
        "--output", type=Path, metavar="FILE", help="append captions as they become final: .srt, .vtt, .txt or .jsonl"
    )
    ls.add_argument("--language", help="language code or name (default: detect; English-only models: en)")
    ls.add_argument("--task", choices=("transcribe", "translate"), default="transcribe")
    ls.add_argument(
        "--partials",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="show the revisable partial in place (default: on a terminal)",
    )
    _add_model_flags(ls, device_flag="--model-device")

    from .bench import add_bench_parser

    add_bench_parser(sub, _add_model_flags)
    return parser


def resolve_config(args: argparse.Namespace) -> Config:
    overrides = {
        "model": {
            "name": getattr(args, "model", None),
            "device": getattr(args, "device", None),
            "compute_type": getattr(args, "compute_type", None),
            "threads": getattr(args, "threads", None),
        },
        "server": {
            "host": getattr(args, "host", None),
            "port": getattr(args, "port", None),
            "max_upload_bytes": getattr(args, "max_upload_bytes", None),
            "wyoming_port": getattr(args, "wyoming_port", None),
            "workers": getattr(args, "workers", None),
            "wyoming_zeroconf": getattr(args, "wyoming_zeroconf", None),
            "agent_port": getattr(args, "agent_port", None),
        },
    }
    if getattr(args, "command", None) != "transcribe":  # its --beam-size and --temperatures are offline options
        overrides["recognizer"] = {
            "beam_size": getattr(args, "beam_size", None),
            "audio_ctx": getattr(args, "audio_ctx", None),
            "fallback": {"temperatures": getattr(args, "temperatures", None)},
        }
    return load_config(getattr(args, "config", None), overrides=overrides)


def load_configured_model(config: Config):  # type: ignore[no-untyped-def]
    """Apply the thread settings and load the configured model."""
    from .model.cpu_threads import configure_threads
    from .model.loading import load_model

    configure_threads(config.model.threads)
    m = config.model
    return load_model(m.name, m.device, m.compute_type, m.download_root or None, m.download_url or None)


def worker_recognizer(config: Config):  # type: ignore[no-untyped-def]
    """The configured model, loaded and warmed up, for inference worker threads: the loading
    thread then lets its OpenMP team go, as a team beside the workers' slows every one of them
    (:mod:`.model.cpu_threads`)."""
    from .model.cpu_threads import release_openmp_threads
    from .model.serving import WhisperRecognizer
    from .runtime.server import warm_up

    recognizer = WhisperRecognizer(load_configured_model(config), config.recognizer)
    warm_up(recognizer)
    release_openmp_threads()
    return recognizer


def cmd_models(args: argparse.Namespace) -> int:
    from .model.sources import DEFAULT_MODEL, available_models

    root = resolve_config(args).model.download_root
    for name, where in available_models(Path(root) if root else None):
        marker = "*" if name == DEFAULT_MODEL else " "
        print(f"{marker} {name:<16} {where}")
    print("(* default)")
    return 0


def cmd_transcribe(args: argparse.Namespace) -> int:
    from dataclasses import replace

    from .audio.files import load_audio
    from .model.decoding import DecodeOptions
    from .model.fallback import FallbackRule
    from .outputs import to_json, to_srt, to_txt, to_vtt, write_result
    from .transcribe import TranscribeOptions, Transcriber

    config = resolve_config(args)
    for f in args.files:  # fail before loading the model when a file is missing
        if not Path(f).is_file():
            raise StreamWhisperError(f"{f}: no such file")
    if args.beam_size is not None and args.beam_size < 1:
        raise StreamWhisperError("--beam-size must be at least 1")
    fallback = FallbackRule() if args.temperatures is None else FallbackRule(args.temperatures)
    model = load_configured_model(config)
    transcriber = Transcriber(model)
    options = TranscribeOptions(
        decode=DecodeOptions(task=args.task, language=args.language, beam_size=args.beam_size),
        fallback=fallback,
        initial_prompt=args.initial_prompt,
        condition_on_previous_text=args.condition_on_previous_text,
        word_timestamps=args.word_timestamps,
    )
    if not args.temperature_fallback:
        options = replace(options, fallback=replace(fallback, temperatures=fallback.temperatures[:1]))
    if args.language is not None:
        transcriber.tokenizer(args.language, args.task)  # unknown language: a clean error now
    show_progress = sys.stderr.isatty() if args.progress is None else args.progress
    failures = 0
    for f in args.files:
        try:
            audio = load_audio(f)
        except StreamWhisperError as exc:
            print(f"streamwhisper: error: {exc}", file=sys.stderr)
            failures += 1
            continue
        result = _run_with_progress(transcriber, audio, options, show_progress and len(audio) > 30 * 16000, f)
        if args.output_dir is not None:
            args.output_dir.mkdir(parents=True, exist_ok=True)
            path = write_result(result, args.output_dir, args.format, basename=Path(f).stem)
            log.info("wrote %s", path)
        else:
            renderers = {"txt": to_txt, "srt": to_srt, "vtt": to_vtt}
            text = to_json(result) if args.format == "json" else renderers[args.format](result.segments)
            sys.stdout.write(text if text.endswith("\n") else text + "\n")
    return EXIT_ERROR if failures else 0


def cmd_serve(args: argparse.Namespace) -> int:
    import asyncio

    from .model.cpu_threads import core_sharing
    from .runtime.config import inference_threads
    from .runtime.server import Daemon

    config = resolve_config(args)
    workers = inference_threads(config.server.workers, config.model.device)
    config = dataclasses.replace(config, server=dataclasses.replace(config.server, workers=workers))
    recognizer = worker_recognizer(config)

    async def run() -> None:
        sharing = core_sharing(config.server.workers, config.model.threads)
        daemon = Daemon(config.server, config.streaming, recognizer, config.model.name, on_share=sharing)
        await daemon.start()
        print(f"streamwhisper: serving {config.model.name} on {daemon.url}/v1/stream (Ctrl-C to stop)", file=sys.stderr)
        if config.server.wyoming_port:
            host = config.server.wyoming_host or config.server.host
            print(f"streamwhisper: Wyoming (Home Assistant) on tcp://{host}:{daemon.wyoming_port}", file=sys.stderr)
        if config.server.agent_port:
            agent = f"tcp://{config.server.host}:{daemon.agent_port}"
            print(f"streamwhisper: HAProxy agent check on {agent}", file=sys.stderr)
        await daemon.serve_forever()

    asyncio.run(run())
    return 0


def cmd_listen(args: argparse.Namespace) -> int:
    from .listen.app import ListenOptions, run_listen
    from .listen.mic import NO_INPUT_DEVICES, format_devices, list_input_devices, parse_device
    from .runtime.wire import normalize_language

    if args.list_devices:
        devices = list_input_devices()
        if not devices:
            raise AudioDeviceError(NO_INPUT_DEVICES)
        sys.stdout.write(format_devices(devices))
        return 0
    config = resolve_config(args)
    options = ListenOptions(
        device=parse_device(args.input_device),
        server=args.server,
        token=args.token,
        output=args.output,
        language=normalize_language(args.language),
        task=args.task,
        partials=sys.stdout.isatty() if args.partials is None else args.partials,
    )
    return run_listen(options, config, functools.partial(worker_recognizer, config))


def cmd_bench(args: argparse.Namespace) -> int:
    from .bench import run_bench

    config = resolve_config(args)
    return run_bench(args, config, load_configured_model(config))


def _run_with_progress(transcriber, audio, options, show: bool, name: str):  # type: ignore[no-untyped-def]
    if not show:
        return transcriber.transcribe(audio, options)
    from tqdm import tqdm

    with tqdm(total=round(len(audio) / 16000, 1), unit="s", desc=Path(name).name, file=sys.stderr, leave=False) as bar:

        def progress(done: float, total: float) -> None:
            bar.n = round(min(done, total), 1)
            bar.refresh()

        return transcriber.transcribe(audio, options, progress)


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    level = logging.WARNING - 10 * min(args.verbose, 2)
    logging.basicConfig(level=level, format="%(asctime)s %(levelname)s %(name)s: %(message)s", stream=sys.stderr)
    commands = {
        "transcribe": cmd_transcribe,
        "models": cmd_models,
        "serve": cmd_serve,
        "listen": cmd_listen,
        "bench": cmd_bench,
    }
    try:
        return commands[args.command](args)
    except StreamWhisperError as exc:
        print(f"streamwhisper: error: {exc}", file=sys.stderr)
        return EXIT_ERROR
    except KeyboardInterrupt:
        print("streamwhisper: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        return 0


if __name__ == "__main__":
    sys.exit(main())
