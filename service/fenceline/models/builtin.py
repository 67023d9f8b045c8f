"""Small real models, written as ONNX graphs with the onnx helper.

- ``add_<size>``: y = x + 1 over 1x3xHxW FP32 (``_fp16``: FP16), the synthetic frame model of
  the benchmarks.
- ``nan_guard_<h>x<w>``: y = x + 1 like ``add_``, but the run fails (a Reshape to an impossible
  shape) when any input element is NaN: a real model error, provoked by data, for tests.
- ``add_dynamic``: y = x + 1 over 1x3xHxW FP32 with H and W left free (shapes known per run).
- ``slow_add_64x64``: y = x + 1 over 1x3x64x64 FP32 after a Loop of exact multiplies by one, so
  a run stays in flight for about half a second (for lifetime tests, not benchmarks).
- ``image_filter``: a real image operation for the demo: a depthwise 3x3 sharpen convolution,
  then exposure and Reinhard tone mapping (x / (1 + x)), over 1x3x720x1280 FP32.
- ``image_filter_rgba8`` / ``image_filter_rgb8``: the same filter on packed 8-bit pixels, as
  video pipelines hold them (GStreamer's RGBA/BGRA/RGBx/BGRx, RGB/BGR): uint8 NHWC
  1xHxWx4 (or x3) in and out, H and W free. Casting, scaling to [0, 1] and back, and rounding
  happen in the graph, so a caller hands over its frames untouched; the fourth channel passes
  through unchanged. The filter treats every colour channel alike, so one model serves every
  channel order.
- ``image_filter_rgba8_slow``: ``image_filter_rgba8``'s bytes, after a Loop on one pixel that
  takes 0.15 to 0.4 s on one core (this machine; the service runs it faster than a bare
  onnxruntime session) whatever the frame size: a model slower than a video frame
  (the OBS filter's tests and bench, docs/obs.md).
"""

from __future__ import annotations

import atexit
import logging
import os
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from fenceline.errors import InvalidArgument

log = logging.getLogger("fenceline.models")

OPSET = 17
IR_VERSION = 8  # readable by every onnxruntime since 1.10


def _model(graph: onnx.GraphProto) -> bytes:
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)])
    m.ir_version = IR_VERSION
    onnx.checker.check_model(m)
    data: bytes = m.SerializeToString()
    return data


def add_model(shape: list[int | str], datatype: int = TensorProto.FLOAT) -> bytes:
    x = helper.make_tensor_value_info("x", datatype, shape)
    y = helper.make_tensor_value_info("y", datatype, shape)
    np_type = helper.tensor_dtype_to_np_dtype(datatype)
    one = numpy_helper.from_array(np.ones([1], dtype=np_type), "one")
    graph = helper.make_graph([helper.make_node("Add", ["x", "one"], ["y"])], "add", [x], [y], [one])
    return _model(graph)


def nan_guard_model(shape: list[int]) -> bytes:
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, shape)
    size = int(np.prod(shape))
    # The bad shape asks for 7 rows: no frame of 2^k * 3 elements splits into 7.
    bad = [7, -1] if size % 7 else [size + 1]
    inits = [
        numpy_helper.from_array(np.ones([1], dtype=np.float32), "one"),
        numpy_helper.from_array(np.array([0.5], dtype=np.float32), "half"),
        numpy_helper.from_array(np.array(shape, dtype=np.int64), "good_shape"),
        numpy_helper.from_array(np.array(bad + [1] * (len(shape) - len(bad)), dtype=np.int64),
                                "bad_shape"),
    ]
    nodes = [
        helper.make_node("IsNaN", ["x"], ["nan"]),
        helper.make_node("Cast", ["nan"], ["nan_f"], to=TensorProto.FLOAT),
        helper.make_node("ReduceMax", ["nan_f"], ["any_nan"], keepdims=0),
        helper.make_node("Greater", ["any_nan", "half"], ["refuse"]),
        helper.make_node("Where", ["refuse", "bad_shape", "good_shape"], ["shape"]),
        helper.make_node("Add", ["x", "one"], ["sum"]),
        helper.make_node("Reshape", ["sum", "shape"], ["y"]),
    ]
    return _model(helper.make_graph(nodes, "nan_guard", [x], [y], inits))


def slow_add_model(shape: list[int], trips: int) -> bytes:
    def vi(name: str, dt: int, dims: list[int]) -> onnx.ValueInfoProto:
        return helper.make_tensor_value_info(name, dt, dims)

    body = helper.make_graph(
        [helper.make_node("Mul", ["acc_in", "one_b"], ["acc_out"]),
         helper.make_node("Identity", ["cond_in"], ["cond_out"])],
        "body",
        [vi("i", TensorProto.INT64, []), vi("cond_in", TensorProto.BOOL, []),
         vi("acc_in", TensorProto.FLOAT, shape)],
        [vi("cond_out", TensorProto.BOOL, []), vi("acc_out", TensorProto.FLOAT, shape)],
        [numpy_helper.from_array(np.ones([1], np.float32), "one_b")],
    )
    inits = [
        numpy_helper.from_array(np.array(trips, np.int64), "trips"),
        numpy_helper.from_array(np.array(True), "cond"),
        numpy_helper.from_array(np.ones([1], np.float32), "one"),
    ]
    nodes = [
        helper.make_node("Loop", ["trips", "cond", "x"], ["acc"], body=body),
        helper.make_node("Add", ["acc", "one"], ["y"]),
    ]
    graph = helper.make_graph(
        nodes, "slow_add", [vi("x", TensorProto.FLOAT, shape)], [vi("y", TensorProto.FLOAT, shape)],
        inits,
    )
    return _model(graph)


def image_filter_model(height: int = 720, width: int = 1280, exposure: float = 2.0) -> bytes:
    shape = [1, 3, height, width]
    sharpen = np.array([[0, -1, 0], [-1, 5, -1], [0, -1, 0]], dtype=np.float32)
    weights = np.stack([sharpen[None]] * 3)  # 3x1x3x3, one kernel per channel
    inits = [
        numpy_helper.from_array(weights, "sharpen"),
        numpy_helper.from_array(np.array([exposure], dtype=np.float32), "exposure"),
        numpy_helper.from_array(np.array([1.0], dtype=np.float32), "one"),
    ]
    nodes = [
        helper.make_node("Conv", ["image", "sharpen"], ["sharp"], group=3, pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["sharp"], ["positive"]),
        helper.make_node("Mul", ["positive", "exposure"], ["exposed"]),
        helper.make_node("Add", ["exposed", "one"], ["denominator"]),
        helper.make_node("Div", ["exposed", "denominator"], ["display"]),
    ]
    graph = helper.make_graph(
        nodes,
        "image_filter",
        [helper.make_tensor_value_info("image", TensorProto.FLOAT, shape)],
        [helper.make_tensor_value_info("display", TensorProto.FLOAT, shape)],
        inits,
    )
    return _model(graph)


def packed_image_filter_model(channels: int, exposure: float = 2.0, spin_trips: int = 0) -> bytes:
    """The packed-pixel filter; ``spin_trips`` > 0 adds a Loop of that many exact multiplies by
    one on one pixel, whose result (times zero) is added before the final cast: the same bytes
    out, only later (a model slower than a video frame, for the OBS filter's tests)."""
    if channels not in (3, 4):
        raise ValueError("packed pixels have 3 or 4 channels")
    shape: list[int | str] = [1, "height", "width", channels]
    sharpen = np.array([[0, -1, 0], [-1, 5, -1], [0, -1, 0]], dtype=np.float32)
    inits = [
        numpy_helper.from_array(np.stack([sharpen[None]] * 3), "sharpen"),
        numpy_helper.from_array(np.array([1 / 255], dtype=np.float32), "to_unit"),
        numpy_helper.from_array(np.array([exposure], dtype=np.float32), "exposure"),
        numpy_helper.from_array(np.array([1.0], dtype=np.float32), "one"),
        numpy_helper.from_array(np.array([255.0], dtype=np.float32), "to_byte"),
        numpy_helper.from_array(np.array([0.5], dtype=np.float32), "half"),
    ]
    # Every node that reads `image` is an ancestor of the single node that writes `display`, so
    # the service may bind both to the same bytes (the GStreamer element runs in place).
    nodes = [
        helper.make_node("Cast", ["image"], ["pixels"], to=TensorProto.FLOAT),
    ]
    colour_nhwc = "pixels"
    if channels == 4:
        # Only the 4-channel model slices alpha off (onnxruntime warns of unused initializers).
        inits += [numpy_helper.from_array(np.array([v], dtype=np.int64), name)
                  for name, v in (("c0", 0), ("c3", 3), ("c4", 4), ("axis_c", 3))]
        nodes += [
            helper.make_node("Slice", ["pixels", "c0", "c3", "axis_c"], ["rgb"]),
            helper.make_node("Slice", ["pixels", "c3", "c4", "axis_c"], ["alpha"]),
        ]
        colour_nhwc = "rgb"
    nodes += [
        helper.make_node("Transpose", [colour_nhwc], ["nchw"], perm=[0, 3, 1, 2]),
        helper.make_node("Mul", ["nchw", "to_unit"], ["unit"]),
        helper.make_node("Conv", ["unit", "sharpen"], ["sharp"], group=3, pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["sharp"], ["positive"]),
        helper.make_node("Mul", ["positive", "exposure"], ["exposed"]),
        helper.make_node("Add", ["exposed", "one"], ["denominator"]),
        helper.make_node("Div", ["exposed", "denominator"], ["toned"]),
        helper.make_node("Transpose", ["toned"], ["toned_nhwc"], perm=[0, 2, 3, 1]),
        # x / (1 + x) stays below 1: scaled to bytes, + 0.5 and a truncating cast round it.
        helper.make_node("Mul", ["toned_nhwc", "to_byte"], ["bytes"]),
        helper.make_node("Add", ["bytes", "half"], ["rounded"]),
    ]
    if spin_trips > 0:
        nodes[-1].output[0] = "rounded_fast"
        body = helper.make_graph(
            [helper.make_node("Mul", ["acc_in", "one_b"], ["acc_out"]),
             helper.make_node("Identity", ["cond_in"], ["cond_out"])],
            "spin",
            [helper.make_tensor_value_info("i", TensorProto.INT64, []),
             helper.make_tensor_value_info("cond_in", TensorProto.BOOL, []),
             helper.make_tensor_value_info("acc_in", TensorProto.FLOAT, [1, 1, 1, 1])],
            [helper.make_tensor_value_info("cond_out", TensorProto.BOOL, []),
             helper.make_tensor_value_info("acc_out", TensorProto.FLOAT, [1, 1, 1, 1])],
            [numpy_helper.from_array(np.ones([1], np.float32), "one_b")],
        )
        inits += [
            numpy_helper.from_array(np.zeros([4], np.int64), "first_start"),
            numpy_helper.from_array(np.ones([4], np.int64), "first_end"),
            numpy_helper.from_array(np.array(spin_trips, np.int64), "trips"),
            numpy_helper.from_array(np.array(True), "cond"),
            numpy_helper.from_array(np.zeros([1], np.float32), "zero"),
        ]
        nodes += [
            helper.make_node("Slice", ["pixels", "first_start", "first_end"], ["first"]),
            helper.make_node("Loop", ["trips", "cond", "first"], ["spun"], body=body),
            helper.make_node("Mul", ["spun", "zero"], ["nothing"]),
            helper.make_node("Add", ["rounded_fast", "nothing"], ["rounded"]),
        ]
    if channels == 4:
        nodes += [
            helper.make_node("Concat", ["rounded", "alpha"], ["joined"], axis=3),
            helper.make_node("Cast", ["joined"], ["display"], to=TensorProto.UINT8),
        ]
    else:
        nodes.append(helper.make_node("Cast", ["rounded"], ["display"], to=TensorProto.UINT8))
    graph = helper.make_graph(
        nodes,
        f"image_filter_packed{channels}",
        [helper.make_tensor_value_info("image", TensorProto.UINT8, shape)],
        [helper.make_tensor_value_info("display", TensorProto.UINT8, shape)],
        inits,
    )
    return _model(graph)


BUILTIN: dict[str, Callable[[], bytes]] = {
    "add_64x64": lambda: add_model([1, 3, 64, 64]),
    "add_720p": lambda: add_model([1, 3, 720, 1280]),
    "add_1080p": lambda: add_model([1, 3, 1080, 1920]),
    "add_4k": lambda: add_model([1, 3, 2160, 3840]),
    "add_64x64_fp16": lambda: add_model([1, 3, 64, 64], TensorProto.FLOAT16),
    "add_720p_fp16": lambda: add_model([1, 3, 720, 1280], TensorProto.FLOAT16),
    "add_1080p_fp16": lambda: add_model([1, 3, 1080, 1920], TensorProto.FLOAT16),
    "add_4k_fp16": lambda: add_model([1, 3, 2160, 3840], TensorProto.FLOAT16),
    "image_filter": lambda: image_filter_model(),
    "image_filter_rgba8": lambda: packed_image_filter_model(4),
    "image_filter_rgb8": lambda: packed_image_filter_model(3),
    "image_filter_rgba8_slow": lambda: packed_image_filter_model(4, spin_trips=160_000),
    "nan_guard_64x64": lambda: nan_guard_model([1, 3, 64, 64]),
    "slow_add_64x64": lambda: slow_add_model([1, 3, 64, 64], 250_000),
    "add_dynamic": lambda: add_model([1, 3, "height", "width"]),
}


def build_repository(root: Path, names: list[str] | None = None) -> Path:
    """Writes ``root/<name>/1/model.onnx`` for each builtin model, unless the same bytes are
    already there (a cache written by an older fenceline is refreshed)."""
    for name in names if names is not None else list(BUILTIN):
        path = root / name / "1" / "model.onnx"
        data = BUILTIN[name]()
        if path.is_file() and path.stat().st_size == len(data) and path.read_bytes() == data:
            continue
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_bytes(data)
        tmp.replace(path)
    return root


def cache_dir() -> Path:
    base = os.environ.get("FENCELINE_CACHE") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "fenceline"
    )
    return Path(base) / "models"


def builtin_repository() -> Path:
    """A repository with every builtin model: the user's cache, else (a read-only home, a
    sandboxed service) a private temporary directory, removed at exit."""
    try:
        return build_repository(cache_dir())
    except OSError as e:
        log.warning("cannot write the builtin models to %s (%s); using a temporary directory",
                    cache_dir(), e.strerror)
    tmp = tempfile.mkdtemp(prefix="fenceline-models-")
    atexit.register(shutil.rmtree, tmp, True)
    return build_repository(Path(tmp))


def write_models(root: Path, names: list[str] | None = None) -> list[Path]:
    """``fenceline models write``: the builtin models in Triton's layout under ``root``."""
    unknown = sorted(set(names or ()) - set(BUILTIN))
    if unknown:
        raise InvalidArgument(
            f"no builtin model named {', '.join(unknown)}; they are {', '.join(BUILTIN)}"
        )
    chosen = names or list(BUILTIN)
    try:
        build_repository(root, chosen)
    except OSError as e:
        raise InvalidArgument(f"cannot write models to {root}: {e.strerror}") from None
    return [root / n / "1" / "model.onnx" for n in chosen]
