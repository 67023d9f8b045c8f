/* The service's message-mode named pipe (docs/ipc.md, "Windows"): one message per frame, the same
 * frames as the Unix socket. Every read and write is overlapped and waited for with the call's
 * deadline, so a service that stops answering cannot hold the caller. No fds exist here: objects
 * travel by name. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "platform/transport.h"
#include "platform/win32/win32.h"

#include <sddl.h> /* after windows.h, which it needs */

struct fl_conn {
  HANDLE pipe;
  HANDLE event; /* manual-reset, for the one overlapped operation in flight */
};

/* Milliseconds until the deadline for a wait: INFINITE without one. */
static DWORD wait_ms(int64_t deadline_ns) {
  if (deadline_ns < 0) return INFINITE;
  int64_t left = deadline_ns - fl_htl_now_ns();
  if (left <= 0) return 0;
  int64_t ms = (left + 999999) / 1000000;
  return ms >= (int64_t)INFINITE ? INFINITE - 1 : (DWORD)ms;
}

/* "\\.\pipe\fenceline-<user SID>", as fenceline.ipc.pipe_server.default_pipe_name computes it:
 * pipe names are machine-wide, so one per user. */
static FlStatus *user_pipe_name(char *path, size_t size, int *n) {
  HANDLE token = NULL;
  if (!OpenProcessToken(GetCurrentProcess(), TOKEN_QUERY, &token))
    return fl_win_status("OpenProcessToken", GetLastError());
  DWORD need = 0;
  GetTokenInformation(token, TokenUser, NULL, 0, &need);
  void *info = need > 0 ? malloc(need) : NULL;
  char *sid = NULL;
  FlStatus *st = NULL;
  if (info == NULL)
    st = fl_status(FL_ERROR_RESOURCE_EXHAUSTED, "out of memory");
  else if (!GetTokenInformation(token, TokenUser, info, need, &need))
    st = fl_win_status("GetTokenInformation", GetLastError());
  else if (!ConvertSidToStringSidA(((TOKEN_USER *)info)->User.Sid, &sid))
    st = fl_win_status("ConvertSidToStringSid", GetLastError());
  if (st == NULL) *n = snprintf(path, size, "\\\\.\\pipe\\fenceline-%s", sid);
  if (sid != NULL) LocalFree(sid);
  free(info);
  CloseHandle(token);
  return st;
}

FlStatus *fl_conn_default_path(char *buf, size_t size) {
  /* The same order as the service and the Python client: $FENCELINE_SOCKET (on Windows the
   * pipe's name), then the per-user pipe. */
  const char *explicit_path = getenv("FENCELINE_SOCKET");
  char path[4096];
  int n = 0;
  if (explicit_path != NULL && explicit_path[0] != '\0') {
    n = snprintf(path, sizeof path, "%s", explicit_path);
  } else {
    FlStatus *st = user_pipe_name(path, sizeof path, &n);
    if (st != NULL) return st;
  }
  if (n < 0 || (size_t)n >= sizeof path || (size_t)n >= size)
    return fl_status(FL_ERROR_INVALID_ARGUMENT,
                     "GetDefaultSocketPath: the path needs %d bytes, buf has %zu", n + 1, size);
  memcpy(buf, path, (size_t)n + 1);
  return NULL;
}

FlStatus *fl_conn_open(const char *path, int64_t deadline_ns, fl_conn **out) {
  wchar_t *wpath = fl_win_widen(path);
  if (wpath == NULL) return fl_status(FL_ERROR_INVALID_ARGUMENT, "the pipe name must be UTF-8");
  HANDLE h = INVALID_HANDLE_VALUE;
  DWORD err = 0;
  for (;;) {
    /* SECURITY_IDENTIFICATION: the service may learn who we are, never act as us. */
    h = CreateFileW(wpath, GENERIC_READ | GENERIC_WRITE, 0, NULL, OPEN_EXISTING,
                    FILE_FLAG_OVERLAPPED | SECURITY_SQOS_PRESENT | SECURITY_IDENTIFICATION, NULL);
    if (h != INVALID_HANDLE_VALUE) break;
    err = GetLastError();
    if (err != ERROR_PIPE_BUSY) break;
    /* Every instance is taken until the service's acceptor makes the next one. */
    DWORD ms = wait_ms(deadline_ns);
    if (ms == 0) break;
    WaitNamedPipeW(wpath, ms == INFINITE ? NMPWAIT_WAIT_FOREVER : ms);
  }
  free(wpath);
  if (h == INVALID_HANDLE_VALUE) {
    if (err == ERROR_PIPE_BUSY)
      return fl_status(FL_ERROR_TIMED_OUT, "every instance of the fenceline pipe %s stayed busy",
                       path);
    if (err == ERROR_FILE_NOT_FOUND)
      return fl_status(FL_ERROR_TRANSPORT,
                       "cannot connect to the fenceline pipe %s: nobody serves it (is `fenceline "
                       "serve` running?)",
                       path);
    FlStatus *why = fl_win_status("CreateFileW", err);
    FlStatus *st = fl_status(FL_ERROR_TRANSPORT, "cannot connect to the fenceline pipe %s: %s",
                             path, fl_status_message(why));
    fl_status_release(why);
    return st;
  }
  DWORD mode = PIPE_READMODE_MESSAGE;
  fl_conn *c = (fl_conn *)malloc(sizeof *c);
  HANDLE event = CreateEventW(NULL, TRUE, FALSE, NULL);
  FlStatus *st = NULL;
  if (c == NULL || event == NULL)
    st = fl_status(FL_ERROR_RESOURCE_EXHAUSTED, "out of memory");
  else if (!SetNamedPipeHandleState(h, &mode, NULL, NULL))
    st = fl_win_status("SetNamedPipeHandleState", GetLastError());
  if (st != NULL) {
    if (event != NULL) CloseHandle(event);
    free(c);
    CloseHandle(h);
    return st;
  }
  c->pipe = h;
  c->event = event;
  *out = c;
  return NULL;
}

void fl_conn_close(fl_conn *c) {
  if (c == NULL) return;
  CloseHandle(c->pipe);
  CloseHandle(c->event);
  free(c);
}

/* Waits for the overlapped operation `ov` until the deadline. Returns 1 with *done set when it
 * completed, 0 with GetLastError() set when it failed, -1 when the deadline passed (the
 * operation is cancelled and finished with before returning: the kernel no longer uses `ov`). */
static int finish_io(fl_conn *c, OVERLAPPED *ov, int64_t deadline_ns, DWORD *done) {
  if (WaitForSingleObject(c->event, wait_ms(deadline_ns)) != WAIT_OBJECT_0) {
    CancelIoEx(c->pipe, ov);
    /* It may have completed meanwhile: then it counts. */
    if (GetOverlappedResult(c->pipe, ov, done, TRUE)) return 1;
    return GetLastError() == ERROR_OPERATION_ABORTED ? -1 : 0;
  }
  return GetOverlappedResult(c->pipe, ov, done, FALSE) ? 1 : 0;
}

static FlStatus *pipe_error(const char *what, DWORD err) {
  if (err == ERROR_BROKEN_PIPE || err == ERROR_NO_DATA || err == ERROR_PIPE_NOT_CONNECTED)
    return fl_status(FL_ERROR_TRANSPORT, "the service closed the connection");
  FlStatus *why = fl_win_status(what, err);
  FlStatus *st = fl_status(FL_ERROR_TRANSPORT, "%s", fl_status_message(why));
  fl_status_release(why);
  return st;
}

FlStatus *fl_conn_send(fl_conn *c, const uint8_t *buf, size_t len, int fd, int64_t deadline_ns,
                       int *fatal) {
  if (fd >= 0) {
    *fatal = 0;
    return fl_status(FL_ERROR_UNSUPPORTED,
                     "file descriptors cannot travel over the Windows pipe: share the frame or "
                     "fence by name (Local\\NAME)");
  }
  *fatal = 1;
  OVERLAPPED ov;
  memset(&ov, 0, sizeof ov);
  ov.hEvent = c->event;
  ResetEvent(c->event);
  DWORD done = 0;
  if (!WriteFile(c->pipe, buf, (DWORD)len, &done, &ov)) {
    DWORD err = GetLastError();
    if (err != ERROR_IO_PENDING) return pipe_error("WriteFile", err);
    int r = finish_io(c, &ov, deadline_ns, &done);
    if (r < 0) return fl_status(FL_ERROR_TIMED_OUT, "the service stopped reading");
    if (r == 0) return pipe_error("WriteFile", GetLastError());
  }
  if (done != len) return fl_status(FL_ERROR_TRANSPORT, "the pipe took part of a message");
  return NULL;
}

/* 1 when a message is waiting, 0 when none, -1 on error (GetLastError() set). */
static int message_waiting(fl_conn *c) {
  DWORD avail = 0, left = 0;
  if (!PeekNamedPipe(c->pipe, NULL, 0, NULL, &avail, &left)) return -1;
  return avail > 0 || left > 0;
}

FlStatus *fl_conn_recv(fl_conn *c, uint8_t *buf, size_t cap, size_t *len, int64_t spin_ns,
                       int64_t deadline_ns) {
  if (spin_ns > 0) {
    int64_t end = fl_htl_now_ns() + spin_ns;
    for (unsigned i = 0; message_waiting(c) == 0; ++i) {
      fl_cpu_relax();
      if ((i & 15u) == 15u && fl_htl_now_ns() >= end) break;
    }
  }
  if (wait_ms(deadline_ns) == 0) {
    int w = message_waiting(c);
    if (w < 0) return pipe_error("PeekNamedPipe", GetLastError());
    if (w == 0) return fl_status(FL_ERROR_TIMED_OUT, "no reply from the service");
  }
  OVERLAPPED ov;
  memset(&ov, 0, sizeof ov);
  ov.hEvent = c->event;
  ResetEvent(c->event);
  DWORD done = 0;
  BOOL ok = ReadFile(c->pipe, buf, (DWORD)cap, &done, &ov);
  DWORD err = ok ? 0 : GetLastError();
  if (!ok && err == ERROR_IO_PENDING) {
    int r = finish_io(c, &ov, deadline_ns, &done);
    if (r < 0) return fl_status(FL_ERROR_TIMED_OUT, "no reply from the service");
    err = r == 1 ? 0 : GetLastError();
  }
  if (err == ERROR_MORE_DATA) {
    *len = cap; /* longer than any frame: the caller refuses it and closes */
    return NULL;
  }
  if (err != 0) return pipe_error("ReadFile", err);
  if (done == 0) return fl_status(FL_ERROR_TRANSPORT, "the service sent an empty message");
  *len = done;
  return NULL;
}

/* ---- the run page: none on Windows (no memfd to seal; the pipe carries every RUN) -------- */

FlStatus *fl_conn_page_make(fl_conn *c, int *fd) {
  (void)c;
  *fd = -1;
  return fl_status(FL_ERROR_UNSUPPORTED, "the run page needs a Unix socket");
}

void fl_conn_page_keep(fl_conn *c, int taken) {
  (void)c;
  (void)taken;
}

int fl_conn_has_page(const fl_conn *c) {
  (void)c;
  return 0;
}

FlStatus *fl_conn_page_run(fl_conn *c, const FlRunPageRun *run, int64_t spin_ns,
                           int64_t deadline_ns, FlRunPageReply *reply, int *answered) {
  (void)c;
  (void)run;
  (void)spin_ns;
  (void)deadline_ns;
  (void)reply;
  *answered = 0;
  return fl_status(FL_ERROR_UNSUPPORTED, "the run page needs a Unix socket");
}
