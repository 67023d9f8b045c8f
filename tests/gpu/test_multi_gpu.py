"""One service, two GPUs (docs/gpu.md, "Several GPUs"): two Vulkan renderers in their own
processes (tests/support/gpu_renderer_proc.py), one per GPU, stream at once through one service; each
session sits on its renderer's GPU, outputs are correct, and a stall on one GPU leaves the other
streaming. Skipped, with the reason, on machines with fewer than two CUDA devices.

Figures are printed (run with ``-s``); the only timing check is a generous sanity bound.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.gpu.conftest import cuda_ep_reason, cuda_reason, require, two_gpus_reason
from tests.support.service import Service

pytestmark = pytest.mark.gpu

HERE = Path(__file__).parents[1] / "support"
MODEL = "add_1080p"
STREAM_S = 1.5
STALL_SYNC_TIMEOUT_MS = 1000


require("the multi-GPU test needs two CUDA + Vulkan GPUs", cuda_reason, cuda_ep_reason,
        two_gpus_reason)


class RendererProc:
    def __init__(self, svc: Service, uuid_hex: str) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, str(HERE / "gpu_renderer_proc.py"), str(svc.socket), MODEL, uuid_hex],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
        )
        self.info = self.read()

    def read(self) -> dict[str, Any]:
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        if not line:
            raise AssertionError(f"the renderer exited with {self.proc.wait(10)}")
        out: dict[str, Any] = json.loads(line)
        assert "error" not in out, out
        return out

    def send(self, cmd: str, **args: Any) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(json.dumps({"cmd": cmd, **args}) + "\n")
        self.proc.stdin.flush()

    def call(self, cmd: str, **args: Any) -> dict[str, Any]:
        self.send(cmd, **args)
        return self.read()

    def close(self) -> None:
        if self.proc.poll() is None:
            try:
                self.call("quit")
                self.proc.wait(30)
            except (AssertionError, OSError, subprocess.TimeoutExpired):
                self.proc.kill()
                self.proc.wait()
        for pipe in (self.proc.stdin, self.proc.stdout):
            if pipe is not None:
                pipe.close()



def _metric(text: str, name: str, device: str) -> float:
    for line in text.splitlines():
        if line.startswith(f'{name}{{device="{device}"}}'):
            return float(line.split()[-1])
    return 0.0


def test_two_renderers_on_two_gpus_stream_at_once_and_a_stall_stays_on_its_gpu(
    gpu_service: Service,
) -> None:
    caps = httpx.get(gpu_service.url + "/v2/interop/capabilities").json()
    gpus = [d for d in caps["devices"] if d["kind"] == "cuda"]
    assert len(gpus) >= 2
    assert all(d["total_memory_bytes"] > 0 and d["name"] and len(d["uuid"]) == 32 for d in gpus)
    a_dev, b_dev = gpus[0], gpus[1]
    a_label, b_label = f"cuda:{a_dev['id']}", f"cuda:{b_dev['id']}"

    a = RendererProc(gpu_service, a_dev["uuid"])
    b = RendererProc(gpu_service, b_dev["uuid"])
    figures: dict[str, Any] = {}
    try:
        # Placement: every session, memory and fence on its renderer's GPU.
        for r, dev, label in ((a, a_dev, a_label), (b, b_dev, b_label)):
            assert r.info["uuid"] == dev["uuid"]
            for s in r.info["sessions"]:
                assert s["output_devices"] == {"y": label}
                assert s["device"] == label and s["device_uuid"] == dev["uuid"]
            assert r.info["memory"]["device"] == label
            assert r.info["fence"]["device"] == label

        # Each GPU alone, then both at once.
        figures["b_alone"] = b.call("stream", seconds=STREAM_S)
        figures["a_alone"] = a.call("stream", seconds=STREAM_S)
        figures["b_roundtrip_alone"] = b.call("roundtrip", frames=200)
        a.send("stream", seconds=STREAM_S)
        b.send("stream", seconds=STREAM_S)
        figures["a_together"], figures["b_together"] = a.read(), b.read()
        # Session churn on GPU a while GPU b streams: a figure only (onnxruntime builds a
        # session holding the GIL, so this shows what that costs the other GPU).
        a.send("churn")
        b.send("stream", seconds=STREAM_S)
        figures["a_churn"], figures["b_while_a_churns"] = a.read(), b.read()
        assert figures["a_churn"]["correct"]
        for key in ("a_alone", "b_alone", "a_together", "b_together", "b_while_a_churns"):
            assert figures[key]["frames"] > 0 and figures[key]["correct"], figures

        # A stall on GPU a: frames queued behind input semaphores nobody signals, and a plain
        # RUN waiting on the host for that GPU. GPU b's client keeps working meanwhile.
        stall = a.call("stall", sync_timeout_ms=STALL_SYNC_TIMEOUT_MS)
        figures["b_churn_during_stall"] = b.call("churn")
        assert figures["b_churn_during_stall"]["correct"]
        figures["b_during_stall"] = b.call("stream", seconds=STREAM_S)
        figures["b_roundtrip_during_stall"] = b.call("roundtrip", frames=200)
        during = a.call("status")
        assert figures["b_during_stall"]["frames"] > 0 and figures["b_during_stall"]["correct"]
        assert during["done_values"] == stall["done_values"], "the stalled GPU completed frames"
        # Generous: the stalled GPU must not take the other one down to a crawl.
        assert figures["b_during_stall"]["fps"] > 0.25 * figures["b_alone"]["fps"], figures

        after = a.call("unstall")
        figures["a_sync_run_during_stall"] = after["sync_run"]
        assert after["sync_run"]["code"] == "timed_out", after
        assert after["correct"] and after["done_values"] == stall["stalled"]
        assert a.call("check_upload")["correct"] and b.call("check_upload")["correct"]

        metrics = httpx.get(gpu_service.url + "/metrics").text
        for label in (a_label, b_label):
            assert _metric(metrics, "fenceline_gpu_sessions_active", label) == 3
            assert _metric(metrics, "fenceline_gpu_runs_total", label) > 0
            assert _metric(metrics, "fenceline_gpu_imported_bytes", label) > 0
    finally:
        print("\nmulti-GPU figures:", json.dumps(figures, indent=1, sort_keys=True))
        a.close()
        b.close()
    metrics = httpx.get(gpu_service.url + "/metrics").text
    for label in (a_label, b_label):
        assert _metric(metrics, "fenceline_gpu_sessions_active", label) == 0
