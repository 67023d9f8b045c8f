/* A Windows renderer written in C against the C client (fenceline_client.dll), as docs/windows.md
 * tells a C author: a named section for the frame and two named fences, imported by name over
 * the service's named pipe, FRAMES frames of add_64x64 run in place. Built by the Windows lane
 * with mingw-w64; tests/windows/test_c_client.py runs it under Wine.
 *
 *   win_c_renderer run PIPE FRAMES OUTDIR [HANG_AFTER]
 *       prints {"frames": N, "mismatches": M} and leaves the last frame's input and output in
 *       OUTDIR\input.bin and OUTDIR\output.bin (float32); with HANG_AFTER it stops after that
 *       many frames, prints {"hanging": N} and sleeps until killed
 *   win_c_renderer names PIPE     the name rules and refusals, one "ok ..." line each
 *   win_c_renderer silent PIPE    the client's deadline against a pipe that never answers
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define WIN32_LEAN_AND_MEAN
#include <windows.h>

#include "fenceline/fenceline_client.h"

static const FlApi *api;

#define ELEMENTS (3 * 64 * 64)
#define NBYTES (ELEMENTS * sizeof(float))
static const int64_t SHAPE[4] = {1, 3, 64, 64};

static void fail(const char *what, FlStatus *st) {
  fprintf(stderr, "win_c_renderer: %s failed: [%s] %s\n", what,
          api->GetErrorCodeName(api->GetErrorCode(st)), api->GetErrorMessage(st));
  api->ReleaseStatus(st);
  exit(2);
}

#define OK(call)                      \
  do {                                \
    FlStatus *st_ = (call);           \
    if (st_ != NULL) fail(#call, st_); \
  } while (0)

/* The call must fail with `code`; prints "ok WHAT: [code] message". */
static void fails_with(FlErrorCode code, FlStatus *st, const char *what) {
  if (st == NULL) {
    fprintf(stderr, "win_c_renderer: %s succeeded, expected %s\n", what, api->GetErrorCodeName(code));
    exit(1);
  }
  if (api->GetErrorCode(st) != code) {
    fprintf(stderr, "win_c_renderer: %s: got [%s] %s, expected %s\n", what,
            api->GetErrorCodeName(api->GetErrorCode(st)), api->GetErrorMessage(st),
            api->GetErrorCodeName(code));
    exit(1);
  }
  printf("ok %s: [%s] %s\n", what, api->GetErrorCodeName(code), api->GetErrorMessage(st));
  api->ReleaseStatus(st);
}

static void write_file(const char *dir, const char *name, const void *data, size_t n) {
  char path[1024];
  snprintf(path, sizeof path, "%s\\%s", dir, name);
  FILE *f = fopen(path, "wb");
  if (f == NULL || fwrite(data, 1, n, f) != n) {
    fprintf(stderr, "win_c_renderer: cannot write %s\n", path);
    exit(2);
  }
  fclose(f);
}

static int run(const char *pipe, int frames, const char *outdir, int hang_after) {
  char frame_name[128], ready_name[128], done_name[128];
  unsigned long pid = GetCurrentProcessId();
  snprintf(frame_name, sizeof frame_name, "Local\\c-game-frame-%lu", pid);
  snprintf(ready_name, sizeof ready_name, "Local\\c-game-ready-%lu", pid);
  snprintf(done_name, sizeof done_name, "Local\\c-game-done-%lu", pid);

  FlClient *client = NULL;
  FlFrame *frame = NULL;
  FlFence *ready = NULL, *done = NULL;
  FlMemoryImport *memory = NULL;
  FlFenceImport *ready_import = NULL, *done_import = NULL;
  FlSession *session = NULL;
  OK(api->CreateClient(pipe, "c-win-renderer", &client));
  OK(api->CreateFrame(frame_name, 2 * NBYTES, &frame)); /* input, then output */
  OK(api->CreateFence(ready_name, &ready));
  OK(api->CreateFence(done_name, &done));
  OK(api->ImportFrame(client, frame, FL_ACCESS_READ_WRITE, &memory)); /* by name */
  OK(api->ImportFence(client, ready, &ready_import));
  OK(api->ImportFence(client, done, &done_import));
  FlTensorView in = {sizeof(FlTensorView), "x", memory, 0, "FP32", SHAPE, 4};
  FlTensorView out = {sizeof(FlTensorView), "y", memory, NBYTES, "FP32", SHAPE, 4};
  FlSessionDesc desc = {sizeof(FlSessionDesc), "add_64x64", &in, 1, &out, 1, ready_import, done_import};
  OK(api->CreateSession(client, &desc, &session));

  float *image = (float *)api->GetFrameData(frame);
  float *output = image + ELEMENTS;
  int mismatches = 0;
  for (int n = 1; n <= frames; ++n) {
    for (int i = 0; i < ELEMENTS; ++i) image[i] = (float)((i * 7 + n) % 256) / 255.0f; /* render */
    OK(api->SignalFence(ready, (uint64_t)n)); /* inputs ready at value n */
    FlRunResult r = {.struct_size = sizeof(FlRunResult)};
    OK(api->Run(session, (uint64_t)n, 0, FL_TIMEOUT_DEFAULT, &r));
    /* Run returned: the service set `done` to n, which another thread or process would wait on. */
    OK(api->WaitFence(done, (uint64_t)n, 0));
    if (r.signal_value != (uint64_t)n) ++mismatches;
    for (int i = 0; i < ELEMENTS; ++i)
      if (output[i] != image[i] + 1.0f) {
        ++mismatches;
        break;
      }
    if (hang_after > 0 && n == hang_after) {
      printf("{\"hanging\": %d}\n", n);
      fflush(stdout);
      Sleep(INFINITE);
    }
  }
  write_file(outdir, "input.bin", image, NBYTES);
  write_file(outdir, "output.bin", output, NBYTES);
  api->ReleaseSession(session);
  api->ReleaseMemoryImport(memory);
  api->ReleaseFenceImport(ready_import);
  api->ReleaseFenceImport(done_import);
  api->ReleaseClient(client);
  api->ReleaseFence(ready);
  api->ReleaseFence(done);
  api->ReleaseFrame(frame);
  printf("{\"frames\": %d, \"mismatches\": %d}\n", frames, mismatches);
  return 0;
}

static int names(const char *pipe) {
  char name[128], buf[512];
  unsigned long pid = GetCurrentProcessId();
  FlFrame *f = NULL, *g = NULL;
  FlFence *fence = NULL;
  FlClient *client = NULL;
  FlMemoryImport *m = NULL;
  fails_with(FL_ERROR_INVALID_ARGUMENT, api->CreateFrame("local\\x", 4096, &f), "prefix_case");
  fails_with(FL_ERROR_INVALID_ARGUMENT, api->CreateFrame("Session\\1\\x", 4096, &f), "session_reserved");
  fails_with(FL_ERROR_INVALID_ARGUMENT, api->CreateFrame("/posix-style", 4096, &f), "posix_name");
  fails_with(FL_ERROR_INVALID_ARGUMENT, api->CreateFrame("Local\\a\\b", 4096, &f), "backslash");
  fails_with(FL_ERROR_UNSUPPORTED, api->CreateFrame(NULL, 4096, &f), "anonymous_frame");
  /* A name someone holds already is never shared (it may be squatted). */
  snprintf(name, sizeof name, "Local\\c-squat-%lu", pid);
  OK(api->CreateFrame(name, 4096, &f));
  fails_with(FL_ERROR_CONFLICT, api->CreateFrame(name, 4096, &g), "squatted_frame");
  fails_with(FL_ERROR_CONFLICT, api->CreateFence(name, &fence), "squatted_fence");
  /* A section that is not a fence page. */
  fails_with(FL_ERROR_INVALID_ARGUMENT, api->OpenFence(name, &fence), "not_a_fence");
  api->ReleaseFrame(f);
  snprintf(name, sizeof name, "Local\\c-missing-%lu", pid);
  fails_with(FL_ERROR_NOT_FOUND, api->OpenFence(name, &fence), "missing_fence");
  fails_with(FL_ERROR_UNSUPPORTED, api->OpenFenceFd(3, &fence), "fence_by_fd");
  /* The default pipe: per user, as the service computes it. */
  OK(api->GetDefaultSocketPath(buf, sizeof buf));
  printf("ok default_pipe: %s\n", buf);
  if (strncmp(buf, "\\\\.\\pipe\\fenceline-", 19) != 0 && getenv("FENCELINE_SOCKET") == NULL) {
    fprintf(stderr, "win_c_renderer: default pipe %s\n", buf);
    return 1;
  }
  /* The service refuses a name nobody created, and an fd never leaves this process. */
  OK(api->CreateClient(pipe, "c-win-names", &client));
  fails_with(FL_ERROR_NOT_FOUND, api->ImportMemoryName(client, name, 0, 0, FL_ACCESS_READ_WRITE, &m),
             "import_missing");
  fails_with(FL_ERROR_INVALID_ARGUMENT,
             api->ImportMemoryName(client, "GLOBAL\\x", 0, 0, FL_ACCESS_READ_WRITE, &m),
             "import_prefix_case");
  fails_with(FL_ERROR_UNSUPPORTED, api->ImportMemoryFd(client, 3, 0, 0, FL_ACCESS_READ_WRITE, &m),
             "import_fd");
  api->ReleaseClient(client);
  return 0;
}

static int silent(const char *pipe) {
  FlClient *c = NULL;
  /* The pipe accepts and never answers the hello. */
  fails_with(FL_ERROR_TIMED_OUT, api->CreateClientWithTimeout(pipe, "c-silent", 300000000, &c),
             "silent_hello");
  return c == NULL ? 0 : 1;
}

int main(int argc, char **argv) {
  api = FlGetApi(FL_API_VERSION);
  if (api == NULL) {
    fprintf(stderr, "FlGetApi(%u) returned NULL\n", FL_API_VERSION);
    return 1;
  }
  if (argc >= 5 && strcmp(argv[1], "run") == 0)
    return run(argv[2], atoi(argv[3]), argv[4], argc > 5 ? atoi(argv[5]) : 0);
  if (argc == 3 && strcmp(argv[1], "names") == 0) return names(argv[2]);
  if (argc == 3 && strcmp(argv[1], "silent") == 0) return silent(argv[2]);
  fprintf(stderr, "usage: win_c_renderer run PIPE FRAMES OUTDIR [HANG_AFTER] | names PIPE | silent PIPE\n");
  return 2;
}
