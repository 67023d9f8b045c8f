"""KServe JSON tensors: parsed and written in slices, so other threads (the event loop) run."""

from __future__ import annotations

import json
import threading

import numpy as np
import pytest

from fenceline.api import json_tensors
from fenceline.errors import InvalidArgument


def test_parsing_a_large_document_lets_other_threads_run(monkeypatch: pytest.MonkeyPatch) -> None:
    """Between the first and the last number of one document, another thread gets to run
    (json.loads alone holds the interpreter from the first byte to the last)."""
    steps, stop = [0], threading.Event()
    seen: list[int] = []
    parse = json_tensors._float

    def spy(text: str) -> float:
        seen.append(steps[0])
        return parse(text)

    def spin() -> None:
        while not stop.is_set():
            steps[0] += 1

    monkeypatch.setattr(json_tensors, "_float", spy)
    t = threading.Thread(target=spin)
    t.start()
    try:
        json_tensors.loads(json.dumps({"data": [0.25] * 2_000_000}).encode())
    finally:
        stop.set()
        t.join()
    assert seen[-1] - seen[0] > 0, "no other thread ran while the document was parsed"


def test_parsed_numbers_keep_their_types_and_values() -> None:
    doc = b'{"a": [1, -2, 3.5, 1e3, 18446744073709551615], "b": {"c": [true, null]}}'
    assert json_tensors.loads(doc) == json.loads(doc)
    assert isinstance(json_tensors.loads(doc)["a"][0], int)


@pytest.mark.parametrize("doc", [b"[" * 5000 + b"]" * 5000, b'{"a": ', b"\xff"])
def test_bad_documents_are_invalid_arguments(doc: bytes) -> None:
    with pytest.raises(InvalidArgument):
        json_tensors.loads(doc)


@pytest.mark.parametrize("n", [0, 1, json_tensors.SLICE, 3 * json_tensors.SLICE + 7])
def test_written_arrays_match_the_json_module(n: int) -> None:
    arr = np.random.default_rng(n).standard_normal(n).astype(np.float32)
    header = {"model_name": "m", "outputs": [{"name": "y", "shape": [n]}, {"name": "z"}]}
    want = dict(header, outputs=[dict(header["outputs"][0], data=arr.tolist()), {"name": "z"}])
    got = json_tensors.dumps(header, {0: arr})
    assert got == json.dumps(want, separators=(",", ":")).encode()


def test_arrays_are_filled_in_slices_with_the_same_values() -> None:
    data = list(range(2 * json_tensors.SLICE + 3))
    arr = json_tensors.to_array(data, np.dtype(np.int32), [len(data)], "x")
    assert arr.tolist() == data
    with pytest.raises(InvalidArgument, match="needs 4"):
        json_tensors.to_array([1, 2, 3], np.dtype(np.int32), [2, 2], "x")
    with pytest.raises(InvalidArgument, match="does not hold"):
        json_tensors.to_array(["a"] * (json_tensors.SLICE + 1), np.dtype(np.float32),
                              [json_tensors.SLICE + 1], "x")  # fmt: skip
