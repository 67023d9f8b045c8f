/* What the C client's check programs (test_client.c, test_typed.c) share: the API table, the
 * service's socket, the detail line a check prints, the assertion macros, add_64x64's shape.
 * Each program is one translation unit that includes this once. */
#ifndef FENCELINE_CLIENT_TESTS_CHECKS_H
#define FENCELINE_CLIENT_TESTS_CHECKS_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "fenceline/fenceline_client.h"

static const FlApi *api;
static const char *socket_path;
static char detail[512];

#define FAIL(...)                                        \
  do {                                                   \
    fprintf(stderr, "FAIL %s:%d: ", __func__, __LINE__); \
    fprintf(stderr, __VA_ARGS__);                        \
    fprintf(stderr, "\n");                               \
    exit(1);                                             \
  } while (0)

/* The call must succeed. */
#define OK(call)                                                                     \
  do {                                                                               \
    FlStatus *st_ = (call);                                                          \
    if (st_ != NULL)                                                                 \
      FAIL("%s: [%s] %s", #call, api->GetErrorCodeName(api->GetErrorCode(st_)),      \
           api->GetErrorMessage(st_));                                               \
  } while (0)

/* The call must fail with `code`; its message goes into `detail`. */
#define FAILS_WITH(code, call)                                                            \
  do {                                                                                    \
    FlStatus *st_ = (call);                                                               \
    if (st_ == NULL) FAIL("%s succeeded, expected %s", #call, api->GetErrorCodeName(code)); \
    if (api->GetErrorCode(st_) != (code))                                                 \
      FAIL("%s: got [%s] %s, expected %s", #call,                                         \
           api->GetErrorCodeName(api->GetErrorCode(st_)), api->GetErrorMessage(st_),      \
           api->GetErrorCodeName(code));                                                  \
    snprintf(detail, sizeof detail, "[%s] %s", api->GetErrorCodeName(code),               \
             api->GetErrorMessage(st_));                                                  \
    api->ReleaseStatus(st_);                                                              \
  } while (0)

#define EXPECT(cond)                         \
  do {                                       \
    if (!(cond)) FAIL("expected %s", #cond); \
  } while (0)

static const int64_t SHAPE[4] = {1, 3, 64, 64};
#define ELEMENTS (3 * 64 * 64)
#define NBYTES (ELEMENTS * sizeof(float))

#endif
