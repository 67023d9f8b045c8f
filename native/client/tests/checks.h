/* What the C client's check programs (test_client.c, test_typed.c) share: the API table, the
 * service's socket, the detail line a check prints, the assertion macros, add_64x64's shape and
 * its frame and fences.
 * Each program is one translation unit that includes this once. */
#ifndef FENCELINE_CLIENT_TESTS_CHECKS_H
#define FENCELINE_CLIENT_TESTS_CHECKS_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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

/* PROGRAM SOCKET WHICH: sets `api` and `socket_path`; -1 to go on, else the exit status. */
static int start_checks(int argc, char **argv, const char *usage) {
  if (argc != 3) {
    fprintf(stderr, "usage: %s\n", usage);
    return 2;
  }
  api = FlGetApi(FL_API_VERSION);
  if (api == NULL) {
    fprintf(stderr, "FlGetApi(%u) returned NULL\n", FL_API_VERSION);
    return 1;
  }
  socket_path = argv[1];
  return -1;
}

/* add_64x64's frame (input x, then output y) and two fences, imported by one client; a session
 * on them when a check makes one. */
typedef struct setup {
  FlClient *client;
  FlFrame *frame;
  FlFence *ready, *done;
  FlMemoryImport *memory;
  FlFenceImport *ready_import, *done_import;
  FlSession *session;
  float *x, *y;
} setup;

/* The client is named `who`; a NULL name makes an anonymous frame or fence. */
static void make_imports(setup *s, const char *who, const char *frame_name, const char *ready_name,
                         const char *done_name) {
  memset(s, 0, sizeof *s);
  OK(api->CreateClient(socket_path, who, &s->client));
  OK(api->CreateFrame(frame_name, 2 * NBYTES, &s->frame));
  OK(api->CreateFence(ready_name, &s->ready));
  OK(api->CreateFence(done_name, &s->done));
  OK(api->ImportFrame(s->client, s->frame, FL_ACCESS_READ_WRITE, &s->memory));
  OK(api->ImportFence(s->client, s->ready, &s->ready_import));
  OK(api->ImportFence(s->client, s->done, &s->done_import));
  s->x = api->GetFrameData(s->frame);
  s->y = s->x + ELEMENTS;
}

static void free_setup(setup *s) {
  api->ReleaseSession(s->session);
  api->ReleaseMemoryImport(s->memory);
  api->ReleaseFenceImport(s->ready_import);
  api->ReleaseFenceImport(s->done_import);
  api->ReleaseClient(s->client);
  api->ReleaseFence(s->ready);
  api->ReleaseFence(s->done);
  api->ReleaseFrame(s->frame);
}

#endif
