"""Where the C client (``libfenceline_client``, docs/c-api.md) lives in this installation.

The wheel carries the shared and static library, the header and a pkg-config file inside the
package: ``fenceline/lib``, ``fenceline/include``, ``fenceline/lib/pkgconfig``. A C build finds
them with ``python -m fenceline.client.c_api --cflags --libs`` or by adding ``--pkgconfig-path``
to ``PKG_CONFIG_PATH``.
"""

from __future__ import annotations

import argparse
import os
import shlex
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import fenceline
from fenceline.client.errors import ClientError

LIBRARY = "libfenceline_client.so"


def find_c_compiler() -> str | None:
    """``$CC``, else the first of cc, gcc, clang on PATH; None when there is none."""
    for name in (os.environ.get("CC"), "cc", "gcc", "clang"):
        if name and (path := shutil.which(name)):
            return path
    return None


def apt_install(packages: str) -> str:
    """The Debian command that installs ``packages``."""
    return f"sudo apt-get update && sudo apt-get install {packages}"


# Installing fenceline again is what builds a part whose build requirements came afterwards:
# CMake looks for them each time the package is installed (docs/install.md).
REINSTALL = "then install fenceline again: pip install . (in its source tree)"


@dataclass(frozen=True)
class Part:
    """A part of the install that CMake builds only where its requirements are: its ``name``
    and the ``remedy`` that builds a missing one."""

    name: str
    remedy: str


C_CLIENT = Part("the C client libfenceline_client",
                f"{apt_install('gcc')} (a C compiler), {REINSTALL}")
GST_ELEMENT = Part(
    "the GStreamer element fencelinefilter",
    f"{apt_install('pkg-config libgstreamer1.0-dev libgstreamer-plugins-base1.0-dev')} "
    f"(GStreamer 1.22+'s development packages), {REINSTALL}")
OBS_PLUGIN = Part("the OBS plugin fenceline-obs",
                  f"{apt_install('pkg-config libobs-dev libx11-dev')} (libobs 29+'s and X11's "
                  f"development packages), "
                  f"{REINSTALL}")


def _find(relative: str, part: Part) -> Path:
    # An editable install splits the package over the source tree and site-packages; what
    # CMake installed is in one of the package's path entries.
    for entry in fenceline.__path__:
        candidate = Path(entry) / relative
        if candidate.exists():
            return candidate
    raise ClientError(
        f"{part.name} is not installed with this fenceline ({relative} is in none of "
        f"{list(fenceline.__path__)}); {part.remedy}"
    )


def c_library_dir() -> Path:
    """The directory holding ``libfenceline_client.so`` and ``.a``."""
    return _find(f"lib/{LIBRARY}", C_CLIENT).parent


def c_include_dir() -> Path:
    """The directory to put on the include path: it holds ``fenceline/fenceline_client.h``."""
    return _find("include/fenceline/fenceline_client.h", C_CLIENT).parent.parent


def c_pkgconfig_dir() -> Path:
    """The directory holding ``fenceline-client.pc``."""
    return _find("lib/pkgconfig/fenceline-client.pc", C_CLIENT).parent


def c_examples_dir() -> Path:
    """The directory holding the example renderer's source (``renderer.c``)."""
    return _find("share/examples/renderer.c", C_CLIENT).parent


def gst_plugin_dir() -> Path:
    """The directory holding the GStreamer element ``fencelinefilter`` (``libgstfenceline.so``),
    for ``GST_PLUGIN_PATH`` (docs/gstreamer.md). It is built only where GStreamer's development
    packages were installed when fenceline was; else this raises ClientError."""
    return _find("lib/gstreamer-1.0/libgstfenceline.so", GST_ELEMENT).parent


def obs_plugin_dir() -> Path:
    """The directory holding the OBS filter module ``fenceline-obs.so`` and the headless OBS
    program ``fenceline-obs-driver`` (docs/obs.md). They are built only where libobs's
    development package was installed when fenceline was; else this raises ClientError."""
    return _find("lib/obs/fenceline-obs.so", OBS_PLUGIN).parent


def plugin_unavailable(program: str, package: str, plugin_dir: Callable[[], Path],
                       not_built: str) -> str | None:
    """Why a plugin cannot run here, or None: the ``program`` that hosts it is not on PATH
    (Debian's ``package`` has it), or ``plugin_dir`` finds no build of it (``not_built``)."""
    if shutil.which(program) is None:
        return f"{program} is not installed (Debian: {package})"
    try:
        plugin_dir()
    except ClientError as e:
        return f"{not_built}: {e}"
    return None


def c_compile_flags() -> list[str]:
    return [f"-I{c_include_dir()}"]


def c_link_flags() -> list[str]:
    """Links the shared library, with an rpath so programs find it without LD_LIBRARY_PATH."""
    lib = c_library_dir()
    return [f"-L{lib}", f"-Wl,-rpath,{lib}", "-lfenceline_client"]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m fenceline.client.c_api",
        description="Print what a C build needs to use libfenceline_client.",
    )
    p.add_argument("--cflags", action="store_true", help="compiler flags (include path)")
    p.add_argument("--libs", action="store_true", help="linker flags (with rpath)")
    p.add_argument("--libdir", action="store_true", help="the library directory")
    p.add_argument("--pkgconfig-path", action="store_true", help="directory for PKG_CONFIG_PATH")
    p.add_argument("--gst-plugin-path", action="store_true",
                   help="directory for GST_PLUGIN_PATH (the fencelinefilter element)")
    p.add_argument("--obs-plugin-path", action="store_true",
                   help="directory holding the OBS filter module fenceline-obs.so")
    args = p.parse_args(argv)
    try:
        out: list[str] = []
        if args.cflags:
            out += c_compile_flags()
        if args.libs:
            out += c_link_flags()
        if args.libdir:
            out.append(str(c_library_dir()))
        if args.pkgconfig_path:
            out.append(str(c_pkgconfig_dir()))
        if args.gst_plugin_path:
            out.append(str(gst_plugin_dir()))
        if args.obs_plugin_path:
            out.append(str(obs_plugin_dir()))
        if not out:
            out = [*c_compile_flags(), *c_link_flags()]
    except ClientError as e:
        p.exit(2, f"fenceline: {e}\n")
    print(" ".join(shlex.quote(s) for s in out))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
