/* Stand-in for bcryptprimitives.dll, which Wine 8.0 does not ship. Rust's std (1.78 and later)
 * imports ProcessPrng from it, so pydantic-core cannot load under Wine 8 without it. Lane only:
 * every real Windows 10/11 has the DLL. */
#include <windows.h>
#include <ntsecapi.h>

BOOL WINAPI ProcessPrng(PBYTE out, SIZE_T n) {
  while (n > 0) {
    ULONG part = n > 0x1000000u ? 0x1000000u : (ULONG)n;
    if (!RtlGenRandom(out, part)) return FALSE;
    out += part;
    n -= part;
  }
  return TRUE;
}

BOOL WINAPI DllMain(HINSTANCE module, DWORD reason, LPVOID reserved) {
  (void)module;
  (void)reason;
  (void)reserved;
  return TRUE;
}
