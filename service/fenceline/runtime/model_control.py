"""Model control as Triton has it (``--model-control-mode``).

- ``none`` (the default): every model of the repository loads at start; load and unload
  requests are refused.
- ``explicit``: only the models named by ``--load-model`` load at start (``*``: all); clients
  load, reload and unload models by name (``POST /v2/repository/models/{m}/load|unload``).
- ``poll``: every model loads at start, and the repository is rescanned every
  ``--repository-poll-secs``: a new or changed model directory (re)loads, a removed one unloads.

An unload is refused with ``conflict`` while a session of the model exists: a renderer's
session holds imported frames and fences, and pulling its model would fail every later frame
of a renderer that did nothing wrong. A reload is not refused: sessions keep running on the
model they were created with, new sessions and requests get the new one. In-flight KServe
requests finish on the model they started with in both cases.
"""

from __future__ import annotations

import logging
import threading
from pathlib import Path

from fenceline.errors import Conflict, FencelineError, NotFound, Unsupported
from fenceline.runtime.models import check_name
from fenceline.runtime.service import Runtime

log = logging.getLogger("fenceline.runtime")

Stamp = tuple[tuple[str, int, int], ...]


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
        """(Re)loads ``name`` from the repository; a failure keeps what was served and is the
        model's reason in the index. ``config``: Triton's config override, JSON, in place of
        the directory's config.pbtxt for this load (a later load without it reads the
        directory's again)."""
        self._check_explicit()
        with self._lock:
            self.models.load(name, config=config)
            self._stamps[name] = self._stamp(name)

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
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
