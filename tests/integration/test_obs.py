"""The OBS filter (fenceline_filter) in headless OBS: libobs renders a source of known frames
through the filter under Xvfb, against a real service in its own process. Outputs equal
onnxruntime's byte for byte; the service killed mid-stream and started again; a model slower
than a frame; settings saved and loaded with the scene (docs/obs.md)."""

from __future__ import annotations

import json
import os
import re
import signal
import struct
import subprocess
import sys
import time
import zlib
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import onnxruntime as ort
import pytest

from fenceline.bench import obs, obs_formats, obs_fps
from fenceline.models import build_repository
from fenceline.models.builtin import packed_image_filter_model
from tests.support.docs_block import run_docs_block
from tests.support.service import Service, running, start_service, stop_service

WHY = obs.unavailable()
if WHY is not None and os.environ.get("FENCELINE_REQUIRE_OBS"):
    raise RuntimeError(f"FENCELINE_REQUIRE_OBS is set but {WHY}")
pytestmark = pytest.mark.skipif(WHY is not None, reason=WHY or "")

ROOT = Path(__file__).resolve().parents[2]
MODELS = ["image_filter_rgba8", "image_filter_rgb8", "image_filter_rgba8_slow"]
W, H, FPS = 128, 96, 30
# A run ends once the filter has this many results, or at DEADLINE_S (a generous bound, never a
# speed claim: how fast the filter keeps up is `fenceline bench --obs`'s to show).
RESULTS, DEADLINE_S = 20, 60
SLOW_TRIPS = 160_000  # image_filter_rgba8_slow's Loop (fenceline.models.builtin)


@pytest.fixture(scope="module")
def obs_repo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_repository(tmp_path_factory.mktemp("obs-models"), MODELS)


@pytest.fixture(scope="module")
def display() -> Iterator[str]:
    with obs.xvfb() as d:
        yield d


@pytest.fixture(scope="module")
def obs_service(obs_repo: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Service]:
    with running(obs_repo, tmp_path_factory.mktemp("obs-service")) as svc:
        yield svc


def expected(repo: Path, model: str, fmt: str) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """The source's frames as the filter receives them (RGBA or BGRA bytes), and onnxruntime's
    output for each, as the filter must hand them back: converted to the model's RGB(A) and
    back, the frame's own alpha under a 3-channel model."""
    sess = ort.InferenceSession(str(repo / model / "1" / "model.onnx"),
                                providers=["CPUExecutionProvider"])
    ins, outs = [], []
    for k in range(obs.PERIOD):
        rgba = obs.known_frame(k, W, H)
        channels = sess.get_inputs()[0].shape[3]
        (y,) = sess.run(None, {"image": rgba[None, ..., :channels]})
        out = rgba.copy()
        out[..., :channels] = y[0]
        if fmt == "bgra":
            rgba, out = rgba[..., [2, 1, 0, 3]], out[..., [2, 1, 0, 3]]
        ins.append(np.ascontiguousarray(rgba))
        outs.append(np.ascontiguousarray(out))
    return ins, outs


def classify(got: np.ndarray, ins: list[np.ndarray], outs: list[np.ndarray]) -> list[str]:
    """Each frame as "F<k>" (the model's output for input k), "R<k>" (input k unfiltered) or
    "?" (neither)."""
    tags = []
    for frame in got:
        tag = next((f"F{k}" for k, o in enumerate(outs) if np.array_equal(frame, o)), None)
        tag = tag or next((f"R{k}" for k, i in enumerate(ins) if np.array_equal(frame, i)), "?")
        tags.append(tag)
    return tags


def check_filtered(tags: list[str]) -> None:
    """Every frame is a filtered one, except unfiltered frames before the first result, and the
    results change (the newest one is shown, not the first again)."""
    first = next((i for i, t in enumerate(tags) if t.startswith("F")), None)
    assert first is not None, tags
    assert all(t.startswith("R") for t in tags[:first]), tags[:first]
    assert all(t.startswith("F") for t in tags[first:]), tags
    assert len({t for t in tags if t.startswith("F")}) >= 2, tags


def test_the_plugin_loads_and_lists_the_services_models(obs_service: Service,
                                                        display: str) -> None:
    env = dict(os.environ, DISPLAY=display, FENCELINE_SOCKET=str(obs_service.socket))
    out = subprocess.run([str(obs.driver()), "list", str(obs.plugin())], env=env,
                         capture_output=True, text=True, timeout=60, check=True)
    info = json.loads(out.stdout)
    assert info["id"] == "fenceline_filter"
    assert info["name"] == "fenceline model filter"
    assert info["properties"] == ["model", "socket", "frames_in_flight", "fallback",
                                  "channel_order", "deadline_ms", "status"]
    assert info["models"] == sorted(MODELS)  # from $FENCELINE_SOCKET, the socket left empty
    assert info["defaults"] == {"model": "", "socket": "", "frames_in_flight": 2,
                                "fallback": "last_good", "channel_order": "rgb",
                                "deadline_ms": 30000}


@pytest.mark.parametrize(("fmt", "model"), [("rgba", "image_filter_rgba8"),
                                            ("bgra", "image_filter_rgb8")])
def test_frames_equal_onnxruntime_byte_for_byte(obs_service: Service, obs_repo: Path,
                                                display: str, tmp_path: Path, fmt: str,
                                                model: str) -> None:
    run = obs.start(display, tmp_path / "obs.log", model=model, socket=obs_service.socket,
                    format=fmt, width=W, height=H, fps=FPS, seconds=DEADLINE_S,
                    until_filtered=RESULTS, out=tmp_path / "out.raw")
    last = run.finish()
    assert last["filtered"] >= RESULTS, last
    tags = classify(obs.frames(tmp_path / "out.raw", W, H), *expected(obs_repo, model, fmt))
    check_filtered(tags)
    assert last["imports"] == 4  # frames_in_flight 2 + 2, imported once for the whole run
    assert last["failures"] == 0 and last["connected"], last
    # Once a result is shown, OBS's graphics thread hands each frame to the filter's worker, which
    # copies it in and its result out: only the first result and the (at most 2) frames in flight
    # beside it came from frames that thread copied.
    assert last["taken"] >= last["filtered"] - 3, last


def wait_for(run: obs.Run, what: str, ok: object) -> dict[str, object]:
    while (line := run.next()) is not None:
        if ok(line):  # type: ignore[operator]
            return line
    raise AssertionError(f"the driver ended before {what}:\n{run.log_text()[-3000:]}")


def test_service_killed_mid_stream_then_restarted(obs_repo: Path, display: str,
                                                  tmp_path: Path) -> None:
    svc_dir = tmp_path / "service"
    svc_dir.mkdir()
    svc = start_service(obs_repo, svc_dir)
    sock = svc.socket
    run = obs.start(display, tmp_path / "obs.log", model="image_filter_rgba8", socket=sock,
                    width=W, height=H, fps=FPS, seconds=2 * DEADLINE_S, every_ms=100,
                    out=tmp_path / "out.raw")
    restarted: Service | None = None
    try:
        before = wait_for(run, "the first results", lambda c: c["filtered"] >= 15)
        svc.proc.send_signal(signal.SIGKILL)
        svc.proc.wait()
        gone = wait_for(run, "the filter noticed", lambda c: not c["connected"])
        assert gone["failures"] >= 1
        # OBS goes on rendering without the service, showing the last good frame.
        during = wait_for(run, "OBS rendered on",
                          lambda c: c["rendered"] >= gone["rendered"] + 30)
        assert during["filtered"] == gone["filtered"]
        restarted = start_service(obs_repo, svc_dir)
        assert restarted.socket == sock
        back = wait_for(run, "the reconnection",
                        lambda c: c["reconnects"] >= 1 and c["filtered"] >= during["filtered"] + 15)
        assert back["connected"]
        assert back["imports"] == 2 * before["imports"]  # a new pool on the new service
    finally:
        run.close()
        if restarted is not None:
            stop_service(restarted)
        stop_service(svc)
    log = run.log_text()
    # Logged once for the outage (however many attempts), once when back.
    assert log.count("[fenceline] a run failed") == 1, log[-3000:]
    assert log.count("[fenceline] connected again") == 1, log[-3000:]
    tags = classify(obs.frames(tmp_path / "out.raw", W, H),
                    *expected(obs_repo, "image_filter_rgba8", "rgba"))
    check_filtered(tags)  # during the outage: the last good frame, again and again


def test_a_model_slower_than_a_frame_drops_frames_not_obs_frame_rate(
        obs_service: Service, obs_repo: Path, display: str, tmp_path: Path) -> None:
    # image_filter_rgba8_slow takes 0.15 s or more a frame, over four frame intervals at 30 fps.
    # (OBS's frame rate beside it, and a filter that runs the model on OBS's thread instead:
    # `fenceline bench --obs`.)
    run = obs.start(display, tmp_path / "obs.log", model="image_filter_rgba8_slow",
                    socket=obs_service.socket, width=W, height=H, fps=FPS, seconds=DEADLINE_S,
                    until_filtered=4, out=tmp_path / "out.raw")
    last = run.finish()
    # The service runs what it can; frames that came meanwhile are dropped by the filter (the
    # newest replaces a queued one), and every frame is accounted for.
    assert last["filtered"] >= 4 and last["dropped"] > 0, last
    assert last["submitted"] + last["dropped"] >= last["frames"] - 2, last
    assert last["failures"] == 0, last
    # Held frames are shown again between results (last good output): all of them filtered.
    tags = classify(obs.frames(tmp_path / "out.raw", W, H),
                    *expected(obs_repo, "image_filter_rgba8", "rgba"))  # the slow one's bytes
    check_filtered(tags)


def test_settings_are_saved_and_loaded_with_the_scene(obs_service: Service, obs_repo: Path,
                                                      display: str, tmp_path: Path) -> None:
    scene = tmp_path / "scene.json"
    first = obs.start(display, tmp_path / "first.log", model="image_filter_rgba8",
                      socket=obs_service.socket, frames_in_flight=3, fallback="unfiltered",
                      width=W, height=H, fps=FPS, seconds=1, save=scene).finish()
    assert first["imports"] == 5
    saved = json.loads(scene.read_text())
    (known,) = [s for s in saved["sources"] if s["name"] == "known"]
    (filt,) = known["filters"]
    assert filt["id"] == "fenceline_filter"
    assert filt["settings"] == {"model": "image_filter_rgba8", "socket": str(obs_service.socket),
                                "frames_in_flight": 3, "fallback": "unfiltered"}
    # A new OBS loads the scene: the filter comes back with its settings and runs.
    second = obs.start(display, tmp_path / "second.log", load=scene, width=W, height=H,
                       fps=FPS, seconds=DEADLINE_S, until_filtered=10,
                       out=tmp_path / "out.raw").finish()
    assert second["imports"] == 5 and second["filtered"] >= 10, second
    tags = classify(obs.frames(tmp_path / "out.raw", W, H),
                    *expected(obs_repo, "image_filter_rgba8", "rgba"))
    # fallback "unfiltered": a frame with no new result shows the source's own.
    assert "?" not in tags, tags
    assert any(t.startswith("F") for t in tags), tags


def test_the_bench_in_process_filter_runs_the_model_on_obs_video_thread(
        obs_repo: Path, display: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The bench's comparison (fenceline bench --obs): onnxruntime inside filter_video. With a
    model slower than a frame, OBS's video thread waits for every run and lags."""
    ref = obs_fps.reference_plugin()
    if ref is None:
        pytest.skip("the in-process filter needs Python's embedding library")
    # Its embedded Python imports onnxruntime and fenceline from this interpreter's paths.
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(p for p in sys.path if p))
    run = obs.start(display, tmp_path / "obs.log", plugins=(ref,),
                    filter="fenceline_reference_filter", width=W, height=H, fps=FPS,
                    seconds=DEADLINE_S, every_ms=100,
                    model_path=obs_repo / "image_filter_rgba8_slow" / "1" / "model.onnx",
                    out=tmp_path / "out.raw")
    # Four runs done on OBS's thread, however long a busy machine takes for them (a fixed 3 s
    # could end inside the first run, before OBS had counted a lagged frame).
    wait_for(run, "four runs on OBS's video thread", lambda c: c["frames"] >= 4)
    run.proc.send_signal(signal.SIGINT)  # the driver ends its run early
    last = run.finish()
    assert str(last["status"]).startswith("running"), last
    assert last["lagged"] >= 0.5 * last["rendered"], last
    tags = classify(obs.frames(tmp_path / "out.raw", W, H),
                    *expected(obs_repo, "image_filter_rgba8", "rgba"))  # the slow one's bytes
    assert set(t[0] for t in tags) == {"F"}, tags  # every frame it saw, run in place


def docs_block(first_line: str) -> str:
    """The ```sh block of docs/obs.md that starts with `first_line`."""
    text = (ROOT / "docs" / "obs.md").read_text()
    for block in re.findall(r"^```sh\n(.*?)^```$", text, re.S | re.M):
        if block.startswith(first_line):
            return str(block)
    raise AssertionError(f"docs/obs.md has no block starting {first_line!r}")


def test_docs_run_it_headless_block_runs_as_written(tmp_path: Path) -> None:
    """docs/obs.md "Run it headless", verbatim, in a fresh directory holding this venv as .venv;
    the service's port and socket come from FENCELINE_* (8000 may be taken here), the filter
    finds the socket the same way. The background service is stopped when the block ends."""
    block = docs_block(".venv/bin/python -c 'from pathlib import Path; from fenceline.models "
                       "import build_repository;")
    r = run_docs_block(tmp_path, block, 600)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    listed, ran = [json.loads(x) for x in r.stdout.splitlines() if x.startswith("{")]
    assert listed["id"] == "fenceline_filter"
    assert listed["models"] == ["image_filter_rgba8", "image_filter_rgba8_slow"]
    assert ran["done"] and ran["connected"] and ran["filtered"] > 0, ran
    # The sample output in the docs has the same keys as the real thing.
    text = (ROOT / "docs" / "obs.md").read_text()
    samples = [json.loads(x) for x in re.findall(r"^(\{.*\})$", text, re.M)]
    assert [sorted(s) for s in samples] == [sorted(listed), sorted(ran)]
    assert samples[0] == listed


def test_docs_plugin_link_block_puts_the_module_where_obs_studio_looks(tmp_path: Path) -> None:
    """docs/obs.md's link into ~/.config/obs-studio/plugins, verbatim, with HOME a fresh folder."""
    block = docs_block("mkdir -p ~/.config/obs-studio/plugins/fenceline-obs/bin/64bit")
    (tmp_path / ".venv").symlink_to(Path(sys.executable).parents[1])
    env = dict(os.environ, HOME=str(tmp_path / "home"))
    subprocess.run(["bash", "-ec", block], cwd=tmp_path, env=env, check=True, timeout=120)
    link = tmp_path / "home/.config/obs-studio/plugins/fenceline-obs/bin/64bit/fenceline-obs.so"
    assert link.resolve() == obs.plugin().resolve()


def obs_output(display: str, tmp: Path, name: str, **settings: object) -> np.ndarray:
    """Frames of OBS's own BGRA output (the raw video callback) over a run of the driver."""
    run = obs.start(display, tmp / f"{name}.log", output_format="bgra", raw_out=tmp / f"{name}.raw",
                    width=W, height=H, fps=FPS, **settings)
    run.finish()
    return obs.frames(tmp / f"{name}.raw", W, H)


def distinct(frames: list[np.ndarray]) -> list[np.ndarray]:
    seen: dict[bytes, np.ndarray] = {}
    for f in frames:
        seen.setdefault(f.tobytes(), f)
    return list(seen.values())


SOURCES = [("fenceline_known_sync", "rgba"), ("fenceline_known_frames", "rgba"),
           ("fenceline_known_frames", "bgra"), ("fenceline_known_frames", "nv12"),
           ("fenceline_known_frames", "i420"), ("fenceline_known_frames", "yuy2")]


@pytest.mark.parametrize(("source", "fmt"), SOURCES)
def test_every_source_shows_onnxruntimes_output_on_obs_own_output(
        obs_service: Service, obs_repo: Path, display: str, tmp_path: Path, source: str,
        fmt: str) -> None:
    """OBS's BGRA output (what a stream or recording gets) of each kind of source: a sync one
    (drawn on the graphics thread: the filter renders it and reads it back), and async ones in
    packed formats (filtered in place) and YUV (filtered after OBS's own GPU conversion). The
    inputs are OBS's output of the same source without the filter, until it has shown all of its
    frames; every filtered output is onnxruntime's result on one of them, byte for byte."""
    inputs = obs_inputs(display, tmp_path, source=source, format=fmt)
    got = obs_output(display, tmp_path, "filtered", source=source, format=fmt,
                     model="image_filter_rgba8", socket=obs_service.socket, seconds=DEADLINE_S,
                     until_filtered=RESULTS)
    check_filtered(classify(without_blanks(got), inputs, model_on_bgra(obs_repo, inputs)))


def obs_inputs(display: str, tmp: Path, **settings: object) -> list[np.ndarray]:
    """The obs.PERIOD distinct frames of OBS's BGRA output of a source without the filter (the
    source repeats them; a busy OBS skips some, so up to five runs gather them)."""
    inputs: list[np.ndarray] = []
    for attempt in range(5):
        inputs = distinct([*without_blanks(obs_output(
            display, tmp, f"none{attempt}", filter="none", seconds=3, **settings)), *inputs])
        if len(inputs) >= obs.PERIOD:
            break
    assert len(inputs) == obs.PERIOD, len(inputs)
    return inputs


def without_blanks(got: np.ndarray) -> np.ndarray:
    """OBS's output less the blank (all-zero) frames it outputs before a source's first one,
    which the model keeps blank: neither filtered nor unfiltered, they are left out."""
    while len(got) and not got[0].any():
        got = got[1:]
    return got


def model_on_bgra(repo: Path, inputs: list[np.ndarray]) -> list[np.ndarray]:
    """onnxruntime's image_filter_rgba8, in process, on each of OBS's BGRA frames."""
    sess = ort.InferenceSession(str(repo / "image_filter_rgba8" / "1" / "model.onnx"),
                                providers=["CPUExecutionProvider"])
    outs = []
    for bgra in inputs:
        rgba = np.ascontiguousarray(bgra[..., [2, 1, 0, 3]])
        (y,) = sess.run(None, {"image": rgba[None]})
        outs.append(np.ascontiguousarray(y[0][..., [2, 1, 0, 3]]))
    return outs


def png(rgba: np.ndarray) -> bytes:
    """An 8-bit RGBA PNG of ``rgba`` ([height, width, 4])."""
    h, w, _ = rgba.shape

    def chunk(kind: bytes, data: bytes) -> bytes:
        return (struct.pack(">I", len(data)) + kind + data
                + struct.pack(">I", zlib.crc32(kind + data)))

    rows = b"".join(b"\0" + rgba[y].tobytes() for y in range(h))  # filter type 0 per row
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, 8, 6, 0, 0, 0))
            + chunk(b"IDAT", zlib.compress(rows)) + chunk(b"IEND", b""))


IMAGE_SOURCE = obs.image_source_module()
if IMAGE_SOURCE is None and os.environ.get("FENCELINE_REQUIRE_OBS"):
    raise RuntimeError("FENCELINE_REQUIRE_OBS is set but OBS's image-source module is missing "
                       "(.ci/run takes it out of Debian's obs-studio package)")


@pytest.mark.skipif(IMAGE_SOURCE is None,
                    reason="OBS's image-source module is not here (Debian: obs-studio; .ci/run "
                           "takes the module alone out of the package)")
@pytest.mark.parametrize("source", ["color_source", "image_source"])
def test_obs_own_color_and_image_sources_show_onnxruntimes_output(
        obs_service: Service, obs_repo: Path, display: str, tmp_path: Path, source: str) -> None:
    """OBS's own sync sources, from its image-source module: a color source, and an image source
    showing a PNG of known pixels written here. OBS's BGRA output of the source without the
    filter is one still frame (the image's own pixels, for the image source); with the filter
    every frame after the first result is onnxruntime's output on it, byte for byte."""
    assert IMAGE_SOURCE is not None
    picture = obs.known_frame(5, W, H)
    if source == "image_source":
        (tmp_path / "known.png").write_bytes(png(picture))
        settings: dict[str, object] = {"file": str(tmp_path / "known.png")}
    else:  # 0xAABBGGRR: a colour the model changes
        settings = {"color": 0xFF6A3A1C, "width": W, "height": H}
    common: dict[str, object] = {"source": source, "source_settings": json.dumps(settings),
                                 "plugins": (IMAGE_SOURCE,)}
    unfiltered = without_blanks(obs_output(display, tmp_path, "none", filter="none",
                                           seconds=2, **common))
    inputs = distinct(list(unfiltered))
    assert len(unfiltered) > 0 and len(inputs) == 1, len(inputs)
    if source == "image_source":
        assert np.array_equal(inputs[0], picture[..., [2, 1, 0, 3]])  # the PNG's own pixels
    else:  # one colour, as OBS draws it (libobs's colour handling moves it by a few levels)
        assert (inputs[0] == inputs[0][0, 0]).all() and inputs[0][0, 0, 3] == 255
    outs = model_on_bgra(obs_repo, inputs)
    assert not np.array_equal(outs[0], inputs[0])  # filtered and unfiltered tell apart
    got = obs_output(display, tmp_path, "filtered", model="image_filter_rgba8",
                     socket=obs_service.socket, seconds=DEADLINE_S, until_filtered=RESULTS,
                     **common)
    tags = classify(without_blanks(got), inputs, outs)
    first = next((i for i, t in enumerate(tags) if t == "F0"), None)
    assert first is not None, tags
    assert set(tags[:first]) <= {"R0"} and set(tags[first:]) == {"F0"}, tags


def test_a_model_slower_than_the_old_five_second_deadline_shows_its_results(
        obs_repo: Path, display: str, tmp_path: Path) -> None:
    """A model of about 10 s a run (a Loop of exact multiplies sized on this machine: the same
    bytes as image_filter_rgba8) under the default deadline (30 s) and last_good: the filter
    waits for it, shows its result, and does not reconnect."""
    fast = ort.InferenceSession(str(obs_repo / "image_filter_rgba8_slow" / "1" / "model.onnx"),
                                providers=["CPUExecutionProvider"])
    frame = obs.known_frame(0, W, H)[None]
    fast.run(None, {"image": frame})
    took = []
    for _ in range(3):  # the quickest run: the machine's speed when it is least busy
        t0 = time.perf_counter()
        fast.run(None, {"image": frame})
        took.append(time.perf_counter() - t0)
    trips = int(SLOW_TRIPS * 10 / max(min(took), 1e-3))
    repo = tmp_path / "models"
    model = repo / "image_filter_rgba8_10s" / "1" / "model.onnx"
    model.parent.mkdir(parents=True)
    model.write_bytes(packed_image_filter_model(4, spin_trips=trips))
    (tmp_path / "svc").mkdir()
    svc = start_service(repo, tmp_path / "svc")
    run = obs.start(display, tmp_path / "obs.log", model="image_filter_rgba8_10s",
                    socket=svc.socket, width=W, height=H, fps=FPS, seconds=120, every_ms=500,
                    out=tmp_path / "out.raw")
    try:
        # Until frames have shown the result (ending at the first result, as until_filtered=1
        # did, could end before any frame had shown it), then the driver ends its run early.
        wait_for(run, "frames showing the result", lambda c: c["shown"] >= 2)
        run.proc.send_signal(signal.SIGINT)
        last = run.finish(timeout_s=180)
    finally:
        run.close()
        stop_service(svc)
    assert last["filtered"] >= 1 and last["failures"] == 0 and last["reconnects"] == 0, last
    waits = [float(m.group(1)) for line in run.lines
             if (m := re.search(r"the current run has taken ([0-9.]+) s", line.get("status", "")))]
    # How long the run took depends on how busy the machine was; that the filter waited for it
    # (and said so) does not.
    assert waits, [line.get("status") for line in run.lines]
    tags = classify(obs.frames(tmp_path / "out.raw", W, H),
                    *expected(obs_repo, "image_filter_rgba8", "rgba"))
    assert any(t.startswith("F") for t in tags), tags
    first = next(i for i, t in enumerate(tags) if t.startswith("F"))
    assert all(t.startswith("R") for t in tags[:first]), tags[:first]
    assert all(t.startswith("F") for t in tags[first:]), tags[first:]


def test_a_model_slower_than_the_deadline_is_not_reconnected_to_in_a_loop(
        obs_service: Service, display: str, tmp_path: Path) -> None:
    # deadline_ms 50 against image_filter_rgba8_slow (0.15 s or more a run): every run times
    # out. The retries back off (2, 4, 8 s ...): in 8 s at most 3 connections fail.
    run = obs.start(display, tmp_path / "obs.log", model="image_filter_rgba8_slow",
                    socket=obs_service.socket, deadline_ms=50, width=W, height=H, fps=FPS,
                    seconds=8, every_ms=500)
    last = run.finish()
    assert 1 <= last["failures"] <= 3 and last["filtered"] == 0, last
    assert any("slower than the deadline (50 ms" in line.get("status", "")
               for line in run.lines), [line.get("status") for line in run.lines]
    # One outage, logged once: a connection that works is not the end of it, a result is.
    assert run.log_text().count("[fenceline] a run failed") == 1
    assert "[fenceline] connected again" not in run.log_text()


def test_the_unfiltered_fallback_does_not_strobe(obs_service: Service, obs_repo: Path,
                                                 display: str, tmp_path: Path) -> None:
    """A model slower than the frame rate (a result every few frames) with fallback
    "unfiltered": the frames between results show the last result, not the source's frame. The
    output goes back to unfiltered only after a second without a result, and to filtered only
    after a second of steady results, so it switches at most twice a second (in practice: not
    at all)."""
    run = obs.start(display, tmp_path / "obs.log", model="image_filter_rgba8_slow",
                    socket=obs_service.socket, fallback="unfiltered", width=W, height=H,
                    fps=FPS, seconds=DEADLINE_S, until_filtered=10, out=tmp_path / "out.raw")
    last = run.finish()
    tags = classify(obs.frames(tmp_path / "out.raw", W, H),
                    *expected(obs_repo, "image_filter_rgba8", "rgba"))
    assert "?" not in tags and any(t.startswith("F") for t in tags), tags
    kinds = "".join(t[0] for t in tags).lstrip("R")
    back_to_unfiltered = kinds.count("FR")
    assert back_to_unfiltered <= (last["switches"] + 1) // 2, (kinds, last)
    assert last["switches"] <= 2 * last["t"] + 1, last


def test_properties_and_teardown_never_wait_for_a_hung_service(
        obs_repo: Path, display: str, tmp_path: Path) -> None:
    """The service stopped (SIGSTOP: it accepts connections and never answers). The properties
    dialog opens with the models the service last listed (none yet here), and OBS removes a
    filter whose run waits with no deadline (deadline_ms 0) without waiting for it: the driver
    exits (with a filter that waited for its worker, it would wait as long as the service is
    stopped)."""
    (tmp_path / "svc").mkdir()
    svc = start_service(obs_repo, tmp_path / "svc")
    env = dict(os.environ, DISPLAY=display, FENCELINE_SOCKET=str(svc.socket))
    try:
        run = obs.start(display, tmp_path / "obs.log", model="image_filter_rgba8_slow",
                        socket=svc.socket, deadline_ms=0, width=W, height=H, fps=FPS,
                        seconds=DEADLINE_S, every_ms=100)
        wait_for(run, "the first result", lambda c: c["filtered"] >= 1)
        svc.proc.send_signal(signal.SIGSTOP)
        listed = subprocess.run([str(obs.driver()), "list", str(obs.plugin()), "0"], env=env,
                                capture_output=True, text=True, timeout=60, check=True)
        info = json.loads(listed.stdout)
        assert info["id"] == "fenceline_filter" and info["models"] == [], info
        run.proc.send_signal(signal.SIGINT)  # the driver ends its run early
        last = run.finish(timeout_s=60)
    finally:
        svc.proc.send_signal(signal.SIGCONT)
        stop_service(svc)
    assert last["done"] and run.proc.returncode == 0, last


def test_the_bench_formats_rows_measure_both_sides(obs_service: Service, display: str,
                                                   tmp_path: Path) -> None:
    """`fenceline bench --obs`'s formats rows (fenceline.bench.obs_formats), on small frames:
    the filter ran on the sync source and its time was counted, the source's drawing not, split
    into libobs's staging calls and the filter's own work."""
    row = {side: obs_formats.run_case(display, tmp_path, obs_service.socket, "sync", "rgba",
                                      (W, H), side, seconds=3.5, warmup_s=1.0)
           for side in ("none", "fenceline")}
    assert row["none"]["filter_ms_per_frame"] == 0 and row["none"]["results_per_s"] == 0, row
    assert row["fenceline"]["filter_ms_per_frame"] > 0, row
    assert row["none"]["stage_ms_per_frame"] == 0, row
    fl = row["fenceline"]
    assert fl["stage_ms_per_frame"] > 0 and fl["own_ms_per_frame"] > 0, row
    assert fl["stage_ms_per_frame"] + fl["own_ms_per_frame"] == pytest.approx(
        fl["filter_ms_per_frame"]), row
    assert row["fenceline"]["results_per_s"] > 0, row


FFMPEG = obs.ffmpeg_module()
if isinstance(FFMPEG, str) and os.environ.get("FENCELINE_REQUIRE_OBS"):
    raise RuntimeError(f"FENCELINE_REQUIRE_OBS is set but {FFMPEG}")


def media_file(tmp: Path, fmt: str) -> dict[str, object]:
    """A media file of the source's obs.PERIOD known frames, which FFmpeg decodes to the bytes
    written, and the media source's settings that play it in a loop: raw RGBA frames (FFmpeg's
    rawvideo, the frame size and format given as FFmpeg options), or YUV 4:2:0 (I420) in a
    YUV4MPEG2 file, the frames of native/obs/driver.c's fill_yuv."""
    settings: dict[str, object] = {"is_local_file": True, "looping": True, "hw_decode": False}
    if fmt == "rgba":
        path = tmp / "known.rgb"  # the extension FFmpeg's rawvideo demuxer answers to
        path.write_bytes(b"".join(obs.known_frame(k, W, H).tobytes() for k in range(obs.PERIOD)))
        settings["ffmpeg_options"] = f"video_size={W}x{H} pixel_format=rgba framerate={FPS}"
    else:
        path = tmp / "known.y4m"
        x, y = np.arange(W)[None, :], np.arange(H)[:, None]
        cx, cy = np.arange(W // 2)[None, :], np.arange(H // 2)[:, None]
        frames = []
        for k in range(obs.PERIOD):
            planes = [(x * 3 + y * 7 + k * 13) % 256, (cx * 5 + cy * 3 + k * 7 + 64) % 256,
                      (cx * 2 + cy * 9 + k * 5 + 128) % 256]
            frames.append(b"FRAME\n" + b"".join(p.astype(np.uint8).tobytes() for p in planes))
        path.write_bytes(f"YUV4MPEG2 W{W} H{H} F{FPS}:1 Ip A1:1 C420jpeg XCOLORRANGE=FULL\n"
                         .encode() + b"".join(frames))
    settings["local_file"] = str(path)
    return settings


@pytest.mark.skipif(isinstance(FFMPEG, str), reason=str(FFMPEG))
@pytest.mark.parametrize("fmt", ["rgba", "i420"])
def test_obs_own_media_source_shows_onnxruntimes_output(
        obs_service: Service, obs_repo: Path, display: str, tmp_path: Path, fmt: str) -> None:
    """OBS's own media source (ffmpeg_source, from its obs-ffmpeg module) playing a file of
    known frames in a loop: raw RGBA, which OBS hands the filter as packed frames (filtered in
    place), and I420, which OBS converts on the GPU first (the filter reads it back). OBS's
    BGRA output without the filter gives the inputs (for RGBA: exactly the file's frames);
    with the filter every frame after the first results is onnxruntime's output on one of them,
    byte for byte."""
    assert not isinstance(FFMPEG, str)
    common: dict[str, object] = {"source": "ffmpeg_source", "plugins": (FFMPEG,),
                                 "source_settings": json.dumps(media_file(tmp_path, fmt))}
    inputs = obs_inputs(display, tmp_path, **common)
    if fmt == "rgba":  # the file's own frames, as OBS's BGRA output carries them
        known = {obs.known_frame(k, W, H)[..., [2, 1, 0, 3]].tobytes() for k in range(obs.PERIOD)}
        assert {i.tobytes() for i in inputs} == known
    got = obs_output(display, tmp_path, "filtered", model="image_filter_rgba8",
                     socket=obs_service.socket, seconds=DEADLINE_S, until_filtered=RESULTS,
                     **common)
    check_filtered(classify(without_blanks(got), inputs, model_on_bgra(obs_repo, inputs)))
