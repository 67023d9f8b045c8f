"""Wine 8.0 shims for the Windows CPython of the fenceline Windows lane (never in the product).

- ``_wmi`` calls propsys!VariantToString, a Wine 8 stub that aborts the process whenever
  ``platform.platform()`` or ``platform.processor()`` runs; without ``_wmi`` the platform module
  falls back to ``sys.getwindowsversion()``.
- kernel32!CopyFile2 does not exist in Wine 8; without ``_winapi.CopyFile2`` shutil copies with
  its portable loop.
"""

import sys


def _wine() -> bool:
    try:
        import ctypes

        return hasattr(ctypes.WinDLL("ntdll"), "wine_get_version")
    except Exception:
        return False


if sys.platform == "win32" and _wine():
    sys.modules.setdefault("_wmi", None)  # type: ignore[assignment]
    import _winapi

    if hasattr(_winapi, "CopyFile2"):
        del _winapi.CopyFile2
