"""onnxruntime's pools as the service sizes them (runtime/ort_options.py): from the CPUs the
process may use, which onnxruntime itself does not look at."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from fenceline.runtime import ort_options

PROBE = """
import os, sys
os.sched_setaffinity(0, set(sorted(os.sched_getaffinity(0))[:int(sys.argv[2])]))
from pathlib import Path
from fenceline.runtime.models import Model
before = len(os.listdir("/proc/self/task"))
m = Model("add_64x64", "1", Path(sys.argv[1]))
m.load()
print(len(os.listdir("/proc/self/task")) - before)
"""


def extra_threads(model: Path, cpus: int) -> int:
    out = subprocess.run([sys.executable, "-c", PROBE, str(model), str(cpus)],
                         capture_output=True, text=True, timeout=120, check=True)
    return int(out.stdout.split()[-1])


def test_the_pool_has_one_thread_per_usable_cpu(model_repo: Path) -> None:
    model = model_repo / "add_64x64" / "1" / "model.onnx"
    assert extra_threads(model, 1) == 0  # the caller alone: no pool thread
    if len(os.sched_getaffinity(0)) < 2:
        pytest.skip("needs two CPUs")
    assert extra_threads(model, 2) == 1  # the caller and one pool thread


def test_a_model_setting_wins_over_the_cpu_count() -> None:
    assert ort_options.intra_op_threads(3) == 3
    assert ort_options.intra_op_threads(0) == len(os.sched_getaffinity(0))


def test_pool_threads_never_spin_between_runs() -> None:
    for so in (ort_options.cpu_session_options(), ort_options.cuda_session_options()):
        assert so.get_session_config_entry("session.intra_op.allow_spinning") == "0"
    assert ort_options.cuda_session_options().intra_op_num_threads == 1
