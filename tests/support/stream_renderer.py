"""A renderer process for the streaming tests: it writes frames into shared memory, signals the
input fence and waits on the output fence, with no message per frame.

    python stream_renderer.py SCENARIO --socket PATH [options]

Results go to stdout as one JSON object per line; outputs go to ``--out`` (.npz). Interactive
scenarios read commands from stdin, one per line. Frame n's input is ``frame(seed, n)``, so the
test can recompute it.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from typing import Any

import numpy as np

from fenceline.client import Fence, IpcClient, SharedFrame, View

SHAPE = [1, 3, 64, 64]
NBYTES = int(np.prod(SHAPE)) * 4


def frame(seed: int, n: int) -> np.ndarray:
    return np.random.default_rng([seed, n]).standard_normal(SHAPE, dtype=np.float32)


def emit(obj: dict[str, Any]) -> None:
    sys.stdout.write(json.dumps(obj) + "\n")
    sys.stdout.flush()


def command() -> str:
    return sys.stdin.readline().strip()


class Renderer:
    """One frame buffer (input at 0, output after it) and two fences."""

    def __init__(self, named: bool, spin_us: int) -> None:
        self.frame = SharedFrame(2 * NBYTES, named=named)
        self.fin = Fence(named=named, max_spin_ns=spin_us * 1000)
        self.fout = Fence(named=named, max_spin_ns=spin_us * 1000)
        self.x = self.frame.array(np.float32, SHAPE, 0)
        self.y = self.frame.array(np.float32, SHAPE, NBYTES)

    def connect(self, client: IpcClient, model: str, policy: str, spin_us: int | None,
                start: bool = True) -> str:
        mem = client.import_memory(self.frame)
        fin, fout = client.import_fence(self.fin), client.import_fence(self.fout)
        self.ids = {"memory": mem, "fences": [fin, fout]}
        info = client.create_session(
            model, {"x": View(mem, "FP32", SHAPE, 0)}, {"y": View(mem, "FP32", SHAPE, NBYTES)},
            fin, fout, mode="streaming", policy=policy, spin_us=spin_us, start=start,
        )
        return str(info["id"])

    def release(self, client: IpcClient) -> None:
        client.release_memory(self.ids["memory"])
        for f in self.ids["fences"]:
            client.release_fence(f)

    def step(self, seed: int, n: int, x: np.ndarray | None = None) -> dict[str, Any]:
        self.x[...] = frame(seed, n) if x is None else x
        self.fin.signal(n)
        ok = self.fout.wait(n, 10.0)
        return {"n": n, "ok": ok, "value": self.fout.value, "status": self.fout.status}

    def close(self) -> None:
        for o in (self.frame, self.fin, self.fout):
            o.close()


def sequence(args: argparse.Namespace, client: IpcClient, r: Renderer) -> None:
    sid = r.connect(client, args.model, args.policy, args.spin_us)
    outputs, steps = [], []
    for n in range(1, args.frames + 1):
        steps.append(r.step(args.seed, n))
        outputs.append(r.y.copy())
    np.savez(args.out, outputs=np.stack(outputs))
    emit({"steps": steps, "final": client.stop_session(sid)})


def skip(args: argparse.Namespace, client: IpcClient, r: Renderer) -> None:
    """Frame 1 in lockstep; then, paused, frames 2..N are written and signalled one after the
    other; on start the session finds the fence at N."""
    sid = r.connect(client, args.model, args.policy, args.spin_us)
    first = r.step(args.seed, 1)
    paused = client.pause_session(sid)
    for n in range(2, args.frames + 1):
        r.x[...] = frame(args.seed, n)
        r.fin.signal(n)
    time.sleep(0.05)
    untouched = r.fout.value
    client.start_session(sid)
    ok = r.fout.wait(args.frames, 10.0)
    np.savez(args.out, outputs=r.y.copy()[None])
    emit({
        "first": first, "paused_state": paused["stream"]["state"], "value_while_paused": untouched,
        "ok": ok, "value": r.fout.value, "final": client.stop_session(sid),
    })


def error(args: argparse.Namespace, client: IpcClient, r: Renderer) -> None:
    """Frame ``--bad`` carries a NaN, which the nan_guard model refuses."""
    sid = r.connect(client, args.model, args.policy, args.spin_us)
    steps, outputs = [], []
    for n in range(1, args.frames + 1):
        x = frame(args.seed, n)
        if n == args.bad:
            x[0, 1, 2, 3] = np.nan
        steps.append(r.step(args.seed, n, x))
        outputs.append(r.y.copy())
    np.savez(args.out, outputs=np.stack(outputs))
    emit({"steps": steps, "final": client.stop_session(sid)})


def statuses(args: argparse.Namespace, client: IpcClient, r: Renderer) -> None:
    """The renderer reports a failed frame through its input fence, then abandons it."""
    sid = r.connect(client, args.model, args.policy, args.spin_us)
    steps = [r.step(args.seed, 1)]
    r.fin.set_status(2)  # frame 2 failed on the renderer's side
    steps.append(r.step(args.seed, 2))
    r.fin.set_status(0)
    steps.append(r.step(args.seed, 3))
    r.fin.set_status(1)  # the renderer gives up its input fence
    ok = r.fout.wait(4, 5.0)
    abandoned = {"ok": ok, "value": r.fout.value, "status": r.fout.status,
                 "session": client.describe("session", sid)["stream"]}
    r.fin.set_status(0)
    client.start_session(sid)
    steps.append(r.step(args.seed, 4))
    emit({"steps": steps, "abandoned": abandoned, "final": client.stop_session(sid)})


def progress(args: argparse.Namespace, client: IpcClient, r: Renderer) -> None:
    """Waits for "go", then streams frames and records when each came back."""
    sid = r.connect(client, args.model, args.policy, args.spin_us)
    emit({"ready": True})
    command()
    done, wrong = [], 0
    for n in range(1, args.frames + 1):
        x = frame(args.seed, n)
        s = r.step(args.seed, n, x)
        if not s["ok"] or not np.array_equal(r.y, x + np.float32(1)):
            wrong += 1
        done.append(time.clock_gettime(time.CLOCK_MONOTONIC))
    emit({"done": done, "wrong": wrong, "final": client.stop_session(sid)})


def hold(args: argparse.Namespace, client: IpcClient, r: Renderer) -> None:
    """Streams a few frames, then obeys stdin: "stop" (stop, release the imports) or "exit"."""
    sid = r.connect(client, args.model, args.policy, args.spin_us)
    steps = [r.step(args.seed, n) for n in range(1, args.frames + 1)]
    emit({"streaming": True, "steps": steps, "session": sid})
    while (cmd := command()) not in ("exit", ""):
        if cmd == "stop":
            final = client.stop_session(sid)
            r.release(client)
            emit({"stopped": final})


def named(args: argparse.Namespace, r: Renderer) -> None:
    """No IPC at all: the test imports the named objects over HTTP and creates the session;
    this process only writes frames, signals and waits."""
    emit({"frame": r.frame.name, "input_fence": r.fin.name, "output_fence": r.fout.name,
          "offset": NBYTES})
    assert command() == "go"
    steps, outputs = [], []
    for n in range(1, args.frames + 1):
        steps.append(r.step(args.seed, n))
        outputs.append(r.y.copy())
    np.savez(args.out, outputs=np.stack(outputs))
    emit({"steps": steps})
    command()


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("scenario", choices=["sequence", "skip", "error", "statuses", "progress",
                                        "hold", "named"])
    p.add_argument("--socket")
    p.add_argument("--model", default="add_64x64")
    p.add_argument("--policy", default="latest")
    p.add_argument("--frames", type=int, default=8)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--bad", type=int, default=0)
    p.add_argument("--spin-us", type=int, default=None)
    p.add_argument("--out", default="/dev/null")
    args = p.parse_args()
    spin_us = 50 if args.spin_us is None else args.spin_us
    r = Renderer(named=args.scenario == "named", spin_us=spin_us)
    try:
        if args.scenario == "named":
            named(args, r)
            return 0
        with IpcClient(args.socket, name=f"stream_renderer {args.scenario}") as client:
            globals()[args.scenario](args, client, r)
    finally:
        r.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
