"""The runtime: one object table of imports and sessions, owned by clients, driven by every
transport. It knows no transport: an owner is a name the transport picks (HTTP requests act as
``"http"``, each IPC connection as its own, whose objects it releases when it closes)."""

from __future__ import annotations

import logging
import os
import secrets
import threading
from typing import Any

from fenceline import _native, trace, waiting
from fenceline.errors import (
    Conflict,
    InvalidArgument,
    NotFound,
    ResourceExhausted,
    Unavailable,
)
from fenceline.interop.capabilities import capabilities
from fenceline.interop.cuda_memory import CUDA_MEMORY_TYPES, CudaMemoryImport, import_cuda_memory
from fenceline.interop.d3d12 import (
    D3D12_FENCE_TYPES,
    D3D12_MEMORY_TYPES,
    import_d3d12_fence,
    import_d3d12_memory,
)
from fenceline.interop.datatypes import datatype
from fenceline.interop.devices import check_device_quota, device_label
from fenceline.interop.handles import (
    Access,
    Binding,
    FenceHandle,
    MemoryHandle,
    close_nt_handles,
)
from fenceline.interop.host_fence import FenceImport, import_fence
from fenceline.interop.host_memory import MemoryImport, import_memory
from fenceline.interop.owners import SERVICE, Caller, check_import
from fenceline.interop.vk_fence import VK_FENCE_TYPES, import_vk_fence
from fenceline.metrics import Metrics
from fenceline.runtime import backends
from fenceline.runtime.cuda_session import CudaSession
from fenceline.runtime.host_session import HostSession
from fenceline.runtime.models import Model, ModelRepository
from fenceline.runtime.ort_options import pool_yields, usable_cpus
from fenceline.runtime.session import RunResult, Session
from fenceline.runtime.streaming import Mode, Policy, StreamWorker
from fenceline.runtime.table import Entry, RuntimeSettings, Table, ViewSpec
from fenceline.waiting import Cancel, Flag

# Entry, RuntimeSettings, Table and ViewSpec live in runtime/table.py; re-exported for callers
# that import them from here.
__all__ = ["Entry", "Runtime", "RuntimeSettings", "Table", "ViewSpec"]

log = logging.getLogger("fenceline.runtime")

class Runtime:
    def __init__(
        self,
        models: ModelRepository,
        metrics: Metrics | None = None,
        settings: RuntimeSettings | None = None,
    ) -> None:
        self.models = models
        self.metrics = metrics if metrics is not None else Metrics()
        self.settings = settings or RuntimeSettings()
        self.memory: Table[MemoryHandle] = Table("memory")
        self.fences: Table[FenceHandle] = Table("fence")
        self.sessions: Table[Session] = Table("session")
        # The worker of each streaming session, by session id (request-mode sessions have none).
        self.streams: dict[str, StreamWorker] = {}
        self._lock = threading.RLock()
        # Sessions being built outside the lock: (owner, device label or "") by reserved id.
        self._pending: dict[str, tuple[str, str]] = {}
        # The model of each session being built, by reserved id (an unload waits for none).
        self._pending_models: dict[str, Model] = {}
        # The one shutdown flag: set once, read by every transport and by the run engine.
        self.closing = _native.Shutdown()
        # The run engine: every session's runs enter it (Runtime.run, the IPC transports'
        # native loops, the streaming workers), and it holds every session from its creation.
        s = self.settings
        self.runs: Any = _native.RunTable(
            self.closing, s.max_timeout_ms, s.default_timeout_ms, s.spin_ns,
            s.max_inflight_runs_per_owner)
        self.metrics.watch_runner(self.runs)

    # -- capabilities ---------------------------------------------------------------------

    def capabilities(self) -> dict[str, Any]:
        return capabilities()

    # -- memory ---------------------------------------------------------------------------

    def _check_named(self, obj: MemoryImport | FenceImport, caller: Caller, what: str) -> None:
        """Closes ``obj`` and raises unless ``caller`` may import it by name."""
        try:
            check_import(caller, obj.handle.fd, what, obj.name, self.settings.allow_uids)
        except BaseException:
            obj.close()
            raise

    def _check_import_quota(
        self, owner: str, caller: Caller, fd: int | None, *handles: int | None
    ) -> None:
        """Refuses an import over the client's limit, its user's (over all its clients) or the
        service's (what its fds allow); a received fd and duplicated NT handles are closed
        then."""
        s = self.settings
        with self._lock:
            n = len(self.memory.owned_by(owner)) + len(self.fences.owned_by(owner))
            of_user = self.memory.of_user(caller.user) + self.fences.of_user(caller.user)
        over = None
        if n >= s.max_imports_per_owner:
            over = f"at most {s.max_imports_per_owner} imports per client"
        elif of_user >= s.max_imports_per_user:
            over = (f"{caller.user} holds {of_user} imports over its clients, the most one user "
                    f"may (--max-imports-per-user {s.max_imports_per_user}); release some and "
                    "retry")
        else:
            over = self.saturated()
        if over is not None:
            if fd is not None:
                os.close(fd)
            close_nt_handles(*handles)
            raise ResourceExhausted(over)

    def imports(self) -> int:
        """Memory and fence imports held, over every client."""
        with self._lock:
            return len(self.memory.entries) + len(self.fences.entries)

    def saturated(self) -> str | None:
        """Why the service takes no more imports from anyone (its import bound, which keeps a
        reserve of fds for connections and HTTP, is reached); None while it takes them. The
        readiness probe answers 503 with this reason."""
        n, limit = self.imports(), self.settings.max_imports
        if n < limit:
            return None
        return (f"the service holds {n} imports, its most ({limit}: its open-fd limit less a "
                "reserve for connections and HTTP); retry once clients release some")

    def _release(self, table: Table[Any], owner: str, id: str) -> Any:
        """Removes an unused object from `table` and returns it for closing."""
        with self._lock:
            entry = table.get(owner, id)
            if entry.users:
                raise Conflict(f"{table.kind} {id} is in use by {len(entry.users)} session(s)")
            table.remove(id)
        return entry.obj

    def import_memory(
        self,
        owner: str,
        handle_type: str,
        *,
        name: str | None = None,
        fd: int | None = None,
        size_bytes: int = 0,
        offset_bytes: int = 0,
        access: Access = "read_write",
        caller: Caller = SERVICE,
        nt_handle: int | None = None,
        **gpu: Any,
    ) -> dict[str, Any]:
        """``gpu``: allocation_size_bytes, dedicated, device_uuid, device_id, ipc_handle for the
        GPU handle types (interop/cuda_memory.py); allocation_size_bytes, dedicated,
        adapter_luid for the D3D12 ones (interop/d3d12.py). ``nt_handle``: a section or D3D12
        handle the Windows pipe duplicated from the renderer, owned from here on. An import by
        ``name`` is checked against ``caller`` (interop/owners.py)."""
        self._check_import_quota(owner, caller, fd, nt_handle)
        mem: MemoryHandle
        if handle_type in D3D12_MEMORY_TYPES:
            mem = import_d3d12_memory(
                handle_type, name=name, fd=fd, nt_handle=nt_handle, size_bytes=size_bytes,
                offset_bytes=offset_bytes, access=access, **gpu,
            )
        elif handle_type in CUDA_MEMORY_TYPES:
            close_nt_handles(nt_handle)  # never set: requests only carry handles for the others
            mem = import_cuda_memory(
                handle_type, name=name, fd=fd, size_bytes=size_bytes, offset_bytes=offset_bytes,
                access=access, **gpu,
            )
        else:
            host = import_memory(
                handle_type, name=name, fd=fd, nt_handle=nt_handle, size_bytes=size_bytes,
                offset_bytes=offset_bytes, access=access,
            )
            if fd is None and nt_handle is None:
                self._check_named(host, caller, "memory")
            mem = host
        with self._lock:
            mapped = sum(e.obj.size_bytes for e in self.memory.owned_by(owner))
            limit = self.settings.max_mapped_bytes_per_owner
            if mapped + mem.size_bytes > limit:
                mem.close()
                raise ResourceExhausted(
                    f"importing {mem.size_bytes} bytes would map more than {limit} bytes for "
                    "this client; release memory first"
                )
            entry = self.memory.add(owner, mem, user=caller.user)
        self.metrics.imported_bytes.labels(mem.kind).inc(mem.size_bytes)
        self.metrics.imported_handles.labels(mem.kind).inc()
        if isinstance(mem, CudaMemoryImport):
            self.metrics.gpu_imported_bytes.labels(device_label(mem.cuda.ordinal)).inc(mem.size_bytes)
        return self._memory_info(entry)

    def _memory_info(self, e: Entry[MemoryHandle]) -> dict[str, Any]:
        m = e.obj
        return {
            "id": e.id,
            "handle_type": m.kind,
            "name": m.name,
            "size_bytes": m.size_bytes,
            "offset_bytes": m.offset_bytes,
            "access": m.access,
            "device": m.device,
            "sessions": len(e.users),
        }

    def describe_memory(self, owner: str, id: str) -> dict[str, Any]:
        with self._lock:
            return self._memory_info(self.memory.get(owner, id))

    def release_memory(self, owner: str, id: str) -> None:
        self._close_memory(self._release(self.memory, owner, id))

    def _close_memory(self, mem: MemoryHandle) -> None:
        mem.close()
        self.metrics.imported_bytes.labels(mem.kind).dec(mem.size_bytes)
        self.metrics.imported_handles.labels(mem.kind).dec()
        if isinstance(mem, CudaMemoryImport):
            self.metrics.gpu_imported_bytes.labels(device_label(mem.cuda.ordinal)).dec(mem.size_bytes)

    # -- fences ---------------------------------------------------------------------------

    def import_fence(
        self,
        owner: str,
        fence_type: str,
        *,
        name: str | None = None,
        fd: int | None = None,
        device_uuid: str | None = None,
        adapter_luid: int | None = None,
        nt_handle: int | None = None,
        wake_handle: int | None = None,
        current_value: int = 0,
        caller: Caller = SERVICE,
    ) -> dict[str, Any]:
        """``nt_handle``: a d3d12_fence, or a host_timeline page's section (with its
        ``wake_handle``), that the Windows pipe duplicated from the renderer; owned from here on.
        ``current_value``: a GPU fence's value now, as the renderer states it (the service
        signals only above it)."""
        self._check_import_quota(owner, caller, fd, nt_handle, wake_handle)
        fence: FenceHandle
        if fence_type in D3D12_FENCE_TYPES:
            close_nt_handles(wake_handle)
            fence = import_d3d12_fence(
                fence_type, name=name, fd=fd, nt_handle=nt_handle, adapter_luid=adapter_luid,
                current_value=current_value,
            )
        elif fence_type in VK_FENCE_TYPES:
            close_nt_handles(nt_handle, wake_handle)
            fence = import_vk_fence(
                fence_type, fd=fd, device_uuid=device_uuid, current_value=current_value
            )
        else:
            if current_value:
                close_nt_handles(nt_handle, wake_handle)
                if fd is not None:
                    os.close(fd)
                raise InvalidArgument(
                    "current_value is for GPU fences: the service reads a host fence's value "
                    "from its page"
                )
            host_fence = import_fence(
                fence_type, name=name, fd=fd, nt_handle=nt_handle, wake_handle=wake_handle
            )
            if fd is None and nt_handle is None:
                self._check_named(host_fence, caller, "fence")
            fence = host_fence
        with self._lock:
            entry = self.fences.add(owner, fence, user=caller.user)
        self.metrics.imported_handles.labels(fence.kind).inc()
        return self._fence_info(entry)

    def _fence_info(self, e: Entry[FenceHandle]) -> dict[str, Any]:
        f = e.obj
        return {
            "id": e.id,
            "fence_type": f.kind,
            "name": f.name,
            "value": f.value,
            "status": f.status,
            "device": f.device,
            "sessions": len(e.users),
        }

    def describe_fence(self, owner: str, id: str) -> dict[str, Any]:
        with self._lock:
            return self._fence_info(self.fences.get(owner, id))

    def release_fence(self, owner: str, id: str) -> None:
        self._close_fence(self._release(self.fences, owner, id))

    def _close_fence(self, fence: FenceHandle) -> None:
        fence.close()
        self.metrics.imported_handles.labels(fence.kind).dec()

    # -- sessions -------------------------------------------------------------------------

    def create_session(
        self,
        owner: str,
        model: str,
        inputs: dict[str, ViewSpec],
        outputs: dict[str, ViewSpec],
        wait_fence: str,
        signal_fence: str,
        *,
        mode: Mode = "request",
        policy: Policy = "latest",
        spin_us: int | None = None,
        start: bool = True,
        transport: str = "http",
    ) -> dict[str, Any]:
        """A session; ``mode="streaming"`` gives it a worker that runs each new input fence
        value by itself (runtime/streaming.py), started at once unless ``start`` is false.
        ``transport``: the metrics label of its owner's runs (its owner's transport).

        Checks and reserves under the table lock, then builds the session (the onnxruntime
        session, a CUDA stream) outside it: building takes long, and on a busy or stalled GPU
        longer still, and nothing of another client or another GPU may wait for that."""
        if mode not in ("request", "streaming"):
            raise InvalidArgument(f"mode is 'request' or 'streaming', not {mode!r}")
        if policy not in ("latest", "every"):
            raise InvalidArgument(f"policy is 'latest' or 'every', not {policy!r}")
        max_spin_ns = self.settings.spin_ns if spin_us is None else spin_us * 1000
        if not 0 <= max_spin_ns <= self.settings.max_stream_spin_ns:
            raise InvalidArgument(
                f"spin_us must be within 0..{self.settings.max_stream_spin_ns // 1000}"
            )
        m = self.models.get(model)
        with self._lock:
            owned = self.sessions.owned_by(owner)
            pending = sum(1 for o, _ in self._pending.values() if o == owner)
            if len(owned) + pending >= self.settings.max_sessions_per_owner:
                raise ResourceExhausted(
                    f"at most {self.settings.max_sessions_per_owner} sessions per client"
                )
            limit = self.settings.max_streaming_sessions_per_owner
            streaming = sum(e.id in self.streams for e in owned)
            if mode == "streaming" and streaming >= limit:
                raise ResourceExhausted(
                    f"at most {limit} streaming sessions per client; stop one first"
                )
            wait = self.fences.get(owner, wait_fence)
            signal = self.fences.get(owner, signal_fence)
            used: list[Entry[MemoryHandle]] = []
            bound: list[dict[str, Binding]] = []
            for role, specs in (("input", inputs), ("output", outputs)):
                views: dict[str, Binding] = {}
                for tensor, spec in specs.items():
                    mem_entry = self.memory.get(owner, spec.memory)
                    if not all(isinstance(d, int) and d < 2**63 for d in spec.shape):
                        # The native view takes int64 dimensions; a larger one is the caller's
                        # mistake, not a failed conversion (an ``internal`` error).
                        raise InvalidArgument(
                            f"{role} {tensor!r}: shape dimensions are integers below 2^63, "
                            f"got {list(spec.shape)}"
                        )
                    try:
                        views[tensor] = mem_entry.obj.view(
                            spec.offset_bytes, datatype(spec.datatype), list(spec.shape),
                            need_write=role == "output",
                        )
                    except InvalidArgument as e:
                        raise InvalidArgument(f"{role} {tensor!r}: {e.message}") from None
                    used.append(mem_entry)
                bound.append(views)
            backend = backends.select(m, bound[0], bound[1], wait.obj, signal.obj)
            label = backend.device_label
            if label:
                check_device_quota(
                    label, self._sessions_on(label), self.settings.max_sessions_per_device
                )
            if mode == "streaming":
                if wait.id == signal.id:
                    raise InvalidArgument("a streaming session needs two fences: input and output")
                backend.check_streaming(policy, wait.obj.kind)
            if not self.models.is_loaded(m):
                raise NotFound(f"model {m.name!r} was unloaded while the session was set up")
            sid = secrets.token_hex(16)
            self._pending[sid] = (owner, label)
            self._pending_models[sid] = m
            holders: list[Entry[Any]] = [*used, wait, signal]
            for user in holders:  # held from now on: a release answers conflict
                user.users.add(sid)
        stream: StreamWorker | None = None
        session: Session | None = None
        try:
            session = backend.build(m, bound[0], bound[1], wait.obj, signal.obj)
            if mode == "streaming":
                stream = StreamWorker(session, policy, max_spin_ns, self.metrics)
                session.stream = stream
        except BaseException:
            if session is not None:  # built, but its worker was refused
                session.close()
            with self._lock:
                del self._pending[sid]
                del self._pending_models[sid]
                for user in holders:
                    user.users.discard(sid)
            raise
        full: list[Session] = []
        with self._lock:
            del self._pending[sid]
            del self._pending_models[sid]
            shutting_down = self.closing.is_set()  # release_owner may have run meanwhile
            if shutting_down:
                for user in holders:
                    user.users.discard(sid)
            else:
                entry = self.sessions.add(owner, session, sid)
                session.trace_tag = trace.tag(entry.id)
                self._register(owner, sid, session, stream is not None,
                               self.metrics.run_series(m.name, transport))
                if stream is not None:
                    self.streams[sid] = stream
                self._set_pool_priority()
                full = self._on_cpu_when_full()
        if shutting_down:
            session.close()
            raise Unavailable("the service is shutting down")
        for s in full:  # may load a model's one-thread session: outside the table lock
            s.use_single_thread()
        if stream is not None:
            stream.label, stream.owner = entry.id[:8], owner
        self.metrics.sessions.labels(m.name).inc()
        if label:
            self.metrics.gpu_sessions.labels(label).inc()
        log.info("session created for model %s", m.name, extra=_ids(owner, entry.id))
        if stream is not None:
            log.info("the session streams, policy %s, spins up to %d us", policy,
                     max_spin_ns // 1000, extra=_ids(owner, entry.id))
            if start:
                stream.start()
        return self._session_info(entry)

    def _register(self, owner: str, sid: str, session: Session, streaming: bool,
                  series: Any) -> None:
        """Hands ``session`` to the run engine, which runs it for ``owner`` from now on: a
        host session natively, a CUDA session through its Python ``run`` (the one place a run
        leaves native code). Called with the table lock held."""
        if isinstance(session, HostSession):
            # A streaming session's frames are no client's runs: the engine records them as
            # its stream's frames (Metrics.stream_series).
            session.register(self.runs, sid, owner, self.metrics.stream_series(
                session.model.name) if streaming else series, streaming)
            return
        assert isinstance(session, CudaSession)
        frames: Any = None if streaming else series  # a frame is no run of a client's
        key = bytes.fromhex(sid)
        self.runs.add(key, _native.SessionRunner.python(
            owner, _python_body(session, self.settings.spin_ns, self.metrics, streaming),
            frames, streaming))
        if streaming:  # its driver's frames (runtime/gpu_streaming.py) enter the engine too
            runs = self.runs
            session.frame_entry = lambda value: runs.run(
                owner, key, value, value, None, waiting.gate().native, asynchronous=True,
                stream=True)

    def _set_pool_priority(self) -> None:
        """The models' onnxruntime pools at idle priority while several sessions run on the
        CPU (runtime/ort_options.py), and every RUN reply to a client that asked for its flags
        saying so meanwhile (its ``cpus_shared`` flag: docs/ipc.md). Called with the table lock
        held, so that the last session count is the one that holds."""
        on_cpu = sum(1 for e in self.sessions.entries.values() if not e.obj.device_label)
        shared = pool_yields(on_cpu)
        self.models.set_pool_idle(shared)
        _native.set_cpus_shared(shared)

    def _on_cpu_when_full(self) -> list[Session]:
        """The sessions on the CPU once they are as many as the CPUs the service may use (their
        runs may then fill the CPUs: runtime/ort_options.py), else none. Called with the table
        lock held."""
        on_cpu = [e.obj for e in self.sessions.entries.values() if not e.obj.device_label]
        return on_cpu if len(on_cpu) >= usable_cpus() else []

    def _sessions_on(self, label: str) -> int:
        built = sum(
            1 for e in self.sessions.entries.values() if e.obj.device_label == label
        )
        return built + sum(1 for _, d in self._pending.values() if d == label)

    def _session_info(self, e: Entry[Session]) -> dict[str, Any]:
        info = {"id": e.id, **e.obj.describe()}
        ids = {id(m.obj): m.id for m in self.memory.owned_by(e.owner)}
        for role, bindings in (("inputs", e.obj.inputs), ("outputs", e.obj.outputs)):
            for name, binding in bindings.items():
                info[role][name]["memory"] = ids.get(id(binding.memory), "")
        fence_ids = {id(f.obj): f.id for f in self.fences.owned_by(e.owner)}
        info["wait_fence"] = fence_ids.get(id(e.obj.wait_fence), "")
        info["signal_fence"] = fence_ids.get(id(e.obj.signal_fence), "")
        return info

    def describe_session(self, owner: str, id: str) -> dict[str, Any]:
        with self._lock:
            return self._session_info(self.sessions.get(owner, id))

    def _stream(self, owner: str, id: str) -> StreamWorker:
        with self._lock:
            self.sessions.get(owner, id)
            stream = self.streams.get(id)
        if stream is None:
            raise Conflict(
                f"session {id} runs on request (mode 'request'); only streaming sessions start, "
                "pause and stop"
            )
        return stream

    def start_session(self, owner: str, id: str) -> dict[str, Any]:
        """Starts (or resumes) a streaming session's worker; a no-op when it runs."""
        self._stream(owner, id).start()
        return self.describe_session(owner, id)

    def pause_session(self, owner: str, id: str) -> dict[str, Any]:
        """Returns once the frame in flight is signalled and the worker has ended; values the
        input fence reaches meanwhile are handled by the policy at the next start."""
        self._stream(owner, id).pause()
        return self.describe_session(owner, id)

    def stop_session(self, owner: str, id: str) -> dict[str, Any]:
        """Stops a streaming session and releases it; returns its final description."""
        stream = self._stream(owner, id)
        stream.stop()
        info = self.describe_session(owner, id)
        self.release_session(owner, id)
        return info

    def release_session(self, owner: str, id: str) -> None:
        with self._lock:
            entry = self.sessions.get(owner, id)
            self.sessions.remove(id)
            stream = self.streams.pop(id, None)
            self._set_pool_priority()
        if stream is not None:
            stream.stop()  # joins the worker; outside the table lock
        self.runs.remove(bytes.fromhex(id))  # waits for a run in flight, outside the table lock
        entry.obj.close()
        with self._lock:
            for users in [m.users for m in self.memory.entries.values()] + [
                f.users for f in self.fences.entries.values()
            ]:
                users.discard(id)
        self.metrics.sessions.labels(entry.obj.model.name).dec()
        label = entry.obj.device_label
        if label:
            self.metrics.gpu_sessions.labels(label).dec()
        log.info("session released", extra=_ids(owner, id))

    def session(self, owner: str, id: str) -> Session:
        with self._lock:
            return self.sessions.get(owner, id).obj

    def run(
        self,
        owner: str,
        session_id: str,
        wait_value: int,
        signal_value: int | None = None,
        timeout_ms: int | None = None,
        *,
        asynchronous: bool = False,
        cancel: Cancel | None = None,
        flags: int = 0,
    ) -> RunResult:
        """A request-mode run through the run engine (``self.runs``), the one entry of every
        run whatever the transport: admission and every refusal, the wait, the model, the
        signal, the counters, metrics and trace marks are the engine's. Raises the
        FencelineError of a refused or failed run.

        ``asynchronous``: a CUDA session replies once the work is enqueued; host sessions
        always run to completion. ``cancel`` ends the fence wait early (default: when the
        service shuts down). ``flags``: a RUN frame's (none are defined)."""
        if cancel is None:
            cancel = Cancel(self.closing, _never)
        return RunResult(*self.runs.run(
            owner, session_id, wait_value, signal_value, timeout_ms, waiting.gate().native,
            cancel, cancel.run_options, asynchronous, flags=flags))

    # -- models ---------------------------------------------------------------------------

    def unload_model(self, name: str) -> bool:
        """Stops serving model ``name``; refused with ``conflict`` while a session of it exists
        (release or stop them first). False when it was not loaded. In-flight KServe requests
        hold their model and finish."""
        with self._lock:
            n = sum(1 for e in self.sessions.entries.values() if e.obj.model.name == name)
            n += sum(1 for m in self._pending_models.values() if m.name == name)
            if n:
                raise Conflict(
                    f"model {name!r} has {n} session(s); release them (or stop their "
                    "renderers) before unloading it"
                )
            if not self.models.unload(name):
                return False
        self.metrics.triton.drop(name)  # Triton's nv_inference_* series go with the model
        return True

    # -- owners ---------------------------------------------------------------------------

    def release_owner(self, owner: str) -> int:
        """Releases everything `owner` created: sessions, then memory and fences."""
        with self._lock:
            session_ids = [e.id for e in self.sessions.owned_by(owner)]
        for sid in session_ids:
            self.release_session(owner, sid)
        with self._lock:
            mems = self.memory.owned_by(owner)
            fences = self.fences.owned_by(owner)
            for m in mems:
                self.memory.remove(m.id)
            for f in fences:
                self.fences.remove(f.id)
        for m in mems:
            self._close_memory(m.obj)
        for f in fences:
            self._close_fence(f.obj)
        n = len(session_ids) + len(mems) + len(fences)
        if n:
            log.info("released %d objects of %s", n, owner)
        return n

    def snapshot(
        self,
    ) -> tuple[list[Entry[MemoryHandle]], list[Entry[FenceHandle]], list[Entry[Session]]]:
        """Every object of every owner, for the admin status view. An object in the snapshot may
        be released meanwhile: reading a closed fence raises FencelineError."""
        with self._lock:
            return (
                list(self.memory.entries.values()),
                list(self.fences.entries.values()),
                list(self.sessions.entries.values()),
            )

    def owners(self) -> set[str]:
        with self._lock:
            tables: tuple[Table[Any], ...] = (self.memory, self.fences, self.sessions)
            return {e.owner for t in tables for e in t.entries.values()}

    def close(self) -> None:
        """Fails waiting runs with ``unavailable``, then releases every object."""
        self.closing.set()
        for owner in self.owners():
            self.release_owner(owner)



def _never() -> bool:
    return False


def _python_body(session: CudaSession, spin_ns: int, metrics: Metrics, streaming: bool) -> Any:
    """A CUDA session's run as the run engine calls it, once it admitted the run: a RUN, or a
    streaming session's frame, which is enqueued only (its driver waits for the GPU)."""

    def body(wait_value: int, signal_value: int | None, timeout_ns: int, cancel: Flag | None,
             asynchronous: bool) -> RunResult:
        if streaming:
            took = session.enqueue_frame(wait_value)
            return RunResult(wait_value, 0, took, took)
        result = session.run(wait_value, signal_value, timeout_ns, spin_ns, cancel,
                             asynchronous=asynchronous)
        metrics.observe_gpu_run(session.device_label)
        return result

    return body


def _ids(owner: str, session_id: str) -> dict[str, str]:
    # Logs carry a prefix: enough to correlate with a client, not enough to use the session.
    return {"owner": owner, "session_id": session_id[:8]}
