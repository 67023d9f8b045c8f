#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "errno_code.h"
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
  return fl_status((FlErrorCode)fl_wire_code_for_errno(err), "%s: %s", what, strerror(err));
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
#define FL_CODE_NAME_(name, value, text, action) \
  case FL_ERROR_##name: return text;
  switch (code) {
    case FL_OK: return "ok";
    FL_WIRE_ERRORS(FL_CODE_NAME_)
    case FL_ERROR_TRANSPORT: return "transport";
    case FL_ERROR_PROTOCOL: return "protocol";
  }
#undef FL_CODE_NAME_
  return "unknown";
}
