"""The CUDA cells of docs/architecture.md's table ("Who serves a run"): a CUDA session's RUNs over
the Unix socket and over the run page, and its streaming frames, all enter through the native
engine's one entry, which calls the session's Python body as its backend. Each test reads the
engine's counters (``fenceline_native_runs_total{outcome}``) before and after and asserts the
exact change, so a CUDA run that bypasses the entry fails. This test process is the Vulkan
renderer; the service runs in its own. Skipped, with the reason, without CUDA, the CUDA EP or a
Vulkan device that exports semaphores."""

from __future__ import annotations

import time

import numpy as np
import pytest

from fenceline.client import IpcClient
from fenceline.runtime.gpu_streaming import DEPTH
from tests.gpu.conftest import cuda_ep_reason, cuda_reason, require, vulkan_reason
from tests.support.metrics import changed, native_runs
from tests.support.service import Service

pytestmark = pytest.mark.gpu

require("the CUDA cells need CUDA + Vulkan here", cuda_reason, cuda_ep_reason, vulkan_reason)

from fenceline.client.vk_renderer import VkRenderer  # noqa: E402
from fenceline.client.vulkan import VulkanDevice  # noqa: E402

SHAPE = [1, 3, 64, 64]


@pytest.mark.parametrize("transport", ["socket", "page"])
def test_request_mode(client: IpcClient, device: VulkanDevice, gpu_service: Service,
                      transport: str) -> None:
    """RUNs of a CUDA session: ``send_run`` keeps to the socket, ``run`` takes the page."""
    with VkRenderer(client, "add_64x64", SHAPE, device=device) as r:
        session = r.slots[0].session
        before = native_runs(gpu_service)
        for v in (1, 2, 3):
            frame = np.full(SHAPE, float(v), np.float32)
            r.upload(0, frame, v)
            reply = (client.run(session, v) if transport == "page"
                     else client.recv_run_reply(client.send_run(session, v)))
            assert reply.signal_value == v and r.wait_output(0, v)
            np.testing.assert_array_equal(r.read_output(0, v), frame + 1)
        assert changed(before, native_runs(gpu_service)) == {"answered": 3}
        if transport == "page":
            assert client._end.has_page


def test_streaming(client: IpcClient, device: VulkanDevice, gpu_service: Service) -> None:
    """A streaming CUDA session: its driver hands each input value to the entry, which enqueues
    it through the session's body, up to DEPTH values ahead of the renderer's signals (they
    wait on the GPU); every one is counted answered, none failed."""
    before = native_runs(gpu_service)  # the driver may enqueue value 1 as the session starts
    with VkRenderer(client, "add_64x64", SHAPE, device=device,
                    session_options={"mode": "streaming", "policy": "every"}) as r:
        for v in (1, 2, 3):
            frame = np.full(SHAPE, float(v), np.float32)
            r.upload(0, frame, v)
            assert r.wait_output(0, v)
            np.testing.assert_array_equal(r.read_output(0, v), frame + 1)
        # A frame is counted once its body returns, which may be just after the GPU ran it.
        deadline = time.monotonic() + 5
        change = changed(before, native_runs(gpu_service))
        while change.get("answered", 0) < 3 and time.monotonic() < deadline:
            time.sleep(0.02)
            change = changed(before, native_runs(gpu_service))
    assert set(change) == {"answered"} and 3 <= change["answered"] <= 3 + DEPTH, change
