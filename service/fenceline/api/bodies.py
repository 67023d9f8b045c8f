"""Request bodies of the routes that read their body themselves (KServe inference with its
binary extension, Triton's shared-memory registration), described for OpenAPI so that ``/docs``
shows them and "Try it out" sends a body that works against ``fenceline serve`` with no options
(the example runs the builtin ``add_dynamic``)."""

from __future__ import annotations

from typing import Any


def _object(required: list[str], **properties: dict[str, Any]) -> dict[str, Any]:
    return {"type": "object", "required": required, "properties": properties}


def _described(type_: str, description: str, **more: Any) -> dict[str, Any]:
    return {"type": type_, "description": description, **more}


_STRING: dict[str, Any] = {"type": "string"}
_SHM_PARAMETERS = "shared_memory_region, shared_memory_offset, shared_memory_byte_size"

_TENSOR = _object(
    ["name", "shape", "datatype"],
    name=_STRING,
    shape={"type": "array", "items": {"type": "integer", "minimum": 0}},
    datatype={"type": "string", "examples": ["FP32", "FP16", "UINT8", "INT64"]},
    data=_described("array", "row-major values; absent with binary data or the "
                    "shared_memory_region parameter"),
    parameters=_described("object", f"binary_data_size, {_SHM_PARAMETERS}"),
)

_OUTPUT = _object(
    ["name"],
    name=_STRING,
    parameters=_described("object", f"binary_data, {_SHM_PARAMETERS}"),
)

INFER = _object(
    ["inputs"],
    id=_STRING,
    parameters=_described("object", "binary_data_output"),
    inputs={"type": "array", "items": _TENSOR},
    outputs={"type": "array", "items": _OUTPUT},
)

INFER_EXAMPLE = {
    "inputs": [{"name": "x", "shape": [1, 3, 2, 2], "datatype": "FP32",
                "data": [float(i) for i in range(12)]}],
    "outputs": [{"name": "y"}],
}

_BYTE_SIZE: dict[str, Any] = {"type": "integer", "minimum": 1}

SYSTEM_SHM_REGISTER = _object(
    ["key", "byte_size"],
    key=_described("string", "the POSIX shared-memory name, e.g. /frame0"),
    offset={"type": "integer", "minimum": 0, "default": 0},
    byte_size=_BYTE_SIZE,
)

CUDA_SHM_REGISTER = _object(
    ["raw_handle", "device_id", "byte_size"],
    raw_handle=_described("object", "the cudaIpcMemHandle_t, base64",
                          properties={"b64": _STRING}),
    device_id={"type": "integer", "minimum": 0},
    byte_size=_BYTE_SIZE,
)

def body(schema: dict[str, Any], example: dict[str, Any] | None = None,
         binary: bool = False) -> dict[str, Any]:
    """``openapi_extra`` for a route with this JSON body (``binary``: Triton's binary tensor
    extension may append raw bytes after the JSON, with Inference-Header-Content-Length)."""
    media: dict[str, Any] = {"schema": schema}
    if example is not None:
        media["example"] = example
    content: dict[str, Any] = {"application/json": media}
    if binary:
        content["application/octet-stream"] = {
            "schema": {"type": "string", "format": "binary",
                       "description": "the JSON header, then the tensors' bytes; the header's "
                       "length in the Inference-Header-Content-Length header"}
        }
    return {"requestBody": {"required": True, "content": content}}
