/* The filter on sync sources: the target rendered into a texture, read back through a ring of
 * stage surfaces without stalling the graphics thread, the newest result drawn (render.c). */
#ifndef FENCELINE_OBS_RENDER_H
#define FENCELINE_OBS_RENDER_H

#include <obs.h>
#include <stdint.h>

#include "runner.h"

typedef struct fl_obs_render fl_obs_render;

/* NULL when the GPU cannot make a texture to render into. */
fl_obs_render *fl_obs_render_create(void);
/* Accepts NULL. Enters the graphics context itself. */
void fl_obs_render_destroy(fl_obs_render *t);
/* The filter's video_render on a sync target: renders it, hands the image copied RING - 1 frames
 * ago to the runner, draws the newest result (or, before the first one or with the unfiltered
 * fallback, the target as it is). Returns the filter's time on the graphics thread (ns), the
 * target's own rendering not counted; *stage_ns: the part of it in libobs's staging calls
 * (gs_stage_texture, gs_stagesurface_map and unmap). */
uint64_t fl_obs_render_frame(fl_obs_render *t, obs_source_t *filter, fl_obs_runner *runner,
                             uint64_t *stage_ns);

#endif
