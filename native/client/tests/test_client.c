/* Checks of libfenceline_client against a live service (tests/native/test_c_client.py runs them).
 *
 *   test_client SOCKET CHECK   runs one check, prints "ok CHECK: detail", exits 0 (1 on failure)
 *   test_client SOCKET all     runs every check
 *   test_client SOCKET hold    sets up a session, prints "ready", then runs frames until killed
 *   test_client SOCKET give-up runs slow_add_64x64 (add_64x64 after a slow Loop) once to the end,
 *                              then gives up on a second run after 0.1 s (the client's deadline:
 *                              the connection is closed), prints "gave-up" and the output fence's
 *                              value, stays alive until stdin closes, then prints "done" and the
 *                              value again (tests/native/test_c_client.py)
 *   test_client SOCKET silent-hello|silent-run
 *                              the client-side deadline against a service that accepts but does
 *                              not answer (tests/support/silent_service.py, mute or hello)
 *   test_client - list         prints the names of the checks
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* F_GET_SEALS; clock_gettime, nanosleep under -std=c11 */
#endif
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "checks.h"

static void unique_name(char *buf, size_t n, const char *what) {
  static unsigned counter; /* test program only; the library keeps no such state */
  snprintf(buf, n, "/fl-ctest-%d-%s-%u", (int)getpid(), what, ++counter);
}

/* A complete setup of `model` (add_64x64's shapes): input and output in one frame, two fences, a
 * session. */
static void make_model_setup(setup *s, int named, const char *model) {
  char frame_name[64], ready_name[64], done_name[64];
  unique_name(frame_name, sizeof frame_name, "frame");
  unique_name(ready_name, sizeof ready_name, "ready");
  unique_name(done_name, sizeof done_name, "done");
  make_imports(s, "c-test", named ? frame_name : NULL, named ? ready_name : NULL,
               named ? done_name : NULL);
  FlTensorView in = {sizeof(FlTensorView), "x", s->memory, 0, "FP32", SHAPE, 4};
  FlTensorView out = {sizeof(FlTensorView), "y", s->memory, NBYTES, "FP32", SHAPE, 4};
  FlSessionDesc d = {sizeof(FlSessionDesc), model, &in, 1, &out, 1, s->ready_import,
                     s->done_import};
  OK(api->CreateSession(s->client, &d, &s->session));
}

static void make_setup(setup *s, int named) { make_model_setup(s, named, "add_64x64"); }

static void run_frame(setup *s, uint64_t value) {
  for (int i = 0; i < ELEMENTS; ++i) s->x[i] = (float)(i % 251) * 0.5f + (float)value;
  OK(api->SignalFence(s->ready, value));
  FlRunResult r = {.struct_size = sizeof(FlRunResult)};
  OK(api->Run(s->session, value, 0, FL_TIMEOUT_DEFAULT, &r));
  EXPECT(r.signal_value == value);
  EXPECT(api->GetFenceValue(s->done) == value);
  for (int i = 0; i < ELEMENTS; ++i)
    if (s->y[i] != s->x[i] + 1.0f) FAIL("frame %llu element %d wrong", (unsigned long long)value, i);
}

/* ---- checks without the service ----------------------------------------------------------- */

static void check_api_version(void) {
  EXPECT(FlGetApi(0) == NULL);
  EXPECT(FlGetApi(FL_API_VERSION + 1) == NULL);
  EXPECT(FlGetApi(FL_API_VERSION) == api);
  /* Versions 1 to 4 share the table of the layouts without struct_size (test_typed.c). */
  EXPECT(FlGetApi(1) == FlGetApi(4) && FlGetApi(2) == FlGetApi(4) && FlGetApi(3) == FlGetApi(4) &&
         FlGetApi(4) != api);
  EXPECT(strcmp(api->GetVersionString(), "0.1.0") == 0);
  EXPECT(api->GetErrorCode(NULL) == FL_OK);
  EXPECT(strcmp(api->GetErrorMessage(NULL), "") == 0);
  EXPECT(strcmp(api->GetErrorCodeName(FL_ERROR_NOT_FOUND), "not_found") == 0);
  EXPECT(strcmp(api->GetErrorCodeName((FlErrorCode)555), "unknown") == 0);
  snprintf(detail, sizeof detail, "version %s", api->GetVersionString());
}

static void check_release_accepts_null(void) {
  api->ReleaseStatus(NULL);
  api->ReleaseFrame(NULL);
  api->ReleaseFence(NULL);
  api->ReleaseClient(NULL);
  api->ReleaseMemoryImport(NULL);
  api->ReleaseFenceImport(NULL);
  api->ReleaseSession(NULL);
  api->FreeString(NULL);
  snprintf(detail, sizeof detail, "every Release* took NULL");
}

#define DEADLINE_NS 200000000 /* 0.2 s */

static void check_fence_signal_and_wait(void) {
  FlFence *f = NULL, *peer = NULL;
  OK(api->CreateFence(NULL, &f));
  EXPECT(api->GetFenceValue(f) == 0 && api->GetFenceStatus(f) == FL_FENCE_LIVE);
  EXPECT(api->GetFenceName(f) == NULL && api->GetFenceFd(f) >= 0);
  OK(api->SignalFence(f, 5));
  OK(api->WaitFence(f, 5, 0));
  OK(api->WaitFence(f, 3, 0));
  FAILS_WITH(FL_ERROR_CONFLICT, api->SignalFence(f, 5));
  FAILS_WITH(FL_ERROR_TIMED_OUT, api->WaitFence(f, 6, 2000000));
  OK(api->OpenFenceFd(api->GetFenceFd(f), &peer)); /* a second mapping of the same page */
  OK(api->SignalFence(peer, 9));
  EXPECT(api->GetFenceValue(f) == 9);
  api->ReleaseFence(peer);
  api->ReleaseFence(f);
  snprintf(detail, sizeof detail, "values only go up; timeout reported");
}

typedef struct signal_later {
  FlFence *fence;
  uint64_t value;
  int delay_ms;
} signal_later;

static void *signal_thread(void *arg) {
  signal_later *s = arg;
  struct timespec d = {0, (long)s->delay_ms * 1000000L};
  nanosleep(&d, NULL);
  api->ReleaseStatus(api->SignalFence(s->fence, s->value));
  return NULL;
}

static void check_fence_wakes_waiter_in_other_thread(void) {
  FlFence *f = NULL;
  OK(api->CreateFence(NULL, &f));
  api->SetFenceMaxSpin(f, 0); /* go straight to the futex */
  signal_later s = {f, 7, 30};
  pthread_t t;
  EXPECT(pthread_create(&t, NULL, signal_thread, &s) == 0);
  OK(api->WaitFence(f, 7, FL_WAIT_FOREVER));
  pthread_join(t, NULL);
  EXPECT(api->GetFenceValue(f) == 7);
  api->ReleaseFence(f);
  snprintf(detail, sizeof detail, "futex wait woken by signal");
}

static void check_fence_abandoned_ends_wait(void) {
  FlFence *f = NULL;
  OK(api->CreateFence(NULL, &f));
  OK(api->SetFenceStatus(f, FL_FENCE_ABANDONED));
  FAILS_WITH(FL_ERROR_DEVICE_LOST, api->WaitFence(f, 1, FL_WAIT_FOREVER));
  FAILS_WITH(FL_ERROR_INVALID_ARGUMENT, api->SetFenceStatus(f, (FlFenceStatus)7));
  api->ReleaseFence(f);
}

static void check_named_fence_is_unlinked_by_creator(void) {
  char name[64];
  unique_name(name, sizeof name, "fence");
  FlFence *f = NULL, *opened = NULL;
  OK(api->CreateFence(name, &f));
  EXPECT(strcmp(api->GetFenceName(f), name) == 0);
  FAILS_WITH(FL_ERROR_CONFLICT, api->CreateFence(name, &opened));
  OK(api->OpenFence(name, &opened));
  OK(api->SignalFence(f, 3));
  EXPECT(api->GetFenceValue(opened) == 3);
  api->ReleaseFence(opened); /* an opener never unlinks */
  OK(api->OpenFence(name, &opened));
  api->ReleaseFence(opened);
  api->ReleaseFence(f);
  FAILS_WITH(FL_ERROR_NOT_FOUND, api->OpenFence(name, &opened));
}

static void check_open_fence_rejects_non_fence(void) {
  FlFrame *fr = NULL;
  FlFence *f = NULL;
  OK(api->CreateFrame(NULL, 100, &fr));
  FAILS_WITH(FL_ERROR_INVALID_ARGUMENT, api->OpenFenceFd(api->GetFrameFd(fr), &f));
  api->ReleaseFrame(fr);
  OK(api->CreateFrame(NULL, 4096, &fr));
  FAILS_WITH(FL_ERROR_INVALID_ARGUMENT, api->OpenFenceFd(api->GetFrameFd(fr), &f));
  api->ReleaseFrame(fr);
  FAILS_WITH(FL_ERROR_INVALID_ARGUMENT, api->OpenFenceFd(-1, &f));
}

static void check_frames(void) {
  char name[64];
  unique_name(name, sizeof name, "frame");
  FlFrame *a = NULL, *b = NULL;
  OK(api->CreateFrame(NULL, 4096, &a));
  EXPECT(api->GetFrameName(a) == NULL && api->GetFrameSize(a) == 4096);
  ((unsigned char *)api->GetFrameData(a))[4095] = 7;
  api->ReleaseFrame(a);
  OK(api->CreateFrame(name, 8192, &a));
  FAILS_WITH(FL_ERROR_CONFLICT, api->CreateFrame(name, 8192, &b));
  OK(api->OpenFrame(name, FL_ACCESS_READ_ONLY, &b));
  ((unsigned char *)api->GetFrameData(a))[100] = 42;
  EXPECT(((unsigned char *)api->GetFrameData(b))[100] == 42 && api->GetFrameSize(b) == 8192);
  api->ReleaseFrame(b);
  api->ReleaseFrame(a);
  FAILS_WITH(FL_ERROR_NOT_FOUND, api->OpenFrame(name, FL_ACCESS_READ_WRITE, &b));
  FAILS_WITH(FL_ERROR_INVALID_ARGUMENT, api->CreateFrame("no-slash", 64, &a));
  FAILS_WITH(FL_ERROR_INVALID_ARGUMENT, api->CreateFrame("/a/b", 64, &a));
  FAILS_WITH(FL_ERROR_INVALID_ARGUMENT, api->CreateFrame(NULL, 0, &a));
}

static void check_default_socket_path(void) {
  char buf[256], tiny[4];
  OK(api->GetDefaultSocketPath(buf, sizeof buf));
  EXPECT(strstr(buf, "fenceline/fenceline.sock") != NULL);
  FAILS_WITH(FL_ERROR_INVALID_ARGUMENT, api->GetDefaultSocketPath(tiny, sizeof tiny));
  /* $FENCELINE_SOCKET wins, as in the service and the Python client (docs/deploy.md). */
  char *saved = getenv("FENCELINE_SOCKET") ? strdup(getenv("FENCELINE_SOCKET")) : NULL;
  char chosen[256];
  setenv("FENCELINE_SOCKET", "/run/fenceline/elsewhere.sock", 1);
  OK(api->GetDefaultSocketPath(chosen, sizeof chosen));
  EXPECT(strcmp(chosen, "/run/fenceline/elsewhere.sock") == 0);
  if (saved != NULL) {
    setenv("FENCELINE_SOCKET", saved, 1);
    free(saved);
  } else {
    unsetenv("FENCELINE_SOCKET");
  }
  snprintf(detail, sizeof detail, "%s", buf);
}

/* ---- checks against the service ----------------------------------------------------------- */

static void check_connect_to_missing_socket_fails(void) {
  FlClient *c = NULL;
  FAILS_WITH(FL_ERROR_TRANSPORT, api->CreateClient("/nonexistent/fenceline.sock", NULL, &c));
  EXPECT(c == NULL);
}

static void check_hello(void) {
  FlClient *c = NULL;
  OK(api->CreateClient(socket_path, NULL, &c));
  const char *info = api->GetServerInfo(c);
  EXPECT(strstr(info, "\"server\":\"fenceline\"") != NULL);
  EXPECT(strstr(info, "\"host_timeline\":true") != NULL);
  /* It asked for the RUN reply's flags, and the service has them (docs/ipc.md, "HELLO"). */
  EXPECT(strstr(info, "\"features\":[\"reply_flags\"]") != NULL);
  snprintf(detail, sizeof detail, "%.200s", info);
  api->ReleaseClient(c);
}

static void check_run_by_fd(void) {
  setup s;
  make_setup(&s, 0);
  for (uint64_t v = 1; v <= 20; ++v) run_frame(&s, v);
  free_setup(&s);
  snprintf(detail, sizeof detail, "20 frames, y == x + 1");
}

static void check_run_by_name(void) {
  setup s;
  make_setup(&s, 1);
  for (uint64_t v = 1; v <= 20; ++v) run_frame(&s, v);
  free_setup(&s);
  snprintf(detail, sizeof detail, "20 frames, y == x + 1");
}

static void check_run_with_explicit_signal_value(void) {
  setup s;
  make_setup(&s, 0);
  OK(api->SignalFence(s.ready, 1));
  FlRunResult r = {.struct_size = sizeof(FlRunResult)};
  OK(api->Run(s.session, 1, 100, FL_TIMEOUT_DEFAULT, &r));
  EXPECT(r.signal_value == 100 && api->GetFenceValue(s.done) == 100);
  /* The output fence must go up: signalling 100 again is a conflict. */
  FAILS_WITH(FL_ERROR_CONFLICT, api->Run(s.session, 1, 100, FL_TIMEOUT_DEFAULT, NULL));
  free_setup(&s);
}

static void check_unknown_session(void) {
  setup s;
  make_setup(&s, 0);
  FlSession *ghost = NULL;
  FAILS_WITH(FL_ERROR_INVALID_ARGUMENT, api->OpenSession(s.client, "not-an-id", &ghost));
  OK(api->OpenSession(s.client, "0123456789abcdef0123456789abcdef", &ghost));
  FAILS_WITH(FL_ERROR_NOT_FOUND, api->Run(ghost, 1, 0, 100, NULL));
  api->ReleaseSession(ghost); /* frees the handle only */
  run_frame(&s, 1);           /* the connection is still good */
  free_setup(&s);
}

static void check_session_of_other_client_is_not_found(void) {
  setup s;
  make_setup(&s, 0);
  FlClient *other = NULL;
  FlSession *borrowed = NULL;
  OK(api->CreateClient(socket_path, "c-test-other", &other));
  OK(api->OpenSession(other, api->GetSessionId(s.session), &borrowed));
  OK(api->SignalFence(s.ready, 1));
  FAILS_WITH(FL_ERROR_NOT_FOUND, api->Run(borrowed, 1, 0, 100, NULL));
  api->ReleaseSession(borrowed);
  api->ReleaseClient(other);
  free_setup(&s);
}

static void check_out_of_bounds_view(void) {
  setup s;
  make_setup(&s, 0);
  FlTensorView in = {sizeof(FlTensorView), "x", s.memory, 0, "FP32", SHAPE, 4};
  FlTensorView out = {sizeof(FlTensorView), "y", s.memory, NBYTES + 4096, "FP32", SHAPE, 4};
  FlSessionDesc d = {sizeof(FlSessionDesc), "add_64x64", &in, 1, &out, 1, s.ready_import,
                     s.done_import};
  FlSession *bad = NULL;
  FAILS_WITH(FL_ERROR_INVALID_ARGUMENT, api->CreateSession(s.client, &d, &bad));
  EXPECT(bad == NULL && strstr(detail, "outside") != NULL);
  free_setup(&s);
}

static void check_bad_session_requests(void) {
  setup s;
  make_setup(&s, 0);
  FlSession *bad = NULL;
  FlTensorView in = {sizeof(FlTensorView), "x", s.memory, 0, "FP32", SHAPE, 4};
  FlTensorView out = {sizeof(FlTensorView), "y", s.memory, NBYTES, "FP32", SHAPE, 4};
  FlSessionDesc d = {sizeof(FlSessionDesc), "no_such_model", &in, 1, &out, 1, s.ready_import,
                     s.done_import};
  FAILS_WITH(FL_ERROR_NOT_FOUND, api->CreateSession(s.client, &d, &bad));
  d.model = "add_64x64";
  in.datatype = "FP64";
  FAILS_WITH(FL_ERROR_INVALID_ARGUMENT, api->CreateSession(s.client, &d, &bad));
  in.datatype = "FP32";
  in.name = "wrong";
  FAILS_WITH(FL_ERROR_INVALID_ARGUMENT, api->CreateSession(s.client, &d, &bad));
  in.name = "x";
  d.output_count = 0;
  FAILS_WITH(FL_ERROR_INVALID_ARGUMENT, api->CreateSession(s.client, &d, &bad));
  d.output_count = 1;
  in.memory = NULL;
  FAILS_WITH(FL_ERROR_INVALID_ARGUMENT, api->CreateSession(s.client, &d, &bad));
  free_setup(&s);
}

static void check_read_only_memory_cannot_be_output(void) {
  setup s;
  make_setup(&s, 0);
  FlMemoryImport *ro = NULL;
  OK(api->ImportFrame(s.client, s.frame, FL_ACCESS_READ_ONLY, &ro));
  FlTensorView in = {sizeof(FlTensorView), "x", ro, 0, "FP32", SHAPE, 4};
  FlTensorView out = {sizeof(FlTensorView), "y", ro, NBYTES, "FP32", SHAPE, 4};
  FlSessionDesc d = {sizeof(FlSessionDesc), "add_64x64", &in, 1, &out, 1, s.ready_import,
                     s.done_import};
  FlSession *bad = NULL;
  FAILS_WITH(FL_ERROR_INVALID_ARGUMENT, api->CreateSession(s.client, &d, &bad));
  api->ReleaseMemoryImport(ro);
  free_setup(&s);
}

static void check_fence_timeout(void) {
  setup s;
  make_setup(&s, 0);
  OK(api->SignalFence(s.ready, 1));
  FAILS_WITH(FL_ERROR_TIMED_OUT, api->Run(s.session, 2, 0, 50, NULL));
  EXPECT(api->GetFenceValue(s.done) == 0); /* nothing ran, nothing signalled */
  run_frame(&s, 2);
  free_setup(&s);
}

static void check_abandoned_input_fence(void) {
  setup s;
  make_setup(&s, 0);
  OK(api->SetFenceStatus(s.ready, FL_FENCE_ABANDONED));
  FAILS_WITH(FL_ERROR_DEVICE_LOST, api->Run(s.session, 1, 0, 1000, NULL));
  free_setup(&s);
}

static void check_import_errors(void) {
  FlClient *c = NULL;
  FlMemoryImport *m = NULL;
  FlFenceImport *f = NULL;
  OK(api->CreateClient(socket_path, NULL, &c));
  FAILS_WITH(FL_ERROR_NOT_FOUND, api->ImportMemoryName(c, "/fl-ctest-missing", 0, 0,
                                                      FL_ACCESS_READ_WRITE, &m));
  FAILS_WITH(FL_ERROR_INVALID_ARGUMENT, api->ImportMemoryName(c, "bad name", 0, 0,
                                                             FL_ACCESS_READ_WRITE, &m));
  FAILS_WITH(FL_ERROR_NOT_FOUND, api->ImportFenceName(c, "/fl-ctest-missing", &f));
  FlFrame *fr = NULL;
  OK(api->CreateFrame(NULL, 4096, &fr));
  FAILS_WITH(FL_ERROR_INVALID_ARGUMENT,
             api->ImportMemoryFd(c, api->GetFrameFd(fr), 8192, 0, FL_ACCESS_READ_WRITE, &m));
  FAILS_WITH(FL_ERROR_INVALID_ARGUMENT, api->ImportFenceFd(c, api->GetFrameFd(fr), &f));
  OK(api->ImportMemoryFd(c, api->GetFrameFd(fr), 1024, 1024, FL_ACCESS_READ_WRITE, &m));
  char *json = NULL;
  OK(api->Describe(c, "memory", api->GetMemoryImportId(m), &json));
  EXPECT(strstr(json, "\"size_bytes\":1024") != NULL);
  api->FreeString(json);
  FAILS_WITH(FL_ERROR_INVALID_REQUEST, api->Describe(c, "nothing", "x", &json));
  api->ReleaseMemoryImport(m);
  api->ReleaseFrame(fr);
  api->ReleaseClient(c);
}

/* D3D12 imports are requests like any other: checked here, refused with the reason by a
 * service that cannot import D3D12 (every non-Windows one). */
static void check_d3d12_imports_are_refused_off_windows(void) {
  FlClient *c = NULL;
  FlMemoryImport *m = NULL;
  FlFenceImport *f = NULL;
  OK(api->CreateClient(socket_path, NULL, &c));
  FAILS_WITH(FL_ERROR_INVALID_ARGUMENT,
             api->ImportD3D12Memory(c, "opaque_fd", "Local\\frame", 1 << 20, 0, 0, 1,
                                    FL_ACCESS_READ_WRITE, &m));
  FAILS_WITH(FL_ERROR_INVALID_ARGUMENT,
             api->ImportD3D12Memory(c, "d3d12_heap", "", 1 << 20, 0, 0, 1,
                                    FL_ACCESS_READ_WRITE, &m));
  FAILS_WITH(FL_ERROR_INVALID_ARGUMENT, api->ImportD3D12Fence(c, NULL, 1, &f));
  FAILS_WITH(FL_ERROR_UNSUPPORTED, api->ImportD3D12Fence(c, "Local\\fence", 1, &f));
  EXPECT(strstr(detail, "only on Windows") != NULL);
  /* Version 6: the fence's value now travels with it; refused for the platform only. */
  FAILS_WITH(FL_ERROR_INVALID_ARGUMENT, api->ImportD3D12FenceAt(c, NULL, 1, 41, &f));
  FAILS_WITH(FL_ERROR_UNSUPPORTED, api->ImportD3D12FenceAt(c, "Local\\fence", 1, 41, &f));
  EXPECT(strstr(detail, "only on Windows") != NULL);
  FAILS_WITH(FL_ERROR_UNSUPPORTED,
             api->ImportD3D12Memory(c, "d3d12_resource", "Local\\frame", 1 << 20, 0, 0, 1,
                                    FL_ACCESS_READ_WRITE, &m));
  EXPECT(m == NULL && f == NULL);
  api->ReleaseClient(c);
}

/* Handles may be released in any order: a session keeps its imports alive in the service. */
static void check_release_order_does_not_matter(void) {
  setup s;
  make_setup(&s, 0);
  char memory_id[64], session_id[64];
  snprintf(memory_id, sizeof memory_id, "%s", api->GetMemoryImportId(s.memory));
  snprintf(session_id, sizeof session_id, "%s", api->GetSessionId(s.session));
  api->ReleaseMemoryImport(s.memory);
  api->ReleaseFenceImport(s.ready_import);
  s.memory = NULL;
  s.ready_import = NULL;
  run_frame(&s, 1);
  char *json = NULL;
  OK(api->Describe(s.client, "memory", memory_id, &json));
  api->FreeString(json);
  api->ReleaseSession(s.session);
  s.session = NULL;
  FAILS_WITH(FL_ERROR_NOT_FOUND, api->Describe(s.client, "session", session_id, &json));
  FAILS_WITH(FL_ERROR_NOT_FOUND, api->Describe(s.client, "memory", memory_id, &json));
  free_setup(&s);
}

static void check_use_after_client_release(void) {
  setup s;
  make_setup(&s, 0);
  run_frame(&s, 1);
  api->ReleaseClient(s.client);
  s.client = NULL;
  OK(api->SignalFence(s.ready, 2));
  FAILS_WITH(FL_ERROR_TRANSPORT, api->Run(s.session, 2, 0, 100, NULL));
  free_setup(&s); /* releasing handles after their client is safe */
}

/* The service seals an imported memfd against shrinking, which a shrink under its mapping
 * would turn into a fault; CreateFrame's memfds allow it. */
static void check_imported_memfd_is_sealed_against_shrinking(void) {
  setup s;
  make_setup(&s, 0);
  int seals = fcntl(api->GetFrameFd(s.frame), F_GET_SEALS);
  EXPECT(seals >= 0 && (seals & F_SEAL_SHRINK) != 0);
  EXPECT(ftruncate(api->GetFrameFd(s.frame), 64) != 0);
  run_frame(&s, 1);
  free_setup(&s);
  snprintf(detail, sizeof detail, "seals 0x%x", (unsigned)seals);
}

static void check_run_async_on_a_host_session_completes(void) {
  setup s;
  make_setup(&s, 0);
  for (int i = 0; i < ELEMENTS; ++i) s.x[i] = (float)i;
  OK(api->SignalFence(s.ready, 1));
  FlRunResult r = {.struct_size = sizeof(FlRunResult)};
  /* A host session has no queue: RunAsync answers once the frame is done, as Run does. */
  OK(api->RunAsync(s.session, 1, 0, FL_TIMEOUT_DEFAULT, &r));
  EXPECT(r.signal_value == 1 && api->GetFenceValue(s.done) == 1);
  for (int i = 0; i < ELEMENTS; ++i) EXPECT(s.y[i] == s.x[i] + 1.0f);
  FAILS_WITH(FL_ERROR_CONFLICT, api->RunAsync(s.session, 1, 1, FL_TIMEOUT_DEFAULT, NULL));
  FAILS_WITH(FL_ERROR_INVALID_ARGUMENT, api->RunAsync(NULL, 1, 0, 100, NULL));
  free_setup(&s);
  snprintf(detail, sizeof detail, "signal %llu", (unsigned long long)r.signal_value);
}

static int contains(const char *json, const char *text) { return strstr(json, text) != NULL; }

static void check_streaming_session_start_pause_stop(void) {
  setup s;
  make_setup(&s, 0);
  /* The request session leaves the fences to the streaming one. */
  api->ReleaseSession(s.session);
  s.session = NULL;
  FAILS_WITH(FL_ERROR_INVALID_ARGUMENT, api->StartSession(NULL, NULL));
  FlTensorView in = {sizeof(FlTensorView), "x", s.memory, 0, "FP32", SHAPE, 4};
  FlTensorView out = {sizeof(FlTensorView), "y", s.memory, NBYTES, "FP32", SHAPE, 4};
  FlSessionDesc d = {sizeof(FlSessionDesc), "add_64x64", &in, 1, &out, 1, s.ready_import,
                     s.done_import};
  FAILS_WITH(FL_ERROR_INVALID_REQUEST,
             api->CreateStreamingSession(s.client, &d, "sometimes", -1, 1, &s.session));
  OK(api->CreateStreamingSession(s.client, &d, "every", 0, 1, &s.session));
  for (uint64_t v = 1; v <= 5; ++v) {
    for (int i = 0; i < ELEMENTS; ++i) s.x[i] = (float)(i % 97) + (float)v;
    OK(api->SignalFence(s.ready, v));
    OK(api->WaitFence(s.done, v, 10 * 1000 * 1000 * 1000LL));
    for (int i = 0; i < ELEMENTS; ++i) EXPECT(s.y[i] == s.x[i] + 1.0f);
  }
  /* No RUN for a streaming session: it runs by itself. */
  FAILS_WITH(FL_ERROR_CONFLICT, api->Run(s.session, 6, 0, 100, NULL));
  char *json = NULL;
  OK(api->PauseSession(s.session, &json));
  EXPECT(contains(json, "\"state\":\"paused\""));
  api->FreeString(json);
  OK(api->StartSession(s.session, NULL));
  OK(api->SignalFence(s.ready, 6));
  OK(api->WaitFence(s.done, 6, 10 * 1000 * 1000 * 1000LL));
  OK(api->StopSession(s.session, &json));
  EXPECT(contains(json, "\"state\":\"stopped\"") && contains(json, "\"frames\":6"));
  api->FreeString(json);
  /* Stopped means released in the service: the id is gone, the handle still releases. */
  FAILS_WITH(FL_ERROR_NOT_FOUND, api->StartSession(s.session, NULL));
  free_setup(&s);
  snprintf(detail, sizeof detail, "6 frames streamed, paused, resumed, stopped");
}

static void check_request_session_cannot_start(void) {
  setup s;
  make_setup(&s, 0);
  FAILS_WITH(FL_ERROR_CONFLICT, api->StartSession(s.session, NULL));
  FAILS_WITH(FL_ERROR_CONFLICT, api->PauseSession(s.session, NULL));
  FAILS_WITH(FL_ERROR_CONFLICT, api->StopSession(s.session, NULL));
  run_frame(&s, 1); /* it still runs on request, and ReleaseSession still releases it */
  free_setup(&s);
}

static void check_client_threads(void);

typedef struct check_entry {
  const char *name;
  void (*fn)(void);
} check_entry;

static const check_entry CHECKS[] = {
    {"api_version", check_api_version},
    {"release_accepts_null", check_release_accepts_null},
    {"fence_signal_and_wait", check_fence_signal_and_wait},
    {"fence_wakes_waiter_in_other_thread", check_fence_wakes_waiter_in_other_thread},
    {"fence_abandoned_ends_wait", check_fence_abandoned_ends_wait},
    {"named_fence_is_unlinked_by_creator", check_named_fence_is_unlinked_by_creator},
    {"open_fence_rejects_non_fence", check_open_fence_rejects_non_fence},
    {"frames", check_frames},
    {"default_socket_path", check_default_socket_path},
    {"connect_to_missing_socket_fails", check_connect_to_missing_socket_fails},
    {"hello", check_hello},
    {"run_by_fd", check_run_by_fd},
    {"run_by_name", check_run_by_name},
    {"run_with_explicit_signal_value", check_run_with_explicit_signal_value},
    {"unknown_session", check_unknown_session},
    {"session_of_other_client_is_not_found", check_session_of_other_client_is_not_found},
    {"out_of_bounds_view", check_out_of_bounds_view},
    {"bad_session_requests", check_bad_session_requests},
    {"read_only_memory_cannot_be_output", check_read_only_memory_cannot_be_output},
    {"fence_timeout", check_fence_timeout},
    {"abandoned_input_fence", check_abandoned_input_fence},
    {"import_errors", check_import_errors},
    {"d3d12_imports_are_refused_off_windows", check_d3d12_imports_are_refused_off_windows},
    {"release_order_does_not_matter", check_release_order_does_not_matter},
    {"use_after_client_release", check_use_after_client_release},
    {"imported_memfd_is_sealed_against_shrinking",
     check_imported_memfd_is_sealed_against_shrinking},
    {"client_threads", check_client_threads},
    {"run_async_on_a_host_session_completes", check_run_async_on_a_host_session_completes},
    {"streaming_session_start_pause_stop", check_streaming_session_start_pause_stop},
    {"request_session_cannot_start", check_request_session_cannot_start},
};

#define CHECK_COUNT (sizeof CHECKS / sizeof CHECKS[0])

/* Several threads share one client: calls are serialized, every reply reaches its caller. */
static void *client_thread(void *arg) {
  setup *s = arg;
  for (uint64_t v = 1; v <= 50; ++v) {
    OK(api->SignalFence(s->ready, v));
    OK(api->Run(s->session, v, 0, FL_TIMEOUT_DEFAULT, NULL));
    EXPECT(api->GetFenceValue(s->done) >= v);
  }
  return NULL;
}

static void check_client_threads(void) {
  setup s[3];
  make_setup(&s[0], 0);
  for (int i = 1; i < 3; ++i) {
    /* Sessions of their own on the first setup's client. */
    memset(&s[i], 0, sizeof s[i]);
    s[i].client = s[0].client;
    OK(api->CreateFrame(NULL, 2 * NBYTES, &s[i].frame));
    OK(api->CreateFence(NULL, &s[i].ready));
    OK(api->CreateFence(NULL, &s[i].done));
    OK(api->ImportFrame(s[i].client, s[i].frame, FL_ACCESS_READ_WRITE, &s[i].memory));
    OK(api->ImportFence(s[i].client, s[i].ready, &s[i].ready_import));
    OK(api->ImportFence(s[i].client, s[i].done, &s[i].done_import));
    FlTensorView in = {sizeof(FlTensorView), "x", s[i].memory, 0, "FP32", SHAPE, 4};
    FlTensorView out = {sizeof(FlTensorView), "y", s[i].memory, NBYTES, "FP32", SHAPE, 4};
    FlSessionDesc d = {sizeof(FlSessionDesc), "add_64x64", &in, 1, &out, 1, s[i].ready_import,
                       s[i].done_import};
    OK(api->CreateSession(s[i].client, &d, &s[i].session));
  }
  pthread_t t[3];
  for (int i = 0; i < 3; ++i) EXPECT(pthread_create(&t[i], NULL, client_thread, &s[i]) == 0);
  for (int i = 0; i < 3; ++i) pthread_join(t[i], NULL);
  for (int i = 1; i < 3; ++i) {
    s[i].client = NULL;
    free_setup(&s[i]);
  }
  free_setup(&s[0]);
  snprintf(detail, sizeof detail, "3 threads x 50 runs on one client");
}

/* ---- hold: for the leak test, which kills this process with SIGKILL ------------------------ */

static int hold(void) {
  setup s;
  make_setup(&s, 0);
  setup named;
  make_setup(&named, 1);
  run_frame(&s, 1);
  run_frame(&named, 1);
  printf("ready %s %s\n", api->GetSessionId(s.session), api->GetSessionId(named.session));
  fflush(stdout);
  for (uint64_t v = 2; v < UINT64_MAX; ++v) {
    run_frame(&s, v);
    struct timespec d = {0, 1000000};
    nanosleep(&d, NULL);
  }
  return 0;
}

/* ---- give-up: a client that stops waiting for a slow run ---------------------------------- */

static int give_up(void) {
  setup s;
  make_model_setup(&s, 0, "slow_add_64x64");
  run_frame(&s, 1); /* the model runs to the end when its client waits */
  for (int i = 0; i < ELEMENTS; ++i) s.x[i] = 2.0f;
  OK(api->SignalFence(s.ready, 2));
  api->SetClientTimeout(s.client, DEADLINE_NS / 2);
  FAILS_WITH(FL_ERROR_TIMED_OUT, api->Run(s.session, 2, 0, 1, NULL));
  /* The client closed its connection; this process lives on, holding the output fence. */
  printf("gave-up %llu\n", (unsigned long long)api->GetFenceValue(s.done));
  fflush(stdout);
  char buf[64];
  while (fread(buf, 1, sizeof buf, stdin) > 0) {
  }
  printf("done %llu\n", (unsigned long long)api->GetFenceValue(s.done));
  free_setup(&s);
  return 0;
}

/* ---- silent: a service that hangs (tests/support/silent_service.py) ------------------------ */

static int silent(const char *mode) {
  FlClient *c = NULL;
  if (strcmp(mode, "silent-hello") == 0) {
    /* The service accepts but never answers the hello. */
    FAILS_WITH(FL_ERROR_TIMED_OUT,
               api->CreateClientWithTimeout(socket_path, "c-test", DEADLINE_NS, &c));
    EXPECT(c == NULL);
    printf("ok %s: %s\n", mode, detail);
    return 0;
  }
  /* The service answers the hello, then nothing: a control call times out after SetClientTimeout
   * and leaves the connection closed. */
  OK(api->CreateClient(socket_path, "c-test", &c));
  api->SetClientTimeout(c, DEADLINE_NS);
  char *json = NULL;
  FAILS_WITH(FL_ERROR_TIMED_OUT, api->Describe(c, "session", "0123456789abcdef0123456789abcdef",
                                              &json));
  printf("ok %s describe: %s\n", mode, detail);
  FAILS_WITH(FL_ERROR_TRANSPORT, api->Describe(c, "session", "0123456789abcdef0123456789abcdef",
                                              &json));
  api->ReleaseClient(c);
  /* A run may wait its own timeout_ms in the service on top of the client's deadline. */
  OK(api->CreateClientWithTimeout(socket_path, "c-test", DEADLINE_NS, &c));
  FlSession *s = NULL;
  OK(api->OpenSession(c, "0123456789abcdef0123456789abcdef", &s));
  FAILS_WITH(FL_ERROR_TIMED_OUT, api->Run(s, 1, 0, 100, NULL));
  EXPECT(strstr(detail, "within 0.300 s") != NULL);
  printf("ok %s run: %s\n", mode, detail);
  FAILS_WITH(FL_ERROR_TRANSPORT, api->Run(s, 1, 0, 100, NULL));
  api->ReleaseSession(s);
  api->ReleaseClient(c);
  return 0;
}

int main(int argc, char **argv) {
  int status = start_checks(argc, argv, "test_client SOCKET CHECK|all|hold|give-up|list");
  if (status >= 0) return status;
  const char *which = argv[2];
  if (strcmp(which, "list") == 0) {
    for (size_t i = 0; i < CHECK_COUNT; ++i) printf("%s\n", CHECKS[i].name);
    return 0;
  }
  if (strcmp(which, "hold") == 0) return hold();
  if (strncmp(which, "silent-", 7) == 0) return silent(which);
  if (strcmp(which, "give-up") == 0) return give_up();
  int ran = 0;
  for (size_t i = 0; i < CHECK_COUNT; ++i) {
    if (strcmp(which, "all") != 0 && strcmp(which, CHECKS[i].name) != 0) continue;
    detail[0] = '\0';
    CHECKS[i].fn();
    printf("ok %s: %s\n", CHECKS[i].name, detail);
    fflush(stdout);
    ++ran;
  }
  if (ran == 0) {
    fprintf(stderr, "no check named %s\n", which);
    return 2;
  }
  return 0;
}
