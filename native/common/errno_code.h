/* The one mapping from an errno value to a wire error code (fenceline_wire.h), used wherever a
 * POSIX call fails: the importer's POSIX platform code and the C client. Windows reports
 * GetLastError() values instead and maps them in its own platform code. */
#ifndef FENCELINE_ERRNO_CODE_H
#define FENCELINE_ERRNO_CODE_H

#include <errno.h>

#include "fenceline_wire.h"

static inline int fl_wire_code_for_errno(int err) {
  switch (err) {
    case ENOENT: return FL_WIRE_ERROR_NOT_FOUND;
    case EEXIST: return FL_WIRE_ERROR_CONFLICT;
    case EACCES:
    case EPERM:
    case EINVAL:
    case ENAMETOOLONG: return FL_WIRE_ERROR_INVALID_ARGUMENT;
    case ENOMEM:
    case EMFILE:
    case ENFILE:
    case ENOSPC: return FL_WIRE_ERROR_RESOURCE_EXHAUSTED;
    default: return FL_WIRE_ERROR_INTERNAL;
  }
}

#endif
