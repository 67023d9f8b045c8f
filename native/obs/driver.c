/* fenceline-obs-driver: headless OBS (libobs, OpenGL on an X display such as Xvfb) with one
 * source of known frames (async, or sync) and a filter, for the tests, the bench and docs/obs.md.
 *
 *   fenceline-obs-driver list PLUGIN.so [WAIT_MS]
 *       loads the plugin and prints its filter's id, name and settings as JSON (opening the
 *       properties again for up to WAIT_MS, default 10000, until the service's models have come;
 *       stderr says how long the first opening took).
 *   fenceline-obs-driver run PLUGIN.so [key=value ...]
 *       renders a scene for `seconds` (or until the filter has `until_filtered` results, if
 *       sooner; SIGINT: at once); prints a JSON line of counters every `every_ms` and a last one
 *       with "done": true. Keys:
 *       - width height fps seconds every_ms until_filtered;
 *       - source: the source's id: fenceline_known_frames (async, the default),
 *         fenceline_known_sync (the same frames drawn by a sync source) or any other (e.g.
 *         color_source); source_settings: JSON merged into its settings; format: the known
 *         frames' (rgba, bgra, bgrx, nv12, i420, yuy2);
 *       - filter: a filter's id ("none": no filter); model socket frames_in_flight fallback
 *         channel_order deadline_ms model_path intra_op_threads: the filter's settings;
 *       - out: a file that receives every frame as it leaves an async source's filters, its
 *         planes one after another; output_format: OBS's output (rgba, the default, or bgra);
 *         raw_out: a file that receives every frame of OBS's output from its raw video callback
 *         (libobs 29.0.2 hands an RGBA output's callback zeros here, a BGRA output's the exact
 *         bytes);
 *       - save: a file that receives the scene's sources as JSON afterwards; load: a file saved
 *         so, loaded instead of building the scene; plugin2: another module to load (the
 *         reference filter, OBS's image-source).
 *
 * Frame k of the source is pixel (x, y, channel c) = (x * 3 + y * 7 + (k % 16) * 13 + c * 50)
 * mod 256, alpha 255 (tests/integration/test_obs.py makes the same frames). */
#include <X11/Xlib.h>
#include <execinfo.h>
#include <unistd.h>
#include <obs-nix-platform.h>
#include <obs.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <util/base.h>
#include <util/platform.h>
#include <util/threading.h>

#define PERIOD 16

static const char *arg(int argc, char **argv, const char *key, const char *dflt) {
  size_t n = strlen(key);
  for (int i = 3; i < argc; i++)
    if (strncmp(argv[i], key, n) == 0 && argv[i][n] == '=')
      return argv[i] + n + 1;
  return dflt;
}

/* ---- the source of known frames --------------------------------------------------------------- */

typedef struct known {
  obs_source_t *source;
  pthread_t thread;
  volatile int stop;
  uint32_t width, height, fps;
  enum video_format format;
} known;

static const char *known_name(void *unused) {
  (void)unused;
  return "known frames";
}

static void fill(uint8_t *p, uint32_t w, uint32_t h, uint32_t k, enum video_format format) {
  int swap = format != VIDEO_FORMAT_RGBA;
  for (uint32_t y = 0; y < h; y++)
    for (uint32_t x = 0; x < w; x++, p += 4) {
      uint8_t c0 = (uint8_t)(x * 3 + y * 7 + (k % PERIOD) * 13);
      uint8_t rgb[3] = {c0, (uint8_t)(c0 + 50), (uint8_t)(c0 + 100)};
      p[0] = rgb[swap ? 2 : 0];
      p[1] = rgb[1];
      p[2] = rgb[swap ? 0 : 2];
      p[3] = 255;
    }
}

/* The bytes of plane p of a frame: rows of row_bytes (0: no such plane). */
static void plane_geometry(enum video_format format, int p, uint32_t w, uint32_t h,
                           uint32_t *row_bytes, uint32_t *rows) {
  *row_bytes = 0;
  *rows = h;
  switch (format) {
  case VIDEO_FORMAT_NV12: *row_bytes = p == 0 ? w : p == 1 ? w : 0; *rows = p ? h / 2 : h; break;
  case VIDEO_FORMAT_I420: *row_bytes = p == 0 ? w : p <= 2 ? w / 2 : 0; *rows = p ? h / 2 : h; break;
  case VIDEO_FORMAT_YUY2: *row_bytes = p == 0 ? 2 * w : 0; break;
  default: *row_bytes = p == 0 ? 4 * w : 0; break;
  }
}

/* YUV frame k: Y = (x * 3 + y * 7 + k * 13) mod 256; at chroma position (cx, cy) (x / 2, and
 * y / 2 for 4:2:0), U = (cx * 5 + cy * 3 + k * 7 + 64) mod 256, V = (cx * 2 + cy * 9 + k * 5 +
 * 128) mod 256; BT.709 full range. */
static void fill_yuv(uint8_t *planes[3], uint32_t w, uint32_t h, uint32_t k,
                     enum video_format format) {
  k %= PERIOD;
  for (uint32_t y = 0; y < h; y++)
    for (uint32_t x = 0; x < w; x++) {
      uint8_t Y = (uint8_t)(x * 3 + y * 7 + k * 13);
      uint32_t cx = x / 2, cy = format == VIDEO_FORMAT_YUY2 ? y : y / 2;
      uint8_t U = (uint8_t)(cx * 5 + cy * 3 + k * 7 + 64), V = (uint8_t)(cx * 2 + cy * 9 + k * 5 + 128);
      if (format == VIDEO_FORMAT_NV12) {
        planes[0][(size_t)y * w + x] = Y;
        planes[1][(size_t)cy * w + cx * 2] = U;
        planes[1][(size_t)cy * w + cx * 2 + 1] = V;
      } else if (format == VIDEO_FORMAT_I420) {
        planes[0][(size_t)y * w + x] = Y;
        planes[1][(size_t)cy * (w / 2) + cx] = U;
        planes[2][(size_t)cy * (w / 2) + cx] = V;
      } else {
        uint8_t *p = planes[0] + (size_t)y * 2 * w + cx * 4;
        p[(x % 2) * 2] = Y;
        p[1] = U;
        p[3] = V;
      }
    }
}

static int is_yuv(enum video_format format) {
  return format == VIDEO_FORMAT_NV12 || format == VIDEO_FORMAT_I420 ||
         format == VIDEO_FORMAT_YUY2;
}

static void *known_thread(void *arg) {
  known *s = arg;
  uint8_t *frames[PERIOD][3] = {{0}};
  uint32_t row_bytes[3], rows[3];
  for (int p = 0; p < 3; p++)
    plane_geometry(s->format, p, s->width, s->height, &row_bytes[p], &rows[p]);
  for (uint32_t k = 0; k < PERIOD; k++) {
    for (int p = 0; p < 3; p++)
      frames[k][p] = row_bytes[p] ? malloc((size_t)row_bytes[p] * rows[p]) : NULL;
    if (is_yuv(s->format))
      fill_yuv(frames[k], s->width, s->height, k, s->format);
    else
      fill(frames[k][0], s->width, s->height, k, s->format);
  }
  float matrix[16], range_min[3], range_max[3];
  video_format_get_parameters_for_format(VIDEO_CS_709, VIDEO_RANGE_FULL, s->format, matrix,
                                         range_min, range_max);
  uint64_t interval = 1000000000ULL / s->fps, next = os_gettime_ns();
  for (uint32_t k = 0; !s->stop; k++) {
    struct obs_source_frame f = {0};
    for (int p = 0; p < 3; p++) {
      f.data[p] = frames[k % PERIOD][p];
      f.linesize[p] = row_bytes[p];
    }
    memcpy(f.color_matrix, matrix, sizeof matrix);
    memcpy(f.color_range_min, range_min, sizeof range_min);
    memcpy(f.color_range_max, range_max, sizeof range_max);
    f.width = s->width;
    f.height = s->height;
    f.format = s->format;
    f.full_range = true;
    f.timestamp = os_gettime_ns();
    obs_source_output_video(s->source, &f);
    next += interval;
    uint64_t now = os_gettime_ns();
    if (next > now)
      os_sleepto_ns(next);
    else
      next = now;
  }
  for (uint32_t k = 0; k < PERIOD; k++)
    for (int p = 0; p < 3; p++)
      free(frames[k][p]);
  return NULL;
}

static void *known_create(obs_data_t *settings, obs_source_t *source) {
  known *s = bzalloc(sizeof *s);
  s->source = source;
  s->width = (uint32_t)obs_data_get_int(settings, "width");
  s->height = (uint32_t)obs_data_get_int(settings, "height");
  s->fps = (uint32_t)obs_data_get_int(settings, "fps");
  const char *fmt = obs_data_get_string(settings, "format");
  s->format = strcmp(fmt, "bgra") == 0   ? VIDEO_FORMAT_BGRA
              : strcmp(fmt, "bgrx") == 0 ? VIDEO_FORMAT_BGRX
              : strcmp(fmt, "nv12") == 0 ? VIDEO_FORMAT_NV12
              : strcmp(fmt, "i420") == 0 ? VIDEO_FORMAT_I420
              : strcmp(fmt, "yuy2") == 0 ? VIDEO_FORMAT_YUY2
                                         : VIDEO_FORMAT_RGBA;
  pthread_create(&s->thread, NULL, known_thread, s);
  return s;
}

static void known_destroy(void *data) {
  known *s = data;
  s->stop = 1;
  pthread_join(s->thread, NULL);
  bfree(s);
}

static struct obs_source_info known_info = {
    .id = "fenceline_known_frames",
    .type = OBS_SOURCE_TYPE_INPUT,
    .output_flags = OBS_SOURCE_ASYNC_VIDEO,
    .get_name = known_name,
    .create = known_create,
    .destroy = known_destroy,
};

/* ---- a sync source of the same known frames ------------------------------------------------ */

/* Draws frame k (RGBA) as a texture and moves to frame k + 1 each tick: a source that renders on
 * the graphics thread, as color, image, game, display and window capture do. */
typedef struct known_sync {
  gs_texture_t *frames[PERIOD];
  uint32_t width, height, k;
} known_sync;

static void *known_sync_create(obs_data_t *settings, obs_source_t *source) {
  (void)source;
  known_sync *s = bzalloc(sizeof *s);
  s->width = (uint32_t)obs_data_get_int(settings, "width");
  s->height = (uint32_t)obs_data_get_int(settings, "height");
  uint8_t *bytes = malloc((size_t)s->width * s->height * 4);
  obs_enter_graphics();
  for (uint32_t k = 0; k < PERIOD; k++) {
    fill(bytes, s->width, s->height, k, VIDEO_FORMAT_RGBA);
    const uint8_t *data = bytes;
    s->frames[k] = gs_texture_create(s->width, s->height, GS_RGBA, 1, &data, 0);
  }
  obs_leave_graphics();
  free(bytes);
  return s;
}

static void known_sync_destroy(void *data) {
  known_sync *s = data;
  obs_enter_graphics();
  for (uint32_t k = 0; k < PERIOD; k++)
    gs_texture_destroy(s->frames[k]);
  obs_leave_graphics();
  bfree(s);
}

static void known_sync_tick(void *data, float seconds) {
  (void)seconds;
  known_sync *s = data;
  s->k = (s->k + 1) % PERIOD;
}

static void known_sync_render(void *data, gs_effect_t *effect) {
  (void)effect;
  known_sync *s = data;
  gs_texture_t *tex = s->frames[s->k];
  gs_effect_t *draw = obs_get_base_effect(OBS_EFFECT_DEFAULT);
  const bool srgb = gs_framebuffer_srgb_enabled();
  gs_enable_framebuffer_srgb(false);
  gs_effect_set_texture(gs_effect_get_param_by_name(draw, "image"), tex);
  while (gs_effect_loop(draw, "Draw"))
    gs_draw_sprite(tex, 0, s->width, s->height);
  gs_enable_framebuffer_srgb(srgb);
}

static uint32_t known_sync_width(void *data) { return ((known_sync *)data)->width; }
static uint32_t known_sync_height(void *data) { return ((known_sync *)data)->height; }

static struct obs_source_info known_sync_info = {
    .id = "fenceline_known_sync",
    .type = OBS_SOURCE_TYPE_INPUT,
    /* It draws with its own effect, its bytes as they are (as color_source does). */
    .output_flags = OBS_SOURCE_VIDEO | OBS_SOURCE_CUSTOM_DRAW | OBS_SOURCE_SRGB,
    .get_name = known_name,
    .create = known_sync_create,
    .destroy = known_sync_destroy,
    .video_tick = known_sync_tick,
    .video_render = known_sync_render,
    .get_width = known_sync_width,
    .get_height = known_sync_height,
};

/* ---- rendered frames ---------------------------------------------------------------------- */

/* The raw video callback counts the frames OBS's video output delivers. The bytes are read at
 * the end of the source's filter chain instead, by the probe filter below (added after the
 * fenceline filter, so it runs after it): libobs 29 hands a raw callback of an unscaled RGBA
 * output an all-zero image here (the llvmpipe OpenGL path), and a scaled output is filtered
 * bilinearly, so neither shows the filter's bytes exactly. */
typedef struct sink {
  volatile long frames;
  FILE *out; /* `raw_out`: every frame of OBS's output (output_format bgra: exact bytes) */
  uint32_t width, height;
} sink;

static void on_frame(void *param, struct video_data *frame) {
  sink *k = param;
  os_atomic_inc_long(&k->frames);
  for (uint32_t y = 0; k->out && y < k->height; y++)
    fwrite(frame->data[0] + (size_t)y * frame->linesize[0], 1, (size_t)k->width * 4, k->out);
}

typedef struct probe {
  FILE *out;
} probe;

static FILE *probe_out; /* the run's `out` file, set before the probe is created */

static const char *probe_name(void *unused) {
  (void)unused;
  return "fenceline test probe";
}

static void *probe_create(obs_data_t *settings, obs_source_t *source) {
  (void)settings;
  (void)source;
  probe *p = bzalloc(sizeof *p);
  p->out = probe_out;
  return p;
}

static void probe_destroy(void *data) { bfree(data); }

static void plane_geometry(enum video_format format, int p, uint32_t w, uint32_t h,
                           uint32_t *row_bytes, uint32_t *rows);

static struct obs_source_frame *probe_video(void *data, struct obs_source_frame *frame) {
  probe *p = data;
  for (int i = 0; p->out && i < 3; i++) {
    uint32_t row_bytes, rows;
    plane_geometry(frame->format, i, frame->width, frame->height, &row_bytes, &rows);
    for (uint32_t y = 0; row_bytes && y < rows; y++)
      fwrite(frame->data[i] + (size_t)y * frame->linesize[i], 1, row_bytes, p->out);
  }
  return frame;
}

static struct obs_source_info probe_info = {
    .id = "fenceline_test_probe",
    .type = OBS_SOURCE_TYPE_FILTER,
    .output_flags = OBS_SOURCE_VIDEO | OBS_SOURCE_ASYNC,
    .get_name = probe_name,
    .create = probe_create,
    .destroy = probe_destroy,
    .filter_video = probe_video,
};

/* ---- libobs ------------------------------------------------------------------------------- */

static int start_obs(uint32_t width, uint32_t height, uint32_t fps, enum video_format output) {
  Display *display = XOpenDisplay(NULL);
  if (display == NULL) {
    fprintf(stderr, "no X display (DISPLAY=%s): run under Xvfb (xvfb-run -a ...)\n",
            getenv("DISPLAY") ? getenv("DISPLAY") : "");
    return -1;
  }
  obs_set_nix_platform(OBS_NIX_PLATFORM_X11_EGL);
  obs_set_nix_platform_display(display);
  if (!obs_startup("en-US", NULL, NULL)) {
    fprintf(stderr, "obs_startup failed\n");
    return -1;
  }
  struct obs_video_info ovi = {
      .graphics_module = "libobs-opengl",
      .fps_num = fps,
      .fps_den = 1,
      .base_width = width,
      .base_height = height,
      .output_width = width,
      .output_height = height,
      .output_format = output,
      .gpu_conversion = false,
      .colorspace = VIDEO_CS_SRGB,
      .range = VIDEO_RANGE_FULL,
      .scale_type = OBS_SCALE_POINT,
  };
  int rc = obs_reset_video(&ovi);
  if (rc != OBS_VIDEO_SUCCESS) {
    fprintf(stderr, "obs_reset_video failed: %d\n", rc);
    return -1;
  }
  obs_register_source(&known_info);
  obs_register_source(&known_sync_info);
  obs_register_source(&probe_info);
  return 0;
}

static int load_plugin(const char *path) {
  obs_module_t *module = NULL;
  int rc = obs_open_module(&module, path, "");
  if (rc != MODULE_SUCCESS) {
    fprintf(stderr, "obs_open_module(%s) failed: %d\n", path, rc);
    return -1;
  }
  if (!obs_init_module(module)) {
    fprintf(stderr, "obs_init_module(%s) failed\n", path);
    return -1;
  }
  return 0;
}

/* Prints one JSON line of counters; returns the filter's "filtered" count (-1: no filter). */
static long long print_stats(obs_source_t *filter, sink *k, double t, uint64_t frames0,
                             uint64_t lagged0, int done) {
  long long filtered = -1;
  printf("{\"t\": %.3f, \"rendered\": %llu, \"lagged\": %llu, \"frame_time_ns\": %llu, "
         "\"callbacks\": %ld",
         t, (unsigned long long)(obs_get_total_frames() - frames0),
         (unsigned long long)(obs_get_lagged_frames() - lagged0),
         (unsigned long long)obs_get_average_frame_time_ns(), k->frames);
  if (filter) {
    calldata_t cd = {0};
    if (proc_handler_call(obs_source_get_proc_handler(filter), "get_stats", &cd)) {
      const char *names[] = {"frames",   "submitted",  "filtered", "shown", "dropped",
                             "fallbacks", "failures", "reconnects", "imports", "video_ns",
                             "video_ns_p50", "stage_ns", "switches", "taken"};
      for (size_t i = 0; i < sizeof names / sizeof *names; i++)
        printf(", \"%s\": %lld", names[i], calldata_int(&cd, names[i]));
      filtered = calldata_int(&cd, "filtered");
      printf(", \"connected\": %s", calldata_bool(&cd, "connected") ? "true" : "false");
      obs_data_t *d = obs_data_create();
      obs_data_set_string(d, "status", calldata_string(&cd, "status"));
      const char *json = obs_data_get_json(d);
      /* {"status": "..."}: the escaped string without the braces */
      const char *open = strchr(json, '{');
      const char *close = strrchr(json, '}');
      if (open && close && close > open)
        printf(", %.*s", (int)(close - open - 1), open + 1);
      obs_data_release(d);
    }
    calldata_free(&cd);
  }
  printf(", \"done\": %s}\n", done ? "true" : "false");
  fflush(stdout);
  return filtered;
}

static int cmd_list(const char *plugin, int wait_ms) {
  if (start_obs(64, 64, 30, VIDEO_FORMAT_RGBA) != 0 || load_plugin(plugin) != 0)
    return 1;
  const char *id = NULL;
  int found = 0;
  for (size_t i = 0; obs_enum_filter_types(i, &id); i++) {
    if (strcmp(id, "fenceline_filter") != 0)
      continue;
    found = 1;
    obs_data_t *settings = obs_get_source_defaults(id);
    obs_data_t *defaults = obs_data_get_defaults(settings);
    printf("{\"id\": \"%s\", \"name\": \"%s\", \"properties\": [", id,
           obs_source_get_display_name(id));
    /* The model list is the service's last answer, asked for in the background: open the
     * properties again (for up to wait_ms) until it has come. */
    uint64_t t0 = os_gettime_ns();
    obs_properties_t *props = obs_get_source_properties(id);
    uint64_t open_ns = os_gettime_ns() - t0;
    for (int tries = 0; tries < wait_ms / 200; tries++) {
      obs_property_t *m = obs_properties_get(props, "model");
      if (m && obs_property_list_item_count(m) > 0)
        break;
      obs_properties_destroy(props);
      os_sleep_ms(200);
      props = obs_get_source_properties(id);
    }
    const char *sep = "";
    for (obs_property_t *p = obs_properties_first(props); p; obs_property_next(&p), sep = ", ")
      printf("%s\"%s\"", sep, obs_property_name(p));
    printf("], \"models\": [");
    obs_property_t *model = obs_properties_get(props, "model");
    for (size_t m = 0; model && m < obs_property_list_item_count(model); m++)
      printf("%s\"%s\"", m ? ", " : "", obs_property_list_item_string(model, m));
    printf("], \"defaults\": %s}\n", obs_data_get_json(defaults));
    fprintf(stderr, "the properties opened in %.1f ms\n", (double)open_ns / 1e6);
    obs_properties_destroy(props);
    obs_data_release(defaults);
    obs_data_release(settings);
  }
  obs_shutdown();
  if (!found)
    fprintf(stderr, "%s registers no fenceline_filter\n", plugin);
  return found ? 0 : 1;
}

static obs_source_t *find_filter(obs_source_t *source) {
  obs_source_t *found = NULL;
  obs_source_t *f = obs_source_get_filter_by_name(source, "fenceline");
  if (f)
    found = f; /* a reference the caller releases */
  return found;
}

static void keep_loaded(void *param, obs_source_t *source) {
  obs_source_t **loaded = param;
  const char *name = obs_source_get_name(source);
  if (strcmp(name, "scene") == 0 && loaded[0] == NULL)
    loaded[0] = obs_source_get_ref(source);
  else if (strcmp(name, "known") == 0 && loaded[1] == NULL)
    loaded[1] = obs_source_get_ref(source);
}

/* Releases the sources and waits, at most 10 s, until libobs has destroyed them. libobs frees a
 * source on its destroy thread once the last reference is gone, and the video thread holds one
 * while it renders, so the last release may come after ours; obs_shutdown waits only for the
 * destroys queued when it starts, then frees the hotkeys and the video output while a later
 * destroy still runs (a scene's item unregistering its hotkeys: a double free, and heap
 * corruption). So the sources' weak references are watched until none yields its source (every
 * destroy queued), then the destroy queue is waited for twice: a source's destroy queues those of
 * its filters (the probe's too), and the second wait covers them. */
static void release_and_wait(obs_source_t *sources[3]) {
  obs_weak_source_t *weak[3];
  for (size_t i = 0; i < 3; i++) {
    weak[i] = sources[i] ? obs_source_get_weak_source(sources[i]) : NULL;
    obs_source_release(sources[i]);
  }
  for (int tries = 0; tries < 1000; tries++) {
    size_t alive = 0;
    for (size_t i = 0; i < 3; i++) {
      obs_source_t *s = weak[i] ? obs_weak_source_get_source(weak[i]) : NULL;
      alive += s != NULL;
      obs_source_release(s);
    }
    if (alive == 0)
      break;
    os_sleep_ms(10);
  }
  for (size_t i = 0; i < 3; i++)
    obs_weak_source_release(weak[i]);
  obs_wait_for_destroy_queue();
  obs_wait_for_destroy_queue();
}

/* SIGINT ends a run early, as if its seconds were up. */
static volatile sig_atomic_t interrupted;
static void on_interrupt(int sig) {
  (void)sig;
  interrupted = 1;
}

static int cmd_run(int argc, char **argv) {
  uint32_t width = (uint32_t)atoi(arg(argc, argv, "width", "128"));
  uint32_t height = (uint32_t)atoi(arg(argc, argv, "height", "96"));
  uint32_t fps = (uint32_t)atoi(arg(argc, argv, "fps", "30"));
  double seconds = atof(arg(argc, argv, "seconds", "3"));
  int every_ms = atoi(arg(argc, argv, "every_ms", "250"));
  long long until_filtered = atoll(arg(argc, argv, "until_filtered", "0"));
  const char *filter_id = arg(argc, argv, "filter", "fenceline_filter");
  const char *load = arg(argc, argv, "load", NULL);
  const char *save = arg(argc, argv, "save", NULL);
  const char *out = arg(argc, argv, "out", NULL);
  const char *plugin2 = arg(argc, argv, "plugin2", NULL);
  const char *raw_out = arg(argc, argv, "raw_out", NULL);
  enum video_format output =
      strcmp(arg(argc, argv, "output_format", "rgba"), "bgra") == 0 ? VIDEO_FORMAT_BGRA
                                                                   : VIDEO_FORMAT_RGBA;
  const char *source_id = arg(argc, argv, "source", "fenceline_known_frames");
  if (start_obs(width, height, fps, output) != 0 || load_plugin(argv[2]) != 0 ||
      (plugin2 && load_plugin(plugin2) != 0))
    return 1;

  obs_source_t *scene_source = NULL, *source = NULL, *filter = NULL;
  if (load) {
    obs_data_t *saved = obs_data_create_from_json_file(load);
    if (saved == NULL) {
      fprintf(stderr, "cannot read %s\n", load);
      return 1;
    }
    obs_data_array_t *sources = obs_data_get_array(saved, "sources");
    /* obs_load_sources releases what it made: keep a reference to the two we use. */
    obs_source_t *loaded[2] = {NULL, NULL};
    obs_load_sources(sources, keep_loaded, loaded);
    obs_data_array_release(sources);
    obs_data_release(saved);
    scene_source = loaded[0];
    source = loaded[1];
    if (scene_source == NULL || source == NULL) {
      fprintf(stderr, "%s has no scene \"scene\" with a source \"known\"\n", load);
      return 1;
    }
  } else {
    obs_scene_t *scene = obs_scene_create("scene");
    scene_source = obs_source_get_ref(obs_scene_get_source(scene));
    obs_scene_release(scene);
    obs_data_t *s = obs_data_create();
    obs_data_set_int(s, "width", width);
    obs_data_set_int(s, "height", height);
    obs_data_set_int(s, "fps", fps);
    obs_data_set_string(s, "format", arg(argc, argv, "format", "rgba"));
    const char *source_json = arg(argc, argv, "source_settings", NULL);
    if (source_json) {
      obs_data_t *extra = obs_data_create_from_json(source_json);
      if (extra == NULL) {
        fprintf(stderr, "source_settings is not a JSON object: %s\n", source_json);
        return 1;
      }
      obs_data_apply(s, extra);
      obs_data_release(extra);
    }
    source = obs_source_create(source_id, "known", s, NULL);
    obs_data_release(s);
    if (source == NULL) {
      fprintf(stderr, "no source %s (is its plugin loaded?)\n", source_id);
      return 1;
    }
    if (strcmp(filter_id, "none") != 0) {
      obs_data_t *fs = obs_data_create();
      const char *keys[] = {"model", "socket", "fallback", "channel_order", "model_path"};
      for (size_t i = 0; i < sizeof keys / sizeof *keys; i++)
        if (arg(argc, argv, keys[i], NULL))
          obs_data_set_string(fs, keys[i], arg(argc, argv, keys[i], NULL));
      const char *ints[] = {"frames_in_flight", "intra_op_threads", "deadline_ms"};
      for (size_t i = 0; i < sizeof ints / sizeof *ints; i++)
        if (arg(argc, argv, ints[i], NULL))
          obs_data_set_int(fs, ints[i], atoi(arg(argc, argv, ints[i], "0")));
      obs_source_t *f = obs_source_create(filter_id, "fenceline", fs, NULL);
      obs_data_release(fs);
      if (f == NULL) {
        fprintf(stderr, "no filter %s (is its plugin loaded?)\n", filter_id);
        return 1;
      }
      obs_source_filter_add(source, f);
      obs_source_release(f);
    }
    obs_scene_add(obs_scene_from_source(scene_source), source);
  }
  filter = find_filter(source);
  if (out) {
    if ((probe_out = fopen(out, "wb")) == NULL) {
      fprintf(stderr, "cannot write %s\n", out);
      return 1;
    }
    obs_source_t *p = obs_source_create_private("fenceline_test_probe", "probe", NULL);
    obs_source_filter_add(source, p);
    obs_source_release(p);
  }
  obs_set_output_source(0, scene_source);


  sink k = {0, NULL, width, height};
  if (raw_out && (k.out = fopen(raw_out, "wb")) == NULL) {
    fprintf(stderr, "cannot write %s\n", raw_out);
    return 1;
  }
  obs_add_raw_video_callback(NULL, on_frame, &k);
  uint64_t t0 = os_gettime_ns(), frames0 = obs_get_total_frames(),
           lagged0 = obs_get_lagged_frames();
  double t = 0;
  signal(SIGINT, on_interrupt);
  while (t < seconds && !interrupted) {
    os_sleep_ms((uint32_t)every_ms);
    t = (double)(os_gettime_ns() - t0) / 1e9;
    long long filtered = print_stats(filter, &k, t, frames0, lagged0, 0);
    if (until_filtered > 0 && filtered >= until_filtered)
      break;
  }
  obs_remove_raw_video_callback(on_frame, &k);
  if (k.out)
    fclose(k.out);
  print_stats(filter, &k, (double)(os_gettime_ns() - t0) / 1e9, frames0, lagged0, 1);
  obs_set_output_source(0, NULL);
  if (save) {
    obs_data_array_t *sources = obs_save_sources();
    obs_data_t *all = obs_data_create();
    obs_data_set_array(all, "sources", sources);
    obs_data_save_json_safe(all, save, "tmp", "bak");
    obs_data_array_release(sources);
    obs_data_release(all);
  }
  obs_source_t *gone[3] = {scene_source, source, filter};
  obs_source_remove(source);
  obs_source_remove(scene_source);
  release_and_wait(gone);
  obs_shutdown();
  if (probe_out)
    fclose(probe_out);
  return 0;
}

/* libobs's log goes to stderr: stdout carries only the JSON lines. */
static void log_to_stderr(int level, const char *format, va_list args, void *param) {
  (void)param;
  if (level > LOG_INFO && getenv("FENCELINE_OBS_DEBUG") == NULL)
    return;
  vfprintf(stderr, format, args);
  fputc('\n', stderr);
}

/* A crash (an abort in libobs, Mesa, the plugin or an embedded Python) prints the crashing
 * thread's stack to stderr, where the tests' logs keep it. */
static void on_crash(int sig) {
  void *frames[64];
  int n = backtrace(frames, 64);
  static const char msg[] = "fenceline-obs-driver: crashed; the crashing thread's stack:\n";
  ssize_t w = write(STDERR_FILENO, msg, sizeof msg - 1);
  (void)w;
  backtrace_symbols_fd(frames, n, STDERR_FILENO);
  signal(sig, SIG_DFL);
  raise(sig);
}

int main(int argc, char **argv) {
  signal(SIGABRT, on_crash);
  signal(SIGSEGV, on_crash);
  base_set_log_handler(log_to_stderr, NULL);
  if (argc >= 3 && strcmp(argv[1], "list") == 0)
    return cmd_list(argv[2], argc >= 4 ? atoi(argv[3]) : 10000);
  if (argc >= 3 && strcmp(argv[1], "run") == 0)
    return cmd_run(argc, argv);
  fprintf(stderr, "usage: %s list PLUGIN.so [WAIT_MS] | run PLUGIN.so [key=value ...]\n",
          argv[0]);
  return 2;
}
