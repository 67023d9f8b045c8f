"""The native module uses no C++ iostreams. Built by GCC 13, their locale code lands in the
module beside the libstdc++ that onnxruntime brings into the process, and an `ifstream >> int`
in it crashed the service on the GPU machine at its first run (a SIGSEGV in a `codecvt` facet;
the module carried 260 iostream and `codecvt` symbols). GCC 12 only references them, so the crash can't
happen here: the module's dynamic symbols are where it shows."""

import shutil
import subprocess
import sys

import pytest

from fenceline import _native

IOSTREAM_CLASSES = ("istream", "ostream", "fstream", "filebuf", "stringstream", "basic_ios",
                    "std::locale", "codecvt")


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads an ELF module's symbols")
def test_the_native_module_uses_no_iostreams() -> None:
    nm = shutil.which("nm")
    if nm is None:
        pytest.skip("nm (binutils) is not installed")
    listed = subprocess.run([nm, "-D", "-C", _native.__file__], capture_output=True, text=True,
                            check=True)
    names = [line.split(maxsplit=2)[-1] for line in listed.stdout.splitlines() if line.strip()]
    assert len(names) > 20, listed.stdout  # the module's own exports and imports were read
    used = sorted({n for n in names if any(c in n for c in IOSTREAM_CLASSES)})
    assert used == [], f"the native module uses iostreams: {used[:8]}"
