"""The frames every row runs on: a model's concrete signature, and one shared-memory object that
holds all of its inputs then all of its outputs, filled the same way in every process so that
every transport's outputs can be checked against one direct onnxruntime run."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from fenceline.client import SharedFrame, View
from fenceline.interop.datatypes import datatype

ALIGN = 64


@dataclass(frozen=True)
class Tensor:
    name: str
    datatype: str  # KServe name
    shape: tuple[int, ...]

    @property
    def dtype(self) -> np.dtype[Any]:
        return datatype(self.datatype).numpy

    @property
    def nbytes(self) -> int:
        return int(np.prod(self.shape)) * self.dtype.itemsize


@dataclass(frozen=True)
class Signature:
    """What one run of a model reads and writes, every dimension concrete."""

    inputs: tuple[Tensor, ...]
    outputs: tuple[Tensor, ...]

    @property
    def tensors(self) -> tuple[Tensor, ...]:
        return self.inputs + self.outputs

    def layout(self) -> tuple[dict[str, int], int]:
        """Offset of each tensor in the frame, and the frame's size."""
        offsets, at = {}, 0
        for t in self.tensors:
            offsets[t.name] = at
            at += -(-t.nbytes // ALIGN) * ALIGN
        return offsets, at


def _ort_session(path: Path) -> Any:
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.add_session_config_entry("session.intra_op.allow_spinning", "0")  # as the service's
    return ort.InferenceSession(str(path), so, providers=["CPUExecutionProvider"])


def signature(path: Path, image: tuple[int, int] | None = None) -> Signature:
    """The model's signature with free dimensions made concrete: H and W of a 4-D input from
    ``image``, every other free dimension 1; output shapes from one run on such inputs."""
    from fenceline.interop.datatypes import from_ort

    session = _ort_session(path)

    def concrete(shape: list[Any]) -> tuple[int, ...]:
        dims = [d if isinstance(d, int) and d > 0 else -1 for d in shape]
        if len(dims) == 4 and image is not None:
            for axis, value in ((2, image[0]), (3, image[1])):
                if dims[axis] == -1:
                    dims[axis] = value
        return tuple(1 if d == -1 else d for d in dims)

    def kserve(ort_type: str) -> str:
        dt = from_ort(ort_type)
        if dt is None:
            raise ValueError(f"{path}: unsupported tensor type {ort_type}")
        return dt.name

    ins = tuple(Tensor(a.name, kserve(a.type), concrete(a.shape)) for a in session.get_inputs())
    feeds = {t.name: np.zeros(t.shape, t.dtype) for t in ins}
    results = session.run(None, feeds)
    outs = tuple(
        Tensor(a.name, kserve(a.type), tuple(int(d) for d in r.shape))
        for a, r in zip(session.get_outputs(), results, strict=True)
    )
    return Signature(ins, outs)


class Buffers:
    """One frame: every tensor of ``sig`` in one shared-memory object (named when ``named``, for
    HTTP and Triton's system shared memory; else a memfd). ``close()`` unmaps it and, for a
    named one, unlinks it; safe twice."""

    def __init__(self, sig: Signature, *, named: bool = False, fill: str = "random") -> None:
        self.sig = sig
        self.offsets, size = sig.layout()
        self.frame = SharedFrame(size, named=named)
        self.fill(fill)

    @property
    def name(self) -> str | None:
        return self.frame.name

    def array(self, t: Tensor) -> npt.NDArray[Any]:
        return self.frame.array(t.dtype, list(t.shape), self.offsets[t.name])

    def fill(self, how: str) -> None:
        for i, t in enumerate(self.sig.inputs):
            self.array(t)[...] = make_input(t, how, i)
        self.clear_outputs()

    def clear_outputs(self) -> None:
        """Clears the outputs (zeros)."""
        for t in self.sig.outputs:
            self.array(t)[...] = 0

    def views(self, memory: str) -> tuple[dict[str, View], dict[str, View]]:
        def view(t: Tensor) -> View:
            return View(memory, t.datatype, list(t.shape), self.offsets[t.name])

        return ({t.name: view(t) for t in self.sig.inputs},
                {t.name: view(t) for t in self.sig.outputs})

    def output_digest(self) -> str:
        return digest([self.array(t) for t in self.sig.outputs])

    def close(self) -> None:
        self.frame.close()

    def __enter__(self) -> Buffers:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def digest(arrays: list[npt.NDArray[Any]]) -> str:
    h = hashlib.sha256()
    for a in arrays:
        h.update(np.ascontiguousarray(a).tobytes())
    return h.hexdigest()[:16]


def make_input(t: Tensor, how: str, index: int = 0) -> npt.NDArray[Any]:
    """Deterministic input: ``random`` (uniform [0, 1)), or ``text-frame`` (a synthetic game
    frame with text on it, normalized as PP-OCR's detector expects)."""
    if how == "text-frame" and len(t.shape) == 4 and t.shape[1] == 3:
        from fenceline.bench.realmodel import text_frame

        return text_frame(t.shape[2], t.shape[3]).astype(t.dtype)[None]
    rng = np.random.default_rng(1234 + index)
    return rng.random(t.shape, dtype=np.float32).astype(t.dtype)


def builtin_frame(model: str) -> tuple[Path, Signature, str]:
    """A builtin model's file (built once in the cache), its signature, and the digest of its
    outputs on the inputs every row uses (``random``)."""
    from fenceline.models.builtin import build_repository, cache_dir

    repo = cache_dir()
    build_repository(repo, [model])
    path = repo / model / "1" / "model.onnx"
    sig = signature(path)
    return path, sig, digest(direct_outputs(path, sig, "random"))


def direct_outputs(path: Path, sig: Signature, fill: str) -> list[npt.NDArray[Any]]:
    """The outputs of a direct onnxruntime run on the inputs every row uses."""
    session = _ort_session(path)
    feeds = {t.name: make_input(t, fill, i) for i, t in enumerate(sig.inputs)}
    return [np.asarray(r) for r in session.run([t.name for t in sig.outputs], feeds)]
