"""The one place that reaches past onnxruntime's public Python API.

The run engine (native/importer/engine/host_runs.cpp) calls the model as ``run(binding, None)``.
Given the C++ session's ``run_with_iobinding`` and the C++ IOBinding, it skips the Python
wrapper's work on every frame (0.35 us of 3.6 us per run of add_64x64 on the 2-core CI machine,
with the GIL held). Those two are private attributes of onnxruntime's binding
(``InferenceSession._sess``, ``IOBinding._iobinding``), so :func:`native_entry` hands them out
only on an onnxruntime version it was tested with that has them; on any other it hands out the
public ``InferenceSession.run_with_iobinding`` and the ``IOBinding`` itself, which take the same
arguments, and a warning says so once. Either way the run engine serves the session; only
that fraction of a microsecond differs.

Why not onnxruntime's C API instead: no onnxruntime wheel ships its headers, and the PyPI binding
links onnxruntime statically, so a native extension linking the wheel's shared library would run
a second onnxruntime beside the binding's, with its own thread pools and memory arenas, and
sessions made by one could not be run by the other (docs/architecture.md, "onnxruntime").
"""

from __future__ import annotations

import logging
from typing import Any

import onnxruntime

log = logging.getLogger("fenceline.runtime")

# The onnxruntime releases whose private binding objects the run engine is known to work
# with: 1.17 (the oldest pyproject.toml allows) to 1.32 (the newest tested). Extend after running
# tests/integration/test_run_paths.py and tests/unit/test_ort_binding.py on a newer one.
TESTED = ((1, 17), (1, 32))

_checked: str | None = None  # why the run engine cannot use this onnxruntime; "" once it can


def _version() -> tuple[int, int]:
    parts = onnxruntime.__version__.split(".")
    try:
        return int(parts[0]), int(parts[1])
    except (IndexError, ValueError):
        return (0, 0)


def unusable(session: Any, binding: Any) -> str | None:
    """Why the run engine cannot call this onnxruntime (None: it can)."""
    low, high = TESTED
    if not low <= _version() <= high:
        return (f"onnxruntime {onnxruntime.__version__} is not one the native run path was "
                f"tested with ({low[0]}.{low[1]} to {high[0]}.{high[1]})")
    run = getattr(getattr(session, "_sess", None), "run_with_iobinding", None)
    if not callable(run) or getattr(binding, "_iobinding", None) is None:
        return (f"onnxruntime {onnxruntime.__version__} lacks InferenceSession._sess."
                "run_with_iobinding or IOBinding._iobinding")
    return None


def native_entry(session: Any, binding: Any) -> tuple[Any, Any]:
    """(run, binding) for the run engine, called as ``run(binding, None)``: the C++ session's
    ``run_with_iobinding`` and the C++ IOBinding behind ``binding`` (an ``onnxruntime.IOBinding``
    of ``session``) where :func:`unusable` finds nothing against them, else the public method
    and ``binding`` itself (logged once per process)."""
    global _checked
    why = unusable(session, binding)
    if why is not None:
        if _checked is None:
            log.warning("%s: the native run path calls its public run_with_iobinding", why)
        _checked = why
        return session.run_with_iobinding, binding
    _checked = ""
    return session._sess.run_with_iobinding, binding._iobinding
