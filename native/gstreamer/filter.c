#include "filter.h"

#include <string.h>

#include <gst/allocators/gstfdmemory.h>

#include "fdpool.h"

GST_DEBUG_CATEGORY(fenceline_filter_debug);
#define GST_CAT_DEFAULT fenceline_filter_debug

#define FORMATS "{ RGBA, BGRA, RGBx, BGRx, RGB, BGR }"
#define DEFAULT_TIMEOUT_MS 10000
/* The service refuses a run's timeout_ms above this (RuntimeSettings.max_timeout_ms). The
 * property's range stays wider: GObject answers an out-of-range value with a warning and keeps
 * the old one, where a clear error at start is what the user needs. */
#define MAX_TIMEOUT_MS 600000
#define DEFAULT_IN_FLIGHT 2
/* Long enough for a loaded machine's slowest answer, short enough that a hung service stops a
 * live pipeline within seconds rather than never. */
#define DEFAULT_SERVICE_TIMEOUT_MS 10000

enum {
  PROP_0,
  PROP_MODEL,
  PROP_SOCKET,
  PROP_TIMEOUT,
  PROP_SERVICE_TIMEOUT,
  PROP_FRAMES_IN_FLIGHT,
  PROP_INPUT_NAME,
  PROP_OUTPUT_NAME,
  PROP_STATS,
};

static GstStaticPadTemplate sink_template = GST_STATIC_PAD_TEMPLATE(
    "sink", GST_PAD_SINK, GST_PAD_ALWAYS, GST_STATIC_CAPS(GST_VIDEO_CAPS_MAKE(FORMATS)));
static GstStaticPadTemplate src_template = GST_STATIC_PAD_TEMPLATE(
    "src", GST_PAD_SRC, GST_PAD_ALWAYS, GST_STATIC_CAPS(GST_VIDEO_CAPS_MAKE(FORMATS)));

G_DEFINE_TYPE(FencelineFilter, fenceline_filter, GST_TYPE_BASE_TRANSFORM)

/* ---- the connection and the buffers the service holds ------------------------------------ */

static void slot_free(gpointer data) {
  FlSlot *slot = data;
  /* The session holds its import; releasing it releases the service's mapping. */
  const FlApi *api = FlGetApi(FL_API_VERSION);
  api->ReleaseSession(slot->session);
  api->ReleaseMemoryImport(slot->memory);
  g_free(slot);
}

static void disconnect(FencelineFilter *self) {
  const FlApi *api = self->api;
  g_hash_table_remove_all(self->slots);
  api->ReleaseFenceImport(self->ready_import);
  api->ReleaseFenceImport(self->done_import);
  api->ReleaseClient(self->client);
  api->ReleaseFence(self->ready);
  api->ReleaseFence(self->done);
  self->ready_import = self->done_import = NULL;
  self->client = NULL;
  self->ready = self->done = NULL;
  self->last_value = 0;
}

static FlStatus *connect_service(FencelineFilter *self) {
  if (self->client != NULL) return NULL;
  const FlApi *api = self->api;
  GST_OBJECT_LOCK(self);
  gchar *socket = g_strdup(self->socket);
  int64_t deadline_ns = (int64_t)self->service_timeout_ms * 1000000;
  GST_OBJECT_UNLOCK(self);
  /* Every later call on the client keeps this deadline (a run's: it plus the run's timeout): a
   * service that hangs fails the call with timed_out and closes the connection. */
  FlStatus *st = api->CreateClientWithTimeout(socket, "gstreamer", deadline_ns, &self->client);
  g_free(socket);
  if (st == NULL) st = api->CreateFence(NULL, &self->ready);
  if (st == NULL) st = api->CreateFence(NULL, &self->done);
  if (st == NULL) st = api->ImportFence(self->client, self->ready, &self->ready_import);
  if (st == NULL) st = api->ImportFence(self->client, self->done, &self->done_import);
  if (st != NULL) disconnect(self);
  return st;
}

/* The service's session for `mem`: the first time, the memfd travels to the service, which maps
 * it and binds the model's input and output to it (in place); later frames reuse both. */
static FlStatus *slot_for(FencelineFilter *self, GstMemory *mem, guint64 id, FlSlot **out) {
  FlSlot *slot = g_hash_table_lookup(self->slots, &id);
  if (slot != NULL) {
    *out = slot;
    return NULL;
  }
  const FlApi *api = self->api;
  FlMemoryImport *memory = NULL;
  FlStatus *st = api->ImportMemoryFd(self->client, gst_fd_memory_get_fd(mem), 0,
                                     self->frame_bytes, FL_ACCESS_READ_WRITE, &memory);
  if (st != NULL) return st;
  GST_OBJECT_LOCK(self);
  gchar *model = g_strdup(self->model);
  gchar *in_name = g_strdup(self->input_name), *out_name = g_strdup(self->output_name);
  GST_OBJECT_UNLOCK(self);
  FlTensorView in = {sizeof(FlTensorView), in_name, memory, 0, "UINT8", self->shape, 4};
  FlTensorView out_view = {sizeof(FlTensorView), out_name, memory, 0, "UINT8", self->shape, 4};
  FlSessionDesc desc = {sizeof(FlSessionDesc), model, &in, 1, &out_view, 1, self->ready_import,
                        self->done_import};
  FlSession *session = NULL;
  st = api->CreateSession(self->client, &desc, &session);
  g_free(model);
  g_free(in_name);
  g_free(out_name);
  if (st != NULL) {
    api->ReleaseMemoryImport(memory);
    return st;
  }
  slot = g_new0(FlSlot, 1);
  slot->memory = memory;
  slot->session = session;
  guint64 *key = g_new(guint64, 1);
  *key = id;
  g_hash_table_insert(self->slots, key, slot);
  g_mutex_lock(&self->lock);
  self->imports++;
  g_mutex_unlock(&self->lock);
  *out = slot;
  return NULL;
}

/* A pool of memfd buffers of the negotiated frame size. */
static GstBufferPool *make_pool(GstCaps *caps, gsize size, guint min) {
  GstBufferPool *pool = fenceline_fd_pool_new();
  GstStructure *config = gst_buffer_pool_get_config(pool);
  gst_buffer_pool_config_set_params(config, caps, (guint)size, min, 0);
  if (!gst_buffer_pool_set_config(pool, config)) {
    gst_object_unref(pool);
    return NULL;
  }
  return pool;
}

/* ---- GstBaseTransform --------------------------------------------------------------------- */

/* NOT_FOUND when the service has no such model. A session over a one-byte view answers it: the
 * service looks the model up before it checks the views, which this one may well not fit. */
static FlStatus *check_model(FencelineFilter *self, const char *model) {
  const FlApi *api = self->api;
  FlFrame *frame = NULL;
  FlMemoryImport *memory = NULL;
  FlSession *session = NULL;
  static const int64_t one[4] = {1, 1, 1, 1};
  FlStatus *st = api->CreateFrame(NULL, 4096, &frame);
  if (st == NULL) st = api->ImportFrame(self->client, frame, FL_ACCESS_READ_WRITE, &memory);
  if (st == NULL) {
    FlTensorView in = {sizeof(FlTensorView), self->input_name, memory, 0, "UINT8", one, 4};
    FlTensorView out = {sizeof(FlTensorView), self->output_name, memory, 0, "UINT8", one, 4};
    FlSessionDesc desc = {sizeof(FlSessionDesc), model, &in, 1, &out, 1, self->ready_import,
                          self->done_import};
    st = api->CreateSession(self->client, &desc, &session);
    if (st != NULL && api->GetErrorCode(st) != FL_ERROR_NOT_FOUND) {
      api->ReleaseStatus(st);
      st = NULL;
    }
  }
  api->ReleaseSession(session);
  api->ReleaseMemoryImport(memory);
  api->ReleaseFrame(frame);
  return st;
}

/* Connecting and finding the model happen here, in the state change to PAUSED, so that a missing
 * service or model fails the state change itself, before any data flows. */
static gboolean filter_start(GstBaseTransform *trans) {
  FencelineFilter *self = FENCELINE_FILTER(trans);
  self->quit = FALSE;
  self->frames = self->zero_copy_frames = self->copied_frames = self->imports = 0;
  self->said_zero_copy = self->said_copy = FALSE;
  g_atomic_int_set(&self->posted_error, FALSE);

  GST_OBJECT_LOCK(self);
  gchar *model = g_strdup(self->model);
  GST_OBJECT_UNLOCK(self);
  if (model == NULL || model[0] == '\0') {
    g_free(model);
    if (first_error(self))
      GST_ELEMENT_ERROR(self, RESOURCE, SETTINGS,
                        ("fencelinefilter needs a model: set model=NAME"), (NULL));
    return FALSE;
  }
  GST_OBJECT_LOCK(self);
  guint timeout_ms = self->timeout_ms;
  GST_OBJECT_UNLOCK(self);
  if (timeout_ms > MAX_TIMEOUT_MS) {
    g_free(model);
    if (first_error(self))
      GST_ELEMENT_ERROR(self, RESOURCE, SETTINGS,
                        ("fencelinefilter timeout=%u is above the service's limit of %u ms: set "
                         "timeout=1..%u", timeout_ms, MAX_TIMEOUT_MS, MAX_TIMEOUT_MS),
                        (NULL));
    return FALSE;
  }
  FlStatus *st = connect_service(self);
  if (st != NULL) {
    g_free(model);
    post_status(self, st, "connecting to the fenceline service");
    return FALSE;
  }
  st = check_model(self, model);
  if (st != NULL) {
    gchar *what = g_strdup_printf("model '%s'", model);
    post_status(self, st, what);
    g_free(what);
    g_free(model);
    disconnect(self);
    return FALSE;
  }
  g_free(model);
  self->worker = g_thread_new("fenceline-run", worker_main, self);
  return TRUE;
}

static gboolean filter_stop(GstBaseTransform *trans) {
  FencelineFilter *self = FENCELINE_FILTER(trans);
  discard_jobs(self);
  g_mutex_lock(&self->lock);
  self->quit = TRUE;
  g_cond_broadcast(&self->cond);
  g_mutex_unlock(&self->lock);
  if (self->worker != NULL) g_thread_join(self->worker);
  self->worker = NULL;
  GST_INFO_OBJECT(self,
                  "stats: frames=%" G_GUINT64_FORMAT " zero-copy=%" G_GUINT64_FORMAT
                  " copied=%" G_GUINT64_FORMAT " imports=%" G_GUINT64_FORMAT,
                  self->frames, self->zero_copy_frames, self->copied_frames, self->imports);
  disconnect(self);
  if (self->fallback != NULL) gst_buffer_pool_set_active(self->fallback, FALSE);
  gst_clear_object(&self->fallback);
  gst_clear_object(&self->proposed);
  return TRUE;
}

static gboolean filter_set_caps(GstBaseTransform *trans, GstCaps *incaps, GstCaps *outcaps) {
  (void)outcaps;
  FencelineFilter *self = FENCELINE_FILTER(trans);
  GstVideoInfo info;
  if (!gst_video_info_from_caps(&info, incaps)) return FALSE;
  guint pixel = (guint)GST_VIDEO_INFO_COMP_PSTRIDE(&info, 0);
  guint width = GST_VIDEO_INFO_WIDTH(&info), height = GST_VIDEO_INFO_HEIGHT(&info);

  GST_OBJECT_LOCK(self);
  self->depth = self->in_flight;
  GST_OBJECT_UNLOCK(self);

  /* A caps change starts over: the service's sessions are bound to the old frame size. */
  discard_jobs(self);
  g_hash_table_remove_all(self->slots);
  if (self->fallback != NULL) gst_buffer_pool_set_active(self->fallback, FALSE);
  gst_clear_object(&self->fallback);

  self->info = info;
  self->frame_bytes = (gsize)width * height * pixel;
  self->zero_copy_layout = (gsize)GST_VIDEO_INFO_PLANE_STRIDE(&info, 0) == (gsize)width * pixel;
  self->shape[0] = 1;
  self->shape[1] = height;
  self->shape[2] = width;
  self->shape[3] = pixel;

  FlStatus *st = connect_service(self);
  if (st != NULL) {
    post_status(self, st, "connecting to the fenceline service");
    return FALSE;
  }
  self->fallback = make_pool(incaps, self->frame_bytes, 1);
  if (self->fallback == NULL || !gst_buffer_pool_set_active(self->fallback, TRUE)) {
    if (first_error(self))
      GST_ELEMENT_ERROR(self, RESOURCE, NO_SPACE_LEFT, ("could not allocate memfd frames"), (NULL));
    return FALSE;
  }
  /* The first buffer's session checks the model against the caps now, so a model that does not
   * take these frames fails negotiation with the service's reason. */
  GstBuffer *probe = NULL;
  if (gst_buffer_pool_acquire_buffer(self->fallback, &probe, NULL) != GST_FLOW_OK) {
    if (first_error(self))
      GST_ELEMENT_ERROR(self, RESOURCE, NO_SPACE_LEFT, ("could not allocate memfd frames"), (NULL));
    return FALSE;
  }
  GstMemory *mem = gst_buffer_peek_memory(probe, 0);
  FlSlot *slot = NULL;
  st = slot_for(self, mem, fenceline_fd_pool_memory_id(mem), &slot);
  gst_buffer_unref(probe);
  if (st != NULL) {
    gchar *caps_text = gst_caps_to_string(incaps);
    gchar *what = g_strdup_printf("model '%s' on %s %ux%u (uint8 tensor [1, %u, %u, %u]), caps %s",
                                  self->model, GST_VIDEO_INFO_NAME(&info), width, height, height,
                                  width, pixel, caps_text);
    post_status(self, st, what);
    g_free(what);
    g_free(caps_text);
    return FALSE;
  }
  GST_INFO_OBJECT(self, "model %s runs on %s %ux%u frames, %u in flight", self->model,
                  GST_VIDEO_INFO_NAME(&info), width, height, self->depth);
  return TRUE;
}

static gboolean filter_propose_allocation(GstBaseTransform *trans, GstQuery *decide_query,
                                          GstQuery *query) {
  (void)decide_query;
  FencelineFilter *self = FENCELINE_FILTER(trans);
  GstCaps *caps = NULL;
  gst_query_parse_allocation(query, &caps, NULL);
  GstVideoInfo info;
  if (caps == NULL || !gst_video_info_from_caps(&info, caps)) return FALSE;
  guint pixel = (guint)GST_VIDEO_INFO_COMP_PSTRIDE(&info, 0);
  if ((gsize)GST_VIDEO_INFO_PLANE_STRIDE(&info, 0) != (gsize)GST_VIDEO_INFO_WIDTH(&info) * pixel) {
    GST_INFO_OBJECT(self, "rows of %s are padded: no pool to propose, frames will be copied",
                    GST_VIDEO_INFO_NAME(&info));
    return TRUE;
  }
  /* Upstream fills one buffer while `frames-in-flight` others are with the service. */
  GST_OBJECT_LOCK(self);
  guint min = self->in_flight + 2;
  GST_OBJECT_UNLOCK(self);
  GstBufferPool *pool = make_pool(caps, GST_VIDEO_INFO_SIZE(&info), min);
  if (pool == NULL) return FALSE;
  gst_query_add_allocation_pool(query, pool, (guint)GST_VIDEO_INFO_SIZE(&info), min, 0);
  GST_INFO_OBJECT(self, "proposing a pool of memfd-backed fd memory: at least %u buffers of %"
                  G_GSIZE_FORMAT " bytes", min, GST_VIDEO_INFO_SIZE(&info));
  gst_object_replace((GstObject **)&self->proposed, GST_OBJECT(pool));
  gst_object_unref(pool);
  return TRUE;
}

/* The buffer the service runs on: `in` itself when it is one of our memfds, writable and laid
 * out as the tensor; else one copy into a buffer of our own. Takes `in`. */
static GstBuffer *buffer_for_service(FencelineFilter *self, GstBuffer *in, GstFlowReturn *ret) {
  GstMemory *mem = gst_buffer_n_memory(in) == 1 ? gst_buffer_peek_memory(in, 0) : NULL;
  GstVideoMeta *meta = gst_buffer_get_video_meta(in);
  gsize offset = 0, maxsize = 0;
  gsize size = mem != NULL ? gst_memory_get_sizes(mem, &offset, &maxsize) : 0;
  gboolean ours = mem != NULL && fenceline_fd_pool_memory_id(mem) != 0 && offset == 0 &&
                  size == self->frame_bytes;
  gboolean packed = self->zero_copy_layout &&
                    (meta == NULL || (gsize)meta->stride[0] == self->frame_bytes / self->shape[1]);
  if (ours && packed && gst_buffer_is_writable(in)) {
    g_mutex_lock(&self->lock);
    self->zero_copy_frames++;
    gboolean say = !self->said_zero_copy;
    self->said_zero_copy = TRUE;
    g_mutex_unlock(&self->lock);
    if (say) GST_INFO_OBJECT(self, "upstream writes into the proposed pool: no copy");
    return in;
  }

  GstBuffer *out = NULL;
  *ret = gst_buffer_pool_acquire_buffer(self->fallback, &out, NULL);
  if (*ret != GST_FLOW_OK) {
    gst_buffer_unref(in);
    return NULL;
  }
  GstVideoFrame src, dst;
  GstVideoInfo packed_info = self->info;
  packed_info.stride[0] = (gint)(self->frame_bytes / self->shape[1]);
  packed_info.size = self->frame_bytes;
  if (!gst_video_frame_map(&src, &self->info, in, GST_MAP_READ)) {
    gst_buffer_unref(in);
    gst_buffer_unref(out);
    if (first_error(self))
      GST_ELEMENT_ERROR(self, STREAM, FAILED, ("could not map an input frame"), (NULL));
    *ret = GST_FLOW_ERROR;
    return NULL;
  }
  gst_video_frame_map(&dst, &packed_info, out, GST_MAP_WRITE);
  gst_video_frame_copy(&dst, &src);
  gst_video_frame_unmap(&dst);
  gst_video_frame_unmap(&src);
  gst_buffer_copy_into(out, in, GST_BUFFER_COPY_FLAGS | GST_BUFFER_COPY_TIMESTAMPS, 0, -1);
  gst_buffer_unref(in);
  g_mutex_lock(&self->lock);
  self->copied_frames++;
  gboolean say = !self->said_copy;
  self->said_copy = TRUE;
  g_mutex_unlock(&self->lock);
  if (say)
    GST_INFO_OBJECT(self, "upstream did not write into the proposed pool (%s): copying each "
                    "frame once into shared memory",
                    !ours ? "foreign memory" : !packed ? "padded rows" : "buffer not writable");
  return out;
}

static GstFlowReturn filter_submit_input_buffer(GstBaseTransform *trans, gboolean is_discont,
                                                GstBuffer *input) {
  FencelineFilter *self = FENCELINE_FILTER(trans);
  /* The parent renegotiates when asked and applies QoS; it leaves the buffer in queued_buf. */
  GstFlowReturn ret = GST_BASE_TRANSFORM_CLASS(fenceline_filter_parent_class)
                          ->submit_input_buffer(trans, is_discont, input);
  if (ret != GST_FLOW_OK || trans->queued_buf == NULL) return ret;
  GstBuffer *in = trans->queued_buf;
  trans->queued_buf = NULL;
  if (self->client == NULL) {
    gst_buffer_unref(in);
    return GST_FLOW_NOT_NEGOTIATED;
  }

  ret = GST_FLOW_OK;
  GstBuffer *buf = buffer_for_service(self, in, &ret);
  if (buf == NULL) return ret;
  GstMemory *mem = gst_buffer_peek_memory(buf, 0);
  FlSlot *slot = NULL;
  FlStatus *st = slot_for(self, mem, fenceline_fd_pool_memory_id(mem), &slot);
  if (st == NULL) st = self->api->SignalFence(self->ready, self->last_value + 1);
  if (st != NULL) {
    gst_buffer_unref(buf);
    post_status(self, st, "sharing a frame with the service");
    return GST_FLOW_ERROR;
  }
  FlJob *job = g_new0(FlJob, 1);
  job->buffer = buf;
  job->session = slot->session;
  job->value = ++self->last_value;
  g_mutex_lock(&self->lock);
  g_queue_push_tail(&self->unsent, job);
  g_queue_push_tail(&self->in_flight_jobs, job);
  g_cond_broadcast(&self->cond);
  g_mutex_unlock(&self->lock);
  return GST_FLOW_OK;
}

static GstFlowReturn filter_generate_output(GstBaseTransform *trans, GstBuffer **outbuf) {
  FencelineFilter *self = FENCELINE_FILTER(trans);
  g_mutex_lock(&self->lock);
  gboolean full = g_queue_get_length(&self->in_flight_jobs) > self->depth;
  g_mutex_unlock(&self->lock);
  return pop_done(self, full, outbuf);
}

static gboolean filter_sink_event(GstBaseTransform *trans, GstEvent *event) {
  FencelineFilter *self = FENCELINE_FILTER(trans);
  switch (GST_EVENT_TYPE(event)) {
    case GST_EVENT_EOS:
    case GST_EVENT_CAPS:
    case GST_EVENT_SEGMENT:
      /* Frames in flight belong before the event. */
      if (drain(self) != GST_FLOW_OK && GST_EVENT_TYPE(event) == GST_EVENT_EOS) {
        gst_event_unref(event);
        return FALSE;
      }
      break;
    case GST_EVENT_FLUSH_STOP:
      discard_jobs(self);
      break;
    default:
      break;
  }
  return GST_BASE_TRANSFORM_CLASS(fenceline_filter_parent_class)->sink_event(trans, event);
}

/* ---- GObject ------------------------------------------------------------------------------ */

static void filter_set_property(GObject *obj, guint id, const GValue *value, GParamSpec *pspec) {
  FencelineFilter *self = FENCELINE_FILTER(obj);
  GST_OBJECT_LOCK(self);
  switch (id) {
    case PROP_MODEL: g_free(self->model); self->model = g_value_dup_string(value); break;
    case PROP_SOCKET: g_free(self->socket); self->socket = g_value_dup_string(value); break;
    case PROP_TIMEOUT: self->timeout_ms = g_value_get_uint(value); break;
    case PROP_SERVICE_TIMEOUT: self->service_timeout_ms = g_value_get_uint(value); break;
    case PROP_FRAMES_IN_FLIGHT: self->in_flight = g_value_get_uint(value); break;
    case PROP_INPUT_NAME:
      g_free(self->input_name);
      self->input_name = g_value_dup_string(value);
      break;
    case PROP_OUTPUT_NAME:
      g_free(self->output_name);
      self->output_name = g_value_dup_string(value);
      break;
    default: G_OBJECT_WARN_INVALID_PROPERTY_ID(obj, id, pspec);
  }
  GST_OBJECT_UNLOCK(self);
}

static void filter_get_property(GObject *obj, guint id, GValue *value, GParamSpec *pspec) {
  FencelineFilter *self = FENCELINE_FILTER(obj);
  if (id == PROP_STATS) {
    g_mutex_lock(&self->lock);
    GstStructure *s = gst_structure_new(
        "fenceline-stats", "frames", G_TYPE_UINT64, self->frames, "zero-copy-frames",
        G_TYPE_UINT64, self->zero_copy_frames, "copied-frames", G_TYPE_UINT64,
        self->copied_frames, "imports", G_TYPE_UINT64, self->imports, NULL);
    g_mutex_unlock(&self->lock);
    g_value_take_boxed(value, s);
    return;
  }
  GST_OBJECT_LOCK(self);
  switch (id) {
    case PROP_MODEL: g_value_set_string(value, self->model); break;
    case PROP_SOCKET: g_value_set_string(value, self->socket); break;
    case PROP_TIMEOUT: g_value_set_uint(value, self->timeout_ms); break;
    case PROP_SERVICE_TIMEOUT: g_value_set_uint(value, self->service_timeout_ms); break;
    case PROP_FRAMES_IN_FLIGHT: g_value_set_uint(value, self->in_flight); break;
    case PROP_INPUT_NAME: g_value_set_string(value, self->input_name); break;
    case PROP_OUTPUT_NAME: g_value_set_string(value, self->output_name); break;
    default: G_OBJECT_WARN_INVALID_PROPERTY_ID(obj, id, pspec);
  }
  GST_OBJECT_UNLOCK(self);
}

static void filter_finalize(GObject *obj) {
  FencelineFilter *self = FENCELINE_FILTER(obj);
  g_hash_table_destroy(self->slots);
  g_free(self->model);
  g_free(self->socket);
  g_free(self->input_name);
  g_free(self->output_name);
  g_mutex_clear(&self->lock);
  g_cond_clear(&self->cond);
  G_OBJECT_CLASS(fenceline_filter_parent_class)->finalize(obj);
}

static void fenceline_filter_class_init(FencelineFilterClass *klass) {
  GObjectClass *gobject_class = G_OBJECT_CLASS(klass);
  GstElementClass *element_class = GST_ELEMENT_CLASS(klass);
  GstBaseTransformClass *trans_class = GST_BASE_TRANSFORM_CLASS(klass);
  gobject_class->set_property = filter_set_property;
  gobject_class->get_property = filter_get_property;
  gobject_class->finalize = filter_finalize;
  GParamFlags rw = G_PARAM_READWRITE | G_PARAM_STATIC_STRINGS | GST_PARAM_MUTABLE_READY;

  g_object_class_install_property(
      gobject_class, PROP_MODEL,
      g_param_spec_string("model", "Model", "Name of the model in the service (required)", NULL,
                          rw));
  g_object_class_install_property(
      gobject_class, PROP_SOCKET,
      g_param_spec_string("socket", "Socket",
                          "The service's IPC socket (NULL: $FENCELINE_SOCKET, else "
                          "$XDG_RUNTIME_DIR/fenceline/fenceline.sock, else "
                          "/tmp/fenceline-<uid>/fenceline/fenceline.sock: the service's default)",
                          NULL, rw));
  g_object_class_install_property(
      gobject_class, PROP_TIMEOUT,
      g_param_spec_uint("timeout", "Timeout",
                        "Milliseconds the service waits for a frame's input fence, 1 to the "
                        "service's limit of 600000 (more fails the pipeline at start)",
                        1, G_MAXUINT32 - 1, DEFAULT_TIMEOUT_MS, rw));
  g_object_class_install_property(
      gobject_class, PROP_SERVICE_TIMEOUT,
      g_param_spec_uint("service-timeout", "Service timeout",
                        "Milliseconds the element waits for the service's answer to a call (for "
                        "a frame: beyond its timeout) before it fails the pipeline with "
                        "timed_out",
                        1, G_MAXUINT32 - 1, DEFAULT_SERVICE_TIMEOUT_MS, rw));
  g_object_class_install_property(
      gobject_class, PROP_FRAMES_IN_FLIGHT,
      g_param_spec_uint("frames-in-flight", "Frames in flight",
                        "Frames handed to the service before the oldest is pushed on", 1, 16,
                        DEFAULT_IN_FLIGHT, rw));
  g_object_class_install_property(
      gobject_class, PROP_INPUT_NAME,
      g_param_spec_string("input-name", "Input name", "The model's uint8 NHWC image input",
                          "image", rw));
  g_object_class_install_property(
      gobject_class, PROP_OUTPUT_NAME,
      g_param_spec_string("output-name", "Output name",
                          "The model's uint8 NHWC output, written over the input", "display",
                          rw));
  g_object_class_install_property(
      gobject_class, PROP_STATS,
      g_param_spec_boxed("stats", "Statistics",
                         "frames, zero-copy-frames, copied-frames, imports (memfds the service "
                         "mapped)",
                         GST_TYPE_STRUCTURE, G_PARAM_READABLE | G_PARAM_STATIC_STRINGS));

  gst_element_class_add_static_pad_template(element_class, &sink_template);
  gst_element_class_add_static_pad_template(element_class, &src_template);
  gst_element_class_set_static_metadata(
      element_class, "fenceline filter", "Filter/Effect/Video",
      "Runs each frame through a model in the fenceline service, sharing the pipeline's buffers "
      "with it",
      "fenceline");

  trans_class->passthrough_on_same_caps = FALSE;
  trans_class->start = filter_start;
  trans_class->stop = filter_stop;
  trans_class->set_caps = filter_set_caps;
  trans_class->propose_allocation = filter_propose_allocation;
  trans_class->submit_input_buffer = filter_submit_input_buffer;
  trans_class->generate_output = filter_generate_output;
  trans_class->sink_event = filter_sink_event;
}

static void fenceline_filter_init(FencelineFilter *self) {
  self->api = FlGetApi(FL_API_VERSION);
  self->timeout_ms = DEFAULT_TIMEOUT_MS;
  self->service_timeout_ms = DEFAULT_SERVICE_TIMEOUT_MS;
  self->in_flight = DEFAULT_IN_FLIGHT;
  self->input_name = g_strdup("image");
  self->output_name = g_strdup("display");
  self->slots = g_hash_table_new_full(g_int64_hash, g_int64_equal, g_free, slot_free);
  g_mutex_init(&self->lock);
  g_cond_init(&self->cond);
  g_queue_init(&self->unsent);
  g_queue_init(&self->in_flight_jobs);
}

static gboolean plugin_init(GstPlugin *plugin) {
  GST_DEBUG_CATEGORY_INIT(fenceline_filter_debug, "fencelinefilter", 0, "fenceline filter");
  return gst_element_register(plugin, "fencelinefilter", GST_RANK_NONE, FENCELINE_TYPE_FILTER);
}

#define PACKAGE "fenceline"
GST_PLUGIN_DEFINE(GST_VERSION_MAJOR, GST_VERSION_MINOR, fenceline,
                  "Run fenceline models on video frames, zero copy", plugin_init, "0.1.0",
                  "Apache 2.0", "fenceline", "fenceline")
