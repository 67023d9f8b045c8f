"""onnxruntime's session options, chosen here for every session the service loads (and the
bench's in-process floor, which loads models as the service does), never hand-set by the user
unless a model's ``config.json`` asks (``intra_op_threads``).

- The intra-op pool is sized from the CPUs this process may use (its affinity: a container's
  or ``taskset``'s share, ``fenceline bench --cpus``), not from the machine's cores, which is
  what onnxruntime counts: a pool larger than the CPUs it may run on only makes its threads
  take turns.
- Its threads never spin between runs: spinning threads take the cores that renderers and
  fence waiters need, and with several renderers cost more than they save (docs/benchmarks.md,
  "Scaling").
- A CUDA session's own onnxruntime session (one per renderer session, its nodes on the GPU)
  gets a CPU pool of one thread, the caller: a machine-sized pool for each would be threads
  by the hundred with nothing to do.
"""

from __future__ import annotations

import os

import onnxruntime as ort


def usable_cpus() -> int:
    """The CPUs this process may run on."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # Windows and macOS have no sched_getaffinity
        return os.cpu_count() or 1


def intra_op_threads(configured: int = 0) -> int:
    """The threads of one run on the CPU: the model's own setting, else one per usable CPU."""
    return configured if configured > 0 else usable_cpus()


def cpu_session_options(configured_threads: int = 0) -> ort.SessionOptions:
    so = ort.SessionOptions()
    so.intra_op_num_threads = intra_op_threads(configured_threads)
    so.add_session_config_entry("session.intra_op.allow_spinning", "0")
    return so


def cuda_session_options() -> ort.SessionOptions:
    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    so.add_session_config_entry("session.intra_op.allow_spinning", "0")
    return so
