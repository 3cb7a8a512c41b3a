"""Prometheus metrics of one daemon (its own registry, so several servers can share a process)."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

LATENCY_BUCKETS = (0.25, 0.5, 0.75, 1.0, 1.5, 2.0, 3.0, 5.0, 10.0, 30.0)


class Metrics:
    def __init__(self) -> None:
        r = self.registry = CollectorRegistry()
        self.sessions = Gauge("streamwhisper_sessions", "Sessions open now", registry=r)
        self.sessions_total = Counter("streamwhisper_sessions_accepted", "Sessions accepted", registry=r)
        self.refused = Counter("streamwhisper_sessions_refused", "Sessions refused", ["reason"], registry=r)
        self.audio_seconds = Counter("streamwhisper_audio_seconds", "Audio received (seconds)", registry=r)
        self.inference_seconds = Counter(
            "streamwhisper_inference_seconds", "Time the inference worker spent recognising", registry=r
        )
        self.real_time_factor = Gauge(
            "streamwhisper_real_time_factor", "Inference seconds per audio second since start", registry=r
        )
        self.final_latency = Histogram(
            "streamwhisper_final_latency_seconds",
            "From receiving the last audio of a final to sending it",
            buckets=LATENCY_BUCKETS,
            registry=r,
        )
        self.partial_latency = Histogram(
            "streamwhisper_partial_latency_seconds",
            "From receiving the last audio of a partial to sending it",
            buckets=LATENCY_BUCKETS,
            registry=r,
        )
        self.queue_wait = Histogram(
            "streamwhisper_queue_wait_seconds",
            "Time a request waited for the worker",
            buckets=LATENCY_BUCKETS,
            registry=r,
        )
        self.batch_size = Histogram(
            "streamwhisper_batch_size", "Requests per inference batch", buckets=(1, 2, 4, 8, 12, 16, 32), registry=r
        )
        self.interrupted = Counter(
            "streamwhisper_batches_interrupted", "Batches stopped part way: nobody waited for them", registry=r
        )
        self.paused = Counter(
            "streamwhisper_batches_paused", "Times a batch paused part way for a turn's final", registry=r
        )
        self._worker_seen = (0, 0)
        self.queue_depth = Gauge("streamwhisper_queue_depth", "Requests waiting for the worker", registry=r)
        self.outbox_depth = Gauge("streamwhisper_outbox_messages", "Messages waiting for clients to read", registry=r)
        self.lag = Gauge("streamwhisper_mean_lag_seconds", "Mean transcript lag over open sessions", registry=r)
        self.resumes = Counter(
            "streamwhisper_resumes", "Session resumes by outcome (resumed, refused, expired)", ["outcome"], registry=r
        )
        self.errors = Counter("streamwhisper_errors", "Errors by kind", ["kind"], registry=r)
        self.uploads = Counter(
            "streamwhisper_uploads", "OpenAI-compatible file requests by outcome", ["outcome"], registry=r
        )
        self._audio_total = 0.0
        self._inference_total = 0.0

    def add_audio(self, seconds: float) -> None:
        self._audio_total += seconds
        self.audio_seconds.inc(seconds)

    def observe_batch(self, size: int, seconds: float, waits: list[float]) -> None:
        """Called from the worker thread (prometheus_client metrics are thread-safe)."""
        self.batch_size.observe(size)
        self.inference_seconds.inc(seconds)
        self._inference_total += seconds
        for wait in waits:
            self.queue_wait.observe(wait)

    def count_worker(self, interrupted: int, paused: int) -> None:
        """The worker's running totals (``WorkerStats.interrupted``, ``.paused``)."""
        seen_interrupted, seen_paused = self._worker_seen
        self.interrupted.inc(max(0, interrupted - seen_interrupted))
        self.paused.inc(max(0, paused - seen_paused))
        self._worker_seen = (max(interrupted, seen_interrupted), max(paused, seen_paused))

    def render(self) -> bytes:
        if self._audio_total > 0:
            self.real_time_factor.set(self._inference_total / self._audio_total)
        return generate_latest(self.registry)
