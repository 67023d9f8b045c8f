"""GPU zero-copy with two real processes: this test process is the Vulkan renderer, the service
runs in its own (docs/gpu.md). Skipped, with the reason, where there is no CUDA driver, no Vulkan
device that exports timeline semaphores, or no onnxruntime CUDA EP."""

from __future__ import annotations

import collections
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx
import numpy as np
import pytest

from fenceline import _native
from fenceline.client import IpcClient, ServiceError, View
from tests.gpu.conftest import cuda_ep_reason, cuda_reason, require, vulkan_reason
from tests.support.metrics import imported
from tests.support.service import Mapping, Service, start_service, stop_service

pytestmark = pytest.mark.gpu

SHAPE_1080P = [1, 3, 1080, 1920]
SHAPE_SMALL = [1, 3, 64, 64]


require("GPU tests need CUDA + Vulkan here", cuda_reason, cuda_ep_reason, vulkan_reason)

from fenceline.client.vk_renderer import VkRenderer  # noqa: E402
from fenceline.client.vulkan import VulkanDevice  # noqa: E402


def _mapped_bytes(maps_line: str) -> int:
    start, end = maps_line.split()[0].split("-")
    return int(end, 16) - int(start, 16)


def test_capabilities_report_gpu_handles_and_the_renderers_device(
    gpu_service: Service, device: VulkanDevice
) -> None:
    caps = httpx.get(gpu_service.url + "/v2/interop/capabilities").json()
    assert caps["memory"]["opaque_fd"] and caps["memory"]["cuda_ipc"]
    assert caps["fences"]["vk_timeline_opaque_fd"]
    gpus = [d for d in caps["devices"] if d["kind"] == "cuda"]
    assert device.uuid_hex in [d["uuid"] for d in gpus]
    assert all(d["total_memory_bytes"] > 0 for d in gpus)


def test_1080p_outputs_equal_a_direct_onnxruntime_cuda_run(
    client: IpcClient, device: VulkanDevice, gpu_service: Service, gpu_repo: Path
) -> None:
    import onnxruntime as ort

    frame = np.random.default_rng(4).standard_normal(SHAPE_1080P, dtype=np.float32)
    direct = ort.InferenceSession(
        str(gpu_repo / "add_1080p" / "1" / "model.onnx"), providers=["CUDAExecutionProvider"]
    )
    expected = direct.run(None, {"x": frame})[0]
    with VkRenderer(client, "add_1080p", SHAPE_1080P, device=device) as r:
        info = client.describe("session", r.slots[0].session)
        assert info["output_devices"] == {"y": "cuda:0"}
        assert info["device"] == "cuda:0" and info["device_uuid"] == device.uuid_hex
        assert client.describe("fence", r.slots[0].ids["ready"])["device"] == "cuda:0"
        r.upload(0, frame, 1)
        reply = client.run(r.slots[0].session, 1)
        assert reply.signal_value == 1
        assert r.wait_output(0, 1)
        out = r.read_output(0, 1)
        # The service held the frames only as CUDA imports: no host mapping of frame size.
        assert [m for m in gpu_service.maps() if _mapped_bytes(m) >= r.nbytes] == []
    np.testing.assert_array_equal(out, expected)


def test_a_cuda_session_runs_its_model_as_a_captured_graph_with_exact_outputs(
    client: IpcClient, device: VulkanDevice, gpu_repo: Path
) -> None:
    """The session captures the model's run on the imported memory once (describe() says so)
    and launches that graph on each frame: every frame's output equals a direct onnxruntime
    CUDA run of that frame's input."""
    import onnxruntime as ort

    direct = ort.InferenceSession(
        str(gpu_repo / "add_1080p" / "1" / "model.onnx"), providers=["CUDAExecutionProvider"]
    )
    rng = np.random.default_rng(31)
    with VkRenderer(client, "add_1080p", SHAPE_1080P, device=device) as r:
        info = client.describe("session", r.slots[0].session)
        assert info["cuda_graph"].startswith("captured"), info["cuda_graph"]
        for value in range(1, 5):
            frame = rng.standard_normal(SHAPE_1080P, dtype=np.float32)
            r.upload(0, frame, value)
            assert client.run(r.slots[0].session, value).signal_value == value
            assert r.wait_output(0, value)
            np.testing.assert_array_equal(r.read_output(0, value),
                                          direct.run(None, {"x": frame})[0])


def test_run_submitted_before_the_renderer_signals_waits_on_the_gpu(
    client: IpcClient, device: VulkanDevice
) -> None:
    with VkRenderer(client, "add_64x64", SHAPE_SMALL, device=device, fill_value=2.0) as r:
        t0 = time.perf_counter()
        reply = client.run_async(r.slots[0].session, 5)
        enqueue_s = time.perf_counter() - t0
        assert reply.signal_value == 5
        time.sleep(0.05)
        assert r.slots[0].done.value == 0, "the run completed before its input was signalled"
        r.fill(0, 5)
        assert r.wait_output(0, 5, timeout_s=5)
        out = r.read_output(0, 5)
    assert enqueue_s < 1.0
    np.testing.assert_array_equal(out, np.full(SHAPE_SMALL, 3.0, np.float32))


def test_never_signalled_fence_times_out_cleanly(
    client: IpcClient, device: VulkanDevice, gpu_service: Service
) -> None:
    with VkRenderer(client, "add_64x64", SHAPE_SMALL, device=device) as r:
        t0 = time.perf_counter()
        with pytest.raises(ServiceError) as e:
            client.run(r.slots[0].session, 7, timeout_ms=200)
        took = time.perf_counter() - t0
        assert e.value.code == "timed_out" and e.value.queued
        assert "did not reach 7" in e.value.message
        assert r.slots[0].done.value == 0
    # Releasing the session let the queued run drain; the service still answers.
    assert took < 5
    assert httpx.get(gpu_service.url + "/v2/health/ready").status_code == 200
    with VkRenderer(client, "add_64x64", SHAPE_SMALL, device=device) as r:
        r.fill(0, 1)
        assert client.run(r.slots[0].session, 1).signal_value == 1


def test_a_timed_out_run_stays_queued_and_signals_its_value_once_the_input_arrives(
    client: IpcClient, device: VulkanDevice
) -> None:
    """The timed_out contract on a CUDA session (docs/ipc.md, "When a run times out")."""
    with VkRenderer(client, "add_64x64", SHAPE_SMALL, device=device, fill_value=2.0) as r:
        session = r.slots[0].session
        with pytest.raises(ServiceError) as e:
            client.run(session, 3, signal_value=4, timeout_ms=100)
        assert e.value.code == "timed_out"
        assert e.value.details == {"queued": True, "wait_value": 3, "signal_value": 4}
        assert r.slots[0].done.value == 0
        with pytest.raises(ServiceError) as again:  # the frame is not sent twice
            client.run(session, 3, signal_value=4, timeout_ms=100)
        assert again.value.code == "conflict" and "still queued" in again.value.message
        r.fill(0, 3)  # the queued frame runs now, with no further request
        assert r.wait_output(0, 4, timeout_s=10)
        np.testing.assert_array_equal(r.read_output(0, 4), np.full(SHAPE_SMALL, 3.0, np.float32))
        r.fill(0, 5)
        assert client.run(session, 5).signal_value == 5


def _reply_before_signal(client: IpcClient, r: VkRenderer, value: int, deadline_s: float) -> bool:
    """Sends RUN_ASYNC for ``value`` before the input is signalled and reports whether the reply
    came within ``deadline_s``; signals either way, so a service that waits for the signal is
    released and the frame completes."""
    replies: list[int] = []
    t = threading.Thread(
        target=lambda: replies.append(client.run_async(r.slots[0].session, value).signal_value),
        daemon=True,
    )
    t.start()
    t.join(deadline_s)
    replied = not t.is_alive()
    r.fill(0, value)
    t.join(60)
    assert replies == [value]
    assert r.wait_output(0, value, timeout_s=10)
    return replied


def test_the_first_run_async_of_a_fresh_service_replies_before_the_renderer_signals(
    gpu_repo: Path, tmp_path: Path, device: VulkanDevice
) -> None:
    """RUN_ASYNC never waits on the CPU for the renderer, from the first frame of every new
    session of a service that has run nothing yet (docs/gpu.md, "The first frame")."""
    svc = start_service(gpu_repo, tmp_path)
    try:
        with IpcClient(svc.socket) as c:
            for model, shape in (("add_1080p", SHAPE_1080P), ("add_1080p", SHAPE_1080P),
                                 ("add_64x64", SHAPE_SMALL)):
                with VkRenderer(c, model, shape, device=device) as r:
                    assert _reply_before_signal(c, r, 1, deadline_s=10), (
                        f"the first RUN_ASYNC of a new {model} session waited for its input"
                    )
                    np.testing.assert_array_equal(
                        r.read_output(0, 1), np.full(shape, 1.5, np.float32)
                    )
    finally:
        stop_service(svc)
    assert "Traceback" not in svc.log_text(), svc.log_text()


def _grown(before: list[Mapping], after: list[Mapping], floor_kb: int) -> list[Mapping]:
    """Mappings of ``after`` whose RSS is at least ``floor_kb`` above the same mapping before.
    A mapping is known by its start: a malloc arena that grows keeps its start and moves its end,
    and only its growth counts (as a new range it would count whole)."""
    was = {_start(m): m.rss_kb for m in before}
    return [m for m in after if m.rss_kb - was.get(_start(m), 0) >= floor_kb]


def _start(m: Mapping) -> str:
    return m.range.split("-", 1)[0]


def test_sixty_frames_leave_no_frame_sized_host_memory_in_the_service(
    gpu_repo: Path, tmp_path: Path, device: VulkanDevice
) -> None:
    """The service's anonymous resident memory, by size: smaps' Anonymous of every mapping,
    summed (whichever mappings hold it, new or grown, heap and malloc's arenas included), grows
    by less than a quarter of a frame while a 1080p session is created and runs 60 frames; and no
    mapping appears or grows by half a frame. A 64x64 session (48 KB frames) runs first in the
    fresh service: what the process loads once (CUDA's module images for onnxruntime's kernels,
    ~50 MiB, docs/gpu.md "Host memory") comes with it and is printed, so that only what the
    1080p session and its frames add counts. Its creation logs no onnxruntime warning."""
    svc = start_service(gpu_repo, tmp_path)
    try:
        with IpcClient(svc.socket) as c:
            idle = svc.smaps()
            with VkRenderer(c, "add_64x64", SHAPE_SMALL, device=device) as small:
                small.fill(0, 1)
                c.run(small.slots[0].session, 1)
            before = svc.smaps()
            with VkRenderer(c, "add_1080p", SHAPE_1080P, device=device) as r:
                frame_kb = r.nbytes // 1024
                for n in range(1, 61):
                    r.fill(0, n)
                    c.run_async(r.slots[0].session, n)
                    assert r.wait_output(0, n, timeout_s=10)
                after = svc.smaps()
                np.testing.assert_array_equal(
                    r.read_output(0, 60), np.full(SHAPE_1080P, 1.5, np.float32)
                )
    finally:
        stop_service(svc)
    log = svc.log_text()
    assert "Traceback" not in log, log
    assert [line for line in log.splitlines() if "[W:onnxruntime" in line] == [], log
    print("\nservice mappings that grew by 3 MiB RSS or more (kB size, kB rss, kB anonymous):")
    for label, old, new in (("first 64x64 frame", idle, before), ("1080p, 60 frames", before, after)):
        for m in _grown(old, new, 3 * 1024):
            print(f"  {label:<18} {m.range} {m.size_kb:>8} {m.rss_kb:>8} {m.anon_kb:>8} "
                  f"{m.name or '(anonymous)'}")
    rss = [sum(m.rss_kb for m in maps) for maps in (idle, before, after)]
    anon = [sum(m.anon_kb for m in maps) for maps in (idle, before, after)]
    print(f"  RSS total: idle {rss[0]} kB, after the 64x64 frame {rss[1]} kB, after 60 1080p "
          f"frames {rss[2]} kB; anonymous: {anon[0]}, {anon[1]}, {anon[2]} kB (a frame: "
          f"{frame_kb} kB)")
    assert anon[2] - anon[1] < frame_kb // 4, (
        f"the 1080p session and its frames added {anon[2] - anon[1]} kB of anonymous resident "
        f"memory (a frame is {frame_kb} kB)")
    grown = _grown(before, after, frame_kb // 2)
    assert grown == [], f"host memory of frame size ({frame_kb // 2} kB or more) appeared: {grown}"
    assert rss[2] - rss[1] < frame_kb // 2


def test_three_frames_in_flight_each_get_their_own_result(
    client: IpcClient, device: VulkanDevice
) -> None:
    rng = np.random.default_rng(7)
    frames = [rng.standard_normal(SHAPE_SMALL, dtype=np.float32) for _ in range(9)]
    with VkRenderer(client, "add_64x64", SHAPE_SMALL, device=device, slots=3) as r:
        for i, frame in enumerate(frames):
            slot, value = i % 3, i // 3 + 1
            if value > 1:
                np.testing.assert_array_equal(r.read_output(slot, value - 1), frames[i - 3] + 1)
            r.upload(slot, frame, value)
            client.run_async(r.slots[slot].session, value)
        for i in range(6, 9):
            np.testing.assert_array_equal(r.read_output(i % 3, 3), frames[i] + 1)


def test_non_dedicated_allocations_import_too(client: IpcClient, device: VulkanDevice) -> None:
    with VkRenderer(client, "add_64x64", SHAPE_SMALL, device=device, dedicated=False) as r:
        r.fill(0, 1)
        client.run(r.slots[0].session, 1)
        np.testing.assert_array_equal(r.read_output(0, 1), np.full(SHAPE_SMALL, 1.5, np.float32))


def test_foreign_device_uuid_is_a_clear_error_and_the_fd_is_closed(
    client: IpcClient, device: VulkanDevice, gpu_service: Service
) -> None:
    from fenceline.client.vulkan import Buffer, close_fd

    buf = Buffer(device, 1 << 16)
    before = collections.Counter(gpu_service.fds())
    fd = buf.export_fd()
    try:
        with pytest.raises(ServiceError) as e:
            client.import_gpu_memory(fd, buf.allocation_size, device_uuid="00" * 16)
    finally:
        close_fd(fd)
        buf.close()
    assert e.value.code == "invalid_argument"
    assert "device UUID" in e.value.message
    deadline = time.monotonic() + 2
    while (new := collections.Counter(gpu_service.fds()) - before) and time.monotonic() < deadline:
        time.sleep(0.02)
    # The connection's pidfd (opened once the service first looks at the client's process) is
    # the connection's, closed with it: tests/integration/test_peer_liveness.py.
    new.pop("anon_inode:[pidfd]", None)
    assert not new, f"the service holds new fds after the refusal: {dict(new)}"


def test_closing_the_connection_releases_gpu_imports(
    gpu_service: Service, device: VulkanDevice
) -> None:
    mem0, fence0 = imported(gpu_service, "opaque_fd"), imported(gpu_service, "vk_timeline_opaque_fd")
    c = IpcClient(gpu_service.socket)
    r = VkRenderer(c, "add_64x64", SHAPE_SMALL, device=device, slots=2)
    assert imported(gpu_service, "opaque_fd") == mem0 + 4
    assert imported(gpu_service, "vk_timeline_opaque_fd") == fence0 + 4
    c.close()  # without releasing anything
    deadline = time.monotonic() + 5
    while imported(gpu_service, "opaque_fd") > mem0 and time.monotonic() < deadline:
        time.sleep(0.02)
    assert imported(gpu_service, "opaque_fd") == mem0
    assert imported(gpu_service, "vk_timeline_opaque_fd") == fence0
    r.close()


_EXPORTER = """
import sys, cupy, numpy
p = cupy.cuda.runtime.malloc(4096)  # its own allocation: an IPC handle names a whole one
host = numpy.full(1024, 7.0, numpy.float32)
cupy.cuda.runtime.memcpy(p, host.ctypes.data, 4096, 1)  # host to device, no kernel to compile
sys.stdout.write(bytes(cupy.cuda.runtime.ipcGetMemHandle(p)).hex() + "\\n")
sys.stdout.flush()
sys.stdin.readline()
"""


def test_cuda_ipc_memory_of_another_process_imports(client: IpcClient) -> None:
    cupy = pytest.importorskip("cupy")
    proc = subprocess.Popen(
        [sys.executable, "-c", _EXPORTER], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    try:
        assert proc.stdout is not None and proc.stdin is not None
        handle = bytes.fromhex(proc.stdout.readline().strip())
        assert len(handle) == 64
        mem = _native.CudaMemory.open_ipc(_native.CudaDevice.by_ordinal(0), handle, 4096)
        seen = np.zeros(1024, np.float32)
        cupy.cuda.runtime.memcpy(seen.ctypes.data, mem.pointer, 4096, 2)  # device to host
        assert (seen == 7.0).all()
        mem.close()
        id_ = client.import_cuda_ipc(handle, 4096, device_id=0)
        info = client.describe("memory", id_)
        assert info["handle_type"] == "cuda_ipc" and info["device"] == "cuda:0"
        assert info["size_bytes"] == 4096
        client.release_memory(id_)
        proc.stdin.write("\n")
        proc.stdin.flush()
        assert proc.wait(30) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        for pipe in (proc.stdin, proc.stdout):
            if pipe is not None:
                pipe.close()


def test_gpu_memory_with_host_fences_is_refused(client: IpcClient, device: VulkanDevice) -> None:
    from fenceline.client import Fence
    from fenceline.client.vulkan import Buffer, close_fd

    buf = Buffer(device, 64 * 64 * 3 * 4)
    fd = buf.export_fd()
    try:
        mem = client.import_gpu_memory(fd, buf.allocation_size, device_uuid=device.uuid_hex, dedicated=True)
    finally:
        close_fd(fd)
    with Fence() as f:
        fence = client.import_fence(f)
        with pytest.raises(ServiceError) as e:
            client.create_session(
                "add_64x64", {"x": View(mem, "FP32", SHAPE_SMALL)}, {"y": View(mem, "FP32", SHAPE_SMALL)},
                fence, fence,
            )
        client.release_fence(fence)
    client.release_memory(mem)
    buf.close()
    assert e.value.code == "invalid_argument"
    assert "vk_timeline_opaque_fd" in e.value.message


def test_the_per_gpu_session_limit_answers_resource_exhausted(
    gpu_repo: Path, tmp_path: Path, device: VulkanDevice
) -> None:
    svc = start_service(gpu_repo, tmp_path, "--max-sessions-per-device", "1")
    try:
        with IpcClient(svc.socket) as c:
            with VkRenderer(c, "add_64x64", SHAPE_SMALL, device=device) as r:
                with pytest.raises(ServiceError) as e:
                    VkRenderer(c, "add_64x64", SHAPE_SMALL, device=device)
                r.fill(0, 1)
                assert c.run(r.slots[0].session, 1).signal_value == 1
            assert e.value.code == "resource_exhausted"
            assert "cuda:0 already has 1 sessions" in e.value.message
            # The refused session held nothing: once the first is gone, another fits.
            with VkRenderer(c, "add_64x64", SHAPE_SMALL, device=device) as r:
                r.fill(0, 1)
                assert c.run(r.slots[0].session, 1).signal_value == 1
            text = httpx.get(svc.url + "/metrics").text
            assert 'fenceline_gpu_runs_total{device="cuda:0"} 2.0' in text
    finally:
        stop_service(svc)
    assert "Traceback" not in svc.log_text(), svc.log_text()
