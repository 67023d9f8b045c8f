"""The OBS filter (fenceline_filter) in headless OBS: libobs renders a source of known frames
through the filter under Xvfb, against a real service in its own process. Outputs equal
onnxruntime's byte for byte; the service killed mid-stream and started again; a model slower
than a frame; settings saved and loaded with the scene (docs/obs.md)."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import onnxruntime as ort
import pytest

from fenceline.bench import obs, obs_fps
from fenceline.models import build_repository
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
                                  "channel_order", "status"]
    assert info["models"] == sorted(MODELS)  # from $FENCELINE_SOCKET, the socket left empty
    assert info["defaults"] == {"model": "", "socket": "", "frames_in_flight": 2,
                                "fallback": "last_good", "channel_order": "rgb"}


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
                    filter="fenceline_reference_filter", width=W, height=H, fps=FPS, seconds=3,
                    model_path=obs_repo / "image_filter_rgba8_slow" / "1" / "model.onnx",
                    out=tmp_path / "out.raw")
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


def yuv_planes(fmt: str, k: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The driver's YUV frame k as full Y [H, W] and chroma U, V at their own resolution."""
    k %= obs.PERIOD
    x, y = np.arange(W)[None, :], np.arange(H)[:, None]
    ch = H if fmt == "yuy2" else H // 2
    cx, cy = np.arange(W // 2)[None, :], np.arange(ch)[:, None]
    return ((x * 3 + y * 7 + k * 13) % 256, (cx * 5 + cy * 3 + k * 7 + 64) % 256,
            (cx * 2 + cy * 9 + k * 5 + 128) % 256)


def yuv_bytes(fmt: str, yy: np.ndarray, u: np.ndarray, v: np.ndarray) -> np.ndarray:
    """Planes as the driver's probe writes them."""
    if fmt == "nv12":
        return np.concatenate([yy.ravel(), np.stack([u, v], -1).ravel()]).astype(np.uint8)
    if fmt == "i420":
        return np.concatenate([yy.ravel(), u.ravel(), v.ravel()]).astype(np.uint8)
    packed = np.stack([yy[:, 0::2], u, yy[:, 1::2], v], -1)  # Y0 U Y1 V
    return packed.ravel().astype(np.uint8)


def to_byte(v: np.ndarray) -> np.ndarray:
    return np.clip(np.floor(v.astype(np.float32) * np.float32(255) + np.float32(0.5)), 0, 255)


@pytest.mark.parametrize("fmt", ["nv12", "i420", "yuy2"])
def test_yuv_frames_are_converted_with_their_matrix_filtered_and_converted_back(
        obs_service: Service, obs_repo: Path, display: str, tmp_path: Path, fmt: str) -> None:
    run = obs.start(display, tmp_path / "obs.log", model="image_filter_rgba8",
                    socket=obs_service.socket, format=fmt, width=W, height=H, fps=FPS,
                    seconds=DEADLINE_S, until_filtered=RESULTS, out=tmp_path / "out.raw")
    last = run.finish()
    assert last["filtered"] >= RESULTS and last["failures"] == 0, last
    m = np.array(run.lines[0]["color_matrix"], np.float32).reshape(4, 4)
    inv = np.linalg.inv(m[:3, :3].astype(np.float64)).astype(np.float32)
    sess = ort.InferenceSession(str(obs_repo / "image_filter_rgba8" / "1" / "model.onnx"),
                                providers=["CPUExecutionProvider"])
    sub_y = 1 if fmt == "yuy2" else 2
    want, raw = [], []
    for k in range(obs.PERIOD):
        yy, u, v = yuv_planes(fmt, k)
        raw.append(yuv_bytes(fmt, yy, u, v))
        full = np.stack([yy, np.repeat(np.repeat(u, sub_y, 0), 2, 1),
                         np.repeat(np.repeat(v, sub_y, 0), 2, 1)], -1).astype(np.float32) / 255
        rgb = to_byte(full @ m[:3, :3].T + m[:3, 3])
        rgba = np.concatenate([rgb, np.full((H, W, 1), 255)], -1).astype(np.uint8)
        (out,) = sess.run(None, {"image": rgba[None]})
        back = (out[0, ..., :3].astype(np.float32) / 255 - m[:3, 3]) @ inv.T
        oy = to_byte(back[..., 0])
        ou = back[..., 1].reshape(H // sub_y, sub_y, W // 2, 2).mean((1, 3))
        ov = back[..., 2].reshape(H // sub_y, sub_y, W // 2, 2).mean((1, 3))
        want.append(yuv_bytes(fmt, oy, to_byte(ou), to_byte(ov)).astype(np.int16))
    size = raw[0].size
    data = np.fromfile(tmp_path / "out.raw", np.uint8)
    frames = data[: data.size // size * size].reshape(-1, size).astype(np.int16)
    filtered = 0
    for n, frame in enumerate(frames):
        if any(np.array_equal(frame, r) for r in raw):
            assert filtered == 0, f"frame {n} unfiltered after a filtered one"
            continue
        # numpy's float32 sums round a byte differently from C's now and then: off by one.
        best = min(np.abs(frame - w).max() for w in want)
        assert best <= 1, f"frame {n}: {best} from every expected frame"
        filtered += 1
    # Filtering happened (how fast it keeps up is for `fenceline bench --obs` to show).
    assert filtered > 0, (filtered, len(frames))
