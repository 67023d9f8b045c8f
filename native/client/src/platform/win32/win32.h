/* Small Windows helpers of the C client's Windows files (C11; MSVC and mingw-w64). */
#ifndef FENCELINE_CLIENT_WIN32_H
#define FENCELINE_CLIENT_WIN32_H

#ifndef WIN32_LEAN_AND_MEAN
#define WIN32_LEAN_AND_MEAN
#endif
#include <windows.h>

#include "internal.h"

/* UTF-8 to a malloc'd NUL-terminated UTF-16 string; NULL when s is not valid UTF-8 (or out of
 * memory). The caller frees it. */
wchar_t *fl_win_widen(const char *s);

/* A status for GetLastError() value err from `what`, mapped like the service's importer maps it
 * (native/importer/platform/win32/win32_util.h). */
FlStatus *fl_win_status(const char *what, DWORD err);

#endif
