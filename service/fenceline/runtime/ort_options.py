"""onnxruntime's session options, chosen here for every session the service loads (and the
bench's in-process floor, which loads models as the service does), never hand-set by the user
unless a model's ``config.json`` asks (``intra_op_threads``).

- The intra-op pool is sized from the CPUs this process may use (its affinity: a container's
  or ``taskset``'s share, ``fenceline bench --cpus``), not from the machine's cores, which is
  what onnxruntime counts: a pool larger than the CPUs it may run on only makes its threads
  take turns.
- Its threads never spin between runs: spinning threads take the cores that renderers and
  fence waiters need, and with several renderers cost more than they save (16 cores, 720p, 8
  renderers: 0.39 of the floor's frames/s with spinning pools against 0.72 without; docs/
  benchmarks.md, "Where the time goes").
- In the service, while several renderer sessions run on the CPU of a machine of four CPUs or
  more (``pool_yields``), its threads run at idle priority (Linux's SCHED_IDLE): they take only
  the cores that nothing else wants, and a renderer or a connection thread that wakes up runs at
  once, on a core the pool is using if need be, instead of waiting behind the pool's threads.
  The thread that asked for a run keeps its priority and does its own share of every run, so a
  run always makes progress. Every RUN reply to a client that asked for the reply's flags says
  so meanwhile (``cpus_shared``, docs/ipc.md), and the Python client then neither naps nor
  stays runnable: a renderer's spin would take a core from the pool. With one session the pool
  keeps normal priority (idle, it ran a lone renderer's frames slower in three 16-core leases
  of four: IPC over the floor at 720p 0.803 / 0.787 / 0.81 / 0.861 against 0.846 / 0.750 /
  0.90 / 1.007, while 8 renderers rose from 0.668-0.801 to 0.810-0.920); on two CPUs its one
  thread would never find a free core.
- One thread when the CPUs are full: once the service has as many host sessions as usable CPUs,
  it loads the models of those sessions whose threads it sizes a second time, at one thread
  (``single_thread_from``, ``Model.load_single``), and binds every host session to it beside
  the pool's session (``HostSession.use_single_thread``). A host session's run
  that starts while the service's model runs on the CPU in flight, itself included, are as many
  as the usable CPUs takes that one: every core has a run already, and a pool's threads would
  only take turns with the other runs' (on 2 CPUs, 8 renderers at 720p: 1,867-1,912 us of CPU
  a frame against 2,104-2,366 us with the pool). The run engine counts the
  runs in flight in one place (``CpuRun``, native/importer/engine/cpu_runs.h).
- Large frames take turns: a run whose frame (its session's inputs and outputs) is at least a
  quarter of the last-level cache, and which starts while the runs in flight fill the CPUs,
  waits for the one turn of the large frames instead, and then runs on every core (the pool).
  After its run the turn is kept for the same session's next frame for up to 300 us (the
  renderer reads its reply and sends its next RUN: 30-60 us on two CPUs; the native run path
  looks for that RUN meanwhile with its core given to whoever wants it), until the session has
  held it 4 ms; then the runs that waited go, in the order they came. One frame at a time stays
  in the cache and is read from it again by the next run, where two or more frames at once
  would push each other out (on 2 CPUs, 32 MB of L3, 8 renderers at 720p: 2,222-2,497 frames/s
  against 1,378-1,587 without; the price, a renderer's p99 frame 33 ms against 16 ms, as it
  waits for the others' turns; docs/benchmarks.md, "Where the time goes"). Of every
  64 turns kept, if fewer than half were taken back (renderers that pace their frames, or too
  slow to answer on a loaded machine), the turns are off for a second: one run at a time on
  cold frames is slower than a run per core. Small frames never take turns, nor any run where
  the cache's size is unknown (it is read from Linux's sysfs; Windows: not read, no turns).
  ``_native.large_frame_turns()``, the status page's ``large_frame_turns``, counts them.
- Quiet CUDA requests: onnxruntime (1.31) first looks for a plugin EP device registered for
  CUDAExecutionProvider; the wheel registers none (its CUDA provider is loaded through the
  provider bridge), so every CUDA session's creation printed a warning on onnxruntime's default
  logger, "No registered plugin EP device found for 'CUDAExecutionProvider' with device_id=0",
  before it built the CUDA provider the classic way: a probe that found nothing, not a fault.
  ``cuda_inference_session`` holds that logger at ERROR while it asks (the session's own logger
  stays at WARNING), and if onnxruntime gave no CUDA provider all the same, asks again with the
  default logger at WARNING, so that onnxruntime's own warnings say why.
- A CUDA session's own onnxruntime session (one per renderer session, its nodes on the GPU)
  gets a CPU pool of one thread, the caller: a machine-sized pool for each would be threads
  by the hundred with nothing to do.
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
from collections.abc import Iterator

import onnxruntime as ort

log = logging.getLogger("fenceline.runtime")
_loading = threading.Lock()  # one session made at a time where its threads are told apart
ORT_WARNING, ORT_ERROR = 2, 3  # onnxruntime's log severities
_quiet_lock = threading.Lock()
_quiet_requests = 0  # CUDA requests under way with the default logger at ERROR


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


def single_thread_from(configured_threads: int, provider: str) -> int:
    """The service's model runs on the CPU in flight, a run included, from which a run of this
    model takes its one-thread session: one per usable CPU. 0 (never: the model has no such
    session) where its threads are the model's own setting, it runs on the GPU, or its pool is
    one thread anyway."""
    if configured_threads > 0 or provider != "CPUExecutionProvider":
        return 0
    cpus = usable_cpus()
    return cpus if cpus > 1 else 0


def cuda_session_options() -> ort.SessionOptions:
    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    so.add_session_config_entry("session.intra_op.allow_spinning", "0")
    return so


YIELD_SESSIONS = 2  # renderer sessions on the CPU from which the pools yield ...
YIELD_CPUS = 4  # ... on a machine with at least this many usable CPUs


@contextlib.contextmanager
def _default_log_at_error() -> Iterator[None]:
    """onnxruntime's default logger at ERROR while any caller is inside; WARNING (its own
    default) again once the last one leaves."""
    global _quiet_requests
    with _quiet_lock:
        _quiet_requests += 1
        if _quiet_requests == 1:
            ort.set_default_logger_severity(ORT_ERROR)
    try:
        yield
    finally:
        with _quiet_lock:
            _quiet_requests -= 1
            if _quiet_requests == 0:
                ort.set_default_logger_severity(ORT_WARNING)


def cuda_inference_session(
    path: str, so: ort.SessionOptions, provider: str | tuple[str, dict[str, str]]
) -> ort.InferenceSession:
    """An onnxruntime session asking for the CUDA provider, without the plugin probe's warning
    (see the module's docs). The caller checks that CUDA was given (``get_providers``)."""
    so.log_severity_level = ORT_WARNING  # the session's own warnings still show
    with _default_log_at_error():
        session = ort.InferenceSession(path, so, providers=[provider])
    if session.get_providers()[:1] != ["CUDAExecutionProvider"]:
        # It fell back to the CPU: asked again with the default logger's warnings on, so that
        # onnxruntime's log says why (a CUDA or cuDNN library it could not load).
        session = ort.InferenceSession(path, so, providers=[provider])
    return session


def pool_yields(cpu_sessions: int) -> bool:
    """Whether the pools' threads run at idle priority with this many sessions on the CPU."""
    return (cpu_sessions >= YIELD_SESSIONS and usable_cpus() >= YIELD_CPUS
            and hasattr(os, "SCHED_IDLE"))


def _threads() -> set[int]:
    return {int(t) for t in os.listdir("/proc/self/task")}


@contextlib.contextmanager
def pool_threads(pool_size: int) -> Iterator[list[int]]:
    """The thread ids of the intra-op pool that onnxruntime starts for a session made inside
    this block, filled in when the block ends: the threads that appeared meanwhile and that
    Python did not start. When their number is not the pool's (``pool_size`` less the caller),
    another library started threads at the same moment and the list stays empty: nothing is
    then ever changed. Empty too where threads have no scheduling policy to change (Windows,
    macOS). Keep the list no longer than the session: its threads end with it."""
    tids: list[int] = []
    if not hasattr(os, "SCHED_IDLE") or pool_size < 2:
        yield tids
        return
    with _loading:
        before = _threads()
        yield tids
        started = _threads() - before - {t.native_id for t in threading.enumerate()}
    if len(started) == pool_size - 1:
        tids.extend(sorted(started))
    else:
        log.info("onnxruntime's pool threads keep their priority: %d threads started beside "
                 "the session's %d", len(started), pool_size - 1)


def set_idle(tids: list[int], idle: bool) -> None:
    """Idle (SCHED_IDLE) or normal (SCHED_OTHER) priority for the threads of ``pool_threads``."""
    policy = os.SCHED_IDLE if idle else os.SCHED_OTHER
    for tid in tids:
        with contextlib.suppress(OSError):
            os.sched_setscheduler(tid, policy, os.sched_param(0))
