"""Runs a shell block of the docs verbatim, as a reader would: in a fresh directory holding
this venv as .venv, with the service's port and socket from FENCELINE_* (8000 may be taken
here) so that the clients in the block find the socket the same way."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

# The block's background jobs (the service) are stopped when it ends, also when it fails.
SOURCE_BLOCK = 'set -e; trap "kill \\$(jobs -p) 2>/dev/null; wait" EXIT; source ./block.sh'


def run_docs_block(tmp_path: Path, block: str, timeout: float,
                   **env: str) -> subprocess.CompletedProcess[str]:
    """``block`` run by bash in ``tmp_path``, with ``env`` added to this environment less its
    FENCELINE_* variables; its exit status is the caller's to check."""
    (tmp_path / ".venv").symlink_to(Path(sys.executable).parents[1])
    (tmp_path / "block.sh").write_text(block)
    run_dir = tmp_path / "run"
    run_dir.mkdir(mode=0o700)
    full = {k: v for k, v in os.environ.items() if not k.startswith("FENCELINE_")}
    full.update(FENCELINE_PORT="0", FENCELINE_SOCKET=str(tmp_path / "fl.sock"),
                XDG_RUNTIME_DIR=str(run_dir), **env)
    return subprocess.run(["bash", "-c", SOURCE_BLOCK], cwd=tmp_path, env=full,
                          capture_output=True, text=True, timeout=timeout)
