/* Windows: a named semaphore beside the page wakes sleepers in other processes.
 *
 * WaitOnAddress cannot serve: it only wakes threads of the process that calls WakeByAddress*.
 * The page's `waiters` word counts the sleepers; a signaller that sees n > 0 of them releases the
 * semaphore n times. A sleeper registers (waiters + 1) before it reads `seq` once more, and the
 * signaller bumps `seq` before it reads `waiters`, both sequentially consistent: either the
 * sleeper sees the new seq and does not sleep, or the signaller sees the sleeper and releases it.
 * A release that outlives its sleeper (it timed out meanwhile) only makes a later wait return
 * early and check again.
 */
#ifndef WIN32_LEAN_AND_MEAN
#define WIN32_LEAN_AND_MEAN
#endif
#include <windows.h>

#include <stdlib.h>
#include <string.h>

#include "../atomic.h"
#include "../htl_wake.h"

#ifndef SEMAPHORE_QUERY_STATE /* winnt.h's in the Windows SDK; not in every mingw-w64 */
#define SEMAPHORE_QUERY_STATE 0x0001
#endif

struct fl_htl_wake {
  HANDLE semaphore;
};

int64_t fl_htl_now_ns(void) {
  static LARGE_INTEGER freq; /* constant for the life of the system */
  LARGE_INTEGER now;
  if (freq.QuadPart == 0) QueryPerformanceFrequency(&freq);
  QueryPerformanceCounter(&now);
  return (int64_t)((double)now.QuadPart * 1e9 / (double)freq.QuadPart);
}

/* UTF-8 page name + ".wake" as UTF-16; NULL when it does not convert. Caller frees. */
static wchar_t *wake_name(const char *name) {
  size_t n = strlen(name);
  size_t suffix = sizeof(FL_HTL_WAKE_SUFFIX) - 1;
  char *full = (char *)malloc(n + suffix + 1);
  if (full == NULL) return NULL;
  memcpy(full, name, n);
  memcpy(full + n, FL_HTL_WAKE_SUFFIX, suffix + 1);
  int wn = MultiByteToWideChar(CP_UTF8, MB_ERR_INVALID_CHARS, full, -1, NULL, 0);
  wchar_t *w = wn > 0 ? (wchar_t *)malloc((size_t)wn * sizeof(wchar_t)) : NULL;
  if (w != NULL && MultiByteToWideChar(CP_UTF8, MB_ERR_INVALID_CHARS, full, -1, w, wn) != wn) {
    free(w);
    w = NULL;
  }
  free(full);
  return w;
}

/* The wake semaphore's maximum count must be FL_HTL_WAKE_MAX_COUNT (docs/fences.md, Windows):
 * a signaller releases it once per sleeper (up to 0x10000 at a time), and a release that would
 * pass the maximum fails whole (ERROR_TOO_MANY_POSTS), waking nobody. Read with
 * NtQuerySemaphore (SemaphoreBasicInformation), looked up at run time: no import library
 * declares it. 1: right, 0: another maximum, -1: unreadable (the handle lacks
 * SEMAPHORE_QUERY_STATE, or ntdll does not answer). */
typedef struct {
  LONG current;
  LONG maximum;
} fl_semaphore_basic_information;
typedef LONG(NTAPI *fl_nt_query_semaphore)(HANDLE, int, void *, ULONG, ULONG *);

static int wake_max_count_ok(HANDLE h) {
  HMODULE ntdll = GetModuleHandleW(L"ntdll.dll");
  FARPROC proc = ntdll == NULL ? NULL : GetProcAddress(ntdll, "NtQuerySemaphore");
  if (proc == NULL) return -1;
  fl_nt_query_semaphore query;
  memcpy(&query, &proc, sizeof query); /* a function pointer cast without a cast warning */
  fl_semaphore_basic_information info;
  ULONG got = 0;
  if (query(h, 0 /* SemaphoreBasicInformation */, &info, sizeof info, &got) < 0) return -1;
  return info.maximum == FL_HTL_WAKE_MAX_COUNT ? 1 : 0;
}

static int wake_check(HANDLE h) {
  switch (wake_max_count_ok(h)) {
    case 1: return 0;
    case 0: return FL_HTL_E_WAKE_COUNT;
    default: return FL_HTL_E_WAKE_UNREADABLE;
  }
}

int fl_htl_wake_open(const char *name, int create, fl_htl_wake **out) {
  *out = NULL;
  if (name == NULL) {
    if (!create) return FL_HTL_E_NOT_FOUND;
    HANDLE anonymous = CreateSemaphoreW(NULL, 0, FL_HTL_WAKE_MAX_COUNT, NULL);
    if (anonymous == NULL) return FL_HTL_E_OS;
    return fl_htl_wake_adopt((intptr_t)anonymous, out);
  }
  wchar_t *wname = wake_name(name);
  if (wname == NULL) return FL_HTL_E_OS;
  HANDLE h;
  if (create) {
    /* NULL security attributes: the default DACL of the creator's token (same user only). */
    h = CreateSemaphoreW(NULL, 0, FL_HTL_WAKE_MAX_COUNT, wname);
    if (h != NULL && GetLastError() == ERROR_ALREADY_EXISTS) {
      /* Someone holds this name already: never share a squatted object. */
      CloseHandle(h);
      free(wname);
      return FL_HTL_E_EXISTS;
    }
  } else {
    h = OpenSemaphoreW(SEMAPHORE_QUERY_STATE | SEMAPHORE_MODIFY_STATE | SYNCHRONIZE, FALSE, wname);
  }
  DWORD err = h == NULL ? GetLastError() : 0;
  free(wname);
  if (h == NULL) {
    if (err == ERROR_FILE_NOT_FOUND) return FL_HTL_E_NOT_FOUND;
    if (err == ERROR_INVALID_HANDLE) return FL_HTL_E_WRONG_TYPE;
    return FL_HTL_E_OS;
  }
  if (!create) {
    int rc = wake_check(h);
    if (rc != 0) {
      CloseHandle(h);
      return rc;
    }
  }
  fl_htl_wake *w = (fl_htl_wake *)malloc(sizeof *w);
  if (w == NULL) {
    CloseHandle(h);
    return FL_HTL_E_OS;
  }
  w->semaphore = h;
  *out = w;
  return 0;
}

int fl_htl_wake_adopt(intptr_t handle, fl_htl_wake **out) {
  *out = NULL;
  if (handle == 0 || handle == (intptr_t)INVALID_HANDLE_VALUE) return FL_HTL_E_OS;
  int rc = wake_check((HANDLE)handle);
  if (rc != 0) {
    CloseHandle((HANDLE)handle);
    return rc;
  }
  fl_htl_wake *w = (fl_htl_wake *)malloc(sizeof *w);
  if (w == NULL) {
    CloseHandle((HANDLE)handle);
    return FL_HTL_E_OS;
  }
  w->semaphore = (HANDLE)handle;
  *out = w;
  return 0;
}

intptr_t fl_htl_wake_native(const fl_htl_wake *w) {
  return w == NULL ? -1 : (intptr_t)w->semaphore;
}

void fl_htl_wake_close(fl_htl_wake *w) {
  if (w == NULL) return;
  CloseHandle(w->semaphore);
  free(w);
}

void fl_htl_wake_all(fl_htl_page *p, fl_htl_wake *w) {
  fl_fence_seq_cst();
  uint32_t n = fl_load_u32(&p->waiters);
  if (n == 0 || w == NULL) return;
  if (n > 0x10000u) n = 0x10000u; /* a crashed sleeper's count must not overflow the semaphore */
  ReleaseSemaphore(w->semaphore, (LONG)n, NULL);
}

void fl_htl_sleep(fl_htl_page *p, fl_htl_wake *w, uint32_t seen_seq, int64_t timeout_ns) {
  DWORD ms = INFINITE;
  if (timeout_ns >= 0) {
    int64_t m = (timeout_ns + 999999) / 1000000;
    ms = m >= (int64_t)INFINITE ? INFINITE - 1 : (DWORD)m;
  }
  if (w == NULL) {
    /* No wake object (an anonymous page): poll. */
    Sleep(ms == INFINITE || ms > 1 ? 1 : ms);
    return;
  }
  fl_fetch_add_u32(&p->waiters, 1u);
  fl_fence_seq_cst();
  if (fl_load_u32(&p->seq) == seen_seq) WaitForSingleObject(w->semaphore, ms);
  fl_fetch_add_u32(&p->waiters, (uint32_t)-1);
}
