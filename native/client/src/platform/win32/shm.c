/* Windows shared memory for frames and fences: pagefile-backed sections by NT name (Local\...,
 * Global\...), mapped with MapViewOfFile. A fence page comes with its wake semaphore
 * "<name>.wake" (docs/fences.md, Windows). Names die with their last handle: nothing is
 * unlinked. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "platform/win32/win32.h"

wchar_t *fl_win_widen(const char *s) {
  int n = MultiByteToWideChar(CP_UTF8, MB_ERR_INVALID_CHARS, s, -1, NULL, 0);
  if (n <= 0) return NULL;
  wchar_t *w = (wchar_t *)malloc((size_t)n * sizeof(wchar_t));
  if (w != NULL && MultiByteToWideChar(CP_UTF8, MB_ERR_INVALID_CHARS, s, -1, w, n) != n) {
    free(w);
    w = NULL;
  }
  return w;
}

FlStatus *fl_win_status(const char *what, DWORD err) {
  char text[256] = {0};
  DWORD n = FormatMessageA(FORMAT_MESSAGE_FROM_SYSTEM | FORMAT_MESSAGE_IGNORE_INSERTS, NULL, err,
                           0, text, sizeof text, NULL);
  while (n > 0 && (text[n - 1] == '\n' || text[n - 1] == '\r' || text[n - 1] == '.')) text[--n] = 0;
  switch (err) {
    case ERROR_FILE_NOT_FOUND:
      return fl_status(FL_ERROR_NOT_FOUND, "%s: no such object (Windows error %lu)", what,
                       (unsigned long)err);
    case ERROR_INVALID_HANDLE:
      /* Sections, events, semaphores and mutexes share one namespace per session. */
      return fl_status(FL_ERROR_INVALID_ARGUMENT,
                       "%s: the name belongs to another kind of object", what);
    case ERROR_ALREADY_EXISTS:
      return fl_status(FL_ERROR_CONFLICT, "%s: the name exists already", what);
    case ERROR_PATH_NOT_FOUND:
    case ERROR_BAD_PATHNAME:
    case ERROR_INVALID_NAME:
    case ERROR_FILENAME_EXCED_RANGE:
    case ERROR_ACCESS_DENIED:
    case ERROR_INVALID_PARAMETER:
      return fl_status(FL_ERROR_INVALID_ARGUMENT, "%s: Windows error %lu (%s)", what,
                       (unsigned long)err, text);
    case ERROR_NOT_ENOUGH_MEMORY:
    case ERROR_OUTOFMEMORY:
    case ERROR_COMMITMENT_LIMIT:
    case ERROR_NO_SYSTEM_RESOURCES:
      return fl_status(FL_ERROR_RESOURCE_EXHAUSTED, "%s: Windows error %lu (%s)", what,
                       (unsigned long)err, text);
    default:
      return fl_status(FL_ERROR_INTERNAL, "%s: Windows error %lu (%s)", what, (unsigned long)err,
                       text);
  }
}

static int iequals_prefix(const char *s, const char *prefix) {
  for (; *prefix != '\0'; ++s, ++prefix) {
    char a = *s, b = *prefix;
    if (a >= 'A' && a <= 'Z') a = (char)(a - 'A' + 'a');
    if (b >= 'A' && b <= 'Z') b = (char)(b - 'A' + 'a');
    if (a != b) return 0;
  }
  return 1;
}

/* The same rules, and messages, as the service's check (importer/platform/win32/host_memory.cpp). */
FlStatus *fl_check_shm_name(const char *name) {
  static const char *const prefixes[] = {"Local\\", "Global\\"};
  if (name == NULL) return fl_status(FL_ERROR_INVALID_ARGUMENT, "shared-memory name is NULL");
  const char *rest = NULL;
  for (size_t i = 0; i < 2 && rest == NULL; ++i) {
    size_t n = strlen(prefixes[i]);
    if (strncmp(name, prefixes[i], n) == 0)
      rest = name + n;
    else if (strlen(name) >= n && iequals_prefix(name, prefixes[i]))
      /* Windows matches the namespace keyword case-sensitively: "local\x" is not Local\x. */
      return fl_status(FL_ERROR_INVALID_ARGUMENT,
                       "the namespace prefix of '%.64s' must be written exactly '%s' (Windows "
                       "object namespaces are case-sensitive)",
                       name, prefixes[i]);
  }
  if (rest == NULL || rest[0] == '\0') {
    if (strlen(name) >= 8 && iequals_prefix(name, "Session\\"))
      return fl_status(FL_ERROR_INVALID_ARGUMENT,
                       "'Session\\' names are reserved by Windows; use Local\\NAME (this "
                       "session) or Global\\NAME");
    return fl_status(FL_ERROR_INVALID_ARGUMENT,
                     "Windows section names are Local\\NAME or Global\\NAME, got '%.64s'", name);
  }
  /* The fence's wake object appends ".wake"; the whole must stay within MAX_PATH. */
  if (strlen(rest) > 240)
    return fl_status(FL_ERROR_INVALID_ARGUMENT,
                     "section names hold at most 240 characters after the prefix");
  for (const char *p = rest; *p != '\0'; ++p) {
    if (*p == '\\')
      return fl_status(FL_ERROR_INVALID_ARGUMENT,
                       "a section name holds no '\\' after its Local\\ or Global\\ prefix");
    if ((unsigned char)*p < 0x20)
      return fl_status(FL_ERROR_INVALID_ARGUMENT, "a section name holds no control characters");
  }
  return NULL;
}

/* Maps the section h (owned by *out on success, closed on failure) whole, or its first map_bytes;
 * the size is the view's, the section's rounded up to whole pages. */
static FlStatus *map_section(HANDLE h, int writable, uint64_t map_bytes, const char *name,
                             fl_os_map *out) {
  DWORD access = FILE_MAP_READ | (writable ? FILE_MAP_WRITE : 0);
  void *data = MapViewOfFile(h, access, 0, 0, 0);
  if (data == NULL) {
    DWORD err = GetLastError();
    CloseHandle(h);
    return fl_win_status("MapViewOfFile", err);
  }
  MEMORY_BASIC_INFORMATION info;
  if (VirtualQuery(data, &info, sizeof info) == 0) {
    DWORD err = GetLastError();
    UnmapViewOfFile(data);
    CloseHandle(h);
    return fl_win_status("VirtualQuery", err);
  }
  uint64_t size = (uint64_t)info.RegionSize;
  if (size < map_bytes) {
    UnmapViewOfFile(data);
    CloseHandle(h);
    return fl_status(FL_ERROR_INVALID_ARGUMENT,
                     "not a host_timeline fence: %s has %llu bytes, a fence page %llu", name,
                     (unsigned long long)size, (unsigned long long)map_bytes);
  }
  out->handle = (intptr_t)h;
  out->data = data;
  out->size = map_bytes != 0 ? map_bytes : size;
  return NULL;
}

FlStatus *fl_os_map_create(const char *name, uint64_t size, const char *label, fl_os_map *out) {
  (void)label;
  if (name == NULL)
    /* An unnamed section reaches the service only as a duplicated handle, which this client's
     * pipe does not carry yet. */
    return fl_status(FL_ERROR_UNSUPPORTED,
                     "on Windows a frame or fence needs a name (Local\\NAME): the service opens "
                     "it by name");
  FlStatus *st = fl_check_shm_name(name);
  if (st != NULL) return st;
  wchar_t *wname = fl_win_widen(name);
  if (wname == NULL)
    return fl_status(FL_ERROR_INVALID_ARGUMENT, "a section name must be valid UTF-8");
  /* NULL security attributes: the default DACL of this process's token (this user only). */
  HANDLE h = CreateFileMappingW(INVALID_HANDLE_VALUE, NULL, PAGE_READWRITE, (DWORD)(size >> 32),
                                (DWORD)size, wname);
  DWORD err = GetLastError();
  free(wname);
  char what[300];
  snprintf(what, sizeof what, "CreateFileMappingW %s", name);
  if (h == NULL) return fl_win_status(what, err);
  if (err == ERROR_ALREADY_EXISTS) {
    /* Windows hands back the existing object, maybe another process's squat: never use it. */
    CloseHandle(h);
    return fl_status(FL_ERROR_CONFLICT,
                     "%s exists already (another process holds the name): choose another name",
                     name);
  }
  st = map_section(h, 1, 0, name, out);
  if (st == NULL) out->size = size; /* the caller's size, not the page-rounded view */
  return st;
}

FlStatus *fl_os_map_open(const char *name, int writable, uint64_t map_bytes, fl_os_map *out) {
  FlStatus *st = fl_check_shm_name(name);
  if (st != NULL) return st;
  wchar_t *wname = fl_win_widen(name);
  if (wname == NULL)
    return fl_status(FL_ERROR_INVALID_ARGUMENT, "a section name must be valid UTF-8");
  HANDLE h = OpenFileMappingW(FILE_MAP_READ | (writable ? FILE_MAP_WRITE : 0), FALSE, wname);
  DWORD err = GetLastError();
  free(wname);
  if (h == NULL) {
    char what[300];
    snprintf(what, sizeof what, "OpenFileMappingW %s", name);
    return fl_win_status(what, err);
  }
  return map_section(h, writable, map_bytes, name, out);
}

FlStatus *fl_os_map_open_fd(int fd, uint64_t map_bytes, fl_os_map *out) {
  (void)fd;
  (void)map_bytes;
  (void)out;
  return fl_status(FL_ERROR_UNSUPPORTED,
                   "file descriptors are not shared memory on Windows: open the fence by name");
}

void fl_os_map_close(fl_os_map *m, const char *unlink_name) {
  (void)unlink_name; /* the name dies with its last handle */
  UnmapViewOfFile(m->data);
  CloseHandle((HANDLE)m->handle);
}

int fl_os_map_fd(const fl_os_map *m) {
  (void)m;
  return -1;
}

FlStatus *fl_os_fence_wake(const char *name, int create, fl_htl_wake **out) {
  int rc = fl_htl_wake_open(name, create, out);
  switch (rc) {
    case 0: return NULL;
    case FL_HTL_E_NOT_FOUND:
      return fl_status(FL_ERROR_NOT_FOUND,
                       "the fence %s has no wake semaphore %s.wake (docs/fences.md, Windows)",
                       name, name);
    case FL_HTL_E_EXISTS:
      return fl_status(FL_ERROR_CONFLICT,
                       "%s.wake exists already (another process holds the name): choose another "
                       "fence name",
                       name);
    case FL_HTL_E_WRONG_TYPE:
      return fl_status(FL_ERROR_INVALID_ARGUMENT,
                       "%s.wake belongs to another kind of object, not a semaphore", name);
    case FL_HTL_E_WAKE_COUNT:
    case FL_HTL_E_WAKE_UNREADABLE:
      return fl_status(FL_ERROR_INVALID_ARGUMENT,
                       "%s.wake %s: create it with a maximum count of 0x7FFFFFFF so that one "
                       "release per sleeper can wake every waiter (docs/fences.md, Windows)",
                       name,
                       rc == FL_HTL_E_WAKE_COUNT ? "has another maximum count"
                                                 : "cannot be queried for its maximum count");
    default: break;
  }
  return fl_status(FL_ERROR_INTERNAL, "cannot open the wake semaphore of the fence %s", name);
}
