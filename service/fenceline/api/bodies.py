"""Request bodies of the routes that read their body themselves (KServe inference with its
binary extension, Triton's shared-memory registration), described for OpenAPI so that ``/docs``
shows them and "Try it out" sends a body that works against ``fenceline serve`` with no options
(the example runs the builtin ``add_dynamic``)."""

from __future__ import annotations

from typing import Any

_TENSOR = {
    "type": "object",
    "required": ["name", "shape", "datatype"],
    "properties": {
        "name": {"type": "string"},
        "shape": {"type": "array", "items": {"type": "integer", "minimum": 0}},
        "datatype": {"type": "string", "examples": ["FP32", "FP16", "UINT8", "INT64"]},
        "data": {"type": "array", "description": "row-major values; absent with binary data or "
                 "the shared_memory_region parameter"},
        "parameters": {"type": "object", "description": "binary_data_size, shared_memory_region, "
                       "shared_memory_offset, shared_memory_byte_size"},
    },
}

_OUTPUT = {
    "type": "object",
    "required": ["name"],
    "properties": {
        "name": {"type": "string"},
        "parameters": {"type": "object", "description": "binary_data, shared_memory_region, "
                       "shared_memory_offset, shared_memory_byte_size"},
    },
}

INFER = {
    "type": "object",
    "required": ["inputs"],
    "properties": {
        "id": {"type": "string"},
        "parameters": {"type": "object", "description": "binary_data_output"},
        "inputs": {"type": "array", "items": _TENSOR},
        "outputs": {"type": "array", "items": _OUTPUT},
    },
}

INFER_EXAMPLE = {
    "inputs": [{"name": "x", "shape": [1, 3, 2, 2], "datatype": "FP32",
                "data": [float(i) for i in range(12)]}],
    "outputs": [{"name": "y"}],
}

SYSTEM_SHM_REGISTER = {
    "type": "object",
    "required": ["key", "byte_size"],
    "properties": {
        "key": {"type": "string", "description": "the POSIX shared-memory name, e.g. /frame0"},
        "offset": {"type": "integer", "minimum": 0, "default": 0},
        "byte_size": {"type": "integer", "minimum": 1},
    },
}

CUDA_SHM_REGISTER = {
    "type": "object",
    "required": ["raw_handle", "device_id", "byte_size"],
    "properties": {
        "raw_handle": {"type": "object", "properties": {"b64": {"type": "string"}},
                       "description": "the cudaIpcMemHandle_t, base64"},
        "device_id": {"type": "integer", "minimum": 0},
        "byte_size": {"type": "integer", "minimum": 1},
    },
}


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
