"""The seed's API beside fenceline (``fenceline bench --gpu --peers``): onnxruntime's own interop
API, ``OrtInteropApi``, whose one full implementation is the NvTensorRtRtx plugin execution
provider (the package ``onnxruntime-ep-nv-tensorrt-rtx-cu13``).

Before an in-process OrtInteropApi program can be timed, the plugin must run on the machine's
GPU at all: it targets RTX GPUs. :func:`probe` tries exactly what a user of the plugin does
(register the library, list its devices, make a session on the bench's model, run it once and
check the result), in a child process so that a plugin that aborts cannot take the bench with
it, and says what happened in one line: the exact error where a step fails.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

PACKAGE = "onnxruntime-ep-nv-tensorrt-rtx-cu13"
EP_NAME = "NvTensorRTRTXExecutionProvider"
# A plugin that builds a TensorRT engine takes seconds; one that hangs must not hold the bench.
TIMEOUT_S = 300


def _child(model: str, shape: list[int], fill: float) -> dict[str, Any]:
    """Runs in the child: each step's outcome, the first failure's exact text."""
    import numpy as np
    import onnxruntime as ort

    out: dict[str, Any] = {"onnxruntime": ort.__version__}
    try:
        import onnxruntime_ep_nv_tensorrt_rtx as plugin
    except ImportError as e:
        return {**out, "step": "import", "error": f"{type(e).__name__}: {e}"}
    out["plugin"] = getattr(plugin, "__version__", "?")
    step = "register_execution_provider_library"
    try:
        ort.register_execution_provider_library(plugin.get_ep_name(), plugin.get_library_path())
        step = "get_ep_devices"
        devices = [d for d in ort.get_ep_devices() if d.ep_name == plugin.get_ep_name()]
        out["devices"] = [str(getattr(d.device, "metadata", {}) or d.device.vendor)
                          for d in devices]
        if not devices:
            listed = sorted({d.ep_name for d in ort.get_ep_devices()})
            return {**out, "step": step,
                    "error": f"the plugin lists no device here (devices listed: {listed})"}
        step = "InferenceSession"
        so = ort.SessionOptions()
        # A node the plugin cannot take must fail the session, not run on the CPU unnoticed.
        so.add_session_config_entry("session.disable_cpu_ep_fallback", "1")
        so.add_provider_for_devices(devices, {})
        t0 = time.perf_counter()
        sess = ort.InferenceSession(model, sess_options=so)
        out["session_s"] = round(time.perf_counter() - t0, 3)
        out["providers"] = sess.get_providers()
        step = "run"
        x = np.full(shape, fill, np.float32)
        name = sess.get_inputs()[0].name
        (y,) = sess.run(None, {name: x})
        if not np.array_equal(y, x + 1):
            return {**out, "step": step, "error": "the plugin's output differs from x + 1"}
        samples = []
        for _ in range(50):
            t0 = time.perf_counter()
            sess.run(None, {name: x})
            samples.append(time.perf_counter() - t0)
        out["host_run_p50_us"] = round(sorted(samples)[len(samples) // 2] * 1e6, 1)
    except Exception as e:  # the row reports the plugin's own words, whatever they are
        return {**out, "step": step, "error": f"{type(e).__name__}: {e}".strip()}
    return {**out, "step": "done", "error": None}


def probe(model: Path, shape: list[int], fill: float) -> tuple[str, dict[str, Any]]:
    """One line for the bench's seed row, and what the child reported."""
    code = ("import json, sys; from fenceline.bench.seed_ep import _child; "
            "print(json.dumps(_child(sys.argv[1], json.loads(sys.argv[2]), float(sys.argv[3]))))")
    try:
        done = subprocess.run(
            [sys.executable, "-c", code, str(model), json.dumps(shape), str(fill)],
            capture_output=True, text=True, timeout=TIMEOUT_S,
        )
    except subprocess.TimeoutExpired:
        return f"not measured: the plugin did not finish in {TIMEOUT_S} s", {}
    lines = [ln for ln in done.stdout.splitlines() if ln.startswith("{")]
    if done.returncode != 0 or not lines:
        tail = " | ".join((done.stderr or done.stdout).strip().splitlines()[-3:])
        return f"not measured: the probe ended with status {done.returncode}: {tail}", {}
    got = json.loads(lines[-1])
    if got["step"] == "import":
        return (f"not measured: the plugin is not installed (pip install {PACKAGE})", got)
    if got["error"]:
        return (f"not measured: {EP_NAME} {got.get('plugin', '?')} on onnxruntime "
                f"{got['onnxruntime']} fails at {got['step']}: {got['error']}", got)
    return (f"the plugin runs here ({got['providers'][0]}, session {got['session_s']} s, host-array "
            f"run p50 {got['host_run_p50_us']} us); the in-process OrtInteropApi round trip is not "
            "measured: fenceline has no OrtInteropApi peer program", got)
