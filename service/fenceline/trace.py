"""The per-frame trace (docs/tracing.md): records, for a bounded time or number of frames, the
moments of every frame the service runs, per session, and writes them as Chrome trace-event
JSON, which Perfetto's UI (ui.perfetto.dev) and chrome://tracing open.

The recorder is native (native/importer/core/trace.{h,cpp}): the run engine
and CUDA sessions mark their moments into one buffer. Off by default; off, a moment costs
one relaxed atomic load. One trace records at a time, for the whole service.
"""

from __future__ import annotations

import itertools
import json
import os
import struct
import sys
import threading
import time
from collections.abc import Callable, Collection, Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from fenceline import _native
from fenceline.errors import Conflict, InvalidArgument
from fenceline.waiting import Flag

# The native enum's order (trace.h, Moment): append only.
MOMENTS = (
    "received", "input_reached", "model_start", "model_end", "signalled", "reply_sent",
    "enqueued", "gpu_done",
)  # fmt: skip
RECEIVED, INPUT_REACHED, MODEL_START, MODEL_END, SIGNALLED, REPLY_SENT, ENQUEUED, GPU_DONE = range(8)

MAX_SECONDS = 60.0
MAX_FRAMES = 1_000_000  # the most any service may allow (its trace_max_frames)
# What a service allows by default (``--trace-max-frames``): an answer takes ~760 bytes of JSON
# per frame (100,000 frames answered 76 MB), so 20,000 frames answer ~15 MB, from a recorder
# buffer of 20,000 x 8 moments x 32 bytes = 5 MB, freed when the recording stops.
DEFAULT_MAX_FRAMES = 20_000
DEFAULT_SECONDS = 2.0
DEFAULT_FRAMES = 10_000
# Room per frame: a frame marks at most seven moments (a CUDA run: received, model start and
# end, signalled, enqueued, GPU done, reply sent).
MOMENTS_PER_FRAME = 8
# The answer is written this many trace events per json.dumps call, which holds the GIL
# throughout: 100 take 0.4 ms on the 2-core development machine at best, ~4 ms at load 15 (600
# took 26 ms there). Written pieces go out once they add up to CHUNK_BYTES.
EVENTS_PER_DUMP = 100
CHUNK_BYTES = 256 << 10
_FRAME_MASK = (1 << 64) - 1

# Spans drawn for each frame, between two of its moments: (name, from, to, track). Track
# "gpu" is the session's second row, for the stream's own time.
SPANS = (
    ("wait for input", RECEIVED, INPUT_REACHED, "cpu"),
    ("model", MODEL_START, MODEL_END, "cpu"),
    ("signal", MODEL_END, SIGNALLED, "cpu"),
    ("reply", SIGNALLED, REPLY_SENT, "cpu"),
    ("enqueue", RECEIVED, ENQUEUED, "cpu"),
    ("GPU", ENQUEUED, GPU_DONE, "gpu"),
)

_guard = threading.Lock()
# The recording in progress's "end early" flag, None while none records: one recording at a
# time, and a stop() is never lost, even one that comes the moment recording() turns true.
_ending: threading.Event | None = None


def active() -> bool:
    """Whether a trace is recording (one native call)."""
    return bool(_native.trace_on())


def tag(session_id: str) -> int:
    """The trace's key of a session: the first 8 bytes of its id, as the native path reads
    them from a RUN frame."""
    return int.from_bytes(bytes.fromhex(session_id[:16]), sys.byteorder)


def mark(moment: int, session: int, frame: int, t_ns: int = 0) -> None:
    """Records one moment while a trace is on (``t_ns`` 0: now); costs a native call."""
    _native.trace_mark(moment, session, frame, t_ns)


def mark_run(session: int, frame: int, waited: int, start: int, ended: int,
             signalled: int) -> None:
    """A host run's moments (the runtime marks its receipt and reply)."""
    for moment, t in ((INPUT_REACHED, waited), (MODEL_START, start), (MODEL_END, ended),
                      (SIGNALLED, signalled)):
        _native.trace_mark(moment, session, frame, t)


@dataclass(frozen=True)
class Limits:
    seconds: float = DEFAULT_SECONDS
    frames: int = DEFAULT_FRAMES

    def __post_init__(self) -> None:
        if not 0 < self.seconds <= MAX_SECONDS:
            raise InvalidArgument(f"a trace records for more than 0 and at most {MAX_SECONDS:g} s, "
                                  f"not {self.seconds:g}")
        if not 0 < self.frames <= MAX_FRAMES:
            raise InvalidArgument(f"a trace records 1 to {MAX_FRAMES} frames, not {self.frames}")


class Packed(Collection[tuple[int, int, int, int, int]]):
    """The native recorder's moments as it hands them over: one bytes object of fixed-size
    records (``_native.TRACE_EVENT_FORMAT``), read as (t_ns, moment, session, frame, thread)
    tuples one at a time, so a recording never becomes millions of objects at once."""

    FORMAT = _native.TRACE_EVENT_FORMAT
    SIZE = struct.calcsize(FORMAT)

    def __init__(self, data: bytes) -> None:
        self.data = data

    def __len__(self) -> int:
        return len(self.data) // self.SIZE

    def __iter__(self) -> Iterator[tuple[int, int, int, int, int]]:
        for t_ns, session, frame, thread, moment in struct.iter_unpack(self.FORMAT, self.data):
            yield t_ns, moment, session, frame, thread

    def __contains__(self, item: object) -> bool:
        return any(item == e for e in self)


@dataclass(frozen=True)
class Recording:
    events: Collection[tuple[int, int, int, int, int]]  # (t_ns, moment, session, frame, thread)
    dropped: int
    started_ns: int
    ended_ns: int


def record(limits: Limits, cancel: Flag | None = None) -> Recording:
    """Records until ``limits.seconds`` pass, ``limits.frames`` frames were received,
    :func:`stop` is called or ``cancel`` is set; raises Conflict while another trace records.
    The recorder's buffer is freed when the recording stops: what it recorded is in the
    Recording only."""
    global _ending
    ending = threading.Event()
    with _guard:
        if _ending is not None:
            raise Conflict("a trace is already recording; wait for it to end")
        _ending = ending
    try:
        capacity = limits.frames * MOMENTS_PER_FRAME
        if not _native.trace_start(capacity, limits.frames):
            raise Conflict("a trace is already recording; wait for it to end")
        started = time.perf_counter_ns()
        deadline = time.monotonic() + limits.seconds
        try:
            while (time.monotonic() < deadline and not _native.trace_filled()
                   and not ending.is_set() and not (cancel is not None and cancel.is_set())):
                time.sleep(0.005)
        finally:
            ended = time.perf_counter_ns()
            data, dropped = _native.trace_stop()
        return Recording(Packed(data), dropped, started, ended)
    finally:
        with _guard:
            _ending = None


def recording() -> bool:
    """Whether a trace records now."""
    return _ending is not None


def stop() -> bool:
    """Ends the recording in progress early (its caller gets what it recorded); False when none
    records."""
    with _guard:
        if _ending is None:
            return False
        _ending.set()
        return True


def chrome_trace(rec: Recording, labels: Mapping[int, str],
                 pid: int | None = None) -> dict[str, Any]:
    """:func:`chrome_trace_chunks` as one object (tests, and the bench's own small traces)."""
    doc: dict[str, Any] = json.loads("".join(chrome_trace_chunks(rec, labels, pid)))
    return doc


def chrome_trace_chunks(rec: Recording, labels: Mapping[int, str],
                        pid: int | None = None) -> Iterator[str]:
    """The recording as Chrome trace-event JSON (the "JSON Object Format"), written
    EVENTS_PER_DUMP events at a time in chunks of about CHUNK_BYTES: one process (the
    service), two rows per session (its CPU-side work and, for CUDA sessions, its stream),
    and per frame a ``frame N`` slice with its stages inside. Times in microseconds from the
    recording's start. ``labels``: a name per session tag (e.g. ``session 1a2b3c4d
    (add_720p)``); an unknown tag gets its hex."""
    pid = os.getpid() if pid is None else pid
    # Keyed by one int, session << 64 | frame, and holding ints only: neither the keys nor the
    # per-frame dicts are objects the garbage collector tracks, so 20,000 frames do not set off
    # a full collection (one took 30 ms with the interpreter held).
    frames: dict[int, dict[int, int]] = {}
    threads: dict[int, int] = {}
    for t_ns, moment, session, frame, thread in rec.events:
        key = session << 64 | frame
        moments = frames.setdefault(key, {})
        # A moment seen twice (cannot happen on one path) keeps its first time.
        moments.setdefault(moment, t_ns)
        if moment == RECEIVED:
            threads[key] = thread
    sessions = sorted({k >> 64 for k in frames})
    rows: dict[tuple[int, str], int] = {}
    out: list[dict[str, Any]] = [
        {"name": "process_name", "ph": "M", "pid": pid, "tid": 0,
         "args": {"name": f"fenceline service (pid {pid})"}},
    ]

    def row(session: int, track: str) -> int:
        key = (session, track)
        if key not in rows:
            rows[key] = tid = len(rows) + 1
            name = labels.get(session) or f"session {session.to_bytes(8, sys.byteorder).hex()}"
            out.append({"name": "thread_name", "ph": "M", "pid": pid, "tid": tid,
                        "args": {"name": name if track == "cpu" else f"{name} GPU"}})
            out.append({"name": "thread_sort_index", "ph": "M", "pid": pid, "tid": tid,
                        "args": {"sort_index": tid}})
        return rows[key]

    def us(t_ns: int) -> float:
        return round((t_ns - rec.started_ns) / 1e3, 3)

    yield '{"traceEvents": ['
    sep = ""
    pieces: list[str] = []
    size = 0

    def dump() -> None:
        nonlocal sep, size
        if out:
            pieces.append(sep + json.dumps(out)[1:-1])
            size += len(pieces[-1])
            sep = ", "
            out.clear()

    def flush() -> str:
        nonlocal size
        dump()
        text = "".join(pieces)
        pieces.clear()
        size = 0
        return text

    for session in sessions:
        row(session, "cpu")
    for key in sorted(frames, key=lambda k: min(frames[k].values())):
        session, frame, moments = key >> 64, key & _FRAME_MASK, frames[key]
        first, last = min(moments.values()), max(moments.values())
        cpu_end = max(t for m, t in moments.items() if m != GPU_DONE) if any(
            m != GPU_DONE for m in moments) else first
        args: dict[str, Any] = {"frame": frame,
                                **{MOMENTS[m]: us(t) for m, t in sorted(moments.items())}}
        if key in threads:
            args["thread"] = threads[key]
        if len(moments) > 1:
            args["total_us"] = round((last - first) / 1e3, 3)
        out.append({"name": f"frame {frame}", "cat": "frame", "ph": "X", "pid": pid,
                    "tid": row(session, "cpu"), "ts": us(first),
                    "dur": round((cpu_end - first) / 1e3, 3), "args": args})
        for name, a, b, track in SPANS:
            if a in moments and b in moments and moments[b] >= moments[a]:
                out.append({"name": name, "cat": "stage", "ph": "X", "pid": pid,
                            "tid": row(session, track), "ts": us(moments[a]),
                            "dur": round((moments[b] - moments[a]) / 1e3, 3),
                            "args": {"frame": frame}})
        if len(out) >= EVENTS_PER_DUMP:
            dump()
            if size >= CHUNK_BYTES:
                yield flush()
    yield flush()
    other = {
        "recorder": "fenceline",
        "started_ns": rec.started_ns,
        "duration_us": round((rec.ended_ns - rec.started_ns) / 1e3, 3),
        "frames": len(frames),
        "moments": len(rec.events),
        "dropped_moments": rec.dropped,
        "summary": summary(frames),
    }
    yield f'], "displayTimeUnit": "ns", "otherData": {json.dumps(other)}}}'


def summary(frames: Mapping[int, Mapping[int, int]]) -> dict[str, Any]:
    """Where the frames' time went (docs/tracing.md, "The summary"), from each frame's moments
    (ns) keyed by ``session << 64 | frame``: the model's run, the service's part of a frame
    (``received`` to ``reply_sent``), the time between a reply and the same session's next
    frame (the renderer's part when it runs one frame at a time: its wakeup, its own work, its
    next RUN), each as p50 / mean / p90 in microseconds (None without a sample), and the model
    runs in progress on average from the first model start to the last model end."""
    model: list[int] = []
    service: list[int] = []
    between: list[int] = []
    starts: list[int] = []
    ends: list[int] = []
    by_session: dict[int, list[Mapping[int, int]]] = {}
    for key, m in frames.items():
        by_session.setdefault(key >> 64, []).append(m)
        if MODEL_START in m and MODEL_END in m and m[MODEL_END] >= m[MODEL_START]:
            model.append(m[MODEL_END] - m[MODEL_START])
            starts.append(m[MODEL_START])
            ends.append(m[MODEL_END])
        if RECEIVED in m and REPLY_SENT in m and m[REPLY_SENT] >= m[RECEIVED]:
            service.append(m[REPLY_SENT] - m[RECEIVED])
    for rows in by_session.values():
        got = sorted((m for m in rows if RECEIVED in m), key=lambda m: m[RECEIVED])
        between += [b[RECEIVED] - a[REPLY_SENT] for a, b in itertools.pairwise(got)
                    if REPLY_SENT in a and b[RECEIVED] >= a[REPLY_SENT]]
    in_flight = None
    if starts:
        window = max(ends) - min(starts)
        in_flight = round((sum(ends) - sum(starts)) / window, 2) if window > 0 else 1.0
    return {"sessions": len(by_session), "model_us": _stats(model),
            "service_us": _stats(service), "between_frames_us": _stats(between),
            "models_in_flight": in_flight}


def _stats(ns: list[int]) -> dict[str, float | None]:
    if not ns:
        return {"p50": None, "mean": None, "p90": None}
    ns = sorted(ns)
    return {"p50": round(ns[len(ns) // 2] / 1e3, 1), "mean": round(sum(ns) / len(ns) / 1e3, 1),
            "p90": round(ns[min(len(ns) - 1, len(ns) * 9 // 10)] / 1e3, 1)}


def summary_line(s: Mapping[str, Any]) -> str:
    """The summary in one line, as ``fenceline trace`` and ``fenceline bench --scaling`` print
    it."""
    def f(key: str) -> str:
        v = s[key]
        return "-" if v["p50"] is None else f"{v['p50']:g} / {v['mean']:g} / {v['p90']:g} us"

    flight = "-" if s["models_in_flight"] is None else f"{s['models_in_flight']:g}"
    return (f"p50 / mean / p90: model {f('model_us')}; service's part of a frame "
            f"{f('service_us')}; between a reply and the session's next frame "
            f"{f('between_frames_us')}; models in flight {flight} ({s['sessions']} "
            f"session{'' if s['sessions'] == 1 else 's'})")


def session_labels(entries: Iterable[tuple[str, str]]) -> dict[int, str]:
    """(session id, model name) pairs -> labels by tag."""
    return {tag(sid): f"session {sid[:8]} ({model})" for sid, model in entries}


def trace_service(limits: Limits, sessions: Callable[[], Iterable[tuple[str, str]]],
                  cancel: Flag | None = None) -> Iterator[str]:
    """Records, then returns the Chrome trace's chunks (:func:`chrome_trace_chunks`); ``sessions``
    names them (read at the start and at the end, so sessions made or released meanwhile are
    named too)."""
    before = list(sessions())
    rec = record(limits, cancel)
    labels = session_labels([*before, *sessions()])
    return chrome_trace_chunks(rec, labels)
