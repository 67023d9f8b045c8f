"""The Python half of ``fenceline_reference_filter`` (native/obs/reference.c), the bench's
in-process comparison: OBS's video thread calls the function :func:`load` returns on each frame,
which runs the model with onnxruntime in OBS's process, in place, the way in-process plugins do.
The model is loaded with the service's own session options (``fenceline.runtime.models.Model``),
so the two sides differ in where the model runs, not in how onnxruntime is set up."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np


def load(model_path: str, intra_op_threads: int = 0) -> Callable[[memoryview, int, int], None]:
    """``intra_op_threads`` 0: onnxruntime's default, a pool sized to the machine."""
    from fenceline.runtime.models import Model, ModelSettings

    settings = ModelSettings(intra_op_threads=intra_op_threads)
    model = Model(Path(model_path).parents[1].name, "1", Path(model_path), settings)
    model.load()
    session = model.session
    assert session is not None  # load() made it
    (inp,) = session.get_inputs()

    def run(frame: memoryview, width: int, height: int) -> None:
        x = np.frombuffer(frame, np.uint8).reshape(1, height, width, 4)
        (y,) = session.run(None, {inp.name: x})
        x[...] = y  # the frame is OBS's: the result goes back into it

    return run
