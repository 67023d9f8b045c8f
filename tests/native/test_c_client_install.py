"""The C client as an engine gets it: native/client built alone with CMake (no Python, no
pybind11), installed into a prefix, the prefix moved elsewhere, and programs outside this build
(tests/native/consumer: C, and C++ through the header-only wrapper) built against it with
find_package and with pkg-config, then run against a real service."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from fenceline.client import c_api
from fenceline.client.c_api import find_c_compiler
from tests.support.service import Service

ROOT = Path(__file__).resolve().parents[2]
CLIENT_SRC = ROOT / "native" / "client"
CONSUMER = Path(__file__).resolve().parent / "consumer"


def find_cmake() -> str | None:
    """The venv's cmake (the [test] extra installs one) first, then the system's."""
    here = Path(sys.executable).parent / "cmake"
    return str(here) if here.exists() else shutil.which("cmake")


CMAKE = find_cmake()
CC = find_c_compiler()
pytestmark = pytest.mark.skipif(
    CMAKE is None or CC is None,
    reason="needs cmake (the [test] extra) and a C compiler (cc, gcc or clang; or $CC)",
)


def header_version(name: str) -> int:
    text = (CLIENT_SRC / "include" / "fenceline" / "fenceline_client.h").read_text()
    m = re.search(rf"^#define {name} (\d+)u", text, re.M)
    assert m is not None, name
    return int(m.group(1))


ABI = header_version("FL_ABI_VERSION")
API = header_version("FL_API_VERSION")


def run(cmd: list[str | Path], timeout: float = 300, **kw: object) -> subprocess.CompletedProcess[str]:
    r = subprocess.run([str(c) for c in cmd], capture_output=True, text=True, timeout=timeout,
                       **kw)  # type: ignore[call-overload]
    assert r.returncode == 0, f"{' '.join(map(str, cmd))}\n{r.stdout}\n{r.stderr}"
    return r  # type: ignore[no-any-return]


def no_python_env() -> dict[str, str]:
    """An environment in which neither Python nor pybind11 could be found by CMake: the venv is
    off PATH and no Python variable points anywhere."""
    venv_bin = str(Path(sys.executable).parent)
    path = ":".join(p for p in os.environ.get("PATH", "").split(":") if p and p != venv_bin)
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("PYTHON", "VIRTUAL_ENV", "CMAKE_", "PKG_CONFIG"))}
    env["PATH"] = path
    assert CC is not None
    env["CC"] = CC
    return env


@pytest.fixture(scope="module")
def prefix(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """native/client configured alone, built, installed into one prefix, then moved to another:
    everything below must find itself from where it now lies."""
    assert CMAKE is not None
    tmp = tmp_path_factory.mktemp("client-install")
    build, first, moved = tmp / "build", tmp / "first-prefix", tmp / "moved" / "prefix"
    env = no_python_env()
    run([CMAKE, "-S", CLIENT_SRC, "-B", build, "-DFENCELINE_CLIENT_EXAMPLES=OFF",
         "-DCMAKE_DISABLE_FIND_PACKAGE_Python=ON", "-DCMAKE_DISABLE_FIND_PACKAGE_pybind11=ON",
         "-DCMAKE_EXPORT_COMPILE_COMMANDS=ON"], env=env)
    run([CMAKE, "--build", build, "--parallel", "2"], env=env)
    run([CMAKE, "--install", build, "--prefix", first], env=env)
    commands = json.loads((build / "compile_commands.json").read_text())
    assert commands and not any("python" in c["command"].lower() or "pybind11" in c["command"]
                                for c in commands)
    moved.parent.mkdir()
    shutil.move(str(first), str(moved))
    return moved


def test_install_has_the_versioned_soname_and_one_export(prefix: Path) -> None:
    lib = prefix / "lib"
    real = lib / f"libfenceline_client.so.{ABI}.{API}.0"
    assert real.is_file() and not real.is_symlink()
    assert os.readlink(lib / f"libfenceline_client.so.{ABI}") == real.name
    assert os.readlink(lib / "libfenceline_client.so") == f"libfenceline_client.so.{ABI}"
    readelf, nm = shutil.which("readelf"), shutil.which("nm")
    if readelf is None or nm is None:
        pytest.skip("no readelf or nm (binutils)")
    dynamic = run([readelf, "-d", real]).stdout
    assert f"Library soname: [libfenceline_client.so.{ABI}]" in dynamic
    symbols = run([nm, "-D", "--defined-only", real]).stdout.split()
    assert symbols[-1] == "FlGetApi" and len(symbols) == 3


def test_install_holds_headers_config_and_pkg_config(prefix: Path) -> None:
    for rel in ["include/fenceline/fenceline_client.h", "include/fenceline/fenceline_wire.h",
                "include/fenceline/fenceline_client.hpp",
                "lib/libfenceline_client.a", "lib/pkgconfig/fenceline-client.pc",
                "lib/cmake/fenceline_client/fenceline_clientConfig.cmake",
                "lib/cmake/fenceline_client/fenceline_clientConfigVersion.cmake",
                "share/fenceline/examples/renderer.c"]:
        assert (prefix / rel).is_file(), rel
    # Nothing in the installed tree names the place it was installed to first.
    for path in prefix.rglob("*"):
        if path.is_file() and path.suffix in {".cmake", ".pc"}:
            assert "first-prefix" not in path.read_text(), path


def consumer_build(prefix: Path, tmp: Path, *defines: str, include: Path | None = None) -> Path:
    assert CMAKE is not None
    build = tmp / "consumer-build"
    env = no_python_env()
    run([CMAKE, "-S", CONSUMER, "-B", build, f"-DCMAKE_PREFIX_PATH={prefix}",
         "-DCMAKE_EXPORT_COMPILE_COMMANDS=ON", *defines], env=env)
    run([CMAKE, "--build", build, "--parallel", "2"], env=env)
    commands = json.loads((build / "compile_commands.json").read_text())
    for c in commands:
        includes = re.findall(r"-I\s*(\S+)|-isystem\s+(\S+)", c["command"])
        paths = [a or b for a, b in includes]
        assert paths == [str(include or prefix / "include")], c["command"]
    return build


def test_find_package_builds_c_and_cxx_programs_that_run_against_a_service(
    prefix: Path, tmp_path: Path, service: Service
) -> None:
    build = consumer_build(prefix, tmp_path)
    for exe in ["consumer_shared", "consumer_static", "consumer_cxx"]:
        r = run([build / exe, service.socket], timeout=60, env=no_python_env())
        assert r.stdout.startswith(f"ok {ABI}.{API} "), r.stdout
    ldd = shutil.which("ldd")
    if ldd is not None:
        assert f"libfenceline_client.so.{ABI} => {prefix / 'lib'}" in run(
            [ldd, build / "consumer_shared"]).stdout
        assert "libfenceline_client" not in run([ldd, build / "consumer_static"]).stdout


def test_find_package_refuses_a_newer_api_or_another_abi(prefix: Path, tmp_path: Path) -> None:
    assert CMAKE is not None
    for wanted in [f"{ABI}.{API + 1}", f"{ABI + 1}.0"]:
        src = tmp_path / wanted
        src.mkdir()
        (src / "CMakeLists.txt").write_text(
            "cmake_minimum_required(VERSION 3.18)\nproject(p C)\n"
            f"find_package(fenceline_client {wanted} CONFIG REQUIRED)\n")
        r = subprocess.run([CMAKE, "-S", str(src), "-B", str(src / "b"),
                            f"-DCMAKE_PREFIX_PATH={prefix}"], capture_output=True, text=True,
                           timeout=120, env=no_python_env())
        assert r.returncode != 0
        said = " ".join(r.stderr.split())
        assert f"compatible with requested version \"{wanted}\"" in said, r.stderr
        assert f"version: {ABI}.{API}.0" in said, r.stderr


def test_pkg_config_from_the_moved_prefix_builds_a_program_that_runs(
    prefix: Path, tmp_path: Path, service: Service
) -> None:
    pkg_config = shutil.which("pkg-config")
    if pkg_config is None:
        pytest.skip("no pkg-config")
    env = dict(no_python_env(), PKG_CONFIG_PATH=str(prefix / "lib" / "pkgconfig"))
    flags = run([pkg_config, "--cflags", "--libs", "fenceline-client"], env=env).stdout.split()
    assert f"-I{prefix}/lib/pkgconfig/../../include" in flags
    assert run([pkg_config, "--modversion", "fenceline-client"], env=env).stdout.strip() == (
        f"{ABI}.{API}.0")
    libdir = run([pkg_config, "--variable=libdir", "fenceline-client"], env=env).stdout.strip()
    assert CC is not None
    exe = tmp_path / "consumer_pc"
    run([CC, "-std=c11", "-Wall", "-Wextra", "-Werror", CONSUMER / "consumer.c", *flags,
         f"-Wl,-rpath,{libdir}", "-o", exe], env=env)
    r = run([exe, service.socket], timeout=60, env=env)
    assert r.stdout.startswith(f"ok {ABI}.{API} "), r.stdout


def test_find_package_finds_the_python_packages_copy(tmp_path: Path, service: Service) -> None:
    """The wheel carries the same package config inside fenceline/lib: a C++ engine that has
    the Python package installed points CMake at it and gets the package's own library."""
    package = c_api.c_library_dir().parent
    build = consumer_build(package, tmp_path, include=c_api.c_include_dir())
    r = run([build / "consumer_cxx", service.socket], timeout=60, env=no_python_env())
    assert r.stdout.startswith(f"ok {ABI}.{API} "), r.stdout
