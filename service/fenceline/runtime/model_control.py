"""Model control as Triton has it (``--model-control-mode``).

- ``none`` (the default): every model of the repository loads at start; load and unload
  requests are refused.
- ``explicit``: only the models named by ``--load-model`` load at start (``*``: all); clients
  load, reload and unload models by name (``POST /v2/repository/models/{m}/load|unload``).
- ``poll``: every model loads at start, and the repository is rescanned every
  ``--repository-poll-secs``: a new or changed model directory (re)loads, a removed one unloads.

Loads are queued and paced: one loader thread loads one model at a time, requests for a model
that is already waiting share that one load (80 clients reloading one model cause at most two
loads: the one under way, which may have read the files before the last change, and one
more), and after a load that took d seconds of its CPU the loader rests PACE x d, so loads
take at most a quarter of one CPU however many clients ask, and the renderers keep the rest. A config is read
in a child process (runtime/model_config.py), so a huge or hostile one never holds the GIL.

An unload is refused with ``conflict`` while a session of the model exists: a renderer's
session holds imported frames and fences, and pulling its model would fail every later frame
of a renderer that did nothing wrong. A reload is not refused: sessions keep running on the
model they were created with, new sessions and requests get the new one. In-flight KServe
requests finish on the model they started with in both cases.
"""

from __future__ import annotations

import collections
import logging
import threading
import time
from concurrent.futures import Future
from pathlib import Path

from fenceline.errors import Conflict, FencelineError, NotFound, Unavailable, Unsupported
from fenceline.runtime.models import check_name
from fenceline.runtime.service import Runtime

log = logging.getLogger("fenceline.runtime")

Stamp = tuple[tuple[str, int, int], ...]
_Key = tuple[str, str | None]  # a waiting load: the model's name and its config override

# After a load that took the loader d seconds of CPU the loader rests PACE x d (at least
# MIN_REST_S): loads take at most 1 / (1 + PACE) of one CPU, a quarter, under any number of
# requests. (A config's child process, at nice 10, is not counted.)
PACE = 3.0
MIN_REST_S = 0.02


class ModelControl:
    """Loads and unloads the runtime's models, one change at a time."""

    def __init__(self, runtime: Runtime, poll_s: float = 15.0) -> None:
        self.runtime = runtime
        self.models = runtime.models
        self.poll_s = poll_s
        self._lock = threading.Lock()
        self._stamps: dict[str, Stamp] = {n: self._stamp(n) for n in self.models.names()}
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        # Loads waiting for the loader, in order, and by name: one waiting load per model.
        self._jobs: collections.deque[tuple[_Key, Future[None]]] = collections.deque()
        self._waiting: dict[_Key, Future[None]] = {}
        self._jobs_ready = threading.Condition()
        self._loader: threading.Thread | None = None

    @property
    def mode(self) -> str:
        return self.models.mode

    def _check_explicit(self) -> None:
        if self.mode != "explicit":
            raise Unsupported(
                f"explicit model load / unload is not allowed in model control mode "
                f"'{self.mode}'; start the service with --model-control-mode explicit"
            )

    def load(self, name: str, config: str | None = None) -> None:
        """(Re)loads ``name`` from the repository and returns once loaded; a failure keeps what
        was served and is the model's reason in the index (:meth:`submit_load`)."""
        self.submit_load(name, config).result()

    def submit_load(self, name: str, config: str | None = None) -> Future[None]:
        """Queues a (re)load of ``name``; the future is done once it loaded (or holds why not).
        ``config``: Triton's config override, JSON, in place of the directory's config.pbtxt
        for this load (a later load without it reads the directory's again). A load of
        ``name`` with the same override already waiting is shared, not queued twice; a name
        that is not one the repository may hold, or holds, is refused at once."""
        self._check_explicit()
        check_name(name)
        if name not in self.models.available():
            raise NotFound(f"failed to load '{name}': no model directory named {name!r} in the "
                           f"repository {self.models.root}")
        key = (name, config)
        with self._jobs_ready:
            if self._stop.is_set():
                raise Unavailable("the service is stopping")
            waiting = self._waiting.get(key)
            if waiting is not None:
                return waiting
            job: Future[None] = Future()
            self._waiting[key] = job
            self._jobs.append((key, job))
            if self._loader is None:
                self._loader = threading.Thread(target=self._load_loop, daemon=True,
                                                name="fenceline-model-loader")
                self._loader.start()
            self._jobs_ready.notify()
        return job

    def _load_loop(self) -> None:
        while True:
            with self._jobs_ready:
                while not self._jobs and not self._stop.is_set():
                    self._jobs_ready.wait()
                if self._stop.is_set():
                    for _, job in self._jobs:
                        job.set_exception(Unavailable("the service is stopping"))
                    self._jobs.clear()
                    return
                (name, config), job = self._jobs.popleft()
                del self._waiting[(name, config)]  # a request from now on reads the files again
            started = time.thread_time()
            try:
                with self._lock:
                    self.models.load(name, config=config)
                    self._stamps[name] = self._stamp(name)
            except FencelineError as e:
                job.set_exception(e)
            except Exception as e:  # a defect: the request still gets an answer
                log.exception("loading model %s failed", name)
                job.set_exception(FencelineError(f"loading model {name!r} failed: {e}"))
            else:
                job.set_result(None)
            self._stop.wait(max(MIN_REST_S, PACE * (time.thread_time() - started)))

    def unload(self, name: str) -> None:
        """Stops serving ``name``: ``conflict`` while it has sessions; a model of the repository
        that is not loaded is no error, a name the repository lacks is ``not_found``."""
        self._check_explicit()
        check_name(name)
        with self._lock:
            if not self.runtime.unload_model(name) and name not in self.models.available():
                raise NotFound(f"Request for unknown model: '{name}' is not found")
            self._stamps.pop(name, None)

    # -- poll mode ---------------------------------------------------------------------------

    def start_polling(self) -> None:
        if self._thread is None:
            self._thread = threading.Thread(target=self._poll_loop, name="fenceline-model-poll",
                                             daemon=True)
            self._thread.start()

    def _poll_loop(self) -> None:
        while not self._stop.wait(self.poll_s):
            try:
                self.poll()
            except Exception:  # a poll must never end the loop; the next one retries
                log.exception("model repository poll failed")

    def poll(self) -> None:
        """One rescan: (re)load what is new or changed, unload what is gone."""
        with self._lock:
            available = set(self.models.available())
            for name in sorted(available):
                stamp = self._stamp(name)
                if self._stamps.get(name) == stamp:
                    continue
                self._stamps[name] = stamp
                try:
                    if not self.models.load(name, skip_empty=True):
                        log.warning("model %s is not loaded: no version inside", name)
                except FencelineError as e:
                    log.error("model %s is not loaded: %s", name, e.message)
            for name in sorted(set(self.models.names()) - available):
                try:
                    self.runtime.unload_model(name)
                    self._stamps.pop(name, None)
                except Conflict as e:
                    log.warning("model %s left the repository but stays loaded: %s", name,
                                e.message)

    def _stamp(self, name: str) -> Stamp:
        """What a model's files look like: (path, size, mtime) of its config files and of every
        file of its version directories, or of its one file."""
        if name in self.models.sources:
            files = [Path(self.models.sources[name])]
        elif self.models.root is not None:
            d = self.models.root / name
            files = [d / "config.pbtxt", d / "config.json"]
            try:
                files += [f for v in d.iterdir() if v.name.isdigit() and v.is_dir()
                          for f in v.iterdir()]
            except OSError:
                return ()
        else:
            return ()
        out = []
        for f in sorted(files):
            try:
                st = f.stat()
            except OSError:
                continue
            out.append((str(f), st.st_size, st.st_mtime_ns))
        return tuple(out)

    def close(self) -> None:
        with self._jobs_ready:
            self._stop.set()
            self._jobs_ready.notify_all()
        for thread in (self._thread, self._loader):
            if thread is not None:
                thread.join(timeout=5)
