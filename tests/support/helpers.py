"""Building blocks for tests that play the renderer: frames, fences and a session for a model."""

from __future__ import annotations

import contextlib
import os
import pwd
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import onnxruntime as ort

from fenceline.client import Fence, IpcClient, SharedFrame, View


@dataclass
class FrameSession:
    """A renderer's side of one session: one buffer holding input then output, two fences."""

    client: IpcClient
    frame: SharedFrame
    wait: Fence
    signal: Fence
    memory_id: str
    wait_id: str
    signal_id: str
    session_id: str
    x: np.ndarray
    y: np.ndarray

    def close(self) -> None:
        self.frame.close()
        self.wait.close()
        self.signal.close()


def open_session(
    client: IpcClient,
    model: str,
    shape: list[int],
    *,
    dtype: type = np.float32,
    datatype: str = "FP32",
    input_name: str = "x",
    output_name: str = "y",
    named: bool = False,
) -> FrameSession:
    nbytes = int(np.prod(shape)) * np.dtype(dtype).itemsize
    frame = SharedFrame(2 * nbytes, named=named)
    wait, signal = Fence(named=named), Fence(named=named)
    mid = client.import_memory(frame)
    wid, sid = client.import_fence(wait), client.import_fence(signal)
    info = client.create_session(
        model,
        {input_name: View(mid, datatype, shape)},
        {output_name: View(mid, datatype, shape, nbytes)},
        wid,
        sid,
    )
    return FrameSession(
        client, frame, wait, signal, mid, wid, sid, info["id"],
        frame.array(dtype, shape), frame.array(dtype, shape, nbytes),
    )


def reference(model_repo: Path, model: str, inputs: dict[str, np.ndarray]) -> list[np.ndarray]:
    """The same model run directly by onnxruntime, for bitwise comparisons."""
    sess = ort.InferenceSession(
        str(model_repo / model / "1" / "model.onnx"), providers=["CPUExecutionProvider"]
    )
    return list(sess.run(None, inputs))


def ensure_user(name: str) -> pwd.struct_passwd:
    """A second real Unix user (needs root). Kept afterwards: concurrent runs may share it."""
    try:
        return pwd.getpwnam(name)
    except KeyError:
        subprocess.run(["useradd", "--system", "--no-create-home", "--shell", "/usr/sbin/nologin",
                        name], capture_output=True, check=False)  # fmt: skip
        return pwd.getpwnam(name)  # made by us or by a concurrent run


@contextlib.contextmanager
def shared_dir() -> Iterator[Path]:
    """A directory under /tmp that other users may pass through (0711), as /run/fenceline."""
    d = Path(tempfile.mkdtemp(prefix="fenceline-mu-", dir="/tmp"))
    os.chmod(d, 0o711)
    try:
        yield d
    finally:
        shutil.rmtree(d, ignore_errors=True)
