"""
fenceline's native importer: host memory, host timeline fences, IPC receive.
"""
from __future__ import annotations
import collections.abc
import numpy
import typing
__all__: list[str] = ['Acceptor', 'ClientSocket', 'CudaDevice', 'CudaGraph', 'CudaMemory', 'CudaSemaphore', 'CudaStream', 'CudaTensorView', 'FENCE_PAGE_SIZE', 'FENCE_WAKE_SUFFIX', 'HostFence', 'HostMemory', 'PLATFORM', 'PeerProcess', 'RUN_PAGE_SIZE', 'RUN_PAGE_SLOTS', 'ReceiveSpin', 'ReplyNap', 'RunMetrics', 'RunPage', 'RunSeries', 'RunTable', 'SPIN_OUTLIER', 'SPIN_SLACK_NS', 'SPIN_WINDOWS_PER_PERIOD', 'SPIN_WINDOW_SHIFT', 'SessionCounts', 'SessionRunner', 'Shutdown', 'SpinGate', 'TRACE_EVENT_FORMAT', 'TRACE_MOMENTS', 'TensorView', 'WAIT_ABANDONED', 'WAIT_ERRORED', 'WAIT_REACHED', 'WAIT_TIMED_OUT', 'WIRE_FEATURE_REPLY_FLAGS', 'WIRE_HEADER_SIZE', 'WIRE_MAGIC', 'WIRE_MAX_FDS', 'WIRE_MAX_FRAME', 'WIRE_REPLY_BIT', 'WIRE_REPLY_CPUS_SHARED', 'WIRE_RUN_REPLY_SIZE', 'WIRE_RUN_SIZE', 'WIRE_TIMEOUT_DEFAULT', 'WIRE_VERSION', 'can_import_fence', 'can_import_memory', 'cpus_shared', 'cuda_available', 'cuda_devices', 'cuda_unavailable_reason', 'd3d12_capability', 'd3d12_capability_for', 'd3d12_close_handle', 'd3d12_fence_descriptor', 'd3d12_luid_from_bytes', 'd3d12_luid_text', 'd3d12_memory_descriptor', 'd3d12_select_device', 'd3d12_shared_name', 'error_codes', 'large_frame_turns', 'mapping_stats', 'nt_check_object_type', 'nt_handle_value', 'nt_object_type', 'purge_messages', 'recv_message', 'send_message', 'set_cpus_shared', 'trace_filled', 'trace_mark', 'trace_on', 'trace_start', 'trace_stop', 'wire_kinds', 'wire_offsets']
class HostMemory:
    @staticmethod
    def create_memfd(name: str, size: typing.SupportsInt | typing.SupportsIndex) -> HostMemory:
        ...
    @staticmethod
    def create_shm(name: str, size: typing.SupportsInt | typing.SupportsIndex) -> HostMemory:
        ...
    @staticmethod
    def from_fd(fd: typing.SupportsInt | typing.SupportsIndex, offset: typing.SupportsInt | typing.SupportsIndex = 0, size: typing.SupportsInt | typing.SupportsIndex = 0, writable: bool = True) -> HostMemory:
        """
        Takes ownership of fd, also when it raises.
        """
    @staticmethod
    def from_handle(handle: typing.SupportsInt | typing.SupportsIndex, offset: typing.SupportsInt | typing.SupportsIndex = 0, size: typing.SupportsInt | typing.SupportsIndex = 0, writable: bool = True) -> HostMemory:
        """
        Windows: maps a section handle duplicated into this process; takes ownership of it, also when it raises.
        """
    @staticmethod
    def open_shm(name: str, offset: typing.SupportsInt | typing.SupportsIndex = 0, size: typing.SupportsInt | typing.SupportsIndex = 0, writable: bool = True) -> HostMemory:
        ...
    def array(self, dtype: numpy.dtype[typing.Any], shape: collections.abc.Sequence[typing.SupportsInt | typing.SupportsIndex] = [], offset: typing.SupportsInt | typing.SupportsIndex = 0) -> numpy.ndarray:
        """
        A numpy array over the mapping; it keeps the mapping alive.
        """
    def check(self) -> None:
        """
        Raises DeviceLost when the mapping was lost or the object was truncated below it (an access would fault).
        """
    def close(self) -> None:
        ...
    def unlink(self) -> None:
        ...
    @property
    def address(self) -> int:
        ...
    @property
    def closed(self) -> bool:
        ...
    @property
    def fd(self) -> int:
        ...
    @property
    def handle(self) -> int:
        """
        The OS handle: the fd on POSIX, the section HANDLE on Windows.
        """
    @property
    def lost(self) -> bool:
        """
        True once an access faulted because the object shrank: the range holds zero pages now, for good.
        """
    @property
    def name(self) -> str:
        ...
    @property
    def sealed(self) -> bool:
        """
        True when the object cannot shrink (memfd with F_SEAL_SHRINK).
        """
    @property
    def size(self) -> int:
        ...
    @property
    def writable(self) -> bool:
        ...
class TensorView:
    def __init__(self, memory: HostMemory, offset: typing.SupportsInt | typing.SupportsIndex, element_size: typing.SupportsInt | typing.SupportsIndex, shape: collections.abc.Sequence[typing.SupportsInt | typing.SupportsIndex], need_write: bool = False) -> None:
        ...
    def array(self, dtype: numpy.dtype[typing.Any]) -> numpy.ndarray:
        ...
    @property
    def address(self) -> int:
        ...
    @property
    def lost(self) -> bool:
        """
        True once the memory under this view shrank (see HostMemory.lost); still answers after the import was closed, since the view keeps the mapping.
        """
    @property
    def nbytes(self) -> int:
        ...
    @property
    def offset(self) -> int:
        ...
    @property
    def shape(self) -> list[int]:
        ...
class HostFence:
    @staticmethod
    def create_memfd(name: str) -> HostFence:
        ...
    @staticmethod
    def create_shm(name: str) -> HostFence:
        ...
    @staticmethod
    def from_fd(fd: typing.SupportsInt | typing.SupportsIndex) -> HostFence:
        """
        Takes ownership of fd, also when it raises.
        """
    @staticmethod
    def from_handles(section: typing.SupportsInt | typing.SupportsIndex, wake: typing.SupportsInt | typing.SupportsIndex) -> HostFence:
        """
        Windows: a fence page's section and wake semaphore handles, duplicated into this process; takes ownership of both, also when it raises.
        """
    @staticmethod
    def open_shm(name: str) -> HostFence:
        ...
    def close(self) -> None:
        ...
    def set_status(self, status: typing.SupportsInt | typing.SupportsIndex) -> None:
        ...
    def signal(self, value: typing.SupportsInt | typing.SupportsIndex) -> None:
        ...
    def unlink(self) -> None:
        ...
    def wait(self, value: typing.SupportsInt | typing.SupportsIndex, timeout_ns: typing.SupportsInt | typing.SupportsIndex = -1, spin_ns: typing.SupportsInt | typing.SupportsIndex = 0) -> int:
        """
        Waits with the GIL released. Returns one of the WAIT_* constants.
        """
    @property
    def closed(self) -> bool:
        ...
    @property
    def fd(self) -> int:
        ...
    @property
    def handle(self) -> int:
        """
        The page's OS handle: the fd on POSIX, the section on Windows.
        """
    @property
    def name(self) -> str:
        ...
    @property
    def status(self) -> int:
        ...
    @property
    def value(self) -> int:
        ...
    @property
    def wake_handle(self) -> int:
        """
        Windows: the wake semaphore's handle; -1 on POSIX.
        """
class PeerProcess:
    """
    The process that connected to a Unix socket, watched through a pidfd (SO_PEERPIDFD, else pidfd_open of the SO_PEERCRED pid); liveness says how, or why only the socket's hangup is watched. Owns the pidfd: close() (safe twice) closes it.
    """
    def __init__(self, sock: typing.SupportsInt | typing.SupportsIndex) -> None:
        ...
    def close(self) -> None:
        ...
    def exited(self) -> bool:
        """
        True once the process has exited (never waits).
        """
    @property
    def liveness(self) -> str:
        ...
    @property
    def pid(self) -> int:
        ...
    @property
    def pidfd(self) -> int:
        """
        -1 when not watched or closed
        """
class CudaDevice:
    @staticmethod
    def by_luid(luid: typing.SupportsInt | typing.SupportsIndex) -> CudaDevice:
        """
        The device whose LUID is the renderer's adapter LUID (D3D12).
        """
    @staticmethod
    def by_ordinal(ordinal: typing.SupportsInt | typing.SupportsIndex) -> CudaDevice:
        ...
    @staticmethod
    def by_uuid(uuid: bytes) -> CudaDevice:
        ...
    @property
    def name(self) -> str:
        ...
    @property
    def ordinal(self) -> int:
        ...
    @property
    def total_memory(self) -> int:
        ...
    @property
    def uuid(self) -> bytes:
        ...
class CudaMemory:
    @staticmethod
    def import_d3d12(device: CudaDevice, kind: str, name: str | None = None, handle: typing.SupportsInt | typing.SupportsIndex | None = None, size: typing.SupportsInt | typing.SupportsIndex = 0, offset: typing.SupportsInt | typing.SupportsIndex = 0, mapped_size: typing.SupportsInt | typing.SupportsIndex = 0, dedicated: bool | None = None) -> CudaMemory:
        """
        A D3D12 heap or committed resource by name or NT handle (the handle is owned from here on, also when it raises).
        """
    @staticmethod
    def import_opaque_fd(device: CudaDevice, fd: typing.SupportsInt | typing.SupportsIndex, allocation_size: typing.SupportsInt | typing.SupportsIndex, offset: typing.SupportsInt | typing.SupportsIndex = 0, size: typing.SupportsInt | typing.SupportsIndex = 0, dedicated: bool = False) -> CudaMemory:
        """
        Takes ownership of fd, also when it raises (CUDA owns it once imported).
        """
    @staticmethod
    def open_ipc(device: CudaDevice, handle: bytes, size: typing.SupportsInt | typing.SupportsIndex) -> CudaMemory:
        ...
    def close(self) -> None:
        """
        Drops this hold; views keep the mapping alive.
        """
    @property
    def closed(self) -> bool:
        ...
    @property
    def device(self) -> CudaDevice:
        ...
    @property
    def pointer(self) -> int:
        ...
    @property
    def size(self) -> int:
        ...
class CudaTensorView:
    def __init__(self, memory: CudaMemory, offset: typing.SupportsInt | typing.SupportsIndex, element_size: typing.SupportsInt | typing.SupportsIndex, shape: collections.abc.Sequence[typing.SupportsInt | typing.SupportsIndex]) -> None:
        ...
    @property
    def address(self) -> int:
        ...
    @property
    def nbytes(self) -> int:
        ...
    @property
    def offset(self) -> int:
        ...
    @property
    def shape(self) -> list[int]:
        ...
class CudaSemaphore:
    @staticmethod
    def import_d3d12_fence(device: CudaDevice, name: str | None = None, handle: typing.SupportsInt | typing.SupportsIndex | None = None) -> CudaSemaphore:
        """
        A shared ID3D12Fence by name or NT handle (the handle is owned from here on).
        """
    @staticmethod
    def import_timeline_fd(device: CudaDevice, fd: typing.SupportsInt | typing.SupportsIndex) -> CudaSemaphore:
        """
        Takes ownership of fd, also when it raises.
        """
    def close(self) -> None:
        ...
    @property
    def closed(self) -> bool:
        ...
class CudaGraph:
    """
    A CUDA graph captured from a CudaStream, ready to launch on it.
    """
    @property
    def nodes(self) -> int:
        ...
class CudaStream:
    def __init__(self, device: CudaDevice) -> None:
        ...
    def begin_capture(self) -> None:
        """
        Captures what this thread enqueues on the stream into a graph until end_capture (thread-local: a call of this thread that cannot be captured spoils it).
        """
    def done(self) -> bool:
        ...
    def end_capture(self) -> CudaGraph:
        """
        Ends the capture and returns the instantiated graph; raises when the capture was spoiled (the stream is usable again either way).
        """
    def launch(self, graph: CudaGraph) -> None:
        """
        Enqueues the graph's work on this stream (GIL released).
        """
    def record(self) -> None:
        ...
    def signal(self, semaphore: CudaSemaphore, value: typing.SupportsInt | typing.SupportsIndex) -> None:
        """
        Enqueues a GPU-side signal of value (GIL released).
        """
    def synchronize(self, timeout_ns: typing.SupportsInt | typing.SupportsIndex = -1, spin_ns: typing.SupportsInt | typing.SupportsIndex = 0) -> bool:
        """
        Waits (GIL released) for the work before the last record(); False on timeout.
        """
    def trace_completion(self, session: typing.SupportsInt | typing.SupportsIndex, frame: typing.SupportsInt | typing.SupportsIndex) -> bool:
        """
        While a trace records: records the frame's GPU completion when the stream gets here; False when nothing was enqueued.
        """
    def wait(self, semaphore: CudaSemaphore, value: typing.SupportsInt | typing.SupportsIndex) -> None:
        """
        Enqueues a GPU-side wait for value (GIL released: a full queue may block).
        """
    @property
    def device(self) -> CudaDevice:
        ...
    @property
    def handle(self) -> int:
        ...
class SessionCounts:
    capacity: typing.ClassVar[int] = 128
    def __init__(self) -> None:
        ...
    def note(self, end_ns: typing.SupportsInt | typing.SupportsIndex, signal_value: typing.SupportsInt | typing.SupportsIndex, wait_ns: typing.SupportsInt | typing.SupportsIndex, infer_ns: typing.SupportsInt | typing.SupportsIndex, total_ns: typing.SupportsInt | typing.SupportsIndex) -> None:
        """
        Kept among the recent runs, not counted again.
        """
    def ran(self, signal_value: typing.SupportsInt | typing.SupportsIndex) -> None:
        """
        A run counted once enqueued; its times are kept later by note.
        """
    def recent(self) -> list[tuple[int, int, int, int, int]]:
        """
        The last runs kept, oldest first, at most 128: (end_ns, signal_value, wait_ns, infer_ns, total_ns).
        """
    def record(self, end_ns: typing.SupportsInt | typing.SupportsIndex, signal_value: typing.SupportsInt | typing.SupportsIndex, wait_ns: typing.SupportsInt | typing.SupportsIndex, infer_ns: typing.SupportsInt | typing.SupportsIndex, total_ns: typing.SupportsInt | typing.SupportsIndex, single_thread: bool = False) -> None:
        """
        A run that ended at end_ns (time.perf_counter_ns) having signalled signal_value: counted, and kept among the recent runs.
        """
    def signalled(self, value: typing.SupportsInt | typing.SupportsIndex) -> None:
        """
        A value signalled without a run (a failed frame's).
        """
    @property
    def last_signal_value(self) -> int:
        ...
    @property
    def runs(self) -> int:
        ...
    @property
    def single_thread_runs(self) -> int:
        ...
class RunSeries:
    def count(self, n: typing.SupportsInt | typing.SupportsIndex) -> None:
        """
        Counts n runs whose times were not measured: the counter only.
        """
    def observe(self, run_s: typing.SupportsFloat | typing.SupportsIndex, wait_s: typing.SupportsFloat | typing.SupportsIndex, infer_s: typing.SupportsFloat | typing.SupportsIndex) -> None:
        """
        Records one run: the counter and the three histograms.
        """
    @property
    def runs(self) -> int:
        ...
class RunMetrics:
    def __init__(self, bounds: collections.abc.Sequence[typing.SupportsFloat | typing.SupportsIndex]) -> None:
        ...
    def histograms(self, which: typing.SupportsInt | typing.SupportsIndex) -> list[tuple[str, list[int], float]]:
        """
        (model, counts per bucket with +Inf last, not cumulative, sum) of one histogram (0 run, 1 wait, 2 infer) of every model that has run.
        """
    def last_run_ms(self) -> dict[str, int]:
        """
        The wall-clock time of each model's last run, in ms since the epoch.
        """
    def runs(self) -> list[tuple[str, str, int]]:
        """
        (model, transport, runs) of every series that has run.
        """
    def series(self, model: str, transport: str) -> RunSeries:
        """
        The recorder of one (model, transport), made on first use.
        """
    @property
    def bounds(self) -> list[float]:
        ...
class SpinGate:
    def __init__(self, slots: typing.SupportsInt | typing.SupportsIndex) -> None:
        ...
    def leave(self) -> None:
        """
        Gives back a slot taken by try_enter.
        """
    def try_enter(self) -> bool:
        """
        Takes a slot if one is free; never waits.
        """
    @property
    def slots(self) -> int:
        ...
    @property
    def spinning(self) -> int:
        ...
class ReceiveSpin:
    def __init__(self, max_spin_ns: typing.SupportsInt | typing.SupportsIndex) -> None:
        ...
    def budget_ns(self, now_ns: typing.SupportsInt | typing.SupportsIndex = -1) -> int:
        """
        The next wait's spin budget (now_ns < 0: the clock's now).
        """
    def observe(self, waited_ns: typing.SupportsInt | typing.SupportsIndex, budget_ns: typing.SupportsInt | typing.SupportsIndex) -> None:
        ...
    @property
    def average_wait_ns(self) -> float:
        ...
    @property
    def denied(self) -> int:
        ...
    @denied.setter
    def denied(self, arg0: typing.SupportsInt | typing.SupportsIndex) -> None:
        ...
    @property
    def max_spin_ns(self) -> int:
        ...
    @property
    def spinning(self) -> bool:
        ...
class SessionRunner:
    """
    What the run engine holds of one session: a host session's model, binding and fences, or the Python body of a session whose run stays in Python.
    """
    @staticmethod
    def python(owner: str, body: typing.Any, series: RunSeries, streaming: bool = False) -> SessionRunner:
        """
        A session run by body(wait_value, signal_value or None, timeout_ns, cancel, asynchronous) -> (signal_value, wait_ns, infer_ns, total_ns), which counts the run itself; admitted by the engine first.
        """
    def __init__(self, owner: str, run: typing.Any, binding: typing.Any, session: typing.Any, wait_fence: HostFence, signal_fence: HostFence, unsealed: collections.abc.Sequence[HostMemory], series: RunSeries, streaming: bool = False) -> None:
        ...
    def set_single(self, run: typing.Any, binding: typing.Any, single_from: typing.SupportsInt | typing.SupportsIndex, frame_bytes: typing.SupportsInt | typing.SupportsIndex) -> None:
        """
        The model's one-thread session and its binding, taken by a run that starts while the runs on the CPU in flight, itself included, are single_from or more, unless its frame (frame_bytes) is large: it then takes the large frames' turn; after a run in flight.
        """
class RunPage:
    """
    A connection's run page (docs/ipc.md): the client's sealed memfd, mapped.
    """
    def __init__(self, fd: typing.SupportsInt | typing.SupportsIndex, slots: typing.SupportsInt | typing.SupportsIndex = 1) -> None:
        """
        The page of fd, serving `slots` RUNs in flight as asked (fl_run_page_slots: a power of two, RUN_PAGE_SLOTS at most).
        """
    @property
    def slots(self) -> int:
        """
        The RUNs in flight it serves.
        """
class Shutdown:
    """
    The service's one shutdown flag (Runtime.closing): set once, read by every transport and by the run engine without the GIL.
    """
    def __init__(self) -> None:
        ...
    def is_set(self) -> bool:
        ...
    def set(self) -> None:
        """
        From now on every RUN is answered unavailable.
        """
class RunTable:
    def __init__(self, shutdown: Shutdown, max_timeout_ms: typing.SupportsInt | typing.SupportsIndex, default_timeout_ms: typing.SupportsInt | typing.SupportsIndex, spin_ns: typing.SupportsInt | typing.SupportsIndex, max_inflight: typing.SupportsInt | typing.SupportsIndex) -> None:
        ...
    def __len__(self) -> int:
        ...
    def add(self, key: bytes, runner: SessionRunner) -> None:
        ...
    def counts(self) -> dict[str, int]:
        """
        Runs answered, runs failed (the failure handed to the transport or raised), and of them those whose input fence was waited for.
        """
    def remove(self, key: bytes) -> None:
        """
        Forgets a session, after its run in flight (the GIL is released while it waits).
        """
    def run(self, owner: str, session_id: typing.Any, wait_value: int, signal_value: typing.Any, timeout_ms: typing.Any, gate: SpinGate, cancel: typing.Any = None, run_options: typing.Any = None, asynchronous: bool = False, stream: bool = False, series: typing.Any = None, flags: typing.SupportsInt | typing.SupportsIndex = 0) -> tuple[int, int, int, int]:
        """
        The entry of a run: admission and every refusal, the input fence's wait (spinning as gate allows, ended early by cancel between slices), the model, the signal, the counters, metrics (series; None: the session's) and trace marks. Returns (signal_value, wait_ns, infer_ns, total_ns) or raises the FencelineError. session_id: the id as text, or its 16 bytes. timeout_ms None: the service's default. stream: a streaming session's own frame (a GPU driver's; a host session's frames enter through run_stream). flags: a RUN frame's (none are defined).
        """
    def run_stream(self, owner: str, session_id: bytes, wait_value: typing.SupportsInt | typing.SupportsIndex, backlog: typing.SupportsInt | typing.SupportsIndex, gate: SpinGate, cancel: typing.Any, spin: ReceiveSpin, return_after_ns: typing.SupportsInt | typing.SupportsIndex) -> tuple[int, int, int, typing.Any]:
        """
        A host streaming session's frames, one after another, each as run's stream frame (spin, backlog, cancel), the first waiting for wait_value and each next one for the value after the one before signalled. Returns (frames, skipped, last_value, failure) once cancel ends a wait, a frame fails (failure: its FencelineError, naming the frame in details['signal_value']; else None), or return_after_ns has passed since the call at the end of a frame. session_id: its 16 bytes.
        """
    def serve_bytes(self, frame: bytes, owner: str, reply_flags: bool, gate: SpinGate, cancel: typing.Any, send: collections.abc.Callable[[bytes], bool], run_options: typing.Any = None) -> tuple[bool | None, typing.Any]:
        """
        Serves one received frame: (sent, None) when served here, its reply handed to send(reply) -> bool and then counted; (None, failure) when its run failed here; (None, None) when it is no RUN the engine can read (Python decodes it). reply_flags: the client reads the RUN reply's flags (else they are 0). A RUN sent ahead of its input fence waits here, spinning as gate allows, ended early by cancel (a fenceline.waiting.Cancel) between slices. run_options: onnxruntime's RunOptions for the model's run (None: none).
        """
    def serve_loop(self, fd: typing.SupportsInt | typing.SupportsIndex, owner: str, gate: SpinGate, spin: ReceiveSpin, refuse: collections.abc.Callable[[int, typing.Any], bytes], pidfd: typing.SupportsInt | typing.SupportsIndex = -1, send_timeout_ms: typing.SupportsInt | typing.SupportsIndex = -1, page: typing.Any = None, reply_flags: bool = False, run_options: typing.Any = None, cancel: typing.Any = None) -> tuple[bytes | None, list[int], str | None]:
        """
        Receives and serves frames until one needs Python (no RUN it can read): (data, fds, problem) for it; (None, [], None) once the peer is gone: its end closed, the process behind pidfd (-1: none) exited, or a reply not taken within send_timeout_ms (-1: no limit). A RUN refused or failed here is answered here, on the socket, with refuse(request_id, failure) -> the ERROR frame. A frame queued already is served only while that process lives. Raises when the socket itself fails. With a run page, its RUNs are served too, in order, each answered in its slot (a refusal's ERROR on the socket). reply_flags: the client reads the RUN reply's flags (else they are 0). run_options: onnxruntime's RunOptions for every model run (None: none). A RUN sent ahead of its input fence waits here, ended early by cancel as serve_bytes says.
        """
class Acceptor:
    """
    The Unix socket's accept loop: accepts, identifies each peer (SO_PEERCRED) and refuses here, without the GIL, the connections that the refusal table names (limit(), full()); the others go to Python (next_event). Refuses a connection by answering its first request with the table's ERROR frame (the request id set), shutting it down for writing and reading until the peer closes, for at most grace_s. The table's answers to one uid come at most per_s a second after a burst of burst; the others wait, unanswered, for their turn, at most burst of them. Past that, or past max_pending held at once (answering and waiting), one more is closed unanswered. listen_fd stays the caller's (made non-blocking here).
    """
    def __init__(self, listen_fd: typing.SupportsInt | typing.SupportsIndex, out_of_fds: bytes, grace_s: typing.SupportsFloat | typing.SupportsIndex, max_pending: typing.SupportsInt | typing.SupportsIndex, per_s: typing.SupportsFloat | typing.SupportsIndex, burst: typing.SupportsInt | typing.SupportsIndex, greet_s: typing.SupportsFloat | typing.SupportsIndex) -> None:
        ...
    def admitted(self, uid: typing.SupportsInt | typing.SupportsIndex, connections: typing.SupportsInt | typing.SupportsIndex, total: typing.SupportsInt | typing.SupportsIndex) -> None:
        """
        Python's count of uid's connections and of all, after each admission or close.
        """
    def full(self, frame: typing.Any) -> None:
        """
        Refuses every connection with this ERROR frame from now on (None: no more).
        """
    def greet(self, replies: typing.Any, features: collections.abc.Sequence[str], max_features: typing.SupportsInt | typing.SupportsIndex, uids: collections.abc.Sequence[typing.SupportsInt | typing.SupportsIndex], max_per_uid: typing.SupportsInt | typing.SupportsIndex, max_total: typing.SupportsInt | typing.SupportsIndex) -> None:
        """
        Greets these uids' connections here from now on, while a uid's connections (admitted() and greeted here) are below max_per_uid and all below max_total: a HELLO of {} or {"client":"NAME","features":["NAME",...]} (either field or none, no spaces, at most max_features features, names printable ASCII) is answered with replies[bits], an encoded HELLO reply (its request id set), bit i set when it asked for features[i] (at most 8 names: 2^len(features) replies); paced as refusals are. The connection goes to Python with its next frame (left queued), or after greet_s, as ('peer', (fd, pid, uid, bits, client)), and is closed here when the peer closes first. None: no more greetings.
        """
    def greeting(self, uid: typing.SupportsInt | typing.SupportsIndex) -> tuple[int, int]:
        """
        (uid's, all) connections greeted here or waiting to be: count them as admitted.
        """
    def limit(self, uid: typing.SupportsInt | typing.SupportsIndex, frame: typing.Any) -> None:
        """
        Refuses uid's connections with this ERROR frame from now on (None: no more).
        """
    def next_event(self) -> typing.Any:
        """
        Runs the loop (the GIL released) until something needs Python: ('peer', (fd, pid, uid, features, client)), the caller owning fd (features: the bits of greet()'s names that the HELLO answered here asked for, 0 when none was; client: the name it gave, '?' when it named none, None when no HELLO was answered here, for Python to log); ('refused', [(uid, error code, count), ...]), at most once a second while refusals are made here; ('out_of_fds', why) for each round without fds (one waiting connection shed, accepting paused); ('accepting', None) once it accepts again; None once stopped. Raises OSError when accepting fails otherwise. One thread at a time.
        """
    def refuse(self, fd: typing.SupportsInt | typing.SupportsIndex, frame: bytes) -> None:
        """
        Refuses a connection that next_event handed over, with this ERROR frame; owns fd.
        """
    def stop(self) -> None:
        """
        next_event returns None; what is held is closed.
        """
    @property
    def accepting(self) -> bool:
        """
        False while out of fds, or after accepting failed
        """
    @property
    def dropped(self) -> int:
        """
        connections closed unanswered: refusals past max_pending, and refusals or greetings past a uid's waiting room
        """
    @property
    def greeted(self) -> int:
        """
        HELLOs answered here, since the loop began
        """
    @property
    def held(self) -> int:
        """
        refused connections answering now
        """
    @property
    def waiting(self) -> int:
        """
        refused connections waiting for their turn now
        """
class ReplyNap:
    """
    The Python client's nap rule alone (ClientSocket's, for tests): fed waits, it plans the next one's nap and the spin after it.
    """
    def __init__(self) -> None:
        ...
    def observe(self, waited_ns: typing.SupportsInt | typing.SupportsIndex, nap_ns: typing.SupportsInt | typing.SupportsIndex, late_ns: typing.SupportsInt | typing.SupportsIndex, blocked: bool) -> None:
        ...
    def plan(self, now_ns: typing.SupportsInt | typing.SupportsIndex, shared: bool = False) -> tuple[int, int]:
        """
        (nap_ns, spin_ns) for a wait starting at now_ns; (0, 0): no nap. shared: the last reply said the service's cores are shared (no nap, the wait not judged).
        """
    def served(self, service_us: typing.SupportsInt | typing.SupportsIndex) -> None:
        ...
    @property
    def napping(self) -> bool:
        ...
class ClientSocket:
    """
    The Python client's end of a connection to the service: sends, and receives waited for by the spin rule, a RUN's reply read natively.
    """
    def __init__(self, fd: typing.SupportsInt | typing.SupportsIndex, max_spin_ns: typing.SupportsInt | typing.SupportsIndex, reply_type: typing.Any) -> None:
        ...
    def keep_page(self, taken: bool, slots: typing.SupportsInt | typing.SupportsIndex = 1) -> None:
        """
        Closes the page's memfd; keeps the page when the service took it, with the slots it serves (RUNs in flight there).
        """
    def make_page(self) -> int:
        """
        A new run page (docs/ipc.md): its memfd, to send with OPEN_RUN_PAGE.
        """
    def receive(self, request_id: typing.SupportsInt | typing.SupportsIndex, gate: SpinGate, run_reply: bool = True) -> typing.Any:
        ...
    def run_page(self, kind: typing.SupportsInt | typing.SupportsIndex, request_id: typing.SupportsInt | typing.SupportsIndex, session_id: bytes, wait_value: typing.SupportsInt | typing.SupportsIndex, signal_value: typing.SupportsInt | typing.SupportsIndex, timeout_ms: typing.SupportsInt | typing.SupportsIndex, gate: SpinGate) -> typing.Any:
        ...
    def send(self, data: bytes) -> None:
        ...
    def send_run(self, kind: typing.SupportsInt | typing.SupportsIndex, request_id: typing.SupportsInt | typing.SupportsIndex, session_id: bytes, wait_value: typing.SupportsInt | typing.SupportsIndex, signal_value: typing.SupportsInt | typing.SupportsIndex, timeout_ms: typing.SupportsInt | typing.SupportsIndex) -> None:
        ...
    @property
    def average_wait_ns(self) -> float:
        ...
    @property
    def denied(self) -> int:
        ...
    @property
    def has_page(self) -> bool:
        ...
    @property
    def napping(self) -> bool:
        ...
    @property
    def page_counts(self) -> dict[str, int]:
        """
        RUNs posted on the run page, and of them those answered there.
        """
    @property
    def spinning(self) -> bool:
        ...
    @property
    def waits(self) -> dict[str, int]:
        """
        How the waits for the service went since the connection opened, counted: spun first, napped (nap_missed: of those, the ones whose spin ran out before the answer), blocked at once; stayed runnable first (stayed_answered: the answer came meanwhile).
        """
def can_import_fence(kind: str) -> bool:
    ...
def can_import_memory(kind: str) -> bool:
    ...
def cpus_shared() -> bool:
    """
    What set_cpus_shared said last (False at first).
    """
def cuda_available() -> bool:
    ...
def cuda_devices() -> list[dict[str, typing.Any]]:
    ...
def cuda_unavailable_reason() -> str:
    ...
def d3d12_capability() -> tuple[bool, str]:
    """
    (supported, reason) for this process: false with the reason except on Windows with an NVIDIA driver and a CUDA device.
    """
def d3d12_capability_for(windows: bool, driver_loaded: bool, driver_reason: str, has_luid_query: bool, device_count: typing.SupportsInt | typing.SupportsIndex) -> tuple[bool, str]:
    """
    (supported, reason) for the given platform facts. Pure.
    """
def d3d12_close_handle(handle: typing.SupportsInt | typing.SupportsIndex) -> None:
    """
    Closes an NT handle received for an import that did not happen (no-op off Windows).
    """
def d3d12_fence_descriptor(name: str | None = None, handle: typing.SupportsInt | typing.SupportsIndex | None = None) -> dict[str, typing.Any]:
    """
    The CUDA external-semaphore descriptor a d3d12_fence request becomes. Pure.
    """
def d3d12_luid_from_bytes(raw: bytes) -> int:
    ...
def d3d12_luid_text(luid: typing.SupportsInt | typing.SupportsIndex) -> str:
    ...
def d3d12_memory_descriptor(kind: str, name: str | None = None, handle: typing.SupportsInt | typing.SupportsIndex | None = None, size: typing.SupportsInt | typing.SupportsIndex = 0, offset: typing.SupportsInt | typing.SupportsIndex = 0, mapped_size: typing.SupportsInt | typing.SupportsIndex = 0, dedicated: bool | None = None) -> dict[str, typing.Any]:
    """
    The CUDA external-memory descriptor a D3D12 memory request becomes (InvalidArgument when it breaks a rule). Pure: nothing is imported.
    """
def d3d12_select_device(devices: collections.abc.Sequence[tuple[typing.SupportsInt | typing.SupportsIndex, str, typing.SupportsInt | typing.SupportsIndex | None]], luid: typing.SupportsInt | typing.SupportsIndex) -> int:
    """
    devices: (ordinal, name, luid or None); the ordinal whose LUID is luid. Pure.
    """
def d3d12_shared_name(name: str) -> str:
    """
    The name as the driver receives it; InvalidArgument names the rule.
    """
def error_codes() -> dict[str, int]:
    """
    Wire error codes by their stable name, as in fenceline_wire.h.
    """
def large_frame_turns() -> dict[str, int]:
    """
    The large frames' turns since the process started: the last-level cache's bytes (0: unknown, no turns), runs that took the turn, turns kept that their session took back or that expired, and times the turns were turned off for a second.
    """
def mapping_stats() -> tuple[int, int, int]:
    """
    (mappings, bytes, faults): host shared-memory mappings held now, their bytes, and the SIGBUS faults absorbed since start because a mapped object shrank (POSIX).
    """
def nt_check_object_type(role: str, actual: str, handle: typing.SupportsInt | typing.SupportsIndex) -> None:
    """
    InvalidArgument, naming the handle and both types, unless `actual` is the type `role` needs. Pure.
    """
def nt_handle_value(value: typing.SupportsInt | typing.SupportsIndex) -> int:
    """
    A handle value a renderer may send (not 0, not a pseudo-handle, 32 bits); InvalidArgument names the rule. Pure.
    """
def nt_object_type(role: str) -> str:
    """
    The kernel object type a handle passed in `role` (section, wake, d3d12_heap, d3d12_resource, d3d12_fence) must have. Pure.
    """
def purge_messages(fd: typing.SupportsInt | typing.SupportsIndex) -> tuple[int, int]:
    """
    Shuts a connection's socket down and drops what is queued on it, closing every fd those messages carried: (messages, fds) dropped. The socket itself stays open.
    """
def recv_message(fd: typing.SupportsInt | typing.SupportsIndex, max_bytes: typing.SupportsInt | typing.SupportsIndex, max_fds: typing.SupportsInt | typing.SupportsIndex, spin_ns: typing.SupportsInt | typing.SupportsIndex = 0, block: bool = True, pidfd: typing.SupportsInt | typing.SupportsIndex = -1) -> tuple[bytes | None, list[int], str | None] | None:
    """
    Receives one SOCK_SEQPACKET message: (data, fds, problem). The caller owns the fds; (None, [], None) at EOF, and once the process behind pidfd (-1: none; a PeerProcess's) has exited while the receive blocked. A message over max_bytes or max_fds has its fds closed, data holds its first bytes and problem says what was wrong. A message already there is taken at once; else, with the GIL released, it spins up to spin_ns, then blocks; without block it returns None instead of blocking.
    """
def send_message(fd: typing.SupportsInt | typing.SupportsIndex, data: bytes, timeout_ms: typing.SupportsInt | typing.SupportsIndex = -1, pidfd: typing.SupportsInt | typing.SupportsIndex = -1) -> None:
    """
    Sends one SOCK_SEQPACKET message. Waits with the GIL released only while the socket is full: for at most timeout_ms (-1: no limit; then TimeoutError, errno ETIMEDOUT) and only while the process behind pidfd (-1: none) lives (else OSError ESRCH). Raises OSError when the socket failed (the peer closed its end).
    """
def set_cpus_shared(on: bool) -> None:
    """
    Whether the service's runs on the CPU share its cores with other renderers' runs now (its pools at idle priority): every RUN reply to a client that asked for the reply's flags says so from now on.
    """
def trace_filled() -> bool:
    """
    Whether the recording stopped by itself (its frames or its room reached).
    """
def trace_mark(moment: typing.SupportsInt | typing.SupportsIndex, session: typing.SupportsInt | typing.SupportsIndex, frame: typing.SupportsInt | typing.SupportsIndex, t_ns: typing.SupportsInt | typing.SupportsIndex = 0) -> None:
    """
    Records one moment while a trace is on (t_ns 0: now).
    """
def trace_on() -> bool:
    """
    Whether a trace is recording now.
    """
def trace_start(capacity: typing.SupportsInt | typing.SupportsIndex, max_frames: typing.SupportsInt | typing.SupportsIndex) -> bool:
    """
    Starts recording moments (at most capacity, and those of at most max_frames frames); False when a recording is already on.
    """
def trace_stop() -> tuple[bytes, int]:
    """
    Stops the recording and frees its buffer: (records, dropped); records are TRACE_EVENT_FORMAT structs (t_ns, session, frame, thread, moment).
    """
def wire_kinds() -> dict[str, int]:
    """
    Frame kinds by name, as in fenceline_wire.h.
    """
def wire_offsets() -> dict[str, dict[str, int]]:
    """
    The offset of every field of the header, RUN and RUN reply, from fenceline_wire.h.
    """
FENCE_PAGE_SIZE: int = 4096
FENCE_WAKE_SUFFIX: str = '.wake'
PLATFORM: str = 'posix'
RUN_PAGE_SIZE: int = 4096
RUN_PAGE_SLOTS: int = 8
SPIN_OUTLIER: int = 4
SPIN_SLACK_NS: int = 10000
SPIN_WINDOWS_PER_PERIOD: int = 16
SPIN_WINDOW_SHIFT: int = 21
TRACE_EVENT_FORMAT: str = '=qQQIB3x'
TRACE_MOMENTS: int = 8
WAIT_ABANDONED: int = 2
WAIT_ERRORED: int = 3
WAIT_REACHED: int = 0
WAIT_TIMED_OUT: int = 1
WIRE_FEATURE_REPLY_FLAGS: str = 'reply_flags'
WIRE_HEADER_SIZE: int = 16
WIRE_MAGIC: int = 1346980934
WIRE_MAX_FDS: int = 4
WIRE_MAX_FRAME: int = 65536
WIRE_REPLY_BIT: int = 32768
WIRE_REPLY_CPUS_SHARED: int = 1
WIRE_RUN_REPLY_SIZE: int = 24
WIRE_RUN_SIZE: int = 40
WIRE_TIMEOUT_DEFAULT: int = 4294967295
WIRE_VERSION: int = 1
