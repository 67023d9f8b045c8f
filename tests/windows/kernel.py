"""Kernel objects the Windows lane's tests make and inspect themselves, through kernel32."""

from __future__ import annotations

import ctypes


def event_handle() -> int:
    """A new unnamed auto-reset event: any kernel handle that is not a section or a fence."""
    kernel32 = ctypes.WinDLL("kernel32", use_last_error=True)
    kernel32.CreateEventW.restype = ctypes.c_void_p
    handle = kernel32.CreateEventW(None, False, False, None)
    assert handle
    return int(handle)


def close_handle(handle: int) -> None:
    ctypes.WinDLL("kernel32").CloseHandle(ctypes.c_void_p(handle))


def handle_is_open(handle: int) -> bool:
    kernel32 = ctypes.WinDLL("kernel32", use_last_error=True)
    kernel32.GetHandleInformation.argtypes = [ctypes.c_void_p, ctypes.POINTER(ctypes.c_ulong)]
    flags = ctypes.c_ulong()
    return bool(kernel32.GetHandleInformation(ctypes.c_void_p(handle), ctypes.byref(flags)))
