/* fenceline_filter: an OBS Studio video filter that runs each frame of a source through a model
 * in the fenceline service (docs/obs.md). On an async source (camera, media) OBS hands each
 * frame to filter_video; on a sync one (color, image, game, display, window capture) the filter
 * renders the source into a texture and reads it back (render.c). Either way the runner
 * (runner.c) copies the frame into shared memory the service imported once, runs it on its own
 * thread and hands back the newest result, so OBS never waits for the model; an async frame is
 * copied on that thread too, so OBS's graphics thread copies nothing. */
#include <obs-module.h>
#include <util/platform.h>
#include <stdio.h>
#include <string.h>

#include "render.h"
#include "runner.h"

OBS_DECLARE_MODULE()

MODULE_EXPORT const char *obs_module_description(void) {
  return "fenceline: run models on sources through the fenceline service";
}

typedef struct filter {
  obs_source_t *source;
  fl_obs_runner *runner;
  fl_obs_render *render; /* made on the first frame rendered and read back */
  int frames_on_gpu;     /* the async source's frames are not packed: filter_render takes them */
} filter;

static const char *filter_name(void *type_data) {
  (void)type_data;
  return "fenceline model filter";
}

static void read_config(obs_data_t *settings, fl_obs_config *c) {
  memset(c, 0, sizeof *c);
  snprintf(c->model, sizeof c->model, "%s", obs_data_get_string(settings, "model"));
  snprintf(c->socket, sizeof c->socket, "%s", obs_data_get_string(settings, "socket"));
  c->frames_in_flight = (int)obs_data_get_int(settings, "frames_in_flight");
  c->fallback = strcmp(obs_data_get_string(settings, "fallback"), "unfiltered") == 0
                    ? FL_OBS_FALLBACK_UNFILTERED
                    : FL_OBS_FALLBACK_LAST_GOOD;
  c->bgr = strcmp(obs_data_get_string(settings, "channel_order"), "bgr") == 0;
  c->deadline_ms = obs_data_get_int(settings, "deadline_ms");
}

static void filter_update(void *data, obs_data_t *settings) {
  filter *f = data;
  fl_obs_config c;
  read_config(settings, &c);
  fl_obs_runner_configure(f->runner, &c);
}

/* proc "get_stats": the counters and the status line, for scripts and tests. */
static void proc_stats(void *data, calldata_t *cd) {
  filter *f = data;
  fl_obs_counters c;
  fl_obs_runner_counters(f->runner, &c);
  calldata_set_int(cd, "frames", (long long)c.frames);
  calldata_set_int(cd, "submitted", (long long)c.submitted);
  calldata_set_int(cd, "filtered", (long long)c.filtered);
  calldata_set_int(cd, "shown", (long long)c.shown);
  calldata_set_int(cd, "dropped", (long long)c.dropped);
  calldata_set_int(cd, "fallbacks", (long long)c.fallbacks);
  calldata_set_int(cd, "failures", (long long)c.failures);
  calldata_set_int(cd, "reconnects", (long long)c.reconnects);
  calldata_set_int(cd, "imports", (long long)c.imports);
  calldata_set_int(cd, "video_ns", (long long)c.video_ns);
  calldata_set_int(cd, "video_ns_p50", (long long)c.video_ns_p50);
  calldata_set_int(cd, "stage_ns", (long long)c.stage_ns);
  calldata_set_int(cd, "switches", (long long)c.switches);
  calldata_set_int(cd, "taken", (long long)c.taken);
  calldata_set_bool(cd, "connected", fl_obs_runner_connected(f->runner) != 0);
  char status[768];
  fl_obs_runner_status(f->runner, status, sizeof status);
  calldata_set_string(cd, "status", status);
}

static void *filter_create(obs_data_t *settings, obs_source_t *source) {
  filter *f = bzalloc(sizeof *f);
  f->source = source;
  f->runner = fl_obs_runner_create();
  if (f->runner == NULL) {
    blog(LOG_ERROR, "[fenceline] could not start the filter's worker thread");
    bfree(f);
    return NULL;
  }
  proc_handler_add(obs_source_get_proc_handler(source),
                   "void get_stats(out int frames, out int submitted, out int filtered, "
                   "out int shown, out int dropped, out int fallbacks, out int failures, "
                   "out int reconnects, out int imports, out int video_ns, out int video_ns_p50, "
                   "out int stage_ns, out int switches, out int taken, out bool connected, "
                   "out string status)",
                   proc_stats, f);
  filter_update(f, settings);
  return f;
}

static void filter_destroy(void *data) {
  filter *f = data;
  fl_obs_runner_release_frames(f->runner);
  fl_obs_render_destroy(f->render);
  fl_obs_runner_destroy(f->runner);
  bfree(f);
}

static void filter_defaults(obs_data_t *settings) {
  obs_data_set_default_string(settings, "model", "");
  obs_data_set_default_string(settings, "socket", "");
  obs_data_set_default_int(settings, "frames_in_flight", 2);
  obs_data_set_default_string(settings, "fallback", "last_good");
  obs_data_set_default_string(settings, "channel_order", "rgb");
  obs_data_set_default_int(settings, "deadline_ms", FL_OBS_DEADLINE_DEFAULT_MS);
}

static obs_properties_t *filter_properties(void *data) {
  filter *f = data;
  obs_properties_t *props = obs_properties_create();
  /* The models come from the service at the chosen socket, as it last answered (asked again in
   * the background: the dialog never waits for a service that hangs); the list is editable so a
   * model can be named while the service is down. */
  obs_property_t *model = obs_properties_add_list(props, "model", "Model", OBS_COMBO_TYPE_EDITABLE,
                                                  OBS_COMBO_FORMAT_STRING);
  const char *sock = "";
  obs_data_t *settings = f ? obs_source_get_settings(f->source) : NULL;
  if (settings)
    sock = obs_data_get_string(settings, "socket");
  char *names = fl_obs_list_models(sock, 30);
  for (const char *n = names; n && *n; n += strlen(n) + 1)
    obs_property_list_add_string(model, n, n);
  free(names);
  obs_data_release(settings);
  obs_properties_add_text(props, "socket", "Socket (empty: $FENCELINE_SOCKET, then the default)",
                          OBS_TEXT_DEFAULT);
  obs_properties_add_int(props, "frames_in_flight", "Frames in flight", 1, FL_OBS_MAX_IN_FLIGHT,
                         1);
  obs_property_t *fb = obs_properties_add_list(props, "fallback",
                                               "While the service is behind or gone, show",
                                               OBS_COMBO_TYPE_LIST, OBS_COMBO_FORMAT_STRING);
  obs_property_list_add_string(fb, "the last filtered frame", "last_good");
  obs_property_list_add_string(fb, "the unfiltered frame", "unfiltered");
  obs_property_t *order = obs_properties_add_list(props, "channel_order",
                                                  "The model's channel order",
                                                  OBS_COMBO_TYPE_LIST, OBS_COMBO_FORMAT_STRING);
  obs_property_list_add_string(order, "RGB(A)", "rgb");
  obs_property_list_add_string(order, "BGR(A)", "bgr");
  obs_property_t *deadline = obs_properties_add_int(
      props, "deadline_ms", "Run deadline (0: wait as long as the model takes)", 0,
      3600000, 1000);
  obs_property_int_set_suffix(deadline, " ms");
  char status[768] = "";
  if (f)
    fl_obs_runner_status(f->runner, status, sizeof status);
  obs_property_t *st = obs_properties_add_text(props, "status", status, OBS_TEXT_INFO);
  obs_property_text_set_info_word_wrap(st, true);
  return props;
}

/* An async source's frame, on the graphics thread before it becomes a texture. A packed frame
 * (RGBA, BGRA, BGRX, BGR3) is filtered here: taken by the runner, which returns the newest frame
 * carrying its result; any other (NV12, I420, YUY2, ...) passes as it came and is filtered in
 * filter_render after OBS's own GPU conversion to RGBA, so no YUV is converted on the CPU. */
static struct obs_source_frame *filter_video(void *data, struct obs_source_frame *frame) {
  filter *f = data;
  uint64_t t0 = os_gettime_ns();
  fl_obs_image img;
  f->frames_on_gpu = !fl_obs_image_of_frame(frame, obs_filter_get_parent(f->source), &img);
  if (f->frames_on_gpu)
    return frame;
  /* The runner takes the frame where it can: its worker copies it to the service and its result
   * into it, and the frame comes back here to be shown; NULL shows OBS's last frame again. */
  struct obs_source_frame *show = (struct obs_source_frame *)fl_obs_runner_take(f->runner, &img);
  fl_obs_runner_add_video_ns(f->runner, os_gettime_ns() - t0, 0);
  return show;
}

/* The filter leaves its source: the frames it took go back to it first. */
static void filter_remove(void *data, obs_source_t *source) {
  (void)source;
  filter *f = data;
  fl_obs_runner_release_frames(f->runner);
}

/* The graphics thread's render of the filter. An async source's packed frames were filtered
 * already (filter_video): its texture is drawn as it is. A sync source, or an async one in
 * another format, is rendered and read back (render.c). */
static void filter_render(void *data, gs_effect_t *effect) {
  (void)effect;
  filter *f = data;
  obs_source_t *parent = obs_filter_get_parent(f->source);
  if (parent == NULL ||
      ((obs_source_get_output_flags(parent) & OBS_SOURCE_ASYNC) && !f->frames_on_gpu)) {
    obs_source_skip_video_filter(f->source);
    return;
  }
  if (f->render == NULL && (f->render = fl_obs_render_create()) == NULL) {
    fl_obs_runner_unsupported(f->runner, "the GPU could not make a texture to read frames from");
    obs_source_skip_video_filter(f->source);
    return;
  }
  uint64_t stage_ns = 0;
  uint64_t ns = fl_obs_render_frame(f->render, f->source, f->runner, &stage_ns);
  fl_obs_runner_add_video_ns(f->runner, ns, stage_ns);
}

/* One id for every source: a filter without OBS_SOURCE_ASYNC attaches to sync and async sources
 * alike, and libobs still hands an async source's frames to filter_video. */
static struct obs_source_info fenceline_filter = {
    .id = "fenceline_filter",
    .type = OBS_SOURCE_TYPE_FILTER,
    .output_flags = OBS_SOURCE_VIDEO,
    .get_name = filter_name,
    .create = filter_create,
    .destroy = filter_destroy,
    .update = filter_update,
    .get_defaults = filter_defaults,
    .get_properties = filter_properties,
    .filter_video = filter_video,
    .filter_remove = filter_remove,
    .video_render = filter_render,
};

bool obs_module_load(void) {
  obs_register_source(&fenceline_filter);
  return true;
}

/* Workers of removed filters may still be in a call to a service that hangs (teardown never
 * waits for them): the module's code stays loaded until they are out, for a bounded time. */
void obs_module_unload(void) {
  int left = fl_obs_runner_wait_all(5000);
  if (left)
    blog(LOG_WARNING, "[fenceline] %d calls to the service still waiting at unload", left);
}
