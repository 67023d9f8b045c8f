/* The entry points that take structs which may grow. Version 5's carry struct_size: the caller's
 * structs are copied into this library's layout (fields the caller's version lacks are zero),
 * so remote.c reads one layout only. Versions 1 to 4 had no struct_size; programs built against
 * them get FlGetApi(4)'s table, whose entries read that frozen layout. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"

FlStatus *fl_check_struct_size(const char *what, const char *type, size_t given, size_t minimum,
                               size_t current) {
  if (given >= minimum) return NULL;
  return fl_status(FL_ERROR_INVALID_ARGUMENT,
                   "%s: struct_size is %zu, below the %zu bytes of the first %s; set it to "
                   "sizeof(%s) (%zu in this library)",
                   what, given, minimum, type, type, current);
}

/* Copies the first min(given, sizeof *dst) bytes of a caller's struct into a zeroed one. */
static void copy_sized(void *dst, size_t dst_size, const void *src, size_t given) {
  memset(dst, 0, dst_size);
  memcpy(dst, src, given < dst_size ? given : dst_size);
}

/* A caller's view array, stride struct_size, as this library's FlTensorView array (malloc'd,
 * at least one element so an empty array is not NULL). */
static FlStatus *copy_views(const char *what, const char *role, const FlTensorView *views,
                            size_t n, FlTensorView **out) {
  *out = calloc(n > 0 ? n : 1, sizeof **out);
  if (*out == NULL) return fl_status(FL_ERROR_RESOURCE_EXHAUSTED, "out of memory");
  if (n == 0) return NULL;
  size_t stride = views[0].struct_size;
  char label[64];
  snprintf(label, sizeof label, "%s: %s 0", what, role);
  FlStatus *st = fl_check_struct_size(label, "FlTensorView", stride, FL_TENSOR_VIEW_SIZE_V5,
                                      sizeof(FlTensorView));
  for (size_t i = 0; st == NULL && i < n; ++i) {
    const FlTensorView *v = (const FlTensorView *)((const char *)views + i * stride);
    if (v->struct_size != stride)
      st = fl_status(FL_ERROR_INVALID_ARGUMENT,
                     "%s: %s %zu has struct_size %zu, %s 0 has %zu; every element of an array "
                     "has the same size",
                     what, role, i, v->struct_size, role, stride);
    else
      copy_sized(&(*out)[i], sizeof(FlTensorView), v, stride);
  }
  if (st != NULL) {
    free(*out);
    *out = NULL;
  }
  return st;
}

/* d (any version-5 size) as this library's FlSessionDesc, its arrays copied; free the arrays
 * with free_desc. */
static FlStatus *copy_desc(const char *what, const FlSessionDesc *d, FlSessionDesc *out) {
  if (d == NULL) return NULL; /* create_session names the NULL */
  FlStatus *st = fl_check_struct_size(what, "FlSessionDesc", d->struct_size,
                                      FL_SESSION_DESC_SIZE_V5, sizeof(FlSessionDesc));
  if (st != NULL) return st;
  copy_sized(out, sizeof *out, d, d->struct_size);
  out->struct_size = sizeof *out;
  FlTensorView *in = NULL, *outs = NULL;
  if (d->inputs != NULL &&
      (st = copy_views(what, "input", d->inputs, d->input_count, &in)) != NULL)
    return st;
  if (d->outputs != NULL &&
      (st = copy_views(what, "output", d->outputs, d->output_count, &outs)) != NULL) {
    free(in);
    return st;
  }
  out->inputs = in;
  out->outputs = outs;
  return NULL;
}

static void free_desc(FlSessionDesc *d) {
  free((void *)d->inputs);
  free((void *)d->outputs);
}

FlStatus *fl_session_create_sized(FlClient *c, const FlSessionDesc *d, FlSession **out) {
  FlSessionDesc copy = {0};
  FlStatus *st = copy_desc("CreateSession", d, &copy);
  if (st != NULL) return st;
  st = fl_session_create(c, d != NULL ? &copy : NULL, out);
  free_desc(&copy);
  return st;
}

FlStatus *fl_streaming_session_create_sized(FlClient *c, const FlSessionDesc *d,
                                            const char *policy, int64_t spin_us, int start,
                                            FlSession **out) {
  FlSessionDesc copy = {0};
  FlStatus *st = copy_desc("CreateStreamingSession", d, &copy);
  if (st != NULL) return st;
  st = fl_streaming_session_create(c, d != NULL ? &copy : NULL, policy, spin_us, start, out);
  free_desc(&copy);
  return st;
}

typedef FlStatus *(*run_fn)(FlSession *, uint64_t, uint64_t, uint32_t, FlRunResult *);

static FlStatus *run_sized(const char *what, run_fn run, FlSession *s, uint64_t wait_value,
                           uint64_t signal_value, uint32_t timeout_ms, FlRunResult *out) {
  if (out == NULL) return run(s, wait_value, signal_value, timeout_ms, NULL);
  /* Checked before anything is sent: a bad size must not cost the caller a frame. */
  FlStatus *st = fl_check_struct_size(what, "FlRunResult", out->struct_size,
                                      FL_RUN_RESULT_SIZE_V5, sizeof(FlRunResult));
  if (st != NULL) return st;
  FlRunResult r = {sizeof r, 0, 0, 0, 0, 0};
  st = run(s, wait_value, signal_value, timeout_ms, &r);
  if (st == NULL) {
    size_t n = out->struct_size < sizeof r ? out->struct_size : sizeof r;
    memcpy((char *)out + sizeof r.struct_size, (const char *)&r + sizeof r.struct_size,
           n - sizeof r.struct_size);
  }
  return st;
}

FlStatus *fl_session_run_sized(FlSession *s, uint64_t wait_value, uint64_t signal_value,
                               uint32_t timeout_ms, FlRunResult *out) {
  return run_sized("Run", fl_session_run, s, wait_value, signal_value, timeout_ms, out);
}

FlStatus *fl_session_run_async_sized(FlSession *s, uint64_t wait_value, uint64_t signal_value,
                                     uint32_t timeout_ms, FlRunResult *out) {
  return run_sized("RunAsync", fl_session_run_async, s, wait_value, signal_value, timeout_ms,
                   out);
}

/* ---- versions 1 to 4: the layouts before struct_size, frozen ------------------------------ */

typedef struct tensor_view_v4 {
  const char *name;
  const FlMemoryImport *memory;
  uint64_t offset_bytes;
  const char *datatype;
  const int64_t *shape;
  size_t rank;
} tensor_view_v4;

typedef struct session_desc_v4 {
  const char *model;
  const tensor_view_v4 *inputs;
  size_t input_count;
  const tensor_view_v4 *outputs;
  size_t output_count;
  const FlFenceImport *wait_fence;
  const FlFenceImport *signal_fence;
} session_desc_v4;

typedef struct run_result_v4 {
  uint64_t signal_value;
  uint32_t wait_us, infer_us, total_us, reserved;
} run_result_v4;

static FlTensorView *views_of_v4(const tensor_view_v4 *v, size_t n) {
  FlTensorView *out = calloc(n > 0 ? n : 1, sizeof *out);
  if (out == NULL) return NULL;
  for (size_t i = 0; i < n; ++i) {
    out[i].struct_size = sizeof out[i];
    out[i].name = v[i].name;
    out[i].memory = v[i].memory;
    out[i].offset_bytes = v[i].offset_bytes;
    out[i].datatype = v[i].datatype;
    out[i].shape = v[i].shape;
    out[i].rank = v[i].rank;
  }
  return out;
}

/* The table's type says FlSessionDesc; a program of versions 1 to 4 passed session_desc_v4. */
static FlStatus *desc_of_v4(const FlSessionDesc *d, FlSessionDesc *out) {
  const session_desc_v4 *old = (const session_desc_v4 *)(const void *)d;
  memset(out, 0, sizeof *out);
  out->struct_size = sizeof *out;
  out->model = old->model;
  out->input_count = old->input_count;
  out->output_count = old->output_count;
  out->wait_fence = old->wait_fence;
  out->signal_fence = old->signal_fence;
  FlTensorView *in = old->inputs != NULL ? views_of_v4(old->inputs, old->input_count) : NULL;
  FlTensorView *outs = old->outputs != NULL ? views_of_v4(old->outputs, old->output_count) : NULL;
  if ((old->inputs != NULL && in == NULL) || (old->outputs != NULL && outs == NULL)) {
    free(in);
    free(outs);
    return fl_status(FL_ERROR_RESOURCE_EXHAUSTED, "out of memory");
  }
  out->inputs = in;
  out->outputs = outs;
  return NULL;
}

FlStatus *fl_session_create_v4(FlClient *c, const FlSessionDesc *d, FlSession **out) {
  FlSessionDesc copy = {0};
  FlStatus *st = d != NULL ? desc_of_v4(d, &copy) : NULL;
  if (st != NULL) return st;
  st = fl_session_create(c, d != NULL ? &copy : NULL, out);
  free_desc(&copy);
  return st;
}

FlStatus *fl_streaming_session_create_v4(FlClient *c, const FlSessionDesc *d, const char *policy,
                                         int64_t spin_us, int start, FlSession **out) {
  FlSessionDesc copy = {0};
  FlStatus *st = d != NULL ? desc_of_v4(d, &copy) : NULL;
  if (st != NULL) return st;
  st = fl_streaming_session_create(c, d != NULL ? &copy : NULL, policy, spin_us, start, out);
  free_desc(&copy);
  return st;
}

static FlStatus *run_v4(run_fn run, FlSession *s, uint64_t wait_value, uint64_t signal_value,
                        uint32_t timeout_ms, FlRunResult *out) {
  FlRunResult r = {sizeof r, 0, 0, 0, 0, 0};
  FlStatus *st = run(s, wait_value, signal_value, timeout_ms, out != NULL ? &r : NULL);
  if (st == NULL && out != NULL) {
    run_result_v4 *old = (run_result_v4 *)(void *)out;
    old->signal_value = r.signal_value;
    old->wait_us = r.wait_us;
    old->infer_us = r.infer_us;
    old->total_us = r.total_us;
    old->reserved = 0;
  }
  return st;
}

FlStatus *fl_session_run_v4(FlSession *s, uint64_t wait_value, uint64_t signal_value,
                            uint32_t timeout_ms, FlRunResult *out) {
  return run_v4(fl_session_run, s, wait_value, signal_value, timeout_ms, out);
}

FlStatus *fl_session_run_async_v4(FlSession *s, uint64_t wait_value, uint64_t signal_value,
                                  uint32_t timeout_ms, FlRunResult *out) {
  return run_v4(fl_session_run_async, s, wait_value, signal_value, timeout_ms, out);
}
