"""The per-frame trace (docs/tracing.md): records, for a bounded time or number of frames, the
moments of every frame the service runs, per session, and writes them as Chrome trace-event
JSON, which Perfetto's UI (ui.perfetto.dev) and chrome://tracing open.

The recorder is native (native/importer/core/trace.{h,cpp}): the run engine
and CUDA sessions mark their moments into one buffer. Off by default; off, a moment costs
one relaxed atomic load. One trace records at a time, for the whole service.
"""

from __future__ import annotations

import json
import os
import struct
import sys
import threading
import time
from collections.abc import Callable, Collection, Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

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
# Frames turned into Python objects at a time while the answer is written (FrameTable).
FRAMES_PER_BLOCK = 256

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


# Packed's records as numpy reads them: (t_ns, session, frame, thread, moment) and 3 bytes of
# padding, in the machine's byte order.
_EVENT = np.dtype({"names": ["t_ns", "session", "frame", "thread", "moment"],
                   "formats": ["=i8", "=u8", "=u8", "=u4", "u1"],
                   "offsets": [0, 8, 16, 24, 28], "itemsize": Packed.SIZE})


@dataclass(frozen=True)
class FrameTable:
    """A recording's frames, one row each, in numpy arrays: a trace's 20,000 frames as dicts of
    ints were ~13 MB of small objects alive at once, which the interpreter's 1 MiB arenas kept
    for good once anything long-lived was allocated among them (docs/reliability.md, "Memory");
    arrays this size are mapped on their own and unmapped when freed (runtime/heap.py).
    Rows in order of each frame's first moment in time, ties by first appearance."""

    sessions: npt.NDArray[np.uint64]
    frames: npt.NDArray[np.uint64]
    times: npt.NDArray[np.int64]  # (rows, MOMENTS_PER_FRAME) ns, where ``marked``
    marked: npt.NDArray[np.bool_]
    threads: npt.NDArray[np.int64]  # the thread that received the frame, -1 if none did

    @classmethod
    def of(cls, events: Collection[tuple[int, int, int, int, int]]) -> FrameTable:
        """From (t_ns, moment, session, frame, thread) events; a moment seen twice (cannot
        happen on one path) keeps its first time."""
        if isinstance(events, Packed):
            ev = np.frombuffer(events.data, dtype=_EVENT)
        else:
            ev = np.array([(t, s, f, th, m) for t, m, s, f, th in events], dtype=_EVENT)
        if (ev["moment"] >= MOMENTS_PER_FRAME).any():  # none from the recorder, which refuses them
            ev = ev[ev["moment"] < MOMENTS_PER_FRAME]
        # Grouped by (session, frame) with sorts of plain integers, which numpy runs mostly
        # without the interpreter (a unique over (session, frame) records held it 300 to 600
        # ms); the sort is stable, so each frame's first event comes first.
        by = np.lexsort((ev["frame"], ev["session"]))
        s, f = ev["session"][by], ev["frame"][by]
        starts = np.ones(len(ev), np.bool_)
        starts[1:] = (s[1:] != s[:-1]) | (f[1:] != f[:-1])
        row = np.empty(len(ev), np.int64)
        row[by] = np.cumsum(starts) - 1
        first = by[starts]  # each frame's first event
        n = len(first)
        cell = row * MOMENTS_PER_FRAME + ev["moment"]
        _, once = np.unique(cell, return_index=True)  # each (frame, moment)'s first event
        flat_times = np.zeros(n * MOMENTS_PER_FRAME, np.int64)
        flat_marked = np.zeros(n * MOMENTS_PER_FRAME, np.bool_)
        flat_times[cell[once]] = ev["t_ns"][once]
        flat_marked[cell[once]] = True
        times = flat_times.reshape(n, MOMENTS_PER_FRAME)
        marked = flat_marked.reshape(n, MOMENTS_PER_FRAME)
        threads = np.full(n, -1, np.int64)
        got = once[ev["moment"][once] == RECEIVED]
        threads[row[got]] = ev["thread"][got]
        earliest = np.where(marked, times, np.iinfo(np.int64).max).min(axis=1)
        order = np.lexsort((first, earliest))
        return cls(ev["session"][first][order], ev["frame"][first][order], times[order],
                   marked[order], threads[order])

    def __len__(self) -> int:
        return len(self.frames)

    def rows(self) -> Iterator[tuple[int, int, dict[int, int], int | None]]:
        """(session, frame, {moment: ns}, receiving thread or None) per frame, in order, made
        FRAMES_PER_BLOCK at a time."""
        for i in range(0, len(self), FRAMES_PER_BLOCK):
            b = slice(i, i + FRAMES_PER_BLOCK)
            for session, frame, times, marked, thread in zip(
                    self.sessions[b].tolist(), self.frames[b].tolist(), self.times[b].tolist(),
                    self.marked[b].tolist(), self.threads[b].tolist(), strict=True):
                moments = {m: t for m, (t, on) in enumerate(zip(times, marked, strict=True)) if on}
                yield session, frame, moments, None if thread < 0 else thread


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
    frames = FrameTable.of(rec.events)
    sessions = np.unique(frames.sessions).tolist()
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
    for session, frame, moments, thread in frames.rows():
        first, last = min(moments.values()), max(moments.values())
        cpu_end = max(t for m, t in moments.items() if m != GPU_DONE) if any(
            m != GPU_DONE for m in moments) else first
        args: dict[str, Any] = {"frame": frame,
                                **{MOMENTS[m]: us(t) for m, t in sorted(moments.items())}}
        if thread is not None:
            args["thread"] = thread
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


def summary(frames: FrameTable) -> dict[str, Any]:
    """Where the frames' time went (docs/tracing.md, "The summary"), from each frame's moments:
    the model's run, the service's part of a frame (``received`` to ``reply_sent``), the time
    between a reply and the same session's next frame (the renderer's part when it runs one
    frame at a time: its wakeup, its own work, its next RUN), each as p50 / mean / p90 in
    microseconds (None without a sample), and the model runs in progress on average from the
    first model start to the last model end."""
    t, on = frames.times, frames.marked
    ran = on[:, MODEL_START] & on[:, MODEL_END] & (t[:, MODEL_END] >= t[:, MODEL_START])
    model = t[ran, MODEL_END] - t[ran, MODEL_START]
    served = on[:, RECEIVED] & on[:, REPLY_SENT] & (t[:, REPLY_SENT] >= t[:, RECEIVED])
    service = t[served, REPLY_SENT] - t[served, RECEIVED]
    # Each session's received frames in order of arrival (rows are in order of first moment,
    # so a stable sort keeps ties as they came): a reply, then the next frame's arrival.
    got = np.flatnonzero(on[:, RECEIVED])
    got = got[np.lexsort((t[got, RECEIVED], frames.sessions[got]))]
    a, b = got[:-1], got[1:]
    pair = ((frames.sessions[a] == frames.sessions[b]) & on[a, REPLY_SENT]
            & (t[b, RECEIVED] >= t[a, REPLY_SENT]))
    between = t[b[pair], RECEIVED] - t[a[pair], REPLY_SENT]
    in_flight = None
    if len(model):
        window = int(t[ran, MODEL_END].max() - t[ran, MODEL_START].min())
        in_flight = round(int(model.sum()) / window, 2) if window > 0 else 1.0
    return {"sessions": len(np.unique(frames.sessions)), "model_us": _stats(model),
            "service_us": _stats(service), "between_frames_us": _stats(between),
            "models_in_flight": in_flight}


def _stats(ns: npt.NDArray[np.int64]) -> dict[str, float | None]:
    if not len(ns):
        return {"p50": None, "mean": None, "p90": None}
    ns = np.sort(ns)
    return {"p50": round(int(ns[len(ns) // 2]) / 1e3, 1),
            "mean": round(int(ns.sum()) / len(ns) / 1e3, 1),
            "p90": round(int(ns[min(len(ns) - 1, len(ns) * 9 // 10)]) / 1e3, 1)}


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
