/* A renderer in C: draws frames (a moving gradient) into shared memory, has the fenceline
 * service run a model on each in place, checks the output, and reports fps and latency.
 *
 *   renderer [--socket PATH] [--model add_64x64|add_720p|add_1080p|image_filter] [--frames N]
 *            [--warmup N] [--warmup-ms N] [--named] [--json] [--bench] [--dump DIR]
 *            [--samples FILE]
 *
 * The timed frames follow --warmup frames and at least --warmup-ms milliseconds of untimed
 * ones (default 0), so that the client's spin rule has settled when timing starts.
 * --named shares the frame and fences by POSIX shared-memory name instead of by fd.
 * --json prints one machine-readable line; --bench is --json with bench defaults (64x64,
 * 2000 frames after 200 warm-up frames) and one flat frame drawn before the loop and checked
 * at a few pixels per run, so that the time between frames is as short as in the Python bench
 * and the loop measures the round trip, not the drawing. --dump writes the last frame's input and output as raw float32 files
 * (input.bin, output.bin) into DIR. --samples writes each timed frame's round trip in
 * microseconds, one a line, in frame order.
 *
 * Exit status: 0 all outputs verified, 1 an output was wrong, 2 a usage or service error.
 */
#define _POSIX_C_SOURCE 200809L /* clock_gettime, nanosleep under -std=c11 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "fenceline/fenceline_client.h"

typedef struct model_info {
  const char *name;
  const char *input;
  const char *output;
  int64_t height, width;
  int filter; /* 0: y = x + 1; 1: sharpen, exposure, Reinhard tone map (fenceline.models) */
} model_info;

static const model_info MODELS[] = {
    {"add_64x64", "x", "y", 64, 64, 0},
    {"add_720p", "x", "y", 720, 1280, 0},
    {"add_1080p", "x", "y", 1080, 1920, 0},
    {"image_filter", "image", "display", 720, 1280, 1},
};

static const FlApi *api;

/* Prints a failed status, frees it and exits 2. */
static void check(FlStatus *st, const char *what) {
  if (st == NULL) return;
  fprintf(stderr, "renderer: %s failed: [%s] %s\n", what,
          api->GetErrorCodeName(api->GetErrorCode(st)), api->GetErrorMessage(st));
  api->ReleaseStatus(st);
  exit(2);
}

static double now_us(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec * 1e6 + (double)ts.tv_nsec / 1e3;
}

/* A gradient that moves one pixel per frame, different per channel, in [0, 1). */
static void draw(float *img, const model_info *m, uint64_t frame) {
  const int64_t h = m->height, w = m->width;
  for (int64_t c = 0; c < 3; ++c)
    for (int64_t y = 0; y < h; ++y) {
      float *row = img + (c * h + y) * w;
      for (int64_t x = 0; x < w; ++x) {
        float v = (float)((x + y / 2 + (int64_t)frame) % w) / (float)w + (float)c / 3.0f;
        row[x] = v >= 1.0f ? v - 1.0f : v;
      }
    }
}

static float filter_at(const float *img, const model_info *m, int64_t c, int64_t y, int64_t x) {
  const int64_t h = m->height, w = m->width;
  const float *p = img + c * h * w;
  float s = 5.0f * p[y * w + x];
  if (y > 0) s -= p[(y - 1) * w + x];
  if (y + 1 < h) s -= p[(y + 1) * w + x];
  if (x > 0) s -= p[y * w + x - 1];
  if (x + 1 < w) s -= p[y * w + x + 1];
  if (s < 0.0f) s = 0.0f;
  float e = s * 2.0f;
  return e / (e + 1.0f);
}

/* The bench's frame: one value everywhere. */
static void fill(float *img, const model_info *m, float v) {
  const int64_t n = 3 * m->height * m->width;
  for (int64_t i = 0; i < n; ++i) img[i] = v;
}

static long verify_some(const float *in, const float *out, const model_info *m) {
  const int64_t n = 3 * m->height * m->width;
  long bad = 0;
  for (int64_t i = 0; i < n; i += n / 7 + 1)
    if (m->filter ? !(out[i] >= 0.0f && out[i] <= 1.0f) : out[i] != in[i] + 1.0f) ++bad;
  return bad;
}

/* Number of wrong elements. The add model must match exactly (IEEE addition); the filter is
 * checked on a sample of pixels within float tolerance of a C reference. */
static long verify(const float *in, const float *out, const model_info *m) {
  const int64_t n = 3 * m->height * m->width;
  long bad = 0;
  if (!m->filter) {
    for (int64_t i = 0; i < n; ++i)
      if (out[i] != in[i] + 1.0f) ++bad;
    return bad;
  }
  for (int64_t i = 0; i < n; i += 97) {
    int64_t c = i / (m->height * m->width), rest = i % (m->height * m->width);
    float want = filter_at(in, m, c, rest / m->width, rest % m->width);
    if (fabsf(out[i] - want) > 1e-4f) ++bad;
  }
  return bad;
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

static double percentile(const double *sorted, size_t n, double q) {
  size_t i = (size_t)(q * (double)(n - 1) + 0.5);
  return sorted[i < n ? i : n - 1];
}

static void dump(const char *dir, const char *file, const void *data, size_t n) {
  char path[4096];
  snprintf(path, sizeof path, "%s/%s", dir, file);
  FILE *f = fopen(path, "wb");
  if (f == NULL || fwrite(data, 1, n, f) != n) {
    fprintf(stderr, "renderer: cannot write %s\n", path);
    exit(2);
  }
  fclose(f);
}

static void usage(void) {
  fprintf(stderr,
          "usage: renderer [--socket PATH] [--model add_64x64|add_720p|add_1080p|image_filter] "
          "[--frames N] [--warmup N] [--warmup-ms N] [--named] [--json] [--bench] [--dump DIR] "
          "[--samples FILE]\n");
  exit(2);
}

int main(int argc, char **argv) {
  const char *socket_path = NULL, *model_name = "add_64x64", *dump_dir = NULL;
  const char *samples_path = NULL;
  long frames = -1, warmup = -1, warmup_ms = 0;
  int named = 0, json = 0, bench = 0;
  for (int i = 1; i < argc; ++i) {
    const char *a = argv[i];
    int has_value = i + 1 < argc;
    if (strcmp(a, "--socket") == 0 && has_value) socket_path = argv[++i];
    else if (strcmp(a, "--model") == 0 && has_value) model_name = argv[++i];
    else if (strcmp(a, "--frames") == 0 && has_value) frames = atol(argv[++i]);
    else if (strcmp(a, "--warmup") == 0 && has_value) warmup = atol(argv[++i]);
    else if (strcmp(a, "--warmup-ms") == 0 && has_value) warmup_ms = atol(argv[++i]);
    else if (strcmp(a, "--dump") == 0 && has_value) dump_dir = argv[++i];
    else if (strcmp(a, "--samples") == 0 && has_value) samples_path = argv[++i];
    else if (strcmp(a, "--named") == 0) named = 1;
    else if (strcmp(a, "--json") == 0) json = 1;
    else if (strcmp(a, "--bench") == 0) bench = json = 1;
    else usage();
  }
  if (frames < 0) frames = bench ? 2000 : 240;
  if (warmup < 0) warmup = bench ? 200 : 10;
  if (frames < 1 || warmup_ms < 0) usage();
  const model_info *m = NULL;
  for (size_t i = 0; i < sizeof MODELS / sizeof MODELS[0]; ++i)
    if (strcmp(MODELS[i].name, model_name) == 0) m = &MODELS[i];
  if (m == NULL) usage();

  api = FlGetApi(FL_API_VERSION);
  if (api == NULL) {
    fprintf(stderr, "renderer: libfenceline_client does not serve API version %u\n",
            FL_API_VERSION);
    return 2;
  }

  /* One buffer holds the input tensor, then the output tensor. */
  const int64_t shape[4] = {1, 3, m->height, m->width};
  const uint64_t nbytes = (uint64_t)(3 * m->height * m->width) * sizeof(float);
  char frame_name[64], ready_name[64], done_name[64];
  snprintf(frame_name, sizeof frame_name, "/fl-renderer-%d-frame", (int)getpid());
  snprintf(ready_name, sizeof ready_name, "/fl-renderer-%d-ready", (int)getpid());
  snprintf(done_name, sizeof done_name, "/fl-renderer-%d-done", (int)getpid());

  FlFrame *frame = NULL;
  FlFence *ready = NULL, *done = NULL;
  check(api->CreateFrame(named ? frame_name : NULL, 2 * nbytes, &frame), "CreateFrame");
  check(api->CreateFence(named ? ready_name : NULL, &ready), "CreateFence");
  check(api->CreateFence(named ? done_name : NULL, &done), "CreateFence");
  float *input = (float *)api->GetFrameData(frame);
  float *output = input + nbytes / sizeof(float);

  FlClient *client = NULL;
  FlMemoryImport *memory = NULL;
  FlFenceImport *ready_import = NULL, *done_import = NULL;
  FlSession *session = NULL;
  check(api->CreateClient(socket_path, "c-renderer", &client), "CreateClient");
  check(api->ImportFrame(client, frame, FL_ACCESS_READ_WRITE, &memory), "ImportFrame");
  check(api->ImportFence(client, ready, &ready_import), "ImportFence");
  check(api->ImportFence(client, done, &done_import), "ImportFence");
  FlTensorView in_view = {sizeof(FlTensorView), m->input, memory, 0, "FP32", shape, 4};
  FlTensorView out_view = {sizeof(FlTensorView), m->output, memory, nbytes, "FP32", shape, 4};
  FlSessionDesc desc = {sizeof(FlSessionDesc), m->name, &in_view, 1, &out_view, 1, ready_import,
                        done_import};
  check(api->CreateSession(client, &desc, &session), "CreateSession");
  /* The session holds what it uses: these handles are no longer needed. */
  api->ReleaseMemoryImport(memory);
  api->ReleaseFenceImport(ready_import);
  api->ReleaseFenceImport(done_import);

  double *latency = malloc((size_t)frames * sizeof *latency);
  if (latency == NULL) return 2;
  long wrong = 0, wrong_frames = 0;
  double server_us = 0, start = 0;
  long warmed = -1; /* the untimed frames, once timing started */
  const double warm_until = now_us() + (double)warmup_ms * 1000.0;
  for (long i = 0; warmed < 0 || i < warmed + frames; ++i) {
    if (warmed < 0 && i >= warmup && now_us() >= warm_until) {
      warmed = i;
      start = now_us();
    }
    uint64_t value = (uint64_t)i + 1;
    if (!bench)
      draw(input, m, value);
    else if (i == 0)
      fill(input, m, 0.25f);
    double t0 = now_us();
    check(api->SignalFence(ready, value), "SignalFence"); /* "input ready at value" */
    FlRunResult r = {.struct_size = sizeof(FlRunResult)};
    check(api->Run(session, value, 0, FL_TIMEOUT_DEFAULT, &r), "Run");
    check(api->WaitFence(done, value, 1000000000), "WaitFence"); /* output written */
    double t1 = now_us();
    long bad = bench ? verify_some(input, output, m) : verify(input, output, m);
    wrong += bad;
    wrong_frames += bad != 0;
    if (warmed >= 0) {
      latency[i - warmed] = t1 - t0;
      server_us += r.total_us;
    }
  }
  double elapsed_us = now_us() - start;
  if (dump_dir != NULL) {
    dump(dump_dir, "input.bin", input, (size_t)nbytes);
    dump(dump_dir, "output.bin", output, (size_t)nbytes);
  }

  if (samples_path != NULL) {
    FILE *f = fopen(samples_path, "w");
    if (f == NULL) {
      fprintf(stderr, "renderer: cannot write %s\n", samples_path);
      return 2;
    }
    for (long i = 0; i < frames; ++i) fprintf(f, "%.3f\n", latency[i]);
    fclose(f);
  }
  double mean = 0;
  for (long i = 0; i < frames; ++i) mean += latency[i];
  mean /= (double)frames;
  qsort(latency, (size_t)frames, sizeof *latency, cmp_double);
  double p50 = percentile(latency, (size_t)frames, 0.50);
  double p99 = percentile(latency, (size_t)frames, 0.99);
  double fps = (double)frames / (elapsed_us / 1e6);
  if (json) {
    printf("{\"client\":\"c\",\"model\":\"%s\",\"transport\":\"%s\",\"frames\":%ld,"
           "\"warmup_frames\":%ld,\"p50_us\":%.2f,\"p99_us\":%.2f,\"mean_us\":%.2f,"
           "\"service_mean_us\":%.2f,\"fps\":%.1f,\"wrong_frames\":%ld}\n",
           m->name, named ? "shm" : "memfd", frames, warmed, p50, p99, mean,
           server_us / (double)frames, fps, wrong_frames);
  } else {
    printf("renderer: %ld frames of %s (%s): %.1f fps, round trip p50 %.1f us, p99 %.1f us "
           "(service %.1f us)\n",
           frames, m->name, named ? "shared by name" : "shared by fd", fps, p50, p99,
           server_us / (double)frames);
    if (wrong == 0)
      printf("renderer: all %ld outputs verified\n", warmed + frames);
    else
      printf("renderer: %ld wrong elements in %ld frames\n", wrong, wrong_frames);
  }
  free(latency);
  api->ReleaseSession(session);
  api->ReleaseClient(client);
  api->ReleaseFence(done);
  api->ReleaseFence(ready);
  api->ReleaseFrame(frame);
  return wrong == 0 ? 0 : 1;
}
