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


SINGLE_PROBE = """
import os, sys
os.sched_setaffinity(0, set(sorted(os.sched_getaffinity(0))[:int(sys.argv[2])]))
from pathlib import Path
from fenceline.runtime.models import Model, ModelSettings
before = len(os.listdir("/proc/self/task"))
m = Model("add_64x64", "1", Path(sys.argv[1]), ModelSettings(intra_op_threads=int(sys.argv[4])))
m.load(service=sys.argv[3] == "service")
loaded = m.single is not None
m.load_single()
print(len(os.listdir("/proc/self/task")) - before, loaded, m.single is not None, m.single_from)
"""


def single_session(model: Path, cpus: int, how: str, threads: int = 0) -> list[str]:
    out = subprocess.run([sys.executable, "-c", SINGLE_PROBE, str(model), str(cpus), how,
                          str(threads)], capture_output=True, text=True, timeout=120, check=True)
    return out.stdout.split()[-4:]


def test_a_one_thread_session_only_beside_a_pool_the_service_sized_and_when_asked(
    model_repo: Path,
) -> None:
    # (threads started, one-thread session after the load, after load_single, single_from)
    model = model_repo / "add_64x64" / "1" / "model.onnx"
    assert single_session(model, 1, "service") == ["0", "False", "False", "0"]  # no pool
    if len(os.sched_getaffinity(0)) < 2:
        pytest.skip("needs two CPUs")
    # One pool thread; the one-thread session only when asked for, starting no thread, and
    # taken from 2 runs in flight.
    assert single_session(model, 2, "service") == ["1", "False", "True", "2"]
    assert single_session(model, 2, "floor") == ["1", "False", "False", "0"]  # a renderer's
    assert single_session(model, 2, "service", threads=2) == ["1", "False", "False", "0"]
    assert ort_options.single_thread_from(0, "CUDAExecutionProvider") == 0


def test_a_model_setting_wins_over_the_cpu_count() -> None:
    assert ort_options.intra_op_threads(3) == 3
    assert ort_options.intra_op_threads(0) == len(os.sched_getaffinity(0))


def test_pool_threads_never_spin_between_runs() -> None:
    for so in (ort_options.cpu_session_options(), ort_options.cuda_session_options()):
        assert so.get_session_config_entry("session.intra_op.allow_spinning") == "0"
    assert ort_options.cuda_session_options().intra_op_num_threads == 1



# What a session's pool threads run at: (pool threads noted, idle, normal) after the load, then
# after set_idle(True) and set_idle(False); "floor" loads without noting its pool; "mismatch"
# notes a pool of 2 where 3 are expected.
POLICY_PROBE = """
import os, sys
from pathlib import Path
import onnxruntime as ort
from fenceline.runtime import ort_options
from fenceline.runtime.models import Model
before = set(os.listdir("/proc/self/task"))
if sys.argv[2] == "mismatch":
    with ort_options.pool_threads(3) as pool:
        s = ort.InferenceSession(sys.argv[1], ort_options.cpu_session_options(2))
else:
    m = Model("add_64x64", "1", Path(sys.argv[1]))  # kept: its pool lives as long as it does
    m.load(service=sys.argv[2] == "service")
    pool = m.pool
started = set(os.listdir("/proc/self/task")) - before
def policies():
    got = [os.sched_getscheduler(int(t)) for t in started]
    return [len(pool), got.count(os.SCHED_IDLE), got.count(os.SCHED_OTHER)]
out = policies()
ort_options.set_idle(pool, True)
out += policies()
ort_options.set_idle(pool, False)
print(*out, *policies(), os.sched_getscheduler(0))
"""


def pool_policies(model: Path, how: str) -> list[int]:
    out = subprocess.run([sys.executable, "-c", POLICY_PROBE, str(model), how],
                         capture_output=True, text=True, timeout=120, check=True)
    return [int(x) for x in out.stdout.split()[-10:]]


@pytest.mark.skipif(not hasattr(os, "SCHED_IDLE"), reason="SCHED_IDLE is Linux's")
def test_the_services_pool_threads_are_noted_and_move_between_idle_and_normal(
    model_repo: Path,
) -> None:
    cpus = len(os.sched_getaffinity(0))
    if cpus < 2:
        pytest.skip("needs two CPUs")
    model = model_repo / "add_64x64" / "1" / "model.onnx"
    n = cpus - 1
    # Noted, normal at first, idle, normal again; the caller's thread never changes.
    assert pool_policies(model, "service") == [n, 0, n, n, n, 0, n, 0, n, os.SCHED_OTHER]
    # A floor's pool is not noted, so nothing changes it.
    assert pool_policies(model, "floor") == [0, 0, n, 0, 0, n, 0, 0, n, os.SCHED_OTHER]
    # Threads it cannot tell apart are never noted.
    assert pool_policies(model, "mismatch") == [0, 0, 1, 0, 0, 1, 0, 0, 1, os.SCHED_OTHER]


def test_the_pools_yield_with_several_sessions_on_four_cpus_or_more(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    linux = hasattr(os, "SCHED_IDLE")
    monkeypatch.setattr(ort_options, "usable_cpus", lambda: 16)
    assert [ort_options.pool_yields(n) for n in (0, 1, 2, 8)] == [False, False, linux, linux]
    monkeypatch.setattr(ort_options, "usable_cpus", lambda: 4)
    assert ort_options.pool_yields(2) == linux
    monkeypatch.setattr(ort_options, "usable_cpus", lambda: 2)  # one pool thread: never
    assert [ort_options.pool_yields(n) for n in (1, 2, 8)] == [False, False, False]
