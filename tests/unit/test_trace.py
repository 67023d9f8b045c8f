"""The trace recorder (native/importer/core/trace.cpp) and its Chrome trace-event JSON
(fenceline.trace), in this process."""

from __future__ import annotations

import json
import os
import sys
import threading
from pathlib import Path

import pytest
from PIL import Image

from fenceline import _native, trace
from fenceline.errors import InvalidArgument
from fenceline.trace_picture import draw, window


@pytest.fixture(autouse=True)
def stopped() -> None:
    _native.trace_stop()


def stop() -> tuple[list[tuple[int, int, int, int, int]], int]:
    """The recording's moments as (t_ns, moment, session, frame, thread), and the dropped."""
    data, dropped = _native.trace_stop()
    return list(trace.Packed(data)), dropped


def rss_kb() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * (os.sysconf("SC_PAGE_SIZE") // 1024)


def test_nothing_is_recorded_while_no_trace_records() -> None:
    trace.mark(trace.RECEIVED, 1, 1)
    assert _native.trace_start(64, 10)
    events, dropped = stop()
    assert events == [] and dropped == 0
    assert not trace.active()


def test_moments_come_back_with_their_session_frame_and_thread() -> None:
    assert _native.trace_start(64, 10)
    trace.mark(trace.RECEIVED, 7, 3, 1000)
    trace.mark(trace.MODEL_END, 7, 3, 2000)
    events, dropped = stop()
    assert dropped == 0
    assert [(t, m, s, f) for t, m, s, f, _ in events] == [
        (1000, trace.RECEIVED, 7, 3), (2000, trace.MODEL_END, 7, 3)]
    assert all(tid == threading.get_native_id() for *_, tid in events)


def test_a_second_recording_is_refused_while_one_records() -> None:
    assert _native.trace_start(64, 10)
    assert not _native.trace_start(64, 10)
    _native.trace_stop()
    assert _native.trace_start(64, 10)


def test_the_recording_stops_itself_after_its_frames() -> None:
    assert _native.trace_start(64, 2)
    for frame in (1, 2, 3):
        trace.mark(trace.RECEIVED, 1, frame)
        trace.mark(trace.REPLY_SENT, 1, frame)
    assert _native.trace_filled() and not trace.active()
    events, _ = stop()
    assert sorted({f for _, _, _, f, _ in events}) == [1, 2]


def test_the_recording_stops_itself_when_its_room_is_full() -> None:
    assert _native.trace_start(4, 100)
    for frame in range(1, 4):
        trace.mark(trace.RECEIVED, 1, frame)
        trace.mark(trace.REPLY_SENT, 1, frame)
    assert _native.trace_filled() and not trace.active()
    events, dropped = stop()
    assert len(events) == 4 and dropped == 1


def test_a_larger_recording_after_a_smaller_one_keeps_every_moment() -> None:
    assert _native.trace_start(4, 100)
    _native.trace_stop()
    assert _native.trace_start(5000, 5000)
    for frame in range(1, 2001):
        trace.mark(trace.RECEIVED, 1, frame)
    events, dropped = stop()
    assert len(events) == 2000 and dropped == 0


def test_threads_record_concurrently_without_losing_moments() -> None:
    assert _native.trace_start(40_000, 40_000)

    def marks(session: int) -> None:
        for frame in range(1, 5001):
            trace.mark(trace.RECEIVED, session, frame)

    threads = [threading.Thread(target=marks, args=(s,)) for s in range(1, 5)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    events, dropped = stop()
    assert dropped == 0
    assert sorted((s, f) for _, _, s, f, _ in events) == [
        (s, f) for s in range(1, 5) for f in range(1, 5001)]


@pytest.mark.skipif(sys.platform != "linux", reason="reads this process's RSS from /proc")
def test_a_recordings_buffer_is_freed_when_it_stops() -> None:
    """A recording of 4,000,000 moments takes 128 MB while it records; each stop gives it
    back, so five in a row leave the process's memory where it was."""
    before = rss_kb()
    for _ in range(5):
        assert _native.trace_start(4_000_000, 4_000_000)
        trace.mark(trace.RECEIVED, 1, 1)
        assert rss_kb() - before > 100_000  # the zeroed buffer is resident while it records
        events, _ = stop()
        assert len(events) == 1
    assert rss_kb() - before < 20_000


def test_an_unknown_moment_is_refused() -> None:
    with pytest.raises(ValueError, match="no such moment"):
        _native.trace_mark(len(trace.MOMENTS), 1, 1, 0)


@pytest.mark.parametrize(("seconds", "frames"), [(0, 1), (61, 1), (1, 0), (1, 1_000_001)])
def test_limits_are_bounded(seconds: float, frames: int) -> None:
    with pytest.raises(InvalidArgument):
        trace.Limits(seconds, frames)


def recording(events: list[tuple[int, int, int, int, int]]) -> trace.Recording:
    return trace.Recording(events, 0, 1_000_000, 9_000_000)


def test_a_host_frame_is_one_slice_with_its_stages_inside() -> None:
    sid = "1a2b3c4d5e6f70819293a4b5c6d7e8f9"
    tag = trace.tag(sid)
    us = 1000
    moments = [(2_000_000 + i * 10 * us, m, tag, 5, 42) for i, m in enumerate(
        (trace.RECEIVED, trace.INPUT_REACHED, trace.MODEL_START, trace.MODEL_END,
         trace.SIGNALLED, trace.REPLY_SENT))]
    doc = trace.chrome_trace(recording(moments), trace.session_labels([(sid, "add_720p")]), pid=9)
    meta = [e for e in doc["traceEvents"] if e["ph"] == "M"]
    assert {"name": "thread_name", "ph": "M", "pid": 9, "tid": 1,
            "args": {"name": "session 1a2b3c4d (add_720p)"}} in meta
    slices = [e for e in doc["traceEvents"] if e["ph"] == "X"]
    frame = slices[0]
    assert (frame["name"], frame["ts"], frame["dur"], frame["tid"]) == ("frame 5", 1000.0, 50.0, 1)
    assert frame["args"]["thread"] == 42 and frame["args"]["model_end"] == 1030.0
    assert [(s["name"], s["ts"], s["dur"]) for s in slices[1:]] == [
        ("wait for input", 1000.0, 10.0), ("model", 1020.0, 10.0), ("signal", 1030.0, 10.0),
        ("reply", 1040.0, 10.0)]
    assert doc["otherData"]["frames"] == 1 and doc["otherData"]["duration_us"] == 8000.0


def test_a_cuda_frame_draws_its_gpu_time_on_a_second_row() -> None:
    tag = 77
    moments = [(2_000_000, trace.MODEL_START, tag, 1, 1), (2_010_000, trace.MODEL_END, tag, 1, 1),
               (2_011_000, trace.SIGNALLED, tag, 1, 1), (2_012_000, trace.ENQUEUED, tag, 1, 1),
               (1_990_000, trace.RECEIVED, tag, 1, 1), (2_015_000, trace.REPLY_SENT, tag, 1, 1),
               (2_100_000, trace.GPU_DONE, tag, 1, 0)]
    doc = trace.chrome_trace(recording(moments), {}, pid=1)
    names = {e["tid"]: e["args"]["name"] for e in doc["traceEvents"]
             if e["ph"] == "M" and e["name"] == "thread_name"}
    hexid = tag.to_bytes(8, sys.byteorder).hex()
    assert names == {1: f"session {hexid}", 2: f"session {hexid} GPU"}
    slices = {e["name"]: e for e in doc["traceEvents"] if e["ph"] == "X"}
    assert slices["frame 1"]["dur"] == 25.0  # the CPU side: received to reply sent
    assert slices["frame 1"]["args"]["total_us"] == 110.0  # to the GPU's completion
    assert (slices["GPU"]["tid"], slices["GPU"]["ts"], slices["GPU"]["dur"]) == (2, 1012.0, 88.0)
    assert slices["enqueue"]["dur"] == 22.0


def test_frames_of_several_sessions_get_a_row_each() -> None:
    moments = [(2_000_000 + f, trace.RECEIVED, s, f, 1) for s in (1, 2) for f in (1, 2)]
    doc = trace.chrome_trace(recording(moments), {1: "a", 2: "b"}, pid=1)
    rows = {e["args"]["name"]: e["tid"] for e in doc["traceEvents"]
            if e["ph"] == "M" and e["name"] == "thread_name"}
    assert rows == {"a": 1, "b": 2}
    frames = [(e["tid"], e["args"]["frame"]) for e in doc["traceEvents"] if e["ph"] == "X"]
    assert sorted(frames) == [(1, 1), (1, 2), (2, 1), (2, 2)]


def test_a_trace_draws_as_a_png_timeline(tmp_path: Path) -> None:
    tag = 5
    moments = [(2_000_000 + f * 100_000 + i * 10_000, m, tag, f, 1) for f in range(1, 9)
               for i, m in enumerate((trace.RECEIVED, trace.INPUT_REACHED, trace.MODEL_START,
                                      trace.MODEL_END, trace.SIGNALLED, trace.REPLY_SENT))]
    doc = trace.chrome_trace(recording(moments), {tag: "session 05000000 (m)"}, pid=1)
    start, end = window(doc, frames=3)
    # Frames 3 to 5 (a quarter in): frame f spans 1000 + 100 f us to 50 us later.
    assert 1290 < start < 1300 and 1550 < end < 1560
    draw(doc, tmp_path / "t.png", title="t")
    with Image.open(tmp_path / "t.png") as img:
        assert img.format == "PNG" and img.size[0] == 1400
        # Something was drawn in the model's colour on the session's row.
        assert (66, 133, 244) in {c for _, c in img.convert("RGB").getcolors(1 << 20) or []}


def test_the_summary_says_where_the_frames_time_went() -> None:
    us = 1000
    events = []
    # Two sessions, one frame at a time each: a frame is received, its model runs 100 us (the
    # two sessions' models overlap by half), its reply goes 10 us after the model; the
    # session's next frame comes 30 us (session 1) or 50 us (session 2) after the reply.
    for tag, start, gap in ((1, 0, 30), (2, 50, 50)):
        t = 1_000_000 + start * us
        for frame in range(1, 4):
            events += [(t, trace.RECEIVED, tag, frame, 7), (t + 5 * us, trace.MODEL_START, tag,
                                                            frame, 7),
                       (t + 105 * us, trace.MODEL_END, tag, frame, 7),
                       (t + 115 * us, trace.REPLY_SENT, tag, frame, 7)]
            t += (115 + gap) * us
    s = trace.chrome_trace(recording(events), {}, pid=1)["otherData"]["summary"]
    assert s["sessions"] == 2
    assert s["model_us"] == {"p50": 100.0, "mean": 100.0, "p90": 100.0}
    assert s["service_us"] == {"p50": 115.0, "mean": 115.0, "p90": 115.0}
    assert s["between_frames_us"] == {"p50": 50.0, "mean": 40.0, "p90": 50.0}
    # six model runs of 100 us from the first start (5 us in) to the last end (485 us in)
    assert s["models_in_flight"] == 1.25
    line = trace.summary_line(s)
    assert "model 100 / 100 / 100 us" in line and "models in flight 1.25 (2 sessions)" in line


def test_an_answer_holds_few_python_objects_while_it_is_written() -> None:
    """A 20,000-frame recording is written from arrays, a block of frames at a time: as dicts of
    ints, its frames were ~180,000 small objects alive until the answer ended, which left the
    interpreter's arenas they filled with the process (docs/reliability.md, "Memory")."""
    import struct

    frames = 20_000
    data = b"".join(struct.pack(trace.Packed.FORMAT, 10**13 + f * 100_000 + m * 1_000, 5, f, 7, m)
                    for f in range(frames) for m in range(6))
    rec = trace.Recording(trace.Packed(data), 0, 10**13, 10**13 + frames * 100_000)
    written: list[str] = []
    held = []  # objects alive beside the answer's own text after each chunk
    before = sys.getallocatedblocks()
    for chunk in trace.chrome_trace_chunks(rec, {}, pid=1):
        written.append(chunk)
        held.append(sys.getallocatedblocks() - before - len(written))
    assert len(written) > 10 and max(held) < 30_000, held
    doc = json.loads("".join(written))
    assert doc["otherData"]["frames"] == frames and doc["otherData"]["moments"] == 6 * frames


def test_a_summary_without_frames_says_so() -> None:
    s = trace.summary(trace.FrameTable.of([]))
    assert s["sessions"] == 0 and s["models_in_flight"] is None
    assert s["between_frames_us"] == {"p50": None, "mean": None, "p90": None}
    assert "between a reply and the session's next frame -" in trace.summary_line(s)
