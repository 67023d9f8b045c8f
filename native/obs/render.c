/* The filter on a sync source (color, image, game, display and window capture): libobs hands no
 * frames to filter_video there, so the graphics thread renders the target into a texture of our
 * own, copies it into a ring of stage surfaces and maps each one RING - 1 frames later (by then
 * the GPU has finished the copy: the map does not stall), hands that image to the runner and
 * draws the newest result as a texture (docs/obs.md, "Sync sources"). */
#include "render.h"

#include <graphics/graphics.h>
#include <obs-module.h>
#include <stdlib.h>
#include <string.h>
#include <util/platform.h>

#define RING 3

struct fl_obs_render {
  gs_texrender_t *texrender;
  gs_stagesurf_t *stage[RING];
  int staged[RING]; /* holds a copy not mapped yet */
  uint32_t frame;   /* frames rendered at this size */
  gs_texture_t *result;
  uint8_t *result_bytes; /* the newest result, RGBA rows of 4 * width */
  int result_valid;
  int showing; /* the last frame drew the result */
  uint32_t width, height;
};

/* An image over a mapped stage surface (read) and the result buffer (write). */
typedef struct mapped {
  fl_obs_image img;
  const uint8_t *data;
  uint32_t linesize;
  uint8_t *result;
} mapped;

static const fl_obs_layout RGBA = {0, 1, 2, 3, 4};

static void mapped_read(const fl_obs_image *img, uint8_t *dst, fl_obs_layout to) {
  const mapped *m = (const mapped *)img;
  fl_obs_convert(m->data, m->linesize, RGBA, dst, (size_t)img->width * (size_t)to.bytes, to,
                 img->width, img->height, FL_OBS_TO_SERVICE);
}

static void mapped_write(const fl_obs_image *img, const uint8_t *src, fl_obs_layout from) {
  const mapped *m = (const mapped *)img;
  fl_obs_convert(src, (size_t)img->width * (size_t)from.bytes, from, m->result,
                 (size_t)img->width * 4, RGBA, img->width, img->height,
                 from.a < 0 ? FL_OBS_KEEP_ALPHA : 0);
}

static void release_surfaces(fl_obs_render *t) {
  for (int i = 0; i < RING; i++) {
    gs_stagesurface_destroy(t->stage[i]);
    t->stage[i] = NULL;
    t->staged[i] = 0;
  }
  gs_texture_destroy(t->result);
  t->result = NULL;
  t->result_valid = 0;
  free(t->result_bytes);
  t->result_bytes = NULL;
}

/* Graphics thread: surfaces for width x height. 0 when the GPU has no memory for them. */
static int fit(fl_obs_render *t, uint32_t width, uint32_t height) {
  if (t->width == width && t->height == height && t->result)
    return 1;
  release_surfaces(t);
  t->width = width;
  t->height = height;
  t->frame = 0;
  t->showing = 0;
  for (int i = 0; i < RING; i++)
    if ((t->stage[i] = gs_stagesurface_create(width, height, GS_RGBA)) == NULL)
      return 0;
  t->result = gs_texture_create(width, height, GS_RGBA, 1, NULL, GS_DYNAMIC);
  t->result_bytes = malloc((size_t)width * height * 4);
  return t->result != NULL && t->result_bytes != NULL;
}

fl_obs_render *fl_obs_render_create(void) {
  fl_obs_render *t = calloc(1, sizeof *t);
  if (t == NULL)
    return NULL;
  obs_enter_graphics();
  t->texrender = gs_texrender_create(GS_RGBA, GS_ZS_NONE);
  obs_leave_graphics();
  if (t->texrender == NULL) {
    free(t);
    return NULL;
  }
  return t;
}

void fl_obs_render_destroy(fl_obs_render *t) {
  if (t == NULL)
    return;
  obs_enter_graphics();
  release_surfaces(t);
  gs_texrender_destroy(t->texrender);
  obs_leave_graphics();
  free(t);
}

/* Draws tex at (0, 0), its bytes as they are (no sRGB conversion either way): the result is the
 * model's bytes, the unfiltered frame the bytes the target rendered. */
static void draw(gs_texture_t *tex, uint32_t width, uint32_t height) {
  gs_effect_t *effect = obs_get_base_effect(OBS_EFFECT_DEFAULT);
  const bool srgb = gs_framebuffer_srgb_enabled();
  gs_enable_framebuffer_srgb(false);
  gs_blend_state_push();
  gs_blend_function(GS_BLEND_ONE, GS_BLEND_ZERO);
  gs_effect_set_texture(gs_effect_get_param_by_name(effect, "image"), tex);
  while (gs_effect_loop(effect, "Draw"))
    gs_draw_sprite(tex, 0, width, height);
  gs_blend_state_pop();
  gs_enable_framebuffer_srgb(srgb);
}

uint64_t fl_obs_render_frame(fl_obs_render *t, obs_source_t *filter, fl_obs_runner *runner,
                             uint64_t *stage_ns) {
  obs_source_t *target = obs_filter_get_target(filter);
  uint32_t width = target ? obs_source_get_base_width(target) : 0;
  uint32_t height = target ? obs_source_get_base_height(target) : 0;
  if (width == 0 || height == 0 || !fit(t, width, height)) {
    obs_source_skip_video_filter(filter);
    return 0;
  }
  /* The target, as it would draw itself, into our texture. Its own time is not the filter's. */
  uint64_t t0 = os_gettime_ns();
  gs_texrender_reset(t->texrender);
  uint64_t target_ns = 0;
  if (gs_texrender_begin(t->texrender, width, height)) {
    struct vec4 clear;
    vec4_zero(&clear);
    gs_clear(GS_CLEAR_COLOR, &clear, 0.0f, 0);
    gs_ortho(0.0f, (float)width, 0.0f, (float)height, -100.0f, 100.0f);
    gs_blend_state_push();
    gs_blend_function(GS_BLEND_ONE, GS_BLEND_ZERO);
    uint64_t r0 = os_gettime_ns();
    /* As libobs's own filters do (obs_source_process_filter_begin): a source that draws with the
     * effect it is handed (the image source) gets the default effect's "Draw" technique, which
     * obs_source_video_render would not set up for a source with filters (the source would draw
     * with no shader and leave the texture blank). */
    uint32_t flags = obs_source_get_output_flags(target);
    if (target == obs_filter_get_parent(filter) &&
        !(flags & (OBS_SOURCE_CUSTOM_DRAW | OBS_SOURCE_ASYNC)))
      obs_source_default_render(target);
    else
      obs_source_video_render(target);
    target_ns = os_gettime_ns() - r0;
    gs_blend_state_pop();
    gs_texrender_end(t->texrender);
  }
  gs_texture_t *tex = gs_texrender_get_texture(t->texrender);
  if (tex == NULL) {
    obs_source_skip_video_filter(filter);
    return 0;
  }
  /* Copy this frame into the ring, and map the one copied RING - 1 frames ago. */
  uint32_t put = t->frame % RING, take = (t->frame + 1) % RING;
  t->frame++;
  uint64_t s0 = os_gettime_ns();
  gs_stage_texture(t->stage[put], tex);
  t->staged[put] = 1;
  uint8_t *data = NULL;
  uint32_t linesize = 0;
  int mapped_now = t->staged[take] && gs_stagesurface_map(t->stage[take], &data, &linesize);
  *stage_ns += os_gettime_ns() - s0;
  if (mapped_now) {
    /* keeps_result: the result texture keeps what was written, so a result is copied and
     * uploaded once, not every frame it is shown. The mapped image lives only in this call (no
     * release: the runner copies it, never keeps it). */
    mapped m = {.img = {.width = width, .height = height, .read = mapped_read,
                        .write = mapped_write, .keeps_result = 1},
                .data = data, .linesize = linesize, .result = t->result_bytes};
    int shown = fl_obs_runner_frame(runner, &m.img);
    uint64_t u0 = os_gettime_ns();
    gs_stagesurface_unmap(t->stage[take]);
    *stage_ns += os_gettime_ns() - u0;
    t->staged[take] = 0;
    if (shown == FL_OBS_WRITTEN) {
      gs_texture_set_image(t->result, t->result_bytes, width * 4, false);
      t->result_valid = 1;
    }
    t->showing = shown != FL_OBS_NOT_SHOWN && t->result_valid;
  }
  draw(t->showing ? t->result : tex, width, height);
  return os_gettime_ns() - t0 - target_ns;
}
