"""KServe datatype names and what they are in numpy and ONNX Runtime."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from fenceline.errors import InvalidArgument


class ViewWindow:
    """What a typed window (host_memory.TensorBinding, cuda_memory.CudaTensorBinding) reports
    of its native view: its shape, the address it starts at and its offset in the import."""

    view: Any  # a _native.TensorView or _native.CudaTensorView

    @property
    def shape(self) -> list[int]:
        return list(self.view.shape)

    @property
    def address(self) -> int:
        return int(self.view.address)

    @property
    def offset(self) -> int:
        return int(self.view.offset)


@dataclass(frozen=True)
class Datatype:
    name: str  # KServe name, e.g. "FP32"
    numpy: np.dtype
    ort: str  # onnxruntime type string, e.g. "tensor(float)"

    @property
    def size(self) -> int:
        return int(self.numpy.itemsize)


def _dt(name: str, np_type: type, ort: str) -> Datatype:
    return Datatype(name, np.dtype(np_type), f"tensor({ort})")


DATATYPES: dict[str, Datatype] = {
    d.name: d
    for d in (
        _dt("BOOL", np.bool_, "bool"),
        _dt("UINT8", np.uint8, "uint8"),
        _dt("UINT16", np.uint16, "uint16"),
        _dt("UINT32", np.uint32, "uint32"),
        _dt("UINT64", np.uint64, "uint64"),
        _dt("INT8", np.int8, "int8"),
        _dt("INT16", np.int16, "int16"),
        _dt("INT32", np.int32, "int32"),
        _dt("INT64", np.int64, "int64"),
        _dt("FP16", np.float16, "float16"),
        _dt("FP32", np.float32, "float"),
        _dt("FP64", np.float64, "double"),
    )
}
BY_ORT: dict[str, Datatype] = {d.ort: d for d in DATATYPES.values()}


def datatype(name: str) -> Datatype:
    try:
        return DATATYPES[name]
    except KeyError:
        known = ", ".join(DATATYPES)
        raise InvalidArgument(f"unknown datatype {name!r}; use one of {known}") from None


def from_ort(ort_type: str) -> Datatype | None:
    return BY_ORT.get(ort_type)
