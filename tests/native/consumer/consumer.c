/* One add_64x64 frame through an installed C client: connect, share a memfd and two fences, run,
 * check y = x + 1. Prints "ok <ABI>.<API> <server version>" on success. */
#include <stdio.h>
#include <string.h>

#include <fenceline/fenceline_client.h>

static const FlApi *api;

static int failed(FlStatus *st, const char *what) {
  if (st == NULL) return 0;
  fprintf(stderr, "%s: [%s] %s\n", what, api->GetErrorCodeName(api->GetErrorCode(st)),
          api->GetErrorMessage(st));
  api->ReleaseStatus(st);
  return 1;
}

int main(int argc, char **argv) {
  api = FlGetApi(FL_API_VERSION);
  if (api == NULL) {
    fprintf(stderr, "the library cannot serve API version %u\n", FL_API_VERSION);
    return 1;
  }
  enum { N = 3 * 64 * 64 };
  const int64_t shape[4] = {1, 3, 64, 64};
  FlFrame *frame = NULL;
  FlFence *ready = NULL, *done = NULL;
  FlClient *client = NULL;
  FlMemoryImport *memory = NULL;
  FlFenceImport *ready_import = NULL, *done_import = NULL;
  FlSession *session = NULL;
  int rc = 1;
  if (failed(api->CreateFrame(NULL, 2 * N * sizeof(float), &frame), "CreateFrame") ||
      failed(api->CreateFence(NULL, &ready), "CreateFence") ||
      failed(api->CreateFence(NULL, &done), "CreateFence") ||
      failed(api->CreateClient(argc > 1 ? argv[1] : NULL, "consumer", &client), "CreateClient") ||
      failed(api->ImportFrame(client, frame, FL_ACCESS_READ_WRITE, &memory), "ImportFrame") ||
      failed(api->ImportFence(client, ready, &ready_import), "ImportFence") ||
      failed(api->ImportFence(client, done, &done_import), "ImportFence"))
    goto out;
  {
    FlTensorView in = {sizeof(FlTensorView), "x", memory, 0, "FP32", shape, 4};
    FlTensorView out_view = {sizeof(FlTensorView), "y", memory, N * sizeof(float), "FP32", shape,
                             4};
    FlSessionDesc desc = {sizeof(FlSessionDesc), "add_64x64", &in, 1, &out_view, 1, ready_import,
                          done_import};
    if (failed(api->CreateSession(client, &desc, &session), "CreateSession")) goto out;
  }
  float *x = api->GetFrameData(frame), *y = x + N;
  for (int i = 0; i < N; ++i) x[i] = (float)i;
  FlRunResult r = {.struct_size = sizeof(FlRunResult)};
  if (failed(api->SignalFence(ready, 1), "SignalFence") ||
      failed(api->Run(session, 1, 0, FL_TIMEOUT_DEFAULT, &r), "Run"))
    goto out;
  for (int i = 0; i < N; ++i)
    if (y[i] != x[i] + 1.0f) {
      fprintf(stderr, "y[%d] = %g, not %g\n", i, (double)y[i], (double)x[i] + 1.0);
      goto out;
    }
  printf("ok %u.%u %s\n", FL_ABI_VERSION, FL_API_VERSION, api->GetVersionString());
  rc = 0;
out:
  api->ReleaseSession(session);
  api->ReleaseMemoryImport(memory);
  api->ReleaseFenceImport(ready_import);
  api->ReleaseFenceImport(done_import);
  api->ReleaseClient(client);
  api->ReleaseFence(ready);
  api->ReleaseFence(done);
  api->ReleaseFrame(frame);
  return rc;
}
