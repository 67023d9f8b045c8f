"""Tensors in KServe JSON, parsed and written without stalling the event loop.

CPython's json module holds the GIL for a whole document: a 64 MB request parsed in a worker
thread still froze every other HTTP client for seconds. Here the number hooks are Python
functions, so the interpreter can switch threads between numbers, and arrays are converted
and written in slices for the same reason. Memory stays bounded by the JSON limit
(``--max-json-mb``) times the expansion of numbers into Python objects (about 20x for short
numbers), for at most :data:`LARGE_AT_ONCE` large documents at a time.
"""

from __future__ import annotations

import asyncio
import json
import math
import secrets
from typing import Any

import numpy as np

from fenceline.errors import InvalidArgument

SLICE = 1 << 16  # elements converted or written per slice, between thread switches
LARGE = 1 << 20  # documents from this size on wait for one of the slots below
LARGE_AT_ONCE = 2


def _float(text: str) -> float:
    return float(text)


def _int(text: str) -> int:
    return int(text)


def loads(raw: bytes) -> Any:
    """Parses a request's JSON; malformed or too deeply nested JSON is InvalidArgument."""
    try:
        return json.loads(raw, parse_float=_float, parse_int=_int)
    except (ValueError, UnicodeDecodeError) as e:
        raise InvalidArgument(f"failed to parse the request JSON buffer: {e}") from None
    except RecursionError:
        raise InvalidArgument("failed to parse the request JSON buffer: nested too deeply") from None


def loads_object(raw: bytes, what: str) -> dict[str, Any]:
    """:func:`loads` of a body that must be a JSON object; ``what`` names it in the error."""
    obj = loads(raw)
    if not isinstance(obj, dict):
        raise InvalidArgument(f"{what} must be a JSON object")
    return obj


def to_array(data: Any, dtype: np.dtype[Any], shape: list[int], what: str) -> np.ndarray:
    """``data`` (flat or nested lists) as a C-contiguous array of ``shape``."""
    want = math.prod(shape)  # Python ints: a product past 2^63 must not wrap to a small count
    try:
        if isinstance(data, list) and len(data) > SLICE and not isinstance(data[0], list):
            arr = np.empty(len(data), dtype)
            for i in range(0, len(data), SLICE):
                arr[i : i + SLICE] = data[i : i + SLICE]
        else:
            arr = np.asarray(data, dtype=dtype)
    except (ValueError, TypeError, OverflowError) as e:
        raise InvalidArgument(f"{what}: 'data' does not hold {dtype} values: {e}") from None
    if arr.size != want:
        raise InvalidArgument(
            f"{what}: 'data' holds {arr.size} elements, its shape {shape} needs {want}"
        )
    return np.ascontiguousarray(arr.reshape(shape))


def dumps(header: dict[str, Any], arrays: dict[int, np.ndarray]) -> bytes:
    """``header`` as compact JSON, with ``header["outputs"][i]["data"]`` written from
    ``arrays[i]`` in slices."""
    token = f"fenceline-data-{secrets.token_hex(8)}-"
    for i in arrays:
        header["outputs"][i]["data"] = f"{token}{i}"
    text = json.dumps(header, separators=(",", ":"))
    for i, arr in arrays.items():
        flat = arr.reshape(-1)
        parts = (json.dumps(flat[j : j + SLICE].tolist(), separators=(",", ":"))[1:-1]
                 for j in range(0, flat.size, SLICE))  # fmt: skip
        text = text.replace(f'"{token}{i}"', "[" + ",".join(parts) + "]", 1)
    return text.encode()


class LargeDocuments:
    """At most :data:`LARGE_AT_ONCE` large JSON documents parse at once; others wait here,
    off the event loop's critical path (an ``await``, not a blocked thread)."""

    def __init__(self) -> None:
        self._slots = asyncio.Semaphore(LARGE_AT_ONCE)

    async def __aenter__(self) -> None:
        await self._slots.acquire()

    async def __aexit__(self, *exc: object) -> None:
        self._slots.release()
