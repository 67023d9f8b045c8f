/* The fenceline side of the OBS filter: one connection, a pool of shared-memory slots the service
 * imported once, and a worker thread that runs the model on them (docs/obs.md). An async frame
 * is handed to the worker, which copies it in and its result out; OBS's threads otherwise copy
 * frames in and results out under a short lock. They never wait for the service. */
#ifndef FENCELINE_OBS_RUNNER_H
#define FENCELINE_OBS_RUNNER_H

#include <pthread.h>
#include <stdint.h>

#include "convert.h"

#define FL_OBS_MAX_IN_FLIGHT 8
/* Slots: the frames in flight, one result waiting to be shown and the one shown. */
#define FL_OBS_MAX_SLOTS (FL_OBS_MAX_IN_FLIGHT + 2)

typedef enum fl_obs_fallback {
  FL_OBS_FALLBACK_LAST_GOOD = 0, /* show the newest filtered frame again */
  FL_OBS_FALLBACK_UNFILTERED = 1 /* show the source's frame as it is */
} fl_obs_fallback;

/* What the user chose (the filter's settings). Strings are owned by the struct. */
typedef struct fl_obs_config {
  char model[256];
  char socket[1024]; /* "" : $FENCELINE_SOCKET, then the service's default path */
  int frames_in_flight;
  fl_obs_fallback fallback;
  int bgr; /* the model takes BGR(A) rather than RGB(A) */
  /* The longest a run may take before the service counts as hung (ms); 0: no limit. */
  int64_t deadline_ms;
} fl_obs_config;

/* The default run deadline: the client library's own default for a call (30 s). */
#define FL_OBS_DEADLINE_DEFAULT_MS 30000

typedef struct fl_obs_counters {
  uint64_t frames;     /* frames the filter saw */
  uint64_t submitted;  /* handed to the service */
  uint64_t filtered;   /* runs that finished */
  uint64_t shown;      /* frames the filter replaced with a result */
  uint64_t dropped;    /* frames never run: the service was behind (the newest replaced them) */
  uint64_t fallbacks;  /* frames shown with the fallback (no result newer than the last shown) */
  uint64_t failures;   /* runs or connections that failed */
  uint64_t reconnects; /* connections made after a failure */
  uint64_t imports;    /* slots the service imported (pool size, per connection) */
  uint64_t video_ns;   /* time OBS's video thread spent in the filter, all frames together */
  uint64_t video_ns_p50; /* the median of that time over the last FL_OBS_RECENT frames */
  uint64_t stage_ns;   /* of video_ns: libobs's staging (gs_stage_texture, the stage surface's
                          map and unmap) on the texture path; the rest is the filter's own */
  uint64_t switches;   /* fallback "unfiltered": times the output switched between the two */
  uint64_t taken;      /* of submitted: async frames handed to the worker, which copies them in
                          and their results out (fl_obs_runner_take): OBS's graphics thread
                          copied nothing for them */
} fl_obs_counters;

#define FL_OBS_RECENT 256

typedef struct fl_obs_runner fl_obs_runner;

/* Starts the worker, which connects on its own (and again after every failure). NULL only when
 * out of memory or threads. */
fl_obs_runner *fl_obs_runner_create(void);
/* Stops the worker and releases everything, never waiting for the service: a worker still in a
 * call (a hung service) is left to release the runner when the call ends (at its deadline at the
 * latest); fl_obs_runner_wait_all waits for those. Accepts NULL. */
void fl_obs_runner_destroy(fl_obs_runner *r);
/* New settings: a changed model or socket reconnects. */
void fl_obs_runner_configure(fl_obs_runner *r, const fl_obs_config *config);
/* Waits at most timeout_ms for workers of destroyed runners still in a call (the module's
 * unload: their code must stay loaded). Returns how many are left. */
int fl_obs_runner_wait_all(int timeout_ms);

/* What fl_obs_runner_frame did to the image. */
enum {
  FL_OBS_NOT_SHOWN = 0, /* the image is unfiltered: no result (yet), or the unfiltered fallback */
  FL_OBS_WRITTEN = 1,   /* a result was written over it */
  FL_OBS_KEPT = 2       /* the result it keeps (img->keeps_result) is still the one to show */
};

/* One frame of OBS's graphics thread. Hands a copy of the frame to the service (img->read into
 * the model's packed layout) and writes the newest result (or the fallback) over the frame in
 * place (img->write). Returns an FL_OBS_* above. Never waits for the service. */
int fl_obs_runner_frame(fl_obs_runner *r, const fl_obs_image *img);
/* One frame of an async source (img->release set): taken when it can be, so that OBS's graphics
 * thread copies nothing. The worker copies a taken frame to the service and writes its result
 * into it; once that is done the frame is OBS's to show again. Returns the frame to show now:
 * the newest taken one that carries its result; NULL, nothing newer (OBS shows its last frame
 * again: the last good one); or img's own frame, when the frame could not be taken (before the
 * first result, a size the pool does not fit, the unfiltered fallback showing): then it went
 * through fl_obs_runner_frame. Every taken frame is handed back exactly once (img->release),
 * or returned. Never waits for the service. */
const void *fl_obs_runner_take(fl_obs_runner *r, const fl_obs_image *img);
/* Hands every taken frame back to OBS (the filter leaves its source, or is destroyed), after a
 * copy in progress on the worker ends (a frame's copy, never the service). */
void fl_obs_runner_release_frames(fl_obs_runner *r);
/* Adds to the video thread's time in the filter (measured by the caller around the frame), of
 * which stage_ns in libobs's staging calls. */
void fl_obs_runner_add_video_ns(fl_obs_runner *r, uint64_t ns, uint64_t stage_ns);
/* A frame the filter cannot take (its format): counted and shown unfiltered. */
void fl_obs_runner_unsupported(fl_obs_runner *r, const char *why);

void fl_obs_runner_counters(fl_obs_runner *r, fl_obs_counters *out);
/* One line for the properties dialog, NUL-terminated into buf. */
void fl_obs_runner_status(fl_obs_runner *r, char *buf, size_t size);
/* 1 while connected with a pool for the current frames. */
int fl_obs_runner_connected(fl_obs_runner *r);

/* The models the service at `socket` ("" : the default) serves, as a NUL-separated list ending
 * with an empty string, malloc'd (the caller frees it); NULL when none is known yet. The list is
 * the service's last answer, asked for again in the background (at most once a second); the
 * call waits at most wait_ms for that answer, never for a service that does not reply. */
char *fl_obs_list_models(const char *socket, int wait_ms);

#endif
