"""fencelinefilter in real GStreamer pipelines (gst-launch-1.0, separate processes) against a real
service: outputs equal onnxruntime run directly on the same frames, the pool is shared without a
copy, the fallback copies once, and every failure ends the pipeline with the service's code."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import onnxruntime as ort
import pytest

from fenceline.bench import gst
from fenceline.models import build_repository
from tests.support.metrics import metrics_text, total
from tests.support.service import Service, running, start_service, stop_service

ROOT = Path(__file__).resolve().parents[2]
WHY = gst.unavailable()
if WHY is not None and os.environ.get("FENCELINE_REQUIRE_GST"):
    raise RuntimeError(f"FENCELINE_REQUIRE_GST is set but {WHY}")
pytestmark = pytest.mark.skipif(WHY is not None, reason=WHY or "")

MODELS = ["image_filter_rgba8", "image_filter_rgb8"]


@pytest.fixture(scope="module")
def gst_repo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_repository(tmp_path_factory.mktemp("gst-models"), MODELS)


@pytest.fixture(scope="module")
def gst_service(gst_repo: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Service]:
    with running(gst_repo, tmp_path_factory.mktemp("gst-service")) as svc:
        yield svc


def metric(svc: Service, name: str, **labels: str) -> float:
    """The sum of a metric's samples whose labels include `labels`."""
    return total(metrics_text(svc), name, **labels)


NOTHING_HELD = (0.0, 0.0, 0)


def held_by_service(svc: Service) -> tuple[float, float, int]:
    """(sessions, imported handles, shared memory) the service holds now, once closed
    connections settled: its own counters, and the kernel's view, memfd mappings and fds (the
    element's frames and fences are all memfds)."""
    deadline = time.monotonic() + 20
    while True:
        shared = len(svc.maps()) + sum("memfd:" in target for target in svc.fds())
        now = (metric(svc, "fenceline_session_active"),
               metric(svc, "fenceline_interop_imported_handles"), shared)
        if now == NOTHING_HELD or time.monotonic() > deadline:
            return now
        time.sleep(0.1)


def filter_line(model: str, svc: Service, **props: object) -> str:
    extra = "".join(f" {k.replace('_', '-')}={v}" for k, v in props.items())
    return f"fencelinefilter model={model} socket={svc.socket}{extra}"


def run_and_compare(svc: Service, repo: Path, tmp: Path, model: str, fmt: str, width: int,
                    height: int, count: int, between: str = "") -> str:
    """Runs `count` frames through the element and, in step, the same source without it; checks
    every output frame against onnxruntime on that input. Returns the element's debug log."""
    shape = (1, height, width, gst.CHANNELS[fmt])
    src = f"{gst.SOURCE} num-buffers={count} ! {gst.caps(fmt, width, height)}"
    out = gst.launch(f"{src} ! {between} {filter_line(model, svc)} ! fdsink fd=1",
                     tmp / "filtered.log")
    ref = gst.launch(f"{src} ! fdsink fd=1", tmp / "source.log")
    sess = ort.InferenceSession(str(repo / model / "1" / "model.onnx"),
                                providers=["CPUExecutionProvider"])
    n = 0
    try:
        for got, x in zip(gst.frames(out, shape), gst.frames(ref, shape), strict=True):
            (want,) = sess.run(None, {"image": x})
            if not np.array_equal(got, want):
                diff = np.argwhere(got != want)
                pytest.fail(f"frame {n}: {len(diff)} bytes differ from onnxruntime, first at "
                            f"{diff[0].tolist()}: {got[tuple(diff[0])]} != {want[tuple(diff[0])]}")
            n += 1
    finally:
        for p in (out, ref):
            if p.poll() is None:
                p.kill()
            p.wait()
            if p.stdout is not None:
                p.stdout.close()
    log = (tmp / "filtered.log").read_text(errors="replace")
    assert out.returncode == 0, log
    assert n == count
    return log


def stats(log: str) -> dict[str, int]:
    (line,) = [x for x in log.splitlines() if "stats: frames=" in x]
    fields = line.split("stats: ", 1)[1].split()
    return {k: int(v) for k, v in (f.split("=") for f in fields)}


def test_720p_frames_equal_onnxruntime_and_share_the_pool_without_a_copy(
    gst_service: Service, gst_repo: Path, tmp_path: Path
) -> None:
    runs = metric(gst_service, "fenceline_session_runs_total", model="image_filter_rgba8")
    log = run_and_compare(gst_service, gst_repo, tmp_path, "image_filter_rgba8", "RGBA",
                          1280, 720, 300)
    assert "proposing a pool of memfd-backed fd memory" in log
    assert "upstream writes into the proposed pool: no copy" in log
    s = stats(log)
    assert s["frames"] == 300 and s["zero-copy"] == 300 and s["copied"] == 0, s
    # Each pool buffer is imported once (and one more for the negotiation probe), not per frame.
    assert s["imports"] <= 8, s
    # The service ran every frame as a session run on the imported memfds themselves.
    after = metric(gst_service, "fenceline_session_runs_total", model="image_filter_rgba8",
                   transport="ipc")
    assert after - runs == 300
    assert held_by_service(gst_service) == NOTHING_HELD


@pytest.mark.parametrize(("fmt", "model"), [("BGRx", "image_filter_rgba8"),
                                            ("RGB", "image_filter_rgb8"),
                                            ("BGR", "image_filter_rgb8")])
def test_every_packed_format_runs_through_its_model(
    gst_service: Service, gst_repo: Path, tmp_path: Path, fmt: str, model: str
) -> None:
    log = run_and_compare(gst_service, gst_repo, tmp_path, model, fmt, 320, 240, 20)
    assert stats(log)["zero-copy"] == 20
    assert held_by_service(gst_service) == NOTHING_HELD


def test_refused_pool_falls_back_to_one_copy_per_frame(
    gst_service: Service, gst_repo: Path, tmp_path: Path
) -> None:
    # identity drop-allocation=true keeps the allocation query (and our pool) from upstream.
    log = run_and_compare(gst_service, gst_repo, tmp_path, "image_filter_rgba8", "RGBA",
                          640, 360, 30, between="identity drop-allocation=true !")
    s = stats(log)
    assert s["frames"] == 30 and s["copied"] == 30 and s["zero-copy"] == 0, s
    assert log.count("did not write into the proposed pool") == 1
    assert held_by_service(gst_service) == NOTHING_HELD


def failed_pipeline(pipeline: str) -> str:
    """Plays a pipeline that must fail, in its own process; returns what it printed. Not with
    gst-launch-1.0: 1.22 can miss an error posted before its main loop runs and hang."""
    r = subprocess.run([sys.executable, "-m", "fenceline.bench.gst", pipeline],
                       capture_output=True, text=True, timeout=180, env=gst.gst_env(),
                       check=False)
    assert r.returncode == 1, r.stdout + r.stderr
    return r.stderr


def test_flushing_seek_drops_frames_in_flight_and_the_stream_goes_on(
    gst_service: Service, tmp_path: Path
) -> None:
    # fakesink sync=true plays at 30 fps, so the seek usually lands with frames in flight (the
    # element logs "dropped N frames in flight"); a loaded machine may not get there in time, so
    # that is not asserted: EOS after the seek, and nothing left in the service, are.
    pipeline = (f"{gst.SOURCE} num-buffers=90 ! {gst.caps('RGBA', 320, 240)} ! "
                f"{filter_line('image_filter_rgba8', gst_service, frames_in_flight=3)} ! "
                "fakesink sync=true")
    r = subprocess.run([sys.executable, "-m", "fenceline.bench.gst", "--seek-after", "1",
                        pipeline], capture_output=True, text=True, timeout=180,
                       env=gst.gst_env(), check=False)
    assert r.returncode == 0, r.stderr
    assert "flushing seek to 0" in r.stderr
    s = stats(r.stderr)
    assert s["frames"] > 0 and s["zero-copy"] > 0, s
    assert held_by_service(gst_service) == NOTHING_HELD


def test_caps_the_model_does_not_take_fail_negotiation_with_the_services_reason(
    gst_service: Service,
) -> None:
    err = failed_pipeline(f"{gst.SOURCE} num-buffers=5 ! {gst.caps('RGBA', 320, 240)} ! "
                          f"{filter_line('image_filter_rgb8', gst_service)} ! fakesink")
    assert "ERROR: from element /GstPipeline:pipeline0/FencelineFilter" in err, err
    assert "fenceline error invalid_argument" in err and "has shape" in err, err
    assert "fenceline-code=(int)2" in err and "fenceline-code-name=(string)invalid_argument" in err
    assert "Traceback" not in err
    assert held_by_service(gst_service) == NOTHING_HELD


def test_missing_model_ends_the_pipeline_with_not_found(gst_service: Service) -> None:
    err = failed_pipeline(f"{gst.SOURCE} num-buffers=5 ! {gst.caps('RGBA', 320, 240)} ! "
                          f"{filter_line('no_such_model', gst_service)} ! fakesink")
    assert "fenceline error not_found" in err and "no_such_model" in err, err
    assert held_by_service(gst_service) == NOTHING_HELD


def test_no_service_ends_the_pipeline_with_a_transport_error(tmp_path: Path) -> None:
    err = failed_pipeline(f"{gst.SOURCE} num-buffers=5 ! {gst.caps('RGBA', 320, 240)} ! "
                          f"fencelinefilter model=m socket={tmp_path / 'none.sock'} ! fakesink")
    assert "fenceline error transport" in err, err


def test_a_timeout_above_the_services_limit_fails_the_pipeline_at_start(tmp_path: Path) -> None:
    """The property takes any 32-bit value; the service refuses a run's timeout_ms above
    600000, so the element says so before it connects instead of failing the first frame."""
    err = failed_pipeline(f"{gst.SOURCE} num-buffers=5 ! {gst.caps('RGBA', 320, 240)} ! "
                          f"fencelinefilter model=m timeout=600001 "
                          f"socket={tmp_path / 'none.sock'} ! fakesink")
    assert "timeout=600001 is above the service's limit of 600000 ms: set timeout=1..600000" in err
    assert "transport" not in err, err  # refused before connecting


def running_pipeline(svc: Service, element: str, log: Path) -> subprocess.Popen[bytes]:
    """An endless 320x240 pipeline through ``element``, returned once the service has run 20 of
    its frames."""
    proc = gst.launch(f"{gst.SOURCE} ! {gst.caps('RGBA', 320, 240)} ! {element} ! fakesink", log,
                      stdout=subprocess.DEVNULL)
    deadline = time.monotonic() + 120
    while metric(svc, "fenceline_session_runs_total") < 20:
        assert proc.poll() is None, log.read_text()
        assert time.monotonic() < deadline, "no frames ran"
        time.sleep(0.1)
    return proc


def test_service_killed_mid_stream_fails_the_pipeline_instead_of_hanging(
    gst_repo: Path, tmp_path: Path
) -> None:
    (tmp_path / "svc").mkdir()
    svc = start_service(gst_repo, tmp_path / "svc")
    try:
        proc = running_pipeline(svc, filter_line('image_filter_rgba8', svc),
                                tmp_path / "killed.log")
        svc.proc.send_signal(signal.SIGKILL)
        svc.proc.wait()
        try:
            rc = proc.wait(60)
        except subprocess.TimeoutExpired:
            proc.kill()
            pytest.fail("the pipeline hung after the service was killed")
        err = (tmp_path / "killed.log").read_text(errors="replace")
        assert rc != 0
        assert "fenceline error transport" in err, err
    finally:
        stop_service(svc)


@pytest.mark.parametrize("mode", ["mute", "hello"])
def test_service_that_never_answers_fails_the_pipeline_with_timed_out(
    mode: str, tmp_path: Path
) -> None:
    """A real process accepts the connection and never answers (or answers only the hello): the
    element's calls give up after service-timeout and the pipeline ends with timed_out."""
    sock = tmp_path / "silent.sock"
    silent = subprocess.Popen([sys.executable, "-m", "tests.support.silent_service", str(sock),
                               mode], cwd=ROOT, stdout=subprocess.PIPE, text=True)
    try:
        assert silent.stdout is not None and silent.stdout.readline().strip() == "ready"
        err = failed_pipeline(f"{gst.SOURCE} num-buffers=5 ! {gst.caps('RGBA', 320, 240)} ! "
                              f"fencelinefilter model=m socket={sock} service-timeout=500 ! "
                              "fakesink")
        assert "fenceline error timed_out" in err, err
        assert "fenceline-code-name=(string)timed_out" in err, err
        assert silent.poll() is None  # hung, not dead: the element gave up on its own
    finally:
        silent.kill()
        silent.communicate(timeout=30)


def test_service_stopped_mid_stream_fails_the_pipeline_with_timed_out(
    gst_repo: Path, tmp_path: Path
) -> None:
    """SIGSTOP hangs a real service under a run: the run's deadline (its timeout plus
    service-timeout) ends the pipeline with timed_out; once the service goes on, it holds
    nothing of the element, whose connection was closed."""
    (tmp_path / "svc").mkdir()
    svc = start_service(gst_repo, tmp_path / "svc")
    try:
        proc = running_pipeline(
            svc, filter_line('image_filter_rgba8', svc, timeout=1000, service_timeout=1000),
            tmp_path / "stopped.log")
        svc.proc.send_signal(signal.SIGSTOP)
        try:
            rc = proc.wait(60)
        except subprocess.TimeoutExpired:
            proc.kill()
            pytest.fail("the pipeline hung on a stopped service")
        finally:
            svc.proc.send_signal(signal.SIGCONT)
        err = (tmp_path / "stopped.log").read_text(errors="replace")
        assert rc != 0
        assert "fenceline error timed_out" in err, err
        assert held_by_service(svc) == NOTHING_HELD
    finally:
        stop_service(svc)


def test_bench_prints_element_fps_beside_the_appsink_onnxruntime_reference(
    tmp_path: Path,
) -> None:
    out = tmp_path / "gst.json"
    r = subprocess.run(
        [sys.executable, "-m", "fenceline", "bench", "--gst", "--quick", "--sizes", "720p",
         "--rounds", "2", "--frames", "30", "--intra-op-threads", "1", "--json", str(out)],
        capture_output=True, text=True, timeout=600, check=False,
    )
    assert r.returncode == 0, r.stdout + r.stderr
    assert "fencelinefilter fps" in r.stdout and "appsink->onnxruntime fps" in r.stdout
    assert "round 2/2" in r.stdout and "load average (1 min) before/after" in r.stdout, r.stdout
    doc = json.loads(out.read_text())
    assert doc["intra_op_threads"] == 1
    assert "onnxruntime intra-op threads 1" in r.stdout, r.stdout
    row = doc["sizes"]["720p"]
    assert row["element_fps"] > 0 and row["appsink_onnxruntime_fps"] > 0
    assert len(row["element_rounds"]) == len(row["reference_rounds"]) == 2
    assert len(row["pair_ratios"]) == 2
    for side in ("element", "reference"):
        assert row[f"{side}_cpu_ms_per_frame"] > 0, row
        # Each side's frame time splits into the model's and what its path adds.
        assert row[f"{side}_model_ms_per_frame"] > 0, row
        assert len(row[f"{side}_path_ms_rounds"]) == 2, row
    assert "model ms/frame" in r.stdout and "path ms/frame" in r.stdout, r.stdout
