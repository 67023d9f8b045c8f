"""Streaming sessions on CUDA sessions (docs/streaming.md, "GPU sessions"), with two real
processes: this test process is the Vulkan renderer, the service runs in its own. No RUN is sent:
the service enqueues wait / model / signal per input value on its CUDA stream, and the GPU waits
for the renderer. Skipped, with the reason, where CUDA, Vulkan semaphore export or the CUDA EP
is missing."""

from __future__ import annotations

import time

import httpx
import numpy as np
import pytest

from fenceline.client import IpcClient, ServiceError, View
from tests.gpu.conftest import cuda_ep_reason, cuda_reason, require, vulkan_reason
from tests.support.metrics import imported
from tests.support.service import Service

pytestmark = pytest.mark.gpu

require("GPU streaming tests need CUDA + Vulkan here", cuda_reason, cuda_ep_reason, vulkan_reason)

from fenceline.client.vk_renderer import VkRenderer  # noqa: E402
from fenceline.client.vulkan import (  # noqa: E402
    Buffer,
    Submission,
    VulkanDevice,
    copy_commands,
    fill_commands,
)

SHAPE = [1, 3, 64, 64]
STREAMING = {"mode": "streaming", "policy": "every"}


def _word(value: float) -> int:
    return int(np.float32(value).view(np.uint32))


def _stream_info(client: IpcClient, session: str) -> dict:
    info = client.describe("session", session)
    assert info["mode"] == "streaming", info
    return dict(info["stream"])


def _wait_frames(client: IpcClient, session: str, frames: int, timeout_s: float = 10) -> dict:
    """The stream's description once it counts ``frames`` (it counts a frame when it sees the
    frame's completion event, which may come a little after the output fence's value)."""
    deadline = time.monotonic() + timeout_s
    info = _stream_info(client, session)
    while info["frames"] < frames and time.monotonic() < deadline:
        time.sleep(0.02)
        info = _stream_info(client, session)
    return info


class Producer:
    """Frame n of a streaming renderer, all on the renderer's queue: wait until the output fence
    reached n-1, fill the input with n modulo ``kinds``, signal the input fence n; then copy the
    output, once the output fence reaches n, into frame n's own readback buffer. Nothing waits
    on the CPU, so every frame submitted is in flight at once (each has its own command buffers:
    a pending one may not be submitted again)."""

    def __init__(self, r: VkRenderer, frames: int, kinds: int = 5) -> None:
        s = r.slots[0]
        self.r = r
        self.kinds = kinds
        self.fills = [Submission(r.dev, fill_commands(s.input, _word(self.value(n))),
                                 signal=s.ready, wait=s.done) for n in range(1, frames + 1)]
        self.results = [Buffer(r.dev, r.nbytes, exported=False) for _ in range(frames)]
        self.readbacks = [Submission(r.dev, copy_commands(s.output, b, r.nbytes), wait=s.done)
                          for b in self.results]

    def value(self, n: int) -> float:
        return float(n % self.kinds)

    def submit(self, n: int) -> None:
        self.fills[n - 1].submit(signal_value=n, wait_value=n - 1)
        self.readbacks[n - 1].submit(wait_value=n)

    def output(self, n: int) -> np.ndarray:
        return self.results[n - 1].array(np.float32, self.r.shape).copy()

    def close(self) -> None:
        self.r.dev.wait_idle()
        for b in self.results:
            b.close()


def test_a_streaming_gpu_session_runs_every_frame_the_renderer_signals_without_requests(
    client: IpcClient, device: VulkanDevice
) -> None:
    with VkRenderer(client, "add_64x64", SHAPE, device=device, session_options=STREAMING) as r:
        session = r.slots[0].session
        info = _stream_info(client, session)
        assert info["state"] == "running" and info["policy"] == "every", info
        for n in range(1, 21):
            frame = np.full(SHAPE, float(n), np.float32)
            r.upload(0, frame, n)
            assert r.wait_output(0, n, timeout_s=10), (
                f"frame {n}: the output fence stayed at {r.slots[0].done.value}; "
                f"stream: {_stream_info(client, session)}"
            )
            out = r.read_output(0, n)
            np.testing.assert_array_equal(out, frame + 1, err_msg=f"frame {n}")
        info = _wait_frames(client, session, 20)
        assert info["frames"] >= 20 and info["failed"] == 0, info
        assert info["last_value"] >= 20, info


def test_frames_in_flight_on_the_gpu_each_get_their_own_result(
    client: IpcClient, device: VulkanDevice
) -> None:
    """The renderer submits 24 frames at once, each waiting on the GPU for the previous output;
    the service keeps several queued ahead. Every frame's output is its own input plus one."""
    frames = 24
    with VkRenderer(client, "add_64x64", SHAPE, device=device, session_options=STREAMING) as r:
        p = Producer(r, frames)
        try:
            for n in range(1, frames + 1):
                p.submit(n)
            assert r.slots[0].done.wait(frames, 20), (
                f"the output fence stayed at {r.slots[0].done.value}; "
                f"stream: {_stream_info(client, r.slots[0].session)}"
            )
            r.dev.wait_idle()
            for n in range(1, frames + 1):
                np.testing.assert_array_equal(
                    p.output(n), np.full(SHAPE, p.value(n) + 1, np.float32), err_msg=f"frame {n}"
                )
            info = _wait_frames(client, r.slots[0].session, frames)
            assert info["frames"] >= frames and info["failed"] == 0, info
        finally:
            p.close()


def test_pause_and_start_continue_with_the_next_value(
    client: IpcClient, device: VulkanDevice
) -> None:
    with VkRenderer(client, "add_64x64", SHAPE, device=device, session_options=STREAMING) as r:
        session = r.slots[0].session
        p = Producer(r, 8)
        try:
            for n in range(1, 4):
                p.submit(n)
            assert r.slots[0].done.wait(3, 10), _stream_info(client, session)
            paused = client.pause_session(session)
            assert paused["stream"]["state"] == "paused", paused
            started = client.start_session(session)
            assert started["stream"]["state"] == "running", started
            for n in range(4, 9):
                p.submit(n)
            assert r.slots[0].done.wait(8, 10), (
                f"after pause and start the output fence stayed at {r.slots[0].done.value}; "
                f"stream: {_stream_info(client, session)}"
            )
            r.dev.wait_idle()
            for n in range(1, 9):
                np.testing.assert_array_equal(
                    p.output(n), np.full(SHAPE, p.value(n) + 1, np.float32), err_msg=f"frame {n}"
                )
        finally:
            p.close()


def test_run_on_a_streaming_gpu_session_is_a_conflict_and_stop_releases_it(
    client: IpcClient, device: VulkanDevice, gpu_service: Service
) -> None:
    with VkRenderer(client, "add_64x64", SHAPE, device=device, session_options=STREAMING) as r:
        session = r.slots[0].session
        with pytest.raises(ServiceError) as e:
            client.run_async(session, 1)
        assert e.value.code == "conflict" and "streams" in e.value.message
        r.fill(0, 1)
        assert r.wait_output(0, 1, timeout_s=10), _stream_info(client, session)
        final = client.stop_session(session)
        assert final["stream"]["state"] == "stopped", final
        r.slots[0].session = ""  # gone on the service: close() releases only the imports
        with pytest.raises(ServiceError) as gone:
            client.describe("session", session)
        assert gone.value.code == "not_found"
        # Its memory and fences are free again: close() releases them without a conflict.
    assert httpx.get(gpu_service.url + "/v2/health/ready").status_code == 200


def test_the_latest_policy_on_gpu_fences_is_refused_before_anything_is_built(
    client: IpcClient, device: VulkanDevice
) -> None:
    with VkRenderer(client, "add_64x64", SHAPE, device=device) as r:
        ids = r.slots[0].ids
        for options in ({"mode": "streaming", "policy": "latest"}, {"mode": "streaming"}):
            with pytest.raises(ServiceError) as e:
                client.create_session(
                    "add_64x64", {"x": View(ids["input"], "FP32", SHAPE)},
                    {"y": View(ids["output"], "FP32", SHAPE)}, ids["ready"], ids["done"],
                    **options,
                )
            assert e.value.code == "unsupported", e.value
            assert 'policy "every"' in e.value.message
            # Only the renderer's own request-mode session holds the memory.
            assert client.describe("memory", ids["input"])["sessions"] == 1


def test_a_renderer_that_disconnects_with_frames_queued_leaves_nothing_behind(
    gpu_service: Service, device: VulkanDevice
) -> None:
    """Frames the service queued ahead wait for input values that never come; closing the
    connection releases the session (its queued waits are let go) and every import."""
    mem0 = imported(gpu_service, "opaque_fd")
    c = IpcClient(gpu_service.socket)
    r = VkRenderer(c, "add_64x64", SHAPE, device=device, session_options=STREAMING)
    r.fill(0, 1)
    assert r.wait_output(0, 1, timeout_s=10), _stream_info(c, r.slots[0].session)
    c.close()  # without stopping or releasing anything
    deadline = time.monotonic() + 10
    while imported(gpu_service, "opaque_fd") > mem0 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert imported(gpu_service, "opaque_fd") == mem0
    r.close()
    with IpcClient(gpu_service.socket) as again, VkRenderer(
        again, "add_64x64", SHAPE, device=device, session_options=STREAMING
    ) as r2:
        r2.fill(0, 1)
        assert r2.wait_output(0, 1, timeout_s=10), _stream_info(again, r2.slots[0].session)
        text = httpx.get(gpu_service.url + "/metrics").text
        assert "fenceline_stream_running_sessions 1.0" in text
