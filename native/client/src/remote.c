/* Handles of objects that live in the service: memory imports, fence imports and sessions.
 *
 * A session holds references to the imports it was made from (a view keeps its import alive),
 * so the order the caller releases handles in never matters: an import is released in the
 * service when its last holder lets go. Every handle holds its client, so releasing a handle
 * after the client is always safe (it then frees only local memory). */
#include <stdlib.h>
#include <string.h>

#include "internal.h"

#define ID_CAPACITY 64

typedef struct remote {
  fl_refcount refs;
  FlClient *client;
  uint16_t release_kind; /* 0: the handle does not own the service object */
  char id[ID_CAPACITY];
} remote;

struct FlMemoryImport {
  remote r;
};

struct FlFenceImport {
  remote r;
};

struct FlSession {
  remote r;
  uint8_t raw_id[16];
  size_t hold_count;
  remote **holds;
};

/* The body {"id": id} of the messages that name one object (release, start, pause, stop). */
#define ID_BODY_CAPACITY (ID_CAPACITY + 16)

static void write_id_body(fl_json_writer *w, char body[ID_BODY_CAPACITY], const char *id) {
  fl_jw_init(w, body, ID_BODY_CAPACITY);
  fl_jw_begin_object(w);
  fl_jw_key(w, "id");
  fl_jw_string(w, id);
  fl_jw_end_object(w);
}

static void remote_init(remote *r, FlClient *c, uint16_t release_kind, const char *id) {
  fl_ref_init(&r->refs);
  r->client = c;
  r->release_kind = release_kind;
  memcpy(r->id, id, strlen(id) + 1);
  fl_client_ref(c);
}

/* Sends the release message, if the handle owns its object, and frees the client reference. A
 * failure is not reported: it means the connection is gone, and with it the service object. */
static void remote_finish(remote *r) {
  if (r->release_kind != 0) {
    char body[ID_BODY_CAPACITY];
    fl_json_writer w;
    write_id_body(&w, body, r->id);
    char *reply = NULL;
    fl_status_release(fl_client_call(r->client, r->release_kind, body, w.len, -1, &reply, NULL));
    free(reply);
  }
  fl_client_unref(r->client);
}

static void remote_ref(remote *r) { fl_ref_inc(&r->refs); }

static void remote_unref(remote *r) {
  if (!fl_ref_dec(&r->refs)) return;
  remote_finish(r);
  free(r);
}

/* Calls `kind` with `body` and reads the reply's "id" into id. */
static FlStatus *call_for_id(FlClient *c, uint16_t kind, const fl_json_writer *w, int fd,
                             char id[ID_CAPACITY]) {
  if (w->overflow)
    return fl_status(FL_ERROR_INVALID_ARGUMENT,
                     "the request does not fit in one 65536-byte frame");
  char *reply = NULL;
  size_t len = 0;
  FlStatus *st = fl_client_call(c, kind, w->buf, w->len, fd, &reply, &len);
  if (st != NULL) return st;
  if (fl_json_get_string(reply, len, "id", id, ID_CAPACITY) != 0 || id[0] == '\0')
    st = fl_status(FL_ERROR_PROTOCOL, "the service's reply has no \"id\": %.200s", reply);
  free(reply);
  return st;
}

/* Calls `kind` for a new object in the service and makes its handle, a struct of `size` bytes
 * whose first member is its remote (remote_unref frees it through that member). */
static FlStatus *import_remote(FlClient *c, uint16_t kind, uint16_t release_kind,
                               const fl_json_writer *w, int fd, size_t size, remote **out) {
  char id[ID_CAPACITY];
  FlStatus *st = call_for_id(c, kind, w, fd, id);
  if (st != NULL) return st;
  remote *r = malloc(size);
  if (r == NULL) return fl_status(FL_ERROR_RESOURCE_EXHAUSTED, "out of memory");
  remote_init(r, c, release_kind, id);
  *out = r;
  return NULL;
}

static const char *access_name(FlAccess a) {
  return a == FL_ACCESS_READ_ONLY ? "read_only" : "read_write";
}

/* ---- memory ------------------------------------------------------------------------------- */

static FlStatus *import_memory(FlClient *c, const char *handle_type, const char *name, int fd,
                               uint64_t offset, uint64_t size, FlAccess access,
                               FlMemoryImport **out) {
  if (c == NULL || out == NULL)
    return fl_status(FL_ERROR_INVALID_ARGUMENT, "ImportMemory: client and out must not be NULL");
  if (access != FL_ACCESS_READ_WRITE && access != FL_ACCESS_READ_ONLY)
    return fl_status(FL_ERROR_INVALID_ARGUMENT, "access is FL_ACCESS_READ_WRITE or _READ_ONLY");
  char body[512];
  fl_json_writer w;
  fl_jw_init(&w, body, sizeof body);
  fl_jw_begin_object(&w);
  fl_jw_key(&w, "handle_type");
  fl_jw_string(&w, handle_type);
  if (name != NULL) {
    fl_jw_key(&w, "name");
    fl_jw_string(&w, name);
  }
  fl_jw_key(&w, "size_bytes");
  fl_jw_uint(&w, size);
  fl_jw_key(&w, "offset_bytes");
  fl_jw_uint(&w, offset);
  fl_jw_key(&w, "access");
  fl_jw_string(&w, access_name(access));
  fl_jw_end_object(&w);
  return fl_import_memory_body(c, &w, fd, out);
}

FlStatus *fl_import_memory_body(FlClient *c, const fl_json_writer *w, int fd,
                                FlMemoryImport **out) {
  remote *r = NULL;
  FlStatus *st = import_remote(c, FL_KIND_IMPORT_MEMORY, FL_KIND_RELEASE_MEMORY, w, fd,
                               sizeof(FlMemoryImport), &r);
  if (st == NULL) *out = (FlMemoryImport *)r;
  return st;
}

FlStatus *fl_import_memory_fd(FlClient *c, int fd, uint64_t offset, uint64_t size,
                              FlAccess access, FlMemoryImport **out) {
  if (fd < 0) return fl_status(FL_ERROR_INVALID_ARGUMENT, "ImportMemoryFd: invalid fd %d", fd);
  return import_memory(c, "host_fd", NULL, fd, offset, size, access, out);
}

FlStatus *fl_import_memory_name(FlClient *c, const char *name, uint64_t offset, uint64_t size,
                                FlAccess access, FlMemoryImport **out) {
  FlStatus *st = fl_check_shm_name(name);
  if (st != NULL) return st;
  return import_memory(c, "host_shm", name, -1, offset, size, access, out);
}

FlStatus *fl_import_frame(FlClient *c, const FlFrame *f, FlAccess access, FlMemoryImport **out) {
  if (f == NULL) return fl_status(FL_ERROR_INVALID_ARGUMENT, "ImportFrame: frame is NULL");
  const char *name = fl_frame_name(f);
  if (name != NULL) return fl_import_memory_name(c, name, 0, 0, access, out);
  return fl_import_memory_fd(c, fl_frame_fd(f), 0, 0, access, out);
}

const char *fl_memory_import_id(const FlMemoryImport *m) { return m == NULL ? "" : m->r.id; }

void fl_memory_import_release(FlMemoryImport *m) {
  if (m != NULL) remote_unref(&m->r);
}

/* ---- fences ------------------------------------------------------------------------------- */

static FlStatus *import_fence(FlClient *c, const char *name, int fd, FlFenceImport **out) {
  if (c == NULL || out == NULL)
    return fl_status(FL_ERROR_INVALID_ARGUMENT, "ImportFence: client and out must not be NULL");
  char body[384];
  fl_json_writer w;
  fl_jw_init(&w, body, sizeof body);
  fl_jw_begin_object(&w);
  fl_jw_key(&w, "fence_type");
  fl_jw_string(&w, "host_timeline");
  if (name != NULL) {
    fl_jw_key(&w, "name");
    fl_jw_string(&w, name);
  }
  fl_jw_end_object(&w);
  return fl_import_fence_body(c, &w, fd, out);
}

FlStatus *fl_import_fence_body(FlClient *c, const fl_json_writer *w, int fd,
                               FlFenceImport **out) {
  remote *r = NULL;
  FlStatus *st = import_remote(c, FL_KIND_IMPORT_FENCE, FL_KIND_RELEASE_FENCE, w, fd,
                               sizeof(FlFenceImport), &r);
  if (st == NULL) *out = (FlFenceImport *)r;
  return st;
}

FlStatus *fl_import_fence_fd(FlClient *c, int fd, FlFenceImport **out) {
  if (fd < 0) return fl_status(FL_ERROR_INVALID_ARGUMENT, "ImportFenceFd: invalid fd %d", fd);
  return import_fence(c, NULL, fd, out);
}

FlStatus *fl_import_fence_name(FlClient *c, const char *name, FlFenceImport **out) {
  FlStatus *st = fl_check_shm_name(name);
  if (st != NULL) return st;
  return import_fence(c, name, -1, out);
}

FlStatus *fl_import_fence(FlClient *c, const FlFence *f, FlFenceImport **out) {
  if (f == NULL) return fl_status(FL_ERROR_INVALID_ARGUMENT, "ImportFence: fence is NULL");
  const char *name = fl_fence_name(f);
  if (name != NULL) return fl_import_fence_name(c, name, out);
  return fl_import_fence_fd(c, fl_fence_fd(f), out);
}

const char *fl_fence_import_id(const FlFenceImport *f) { return f == NULL ? "" : f->r.id; }

void fl_fence_import_release(FlFenceImport *f) {
  if (f != NULL) remote_unref(&f->r);
}

/* ---- sessions ----------------------------------------------------------------------------- */

static int hex_value(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

/* Session ids are 32 hex digits; RUN carries their 16 raw bytes. */
static FlStatus *parse_session_id(const char *id, uint8_t raw[16], char canonical[ID_CAPACITY]) {
  static const char digits[] = "0123456789abcdef";
  if (id == NULL || strlen(id) != FL_ID_LENGTH)
    return fl_status(FL_ERROR_INVALID_ARGUMENT, "session id \"%.64s\" is not %d hex digits",
                     id == NULL ? "(null)" : id, FL_ID_LENGTH);
  for (int i = 0; i < 16; ++i) {
    int hi = hex_value(id[2 * i]), lo = hex_value(id[2 * i + 1]);
    if (hi < 0 || lo < 0)
      return fl_status(FL_ERROR_INVALID_ARGUMENT, "session id \"%s\" is not %d hex digits", id,
                       FL_ID_LENGTH);
    raw[i] = (uint8_t)(hi << 4 | lo);
    canonical[2 * i] = digits[hi];
    canonical[2 * i + 1] = digits[lo];
  }
  canonical[FL_ID_LENGTH] = '\0';
  return NULL;
}

static FlStatus *check_view(FlClient *c, const FlTensorView *v, const char *role, size_t i) {
  if (v->name == NULL || v->datatype == NULL || v->memory == NULL ||
      (v->rank > 0 && v->shape == NULL))
    return fl_status(FL_ERROR_INVALID_ARGUMENT,
                     "%s %zu: name, memory, datatype (and shape when rank > 0) must be set", role,
                     i);
  if (v->memory->r.client != c)
    return fl_status(FL_ERROR_INVALID_ARGUMENT,
                     "%s \"%.64s\": its memory was imported by another client", role, v->name);
  return NULL;
}

static void write_views(fl_json_writer *w, const FlTensorView *views, size_t n) {
  fl_jw_begin_object(w);
  for (size_t i = 0; i < n; ++i) {
    const FlTensorView *v = &views[i];
    fl_jw_key(w, v->name);
    fl_jw_begin_object(w);
    fl_jw_key(w, "memory");
    fl_jw_string(w, v->memory->r.id);
    fl_jw_key(w, "offset_bytes");
    fl_jw_uint(w, v->offset_bytes);
    fl_jw_key(w, "datatype");
    fl_jw_string(w, v->datatype);
    fl_jw_key(w, "shape");
    fl_jw_begin_array(w);
    for (size_t d = 0; d < v->rank; ++d) fl_jw_int(w, v->shape[d]);
    fl_jw_end_array(w);
    fl_jw_end_object(w);
  }
  fl_jw_end_object(w);
}

/* What a streaming session adds to CreateSession's body; NULL for a request-mode session. */
typedef struct stream_options {
  const char *policy;
  int64_t spin_us; /* < 0: the service's default */
  int start;
} stream_options;

static FlStatus *create_session(FlClient *c, const FlSessionDesc *d, const stream_options *so,
                                FlSession **out) {
  if (c == NULL || d == NULL || out == NULL)
    return fl_status(FL_ERROR_INVALID_ARGUMENT,
                     "CreateSession: client, desc and out must not be NULL");
  if (d->model == NULL || d->wait_fence == NULL || d->signal_fence == NULL ||
      (d->input_count > 0 && d->inputs == NULL) || (d->output_count > 0 && d->outputs == NULL))
    return fl_status(FL_ERROR_INVALID_ARGUMENT,
                     "CreateSession: model, wait_fence, signal_fence and the view arrays must "
                     "be set");
  if (d->wait_fence->r.client != c || d->signal_fence->r.client != c)
    return fl_status(FL_ERROR_INVALID_ARGUMENT,
                     "CreateSession: a fence was imported by another client");
  FlStatus *st = NULL;
  for (size_t i = 0; st == NULL && i < d->input_count; ++i)
    st = check_view(c, &d->inputs[i], "input", i);
  for (size_t i = 0; st == NULL && i < d->output_count; ++i)
    st = check_view(c, &d->outputs[i], "output", i);
  if (st != NULL) return st;

  const size_t cap = 65536;
  char *body = malloc(cap);
  size_t hold_count = d->input_count + d->output_count + 2;
  FlSession *s = calloc(1, sizeof *s);
  remote **holds = calloc(hold_count, sizeof *holds);
  if (body == NULL || s == NULL || holds == NULL) {
    free(body);
    free(s);
    free(holds);
    return fl_status(FL_ERROR_RESOURCE_EXHAUSTED, "out of memory");
  }
  fl_json_writer w;
  fl_jw_init(&w, body, cap);
  fl_jw_begin_object(&w);
  fl_jw_key(&w, "model");
  fl_jw_string(&w, d->model);
  fl_jw_key(&w, "inputs");
  write_views(&w, d->inputs, d->input_count);
  fl_jw_key(&w, "outputs");
  write_views(&w, d->outputs, d->output_count);
  fl_jw_key(&w, "wait_fence");
  fl_jw_string(&w, d->wait_fence->r.id);
  fl_jw_key(&w, "signal_fence");
  fl_jw_string(&w, d->signal_fence->r.id);
  if (so != NULL) {
    fl_jw_key(&w, "mode");
    fl_jw_string(&w, "streaming");
    fl_jw_key(&w, "policy");
    fl_jw_string(&w, so->policy != NULL ? so->policy : "latest");
    if (so->spin_us >= 0) {
      fl_jw_key(&w, "spin_us");
      fl_jw_int(&w, so->spin_us);
    }
    fl_jw_key(&w, "start");
    fl_jw_bool(&w, so->start);
  }
  fl_jw_end_object(&w);
  char id[ID_CAPACITY];
  st = call_for_id(c, FL_KIND_CREATE_SESSION, &w, -1, id);
  free(body);
  if (st == NULL) st = parse_session_id(id, s->raw_id, id);
  if (st != NULL) {
    free(s);
    free(holds);
    return st;
  }
  remote_init(&s->r, c, FL_KIND_RELEASE_SESSION, id);
  size_t k = 0;
  for (size_t i = 0; i < d->input_count; ++i) holds[k++] = (remote *)&d->inputs[i].memory->r;
  for (size_t i = 0; i < d->output_count; ++i) holds[k++] = (remote *)&d->outputs[i].memory->r;
  holds[k++] = (remote *)&d->wait_fence->r;
  holds[k++] = (remote *)&d->signal_fence->r;
  for (size_t i = 0; i < k; ++i) remote_ref(holds[i]);
  s->holds = holds;
  s->hold_count = k;
  *out = s;
  return NULL;
}

FlStatus *fl_session_create(FlClient *c, const FlSessionDesc *d, FlSession **out) {
  return create_session(c, d, NULL, out);
}

FlStatus *fl_streaming_session_create(FlClient *c, const FlSessionDesc *d, const char *policy,
                                      int64_t spin_us, int start, FlSession **out) {
  stream_options so = {policy, spin_us, start != 0};
  return create_session(c, d, &so, out);
}

FlStatus *fl_session_open(FlClient *c, const char *id, FlSession **out) {
  if (c == NULL || out == NULL)
    return fl_status(FL_ERROR_INVALID_ARGUMENT, "OpenSession: client and out must not be NULL");
  FlSession *s = calloc(1, sizeof *s);
  if (s == NULL) return fl_status(FL_ERROR_RESOURCE_EXHAUSTED, "out of memory");
  char canonical[ID_CAPACITY];
  FlStatus *st = parse_session_id(id, s->raw_id, canonical);
  if (st != NULL) {
    free(s);
    return st;
  }
  remote_init(&s->r, c, 0, canonical);
  *out = s;
  return NULL;
}

const char *fl_session_id(const FlSession *s) { return s == NULL ? "" : s->r.id; }

FlStatus *fl_session_run(FlSession *s, uint64_t wait_value, uint64_t signal_value,
                         uint32_t timeout_ms, FlRunResult *out) {
  if (s == NULL) return fl_status(FL_ERROR_INVALID_ARGUMENT, "Run: session is NULL");
  return fl_client_run(s->r.client, FL_KIND_RUN, s->raw_id, wait_value, signal_value, timeout_ms,
                       out);
}

FlStatus *fl_session_run_async(FlSession *s, uint64_t wait_value, uint64_t signal_value,
                               uint32_t timeout_ms, FlRunResult *out) {
  if (s == NULL) return fl_status(FL_ERROR_INVALID_ARGUMENT, "RunAsync: session is NULL");
  return fl_client_run(s->r.client, FL_KIND_RUN_ASYNC, s->raw_id, wait_value, signal_value,
                       timeout_ms, out);
}

/* START, PAUSE or STOP of a streaming session; the reply (its description) goes to out_json
 * when the caller wants it. */
static FlStatus *stream_control(FlSession *s, uint16_t kind, const char *what, char **out_json) {
  if (s == NULL) return fl_status(FL_ERROR_INVALID_ARGUMENT, "%s: session is NULL", what);
  char body[ID_BODY_CAPACITY];
  fl_json_writer w;
  write_id_body(&w, body, s->r.id);
  char *reply = NULL;
  FlStatus *st = fl_client_call(s->r.client, kind, body, w.len, -1, &reply, NULL);
  if (st == NULL && out_json != NULL)
    *out_json = reply;
  else
    free(reply);
  return st;
}

FlStatus *fl_session_start(FlSession *s, char **out_json) {
  return stream_control(s, FL_KIND_START_SESSION, "StartSession", out_json);
}

FlStatus *fl_session_pause(FlSession *s, char **out_json) {
  return stream_control(s, FL_KIND_PAUSE_SESSION, "PauseSession", out_json);
}

FlStatus *fl_session_stop(FlSession *s, char **out_json) {
  FlStatus *st = stream_control(s, FL_KIND_STOP_SESSION, "StopSession", out_json);
  /* The service released the session with the stop: ReleaseSession must not ask again. */
  if (st == NULL) s->r.release_kind = 0;
  return st;
}

void fl_session_release(FlSession *s) {
  if (s == NULL) return;
  remote_finish(&s->r); /* the session goes first in the service, then what it held */
  for (size_t i = 0; i < s->hold_count; ++i) remote_unref(s->holds[i]);
  free(s->holds);
  free(s);
}

/* ---- describe ----------------------------------------------------------------------------- */

FlStatus *fl_describe(FlClient *c, const char *kind, const char *id, char **out_json) {
  if (c == NULL || kind == NULL || id == NULL || out_json == NULL)
    return fl_status(FL_ERROR_INVALID_ARGUMENT, "Describe: no argument may be NULL");
  char body[512];
  fl_json_writer w;
  fl_jw_init(&w, body, sizeof body);
  fl_jw_begin_object(&w);
  fl_jw_key(&w, "kind");
  fl_jw_string(&w, kind);
  fl_jw_key(&w, "id");
  fl_jw_string(&w, id);
  fl_jw_end_object(&w);
  if (w.overflow) return fl_status(FL_ERROR_INVALID_ARGUMENT, "Describe: id is too long");
  return fl_client_call(c, FL_KIND_DESCRIBE, body, w.len, -1, out_json, NULL);
}
