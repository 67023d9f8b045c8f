"""One wire contract: native/common/fenceline_wire.h. The importer hands its numbers to Python
(fenceline._native), the C client compiles them in; these tests prove that the header as it is
now, the built extension, fenceline.errors, fenceline.protocol.codec and libfenceline_client all
say the same."""

from __future__ import annotations

import ctypes
import re
import struct
from pathlib import Path

from fenceline import _native, errors
from fenceline.client import c_api
from fenceline.protocol import codec

HEADER = Path(__file__).resolve().parents[2] / "native" / "common" / "fenceline_wire.h"


def header_errors() -> dict[str, int]:
    """The X(NAME, number, "name", "action") rows of FL_WIRE_ERRORS, read from the source."""
    text = HEADER.read_text()
    block = text[text.index("#define FL_WIRE_ERRORS(X)"):]
    block = block[: block.index("\n\n")]
    return {name: int(number) for number, name in re.findall(r'X\(\w+, (\d+), "(\w+)"', block)}


def header_kinds() -> dict[str, int]:
    text = HEADER.read_text()
    block = text[text.index("#define FL_WIRE_KINDS(X)"):]
    block = block[: block.index("\n\n")]
    return {name: int(value, 16) for name, value in re.findall(r"X\((\w+), (0x[0-9A-Fa-f]+)\)", block)}


def test_the_extension_was_built_from_the_header_as_it_is() -> None:
    assert len(header_errors()) == 13
    assert _native.error_codes() == header_errors()
    assert _native.wire_kinds() == header_kinds()


def test_every_service_error_class_has_the_header_code_and_back() -> None:
    codes = _native.error_codes()
    assert {cls.code for cls in errors.ALL} == set(codes)
    for cls in errors.ALL:
        assert cls.ipc_code == codes[cls.code], cls
    assert sorted(errors.BY_IPC_CODE) == sorted(codes.values())


def test_the_c_client_names_every_code_as_the_service_does() -> None:
    lib = ctypes.CDLL(str(c_api.c_library_dir() / c_api.LIBRARY))
    lib.FlGetApi.restype = ctypes.c_void_p
    lib.FlGetApi.argtypes = [ctypes.c_uint32]
    table = lib.FlGetApi(3)
    assert table is not None
    # GetErrorCodeName is the fourth entry of the FlApi table.
    slot = ctypes.c_void_p.from_address(table + 3 * ctypes.sizeof(ctypes.c_void_p)).value
    name_of = ctypes.CFUNCTYPE(ctypes.c_char_p, ctypes.c_int)(slot)
    for name, number in _native.error_codes().items():
        assert name_of(number).decode() == name
    assert name_of(1000).decode() == "transport"  # the client's own, never on the wire
    assert name_of(555).decode() == "unknown"


def _offsets(layout: struct.Struct) -> list[int]:
    """Where each field of a little-endian struct format starts."""
    fmt = layout.format[1:]
    fields = re.findall(r"\d*[a-zA-Z]", fmt)
    return [struct.calcsize("<" + "".join(fields[:i])) for i in range(len(fields))]


def test_the_python_codec_reads_every_field_where_the_c_structs_have_it() -> None:
    offsets = _native.wire_offsets()
    for layout, fields in ((codec.HEADER, offsets["header"]), (codec.RUN_BODY, offsets["run"]),
                           (codec.RUN_REPLY_BODY, offsets["run_reply"])):
        assert _offsets(layout) == sorted(fields.values()), (layout.format, fields)


def test_the_python_codec_matches_the_c_layout() -> None:
    assert codec.HEADER.size == _native.WIRE_HEADER_SIZE == 16
    assert codec.RUN_BODY.size == _native.WIRE_RUN_SIZE == 40
    assert codec.RUN_REPLY_BODY.size == _native.WIRE_RUN_REPLY_SIZE == 24
    assert codec.ERROR_CODE.size == 4
    assert (codec.MAGIC, codec.VERSION) == (0x50494C46, 1)
    assert {k.name: int(k) for k in codec.Kind} == _native.wire_kinds()
    # RUN_ASYNC travels with RUN's body: only the kind differs.
    run = codec.Run(bytes(range(16)), 7, 9, 100)
    sync, async_ = codec.encode_run(1, run), codec.encode_run_async(1, run)
    assert sync[:6] == async_[:6] and sync[8:] == async_[8:]
    assert codec.decode(async_).kind == codec.Kind.RUN_ASYNC == 0x0011


def test_the_reply_flags_feature_is_named_as_the_header_names_it() -> None:
    """A RUN reply carries flags only for a client whose HELLO named this feature
    (docs/ipc.md, "HELLO"): the header, the extension, the codec and the service's HELLO
    agree on its name, and the flag bits stay as shipped."""
    named = re.search(r'#define FL_WIRE_FEATURE_REPLY_FLAGS "(\w+)"', HEADER.read_text())
    assert named is not None
    assert named.group(1) == _native.WIRE_FEATURE_REPLY_FLAGS == codec.FEATURE_REPLY_FLAGS
    assert codec.FEATURE_REPLY_FLAGS in codec.FEATURES
    assert codec.REPLY_CPUS_SHARED == _native.WIRE_REPLY_CPUS_SHARED == 1
