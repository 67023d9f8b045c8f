"""Every Prometheus metric of the service, in one place.

Names follow ``fenceline_<subsystem>_<name>_<unit>``; labels are bounded (model names, handle
kinds, transports, error codes; never object ids). The registry is injected, so each test and
each service gets its own.

The one exception is :class:`TritonMetrics`: Triton's own ``nv_inference_*`` names, kept for
the KServe path beside fenceline's, so that dashboards and alerts written for Triton read a
fenceline service unchanged (docs/triton.md, "Metrics").
"""

from __future__ import annotations

import threading
from collections.abc import Iterable
from typing import Any

from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    ProcessCollector,
    disable_created_metrics,
    generate_latest,
)
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
)
from prometheus_client.registry import Collector
from prometheus_client.utils import floatToGoString

from fenceline import _native

# 5 us .. 5 s: small frames over IPC take tens of microseconds, 4K frames milliseconds.
LATENCY_BUCKETS = (
    5e-6, 10e-6, 25e-6, 50e-6, 100e-6, 250e-6, 500e-6,
    1e-3, 2.5e-3, 5e-3, 10e-3, 25e-3, 50e-3, 100e-3, 250e-3, 500e-3, 1.0, 5.0,
)  # fmt: skip

TRANSPORTS = ("http", "ipc", "kserve")
STREAM_FAILURES = ("model_error", "input_error", "conflict")


class Metrics:
    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        # A `_created` series per counter doubles what Prometheus stores and no panel reads it.
        disable_created_metrics()  # type: ignore[no-untyped-call]
        self.registry = registry if registry is not None else CollectorRegistry()
        r = self.registry
        ProcessCollector(registry=r)  # process_resident_memory_bytes, process_open_fds, ...
        # Runs are recorded natively, so that the native run path (docs/ipc.md, "The run path")
        # records without the interpreter: one store, read at scrape time.
        self.run_store = _native.RunMetrics(list(LATENCY_BUCKETS))
        r.register(_RunMetrics(self.run_store))
        self.sessions = Gauge(
            "fenceline_session_active", "Sessions that exist now.", ["model"], registry=r
        )
        self.imported_bytes = Gauge(
            "fenceline_interop_imported_bytes", "Bytes of renderer memory mapped now.",
            ["kind"], registry=r,
        )
        self.imported_handles = Gauge(
            "fenceline_interop_imported_handles", "Memory and fence handles imported now.",
            ["kind"], registry=r,
        )
        self.ipc_connections = Gauge(
            "fenceline_ipc_open_connections", "IPC connections open now.", registry=r
        )
        self.ipc_connections_total = Counter(
            "fenceline_ipc_connections_total", "IPC connections accepted.", registry=r
        )
        self.errors = Counter(
            "fenceline_api_errors_total", "Requests that ended in an error, by code.",
            ["transport", "code"], registry=r,
        )

        self.kserve_requests = Counter(
            "fenceline_kserve_requests_total",
            "KServe v2 inference requests that completed, by how the tensors travelled.",
            ["model", "path"], registry=r,
        )
        self.kserve_failures = Counter(
            "fenceline_kserve_failures_total",
            "KServe v2 inference requests that failed after their model was found.",
            ["model"], registry=r,
        )
        self.kserve_in_flight = Gauge(
            "fenceline_kserve_requests_in_flight", "KServe v2 inference requests running now.",
            registry=r,
        )
        self.kserve_shm_regions = Gauge(
            "fenceline_kserve_shm_regions", "Registered Triton system shared-memory regions.",
            registry=r,
        )
        self._run_series: dict[tuple[str, str], Any] = {}
        # A streaming session's frames are recorded by the run engine too, between frames with
        # no Python step: their counter and histogram come from a native store of their own.
        self.stream_store = _native.RunMetrics(list(LATENCY_BUCKETS))
        r.register(_StreamMetrics(self.stream_store))
        self._stream_series: dict[str, Any] = {}
        self.stream_skipped = Counter(
            "fenceline_stream_skipped_frames_total",
            "Input fence values a latest-only streaming session passed over (or an every-value "
            "session dropped past its backlog limit).", ["model"], registry=r,
        )
        self.stream_failed = Counter(
            "fenceline_stream_failed_frames_total",
            "Frames signalled with the output fence's status set to error, by reason.",
            ["model", "reason"], registry=r,
        )
        self.stream_running = Gauge(
            "fenceline_stream_running_sessions", "Streaming sessions whose worker runs now.",
            registry=r,
        )

        # Per GPU on hosts with several (docs/gpu.md). ``device`` is ``cuda:N`` from
        # interop.devices.device_label: bounded by the number of GPUs, never a session id.
        self.gpu_sessions = Gauge(
            "fenceline_gpu_sessions_active", "CUDA sessions that exist now, by GPU.", ["device"],
            registry=r,
        )
        self.gpu_runs = Counter(
            "fenceline_gpu_runs_total",
            "CUDA session runs that completed (async ones: that were enqueued), by GPU.",
            ["device"], registry=r,
        )
        self.gpu_imported_bytes = Gauge(
            "fenceline_gpu_imported_bytes", "Bytes of renderer GPU memory imported now, by GPU.",
            ["device"], registry=r,
        )
        self._gpu_run_series: dict[str, Any] = {}
        r.register(_NativeMappings())
        self._runners = _NativeRunners()
        r.register(self._runners)
        self.triton = TritonMetrics()
        # Per model, the (run, infer) seconds that KServe requests added to the run histograms,
        # which are labelled by model only: the statistics extension takes them out there and
        # reads the requests from Triton's counters instead (triton/statistics.py).
        self._kserve_seconds: dict[str, tuple[float, float]] = {}
        self._kserve_lock = threading.Lock()

    def exposition(self, models: Iterable[tuple[str, str]] = ()) -> bytes:
        """The Prometheus text of every metric: the registry, then Triton's families (with a
        zero series for each loaded ``(model, version)``, as Triton starts them)."""
        return generate_latest(self.registry) + self.triton.exposition(models)

    def watch_runner(self, table: Any) -> None:
        """Exposes what the run engine (the runtime's ``_native.RunTable``) did with the runs
        that entered it."""
        self._runners.tables.append(table)

    def native_runs(self) -> dict[str, int]:
        """What the native runners did with the RUNs handed to them, by outcome, summed."""
        return self._runners.totals()

    def observe_gpu_run(self, device: str) -> None:
        child = self._gpu_run_series.get(device)
        if child is None:
            child = self._gpu_run_series[device] = self.gpu_runs.labels(device)
        child.inc()

    def run_series(self, model: str, transport: str) -> Any:
        """The native recorder of (model, transport): ``observe(run_s, wait_s, infer_s)``."""
        series = self._run_series.get((model, transport))
        if series is None:
            series = self._run_series[(model, transport)] = self.run_store.series(model, transport)
        return series

    def stream_series(self, model: str) -> Any:
        """The native recorder of ``model``'s streamed frames: ``observe(frame_s, 0, frame_s)``
        per frame, or ``count(n)`` for frames whose time is not measured (on a GPU)."""
        series = self._stream_series.get(model)
        if series is None:
            series = self._stream_series[model] = self.stream_store.series(model, "stream")
        return series

    def observe_run(self, model: str, transport: str, run_s: float, wait_s: float, infer_s: float) -> None:
        self.run_series(model, transport).observe(run_s, wait_s, infer_s)

    def observe_kserve(self, model: str, version: str, start_ns: int, bound_ns: int,
                       inferred_ns: int, end_ns: int) -> None:
        """One KServe request that succeeded, from its clock readings: bound its tensors,
        ran the model, collected its outputs. The same numbers go to the run histograms (no
        fence wait), to Triton's counters and so to the statistics extension."""
        run_s, infer_s = (end_ns - start_ns) / 1e9, (inferred_ns - bound_ns) / 1e9
        self.observe_run(model, "kserve", run_s, 0.0, infer_s)
        with self._kserve_lock:
            run, infer = self._kserve_seconds.get(model, (0.0, 0.0))
            self._kserve_seconds[model] = (run + run_s, infer + infer_s)
        self.triton.succeeded(
            model, version, request_us=(end_ns - start_ns) / 1e3, queue_us=0.0,
            input_us=(bound_ns - start_ns) / 1e3, infer_us=(inferred_ns - bound_ns) / 1e3,
            output_us=(end_ns - inferred_ns) / 1e3,
        )

    def kserve_seconds(self, model: str) -> tuple[float, float]:
        """The (run, infer) seconds KServe requests of ``model`` added to the run histograms."""
        with self._kserve_lock:
            return self._kserve_seconds.get(model, (0.0, 0.0))

    @property
    def last_run_ms(self) -> dict[str, int]:
        """Per model, the wall-clock time of its last run (Triton's statistics extension)."""
        return dict(self.run_store.last_run_ms())


# (name, help) of the run histograms, in RunMetrics.histograms' order.
_RUN_HISTOGRAMS = (
    ("fenceline_session_run_duration_seconds",
     "Wait + infer + signal time of a run, inside the service."),
    ("fenceline_session_wait_duration_seconds", "Time a run waited for its input fence."),
    ("fenceline_session_infer_duration_seconds", "onnxruntime run time of a run."),
)


class _RunMetrics(Collector):
    """The run counter and histograms from the native store, in the exposition a Counter and
    three Histograms labelled the same way would give."""

    def __init__(self, store: Any) -> None:
        self.store = store
        self.bounds = [floatToGoString(b) for b in store.bounds] + ["+Inf"]  # type: ignore[no-untyped-call]

    def collect(self) -> Any:
        runs = CounterMetricFamily(
            "fenceline_session_runs", "Session runs that completed.", labels=["model", "transport"]
        )
        for model, transport, n in self.store.runs():
            runs.add_metric([model, transport], float(n))
        yield runs
        for which, (name, doc) in enumerate(_RUN_HISTOGRAMS):
            family = HistogramMetricFamily(name, doc, labels=["model"])
            for model, counts, total in self.store.histograms(which):
                family.add_metric([model], _cumulative(self.bounds, counts), total)
            yield family


class _StreamMetrics(Collector):
    """The streamed frames' counter and frame-time histogram from their native store (a
    frame's time: from its input fence seen to its output fence signalled)."""

    def __init__(self, store: Any) -> None:
        self.store = store
        self.bounds = [floatToGoString(b) for b in store.bounds] + ["+Inf"]  # type: ignore[no-untyped-call]

    def collect(self) -> Any:
        frames = CounterMetricFamily(
            "fenceline_stream_frames",
            "Frames a streaming session ran and signalled, without a request.", labels=["model"],
        )
        for model, _, n in self.store.runs():
            frames.add_metric([model], float(n))
        yield frames
        family = HistogramMetricFamily(
            "fenceline_stream_frame_duration_seconds",
            "From the input fence seen at a value to the output fence signalled with it.",
            labels=["model"],
        )
        for model, counts, total in self.store.histograms(0):
            family.add_metric([model], _cumulative(self.bounds, counts), total)
        yield family


def _cumulative(bounds: list[str], counts: list[int]) -> list[tuple[str, float]]:
    """Prometheus histogram buckets from counts per bucket (+Inf last, not cumulative)."""
    total, out = 0, []
    for le, c in zip(bounds, counts, strict=True):
        total += c
        out.append((le, float(total)))
    return out


class _NativeMappings(Collector):
    """What the importer really holds, read at scrape time: a released import whose mapping a
    view still holds is counted here until it is unmapped."""

    def collect(self) -> Any:
        mappings, nbytes, faults = _native.mapping_stats()
        yield GaugeMetricFamily(
            "fenceline_interop_host_mappings", "Host shared-memory mappings held now.",
            value=mappings,
        )
        yield GaugeMetricFamily(
            "fenceline_interop_host_mapped_bytes", "Bytes of host shared memory mapped now.",
            value=nbytes,
        )
        yield CounterMetricFamily(
            "fenceline_interop_shrunk_memory_faults",
            "Accesses that faulted because a renderer shrank shared memory under a mapping; "
            "each failed its run, wait or signal with device_lost instead of killing the service.",
            value=faults,
        )


class _NativeRunners(Collector):
    """The run engine's counts (RunTable.counts), summed over the runtimes that share these
    metrics (one in a service)."""

    def __init__(self) -> None:
        self.tables: list[Any] = []

    def collect(self) -> Any:
        family = CounterMetricFamily(
            "fenceline_native_runs",
            "Runs that entered the run engine, by what it did: answered, failed (a refusal or "
            "failure worded there, answered by the transport), and waited (of the answered "
            "and failed, those sent ahead of their input fence).",
            labels=["outcome"],
        )
        for outcome, n in sorted(self.totals().items()):
            family.add_metric([outcome], float(n))
        yield family

    def totals(self) -> dict[str, int]:
        totals: dict[str, int] = {}
        for table in self.tables:
            for outcome, n in table.counts().items():
                totals[outcome] = totals.get(outcome, 0) + n
        return totals


# Triton's per-model inference metrics (its docs/user_guide/metrics.md): name, help.
TRITON_COUNTERS = (
    ("nv_inference_request_success",
     "Number of successful inference requests, all batch sizes"),
    ("nv_inference_count", "Number of inferences performed (does not include cached requests)"),
    ("nv_inference_exec_count",
     "Number of model executions performed (does not include cached requests)"),
    ("nv_inference_request_duration_us",
     "Cumulative inference request duration in microseconds (includes cached requests)"),
    ("nv_inference_queue_duration_us",
     "Cumulative inference queuing duration in microseconds (includes cached requests)"),
    ("nv_inference_compute_input_duration_us",
     "Cumulative compute input duration in microseconds (does not include cached requests)"),
    ("nv_inference_compute_infer_duration_us",
     "Cumulative compute inference duration in microseconds (does not include cached requests)"),
    ("nv_inference_compute_output_duration_us",
     "Cumulative inference compute output duration in microseconds (does not include cached "
     "requests)"),
)
TRITON_FAILURE = ("nv_inference_request_failure",
                  "Number of failed inference requests, all batch sizes")
TRITON_FAILURE_REASONS = ("REJECTED", "CANCELED", "BACKEND", "OTHER")
TRITON_PENDING = ("nv_inference_pending_request_count",
                  "Instantaneous number of pending requests awaiting execution per-model.")


class TritonMetrics:
    """Triton's ``nv_inference_*`` counters for KServe v2 inference, labelled ``model`` and
    ``version`` as Triton labels them, written in Triton's exposition (a counter named without
    ``_total``, which prometheus_client's own counters would add). Runs over the IPC socket and
    the interop routes are in fenceline's metrics only: they are not Triton requests."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._counters: dict[tuple[str, str, str], float] = {}  # (family, model, version)
        self._failures: dict[tuple[str, str, str], float] = {}  # (model, version, reason)
        self._pending: dict[tuple[str, str], int] = {}

    def started(self, model: str, version: str) -> None:
        with self._lock:
            key = (model, version)
            self._pending[key] = self._pending.get(key, 0) + 1

    def succeeded(self, model: str, version: str, *, request_us: float, queue_us: float,
                  input_us: float, infer_us: float, output_us: float) -> None:
        """One request done: its durations in microseconds (one inference, one execution:
        fenceline does not batch)."""
        values = (1, 1, 1, request_us, queue_us, input_us, infer_us, output_us)
        with self._lock:
            if not self._done(model, version):
                return
            for (family, _), v in zip(TRITON_COUNTERS, values, strict=True):
                key = (family, model, version)
                self._counters[key] = self._counters.get(key, 0.0) + v

    def failed(self, model: str, version: str, reason: str) -> None:
        """``reason``: Triton's, ``BACKEND`` (the model failed) or ``OTHER``."""
        with self._lock:
            if not self._done(model, version):
                return
            key = (model, version, reason)
            self._failures[key] = self._failures.get(key, 0.0) + 1

    def _done(self, model: str, version: str) -> bool:
        """One request of ``(model, version)`` ended; False when its series were dropped
        meanwhile (its model unloaded while it ran): it is then not counted."""
        key = (model, version)
        if key not in self._pending:
            return False
        self._pending[key] = max(0, self._pending[key] - 1)
        return True

    def drop(self, model: str) -> None:
        """Forgets every series of ``model``: its unload, as Triton drops a model's metrics
        with it; a later load starts them at 0."""
        with self._lock:
            self._counters = {k: v for k, v in self._counters.items() if k[1] != model}
            self._failures = {k: v for k, v in self._failures.items() if k[0] != model}
            self._pending = {k: v for k, v in self._pending.items() if k[0] != model}

    def totals(self, model: str) -> dict[str, float]:
        """``model``'s counters summed over its versions, by family, and its failures
        (``failures``): what Triton's statistics extension reports from the same numbers."""
        out = dict.fromkeys((family for family, _ in TRITON_COUNTERS), 0.0)
        out["failures"] = 0.0
        with self._lock:
            for (family, m, _), v in self._counters.items():
                if m == model:
                    out[family] += v
            for (m, _, _), v in self._failures.items():
                if m == model:
                    out["failures"] += v
        return out

    def exposition(self, models: Iterable[tuple[str, str]] = ()) -> bytes:
        """The families, a series for each loaded ``(model, version)`` of ``models``."""
        with self._lock:
            counters, failures = dict(self._counters), dict(self._failures)
            pending = dict(self._pending)
        series = sorted(set(models))
        out: list[str] = []
        for family, doc in TRITON_COUNTERS:
            out += [f"# HELP {family} {doc}", f"# TYPE {family} counter"]
            out += [f"{family}{_labels(m, v)} {floatToGoString(counters.get((family, m, v), 0.0))}"  # type: ignore[no-untyped-call]
                    for m, v in series]
        family, doc = TRITON_FAILURE
        out += [f"# HELP {family} {doc}", f"# TYPE {family} counter"]
        for m, v in series:
            for reason in TRITON_FAILURE_REASONS:
                value = floatToGoString(failures.get((m, v, reason), 0.0))  # type: ignore[no-untyped-call]
                out.append(f"{family}{_labels(m, v, reason)} {value}")
        family, doc = TRITON_PENDING
        out += [f"# HELP {family} {doc}", f"# TYPE {family} gauge"]
        out += [f"{family}{_labels(m, v)} {pending.get((m, v), 0)}" for m, v in series]
        return ("\n".join(out) + "\n").encode()


def _labels(model: str, version: str, reason: str | None = None) -> str:
    def q(v: str) -> str:
        return v.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')

    extra = f',reason="{q(reason)}"' if reason is not None else ""
    return f'{{model="{q(model)}"{extra},version="{q(version)}"}}'
