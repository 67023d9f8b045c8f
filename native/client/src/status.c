#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"

struct FlStatus {
  FlErrorCode code;
  char message[]; /* NUL-terminated */
};

/* Returned when a status itself cannot be allocated: a sentinel address, never dereferenced
 * or freed (constant, so no global state). */
static const char out_of_memory_sentinel;
#define OOM_STATUS ((FlStatus *)(void *)&out_of_memory_sentinel)

FlStatus *fl_status(FlErrorCode code, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(NULL, 0, fmt, ap);
  va_end(ap);
  if (n < 0) n = 0;
  FlStatus *s = malloc(sizeof(FlStatus) + (size_t)n + 1);
  if (s == NULL) return OOM_STATUS;
  s->code = code;
  va_start(ap, fmt);
  vsnprintf(s->message, (size_t)n + 1, fmt, ap);
  va_end(ap);
  return s;
}

FlStatus *fl_status_errno(const char *what, int err) {
  FlErrorCode code = FL_ERROR_INTERNAL;
  switch (err) {
    case ENOENT: code = FL_ERROR_NOT_FOUND; break;
    case EEXIST: code = FL_ERROR_CONFLICT; break;
    case EACCES:
    case EPERM:
    case EINVAL:
    case ENAMETOOLONG: code = FL_ERROR_INVALID_ARGUMENT; break;
    case ENOMEM:
    case EMFILE:
    case ENFILE:
    case ENOSPC: code = FL_ERROR_RESOURCE_EXHAUSTED; break;
    default: break;
  }
  return fl_status(code, "%s: %s", what, strerror(err));
}

FlErrorCode fl_status_code(const FlStatus *s) {
  if (s == NULL) return FL_OK;
  if (s == OOM_STATUS) return FL_ERROR_RESOURCE_EXHAUSTED;
  return s->code;
}

const char *fl_status_message(const FlStatus *s) {
  if (s == NULL) return "";
  if (s == OOM_STATUS) return "out of memory while reporting an error";
  return s->message;
}

void fl_status_release(FlStatus *s) {
  if (s != NULL && s != OOM_STATUS) free(s);
}

const char *fl_code_name(FlErrorCode code) {
  switch (code) {
    case FL_OK: return "ok";
    case FL_ERROR_INTERNAL: return "internal";
    case FL_ERROR_INVALID_ARGUMENT: return "invalid_argument";
    case FL_ERROR_NOT_FOUND: return "not_found";
    case FL_ERROR_CONFLICT: return "conflict";
    case FL_ERROR_UNSUPPORTED: return "unsupported";
    case FL_ERROR_TIMED_OUT: return "timed_out";
    case FL_ERROR_RESOURCE_EXHAUSTED: return "resource_exhausted";
    case FL_ERROR_DEVICE_LOST: return "device_lost";
    case FL_ERROR_INVALID_REQUEST: return "invalid_request";
    case FL_ERROR_MODEL: return "model_error";
    case FL_ERROR_PERMISSION_DENIED: return "permission_denied";
    case FL_ERROR_UNAUTHENTICATED: return "unauthenticated";
    case FL_ERROR_UNAVAILABLE: return "unavailable";
    case FL_ERROR_TRANSPORT: return "transport";
    case FL_ERROR_PROTOCOL: return "protocol";
  }
  return "unknown";
}
