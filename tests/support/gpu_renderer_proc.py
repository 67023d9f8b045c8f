"""A Vulkan renderer on one GPU, in its own process, for tests/gpu/test_multi_gpu.py: three frame slots
(VkRenderer) on the Vulkan device with the given deviceUUID, driven by JSON commands on stdin,
one JSON line answered on stdout per command.

    python gpu_renderer_proc.py SOCKET MODEL UUID_HEX

Commands: stream {seconds}, roundtrip {frames}, stall {sync_timeout_ms}, status, unstall,
churn, check_upload, quit.
"""

from __future__ import annotations

import json
import sys
import threading
import time
from typing import Any

import numpy as np

from fenceline.client import IpcClient, ServiceError
from fenceline.client.vk_renderer import VkRenderer
from fenceline.client.vulkan import VulkanDevice

SHAPE = [1, 3, 1080, 1920]
FILL = 0.5


class Renderer:
    def __init__(self, socket_path: str, model: str, uuid: bytes) -> None:
        self.client = IpcClient(socket_path, name="multi-gpu-renderer")
        self.dev = VulkanDevice(uuid=uuid)
        self.model = model
        self.r = VkRenderer(self.client, model, SHAPE, slots=3, device=self.dev, fill_value=FILL)
        self.values = [0, 0, 0]  # the last value run on each slot
        self.stalled: list[int] = []
        self.sync: dict[str, Any] = {}
        self.sync_thread: threading.Thread | None = None

    def ready(self) -> dict[str, Any]:
        s = self.r.slots[0]
        return {
            "vulkan": self.dev.name,
            "uuid": self.dev.uuid_hex,
            "sessions": [self.client.describe("session", x.session) for x in self.r.slots],
            "memory": self.client.describe("memory", s.ids["input"]),
            "fence": self.client.describe("fence", s.ids["ready"]),
        }

    def done_values(self) -> list[int]:
        return [s.done.value for s in self.r.slots]

    def _outputs_correct(self) -> bool:
        want = np.float32(FILL) + np.float32(1)
        return all(
            bool((self.r.read_output(i, self.values[i]) == want).all()) for i in range(3)
        )

    def stream(self, seconds: float) -> dict[str, Any]:
        """Pipelined, as `fenceline bench --gpu`: up to three frames in flight."""
        r, client = self.r, self.client
        sessions = [s.session for s in r.slots]
        frames, i = 0, 0
        t0 = time.perf_counter()
        end = t0 + seconds
        while time.perf_counter() < end:
            slot = i % 3
            v = self.values[slot] + 1
            rid = client.send_run_async(sessions[slot], v)
            if v > 1 and not r.wait_output(slot, v - 1):
                return {"error": f"slot {slot} never reached {v - 1}"}
            r.fill(slot, v)
            client.recv_run_reply(rid)
            self.values[slot] = v
            frames += 1
            i += 1
        for slot in range(3):
            if self.values[slot] and not r.wait_output(slot, self.values[slot]):
                return {"error": f"slot {slot} never reached {self.values[slot]}"}
        elapsed = time.perf_counter() - t0
        return {"frames": frames, "fps": frames / elapsed, "correct": self._outputs_correct()}

    def roundtrip(self, frames: int) -> dict[str, Any]:
        samples = []
        for _ in range(frames):
            v = self.values[0] + 1
            t0 = time.perf_counter_ns()
            self.r.fill(0, v)
            self.client.run_async(self.r.slots[0].session, v)
            if not self.r.wait_output(0, v):
                return {"error": f"output {v} never came"}
            samples.append((time.perf_counter_ns() - t0) / 1e3)
            self.values[0] = v
        samples.sort()
        return {"p50_us": samples[len(samples) // 2], "p99_us": samples[int(len(samples) * 0.99)]}

    def stall(self, sync_timeout_ms: int) -> dict[str, Any]:
        """Queues one RUN_ASYNC per slot whose input is never signalled, then a plain RUN on slot 0
        (on a thread) that waits for the stalled GPU up to sync_timeout_ms."""
        before = self.done_values()
        self.stalled = []
        for slot, s in enumerate(self.r.slots):
            v = self.values[slot] + 1
            self.client.run_async(s.session, v)
            self.values[slot] = v
            self.stalled.append(v)
        v0 = self.values[0] + 1
        self.values[0] = v0
        self.stalled[0] = v0

        def sync_run() -> None:
            t0 = time.perf_counter()
            try:
                self.client.run(self.r.slots[0].session, v0, timeout_ms=sync_timeout_ms)
                self.sync = {"code": "ok"}
            except ServiceError as e:
                self.sync = {"code": e.code, "message": e.message}
            self.sync["seconds"] = time.perf_counter() - t0

        self.sync_thread = threading.Thread(target=sync_run)
        self.sync_thread.start()
        return {"stalled": self.stalled, "done_values": before}

    def unstall(self) -> dict[str, Any]:
        assert self.sync_thread is not None
        self.sync_thread.join(60)
        for slot, v in enumerate(self.stalled):
            self.r.slots[slot].ready.signal(v)
        for slot, v in enumerate(self.stalled):
            if not self.r.wait_output(slot, v):
                return {"error": f"slot {slot} never reached {v} after the stall ended"}
        return {"sync_run": self.sync, "done_values": self.done_values(),
                "correct": self._outputs_correct()}

    def churn(self) -> dict[str, Any]:
        """Creates and releases a one-slot renderer: control requests of this GPU's client."""
        t0 = time.perf_counter()
        with VkRenderer(self.client, self.model, SHAPE, slots=1, device=self.dev) as extra:
            extra.fill(0, 1)
            self.client.run(extra.slots[0].session, 1)
            ok = bool((extra.read_output(0, 1) == np.float32(1.5)).all())
        return {"churn_s": time.perf_counter() - t0, "correct": ok}

    def check_upload(self) -> dict[str, Any]:
        rng = np.random.default_rng(11)
        ok = True
        for slot in range(3):
            frame = rng.standard_normal(SHAPE, dtype=np.float32)
            v = self.values[slot] + 1
            self.r.upload(slot, frame, v)
            self.client.run(self.r.slots[slot].session, v)
            self.values[slot] = v
            ok = ok and bool((self.r.read_output(slot, v) == frame + np.float32(1)).all())
        return {"correct": ok}

    def close(self) -> None:
        if self.sync_thread is not None:  # it uses the client
            self.sync_thread.join(60)
        self.r.close()
        self.client.close()
        self.dev.close()


def main() -> None:
    socket_path, model, uuid_hex = sys.argv[1], sys.argv[2], sys.argv[3]
    r = Renderer(socket_path, model, bytes.fromhex(uuid_hex))
    print(json.dumps(r.ready()), flush=True)
    for line in sys.stdin:
        cmd = json.loads(line)
        name = cmd.pop("cmd")
        if name == "quit":
            r.close()
            print(json.dumps({"bye": True}), flush=True)
            return
        if name == "status":
            out: dict[str, Any] = {"done_values": r.done_values()}
        else:
            out = getattr(r, name)(**cmd)
        print(json.dumps(out), flush=True)


if __name__ == "__main__":
    main()
