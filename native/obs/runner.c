#include "runner.h"

#include <errno.h>
#include <fenceline/fenceline_client.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <util/base.h>

/* How long the worker waits before it connects again after a failure; after runs that passed
 * their deadline the wait doubles each time up to RETRY_MAX_NS (a service too slow for the
 * deadline is not reconnected to in a loop). */
#define RETRY_NS 1000000000LL
#define RETRY_MAX_NS 30000000000LL
/* The client's deadline for connecting and setting up (runs have the filter's own, deadline_ms):
 * a service that hangs costs the worker this long, never OBS's threads. */
#define CONNECT_TIMEOUT_NS 2000000000LL
#define SETUP_TIMEOUT_NS 5000000000LL
/* fallback "unfiltered": the filtered frames give way to the unfiltered ones after STALE_NS
 * without a new result, and come back once results have come steadily (no gap over STALE_NS)
 * for RECOVER_NS; a model merely slower than the frame rate keeps showing its results (no
 * strobe). */
#define STALE_NS 1000000000LL
#define RECOVER_NS 1000000000LL
/* The run's input fence is signalled before the run is sent: the service never waits for it.
 * The client adds this to the run's deadline (deadline_ms). */
#define RUN_TIMEOUT_MS 10u

typedef enum slot_state { SLOT_FREE, SLOT_QUEUED, SLOT_RUNNING, SLOT_READY, SLOT_HELD } slot_state;

typedef struct slot {
  FlFrame *frame;
  FlMemoryImport *import;
  FlSession *session;
  uint8_t *in, *out;
  slot_state state;
  uint64_t seq;
  /* An async source's frame the runner took (fl_obs_runner_take): QUEUED, its input not copied
   * yet; RUNNING, copied; READY, its result written into it. */
  fl_obs_image taken;
  int has_taken;
} slot;

/* Taken frames let go under the lock, handed back to OBS after it (img->release takes the
 * source's own lock). */
typedef struct drops {
  fl_obs_image img[FL_OBS_MAX_SLOTS + 1];
  int n;
} drops;

static void let_go(slot *s, drops *d) {
  if (s->has_taken)
    d->img[d->n++] = s->taken;
  s->has_taken = 0;
}

static void hand_back(const drops *d) {
  for (int i = 0; i < d->n; i++)
    d->img[i].release(&d->img[i]);
}

/* Everything made for one connection and one frame size. The worker creates and releases it; the
 * video thread uses it under the lock while r->pool points to it. */
typedef struct pool {
  uint32_t width, height;
  fl_obs_layout layout; /* the model's */
  size_t bytes;         /* one image in the model's layout */
  FlFence *in_fence, *out_fence;
  FlFenceImport *in_import, *out_import;
  slot slots[FL_OBS_MAX_SLOTS];
  int count, in_flight;
  uint64_t next_seq;
  uint64_t signalled; /* in_fence's value */
} pool;

struct fl_obs_runner {
  const FlApi *api;
  pthread_mutex_t mu;
  pthread_cond_t cv;
  pthread_t thread;
  int stop;

  fl_obs_config config; /* under mu */
  uint64_t config_gen;  /* bumped by every change that needs a new connection */
  uint32_t want_w, want_h;
  int want_valid;

  /* The worker's own. */
  FlClient *client;
  uint64_t client_gen;
  char input_name[256], output_name[256];
  int channels;
  int64_t model_h, model_w;

  pool *pool; /* under mu */
  uint32_t refused_w, refused_h; /* a size the model does not take (until the config changes) */
  uint64_t refused_gen;
  int64_t retry_at_ns; /* no connection attempt before this (monotonic) */

  uint8_t *last_good; /* the last shown result, kept across a lost connection */
  size_t last_good_cap;
  uint32_t lg_w, lg_h;
  fl_obs_layout lg_layout;
  int lg_valid;

  fl_obs_counters c;
  uint64_t recent_ns[FL_OBS_RECENT]; /* the video thread's time in the filter, last frames */
  uint64_t recent_count;
  char status[512];
  int outage; /* a failure was logged and no connection has worked since */
  int64_t retry_delay_ns;
  int64_t run_started_ns; /* the run in flight started (0: none) */

  /* What the frames show (the video thread's, under mu). */
  int64_t last_result_ns, streak_start_ns;
  int filtered_on; /* fallback "unfiltered": showing the filtered frames */
  enum { SHOWN_NONE, SHOWN_NEW, SHOWN_AGAIN, SHOWN_UNFILTERED } shown;

  int orphaned; /* destroyed while the worker was busy: the worker frees the runner */

  /* Taken frames (fl_obs_runner_take). */
  int copying;            /* the worker copies a taken frame, without the lock */
  pthread_cond_t copy_cv; /* copying ended */
  int result_shown;       /* OBS's texture shows a result of frames of this size */
  uint32_t shown_w, shown_h;
};

/* Workers (and model-list refreshes) still running for destroyed runners. */
static pthread_mutex_t live_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t live_cv = PTHREAD_COND_INITIALIZER;
static int live;

static void live_add(int n) {
  pthread_mutex_lock(&live_mu);
  live += n;
  pthread_cond_broadcast(&live_cv);
  pthread_mutex_unlock(&live_mu);
}

static int64_t deadline_ns(const fl_obs_config *c) {
  return c->deadline_ms > 0 ? c->deadline_ms * 1000000LL : FL_WAIT_FOREVER;
}

static int64_t now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

static void set_status(fl_obs_runner *r, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void set_status(fl_obs_runner *r, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(r->status, sizeof r->status, fmt, ap);
  va_end(ap);
}

/* ---- the pool ------------------------------------------------------------------------------ */

static void pool_release(const FlApi *api, pool *p) {
  if (p == NULL)
    return;
  for (int i = 0; i < p->count; i++) {
    api->ReleaseSession(p->slots[i].session);
    api->ReleaseMemoryImport(p->slots[i].import);
    api->ReleaseFrame(p->slots[i].frame);
  }
  api->ReleaseFenceImport(p->in_import);
  api->ReleaseFenceImport(p->out_import);
  api->ReleaseFence(p->in_fence);
  api->ReleaseFence(p->out_fence);
  free(p);
}

/* Makes the pool for width x height on r->client; on failure returns the status (the caller's). */
static FlStatus *pool_create(fl_obs_runner *r, uint32_t width, uint32_t height, int in_flight,
                             int bgr, pool **out) {
  const FlApi *api = r->api;
  pool *p = calloc(1, sizeof *p);
  if (p == NULL)
    return NULL; /* reported by the caller as out of memory */
  p->width = width;
  p->height = height;
  p->layout = fl_obs_model_layout(bgr, r->channels);
  p->bytes = (size_t)width * height * (size_t)r->channels;
  p->in_flight = in_flight;
  p->count = in_flight + 2;
  FlStatus *st = api->CreateFence(NULL, &p->in_fence);
  if (!st)
    st = api->CreateFence(NULL, &p->out_fence);
  if (!st)
    st = api->ImportFence(r->client, p->in_fence, &p->in_import);
  if (!st)
    st = api->ImportFence(r->client, p->out_fence, &p->out_import);
  int64_t shape[4] = {1, (int64_t)height, (int64_t)width, r->channels};
  for (int i = 0; !st && i < p->count; i++) {
    slot *s = &p->slots[i];
    st = api->CreateFrame(NULL, 2 * (uint64_t)p->bytes, &s->frame);
    if (!st)
      st = api->ImportFrame(r->client, s->frame, FL_ACCESS_READ_WRITE, &s->import);
    if (st)
      break;
    s->in = api->GetFrameData(s->frame);
    s->out = s->in + p->bytes;
    FlTensorView in = {sizeof in, r->input_name, s->import, 0, "UINT8", shape, 4};
    FlTensorView outv = {sizeof outv, r->output_name, s->import, p->bytes, "UINT8", shape, 4};
    FlSessionDesc desc = {sizeof desc, r->config.model, &in, 1, &outv, 1, p->in_import,
                          p->out_import};
    st = api->CreateSession(r->client, &desc, &s->session);
  }
  if (st) {
    pool_release(api, p);
    return st;
  }
  *out = p;
  return NULL;
}

/* Under mu: keeps the shown result for the fallback, lets the taken frames go into d (handed
 * back by worker_hand_back, after the unlock), then detaches the pool. */
static pool *detach_pool(fl_obs_runner *r, drops *d) {
  pool *p = r->pool;
  r->pool = NULL;
  d->n = 0;
  if (p == NULL)
    return NULL;
  for (int i = 0; i < p->count; i++)
    let_go(&p->slots[i], d);
  if (d->n)
    r->copying++; /* fl_obs_runner_release_frames waits for them */
  /* Another model's output is no fallback for the one now chosen. */
  for (int i = 0; r->client_gen == r->config_gen && i < p->count; i++) {
    if (p->slots[i].state != SLOT_HELD)
      continue;
    if (r->last_good_cap < p->bytes) {
      uint8_t *b = realloc(r->last_good, p->bytes);
      if (b == NULL)
        break;
      r->last_good = b;
      r->last_good_cap = p->bytes;
    }
    memcpy(r->last_good, p->slots[i].out, p->bytes);
    r->lg_w = p->width;
    r->lg_h = p->height;
    r->lg_layout = p->layout;
    r->lg_valid = 1;
  }
  return p;
}

/* Without mu: hands back what detach_pool let go. */
static void worker_hand_back(fl_obs_runner *r, const drops *d) {
  if (d->n == 0)
    return;
  hand_back(d);
  pthread_mutex_lock(&r->mu);
  r->copying--;
  pthread_cond_broadcast(&r->copy_cv);
  pthread_mutex_unlock(&r->mu);
}

/* ---- the connection ------------------------------------------------------------------------ */

static const char *code_name(const FlApi *api, FlStatus *st) {
  return api->GetErrorCodeName(api->GetErrorCode(st));
}

/* Connects and checks the model (worker only, without the lock). 0 on success, else the status
 * line says why. */
static int connect_client(fl_obs_runner *r, const fl_obs_config *cfg, char *why, size_t why_size) {
  const FlApi *api = r->api;
  const char *sock = cfg->socket[0] ? cfg->socket : NULL;
  FlClient *client = NULL;
  FlStatus *st = api->CreateClientWithTimeout(sock, "obs", CONNECT_TIMEOUT_NS, &client);
  why[0] = 0;
  if (!st) {
    api->SetClientTimeout(client, SETUP_TIMEOUT_NS);
    FlModelMetadata *md = NULL;
    st = api->GetModelMetadata(client, cfg->model, NULL, &md);
    if (!st) {
      FlTensorInfo in = {sizeof in, 0, 0, 0, 0}, out = {sizeof out, 0, 0, 0, 0};
      if (api->GetModelInputCount(md) != 1 || api->GetModelOutputCount(md) != 1)
        snprintf(why, why_size, "model '%s' must have one input and one output", cfg->model);
      else if ((st = api->GetModelInput(md, 0, &in)) == NULL &&
               (st = api->GetModelOutput(md, 0, &out)) == NULL) {
        int ok = in.rank == 4 && out.rank == 4 && strcmp(in.datatype, "UINT8") == 0 &&
                 strcmp(out.datatype, "UINT8") == 0 && (in.shape[3] == 3 || in.shape[3] == 4);
        for (size_t i = 0; ok && i < 4; i++)
          ok = in.shape[i] == out.shape[i] || in.shape[i] < 0 || out.shape[i] < 0;
        if (!ok) {
          snprintf(why, why_size,
                   "model '%s' must take and return uint8 [1, height, width, 3 or 4] pixels",
                   cfg->model);
        } else {
          snprintf(r->input_name, sizeof r->input_name, "%s", in.name);
          snprintf(r->output_name, sizeof r->output_name, "%s", out.name);
          r->channels = (int)in.shape[3];
          r->model_h = in.shape[1];
          r->model_w = in.shape[2];
        }
      }
      api->ReleaseModelMetadata(md);
    }
  }
  if (st) {
    snprintf(why, why_size, "%s: %s", code_name(api, st), api->GetErrorMessage(st));
    api->ReleaseStatus(st);
  }
  if (why[0]) {
    api->ReleaseClient(client);
    return -1;
  }
  r->client = client;
  return 0;
}

static void fail(fl_obs_runner *r, const char *what, int timed_out) {
  /* Under mu. One log line per outage; the status line always has the latest reason. */
  r->c.failures++;
  if (timed_out) {
    r->retry_delay_ns = r->retry_delay_ns * 2 > RETRY_MAX_NS ? RETRY_MAX_NS
                                                             : r->retry_delay_ns * 2;
    set_status(r, "not running: %s: the model or the service is slower than the deadline "
               "(%lld ms; 0: no limit); trying again in %lld s", what,
               (long long)r->config.deadline_ms, (long long)(r->retry_delay_ns / 1000000000LL));
  } else {
    r->retry_delay_ns = RETRY_NS;
    set_status(r, "not running: %s (retrying every second)", what);
  }
  if (!r->outage) {
    blog(LOG_WARNING, "[fenceline] %s; showing the %s frame until the service is back", what,
         r->config.fallback == FL_OBS_FALLBACK_LAST_GOOD ? "last good" : "unfiltered");
    r->outage = 1;
  }
  r->retry_at_ns = now_ns() + r->retry_delay_ns;
}

/* ---- the worker ------------------------------------------------------------------------------ */

static slot *oldest(pool *p, slot_state state) {
  slot *best = NULL;
  for (int i = 0; p && i < p->count; i++)
    if (p->slots[i].state == state && (best == NULL || p->slots[i].seq < best->seq))
      best = &p->slots[i];
  return best;
}

static int pool_fits(const fl_obs_runner *r) {
  return r->pool && r->pool->width == r->want_w && r->pool->height == r->want_h &&
         r->client_gen == r->config_gen;
}

/* Under mu: what the worker should do next. 0 nothing, 1 set up (connect and pool), 2 run. */
static int next_job(fl_obs_runner *r) {
  if (!r->want_valid || r->config.model[0] == 0) {
    if (r->config.model[0] == 0)
      set_status(r, "no model chosen");
    return r->pool || r->client ? 1 : 0; /* 1: tear down what a cleared model left */
  }
  if (!pool_fits(r)) {
    if (r->refused_gen == r->config_gen && r->refused_w == r->want_w && r->refused_h == r->want_h)
      return 0;
    return now_ns() >= r->retry_at_ns ? 1 : 0;
  }
  return oldest(r->pool, SLOT_QUEUED) ? 2 : 0;
}

/* Under mu (released while it copies): a running slot's taken frame, if it still has one, copied
 * into the slot (out 0) or its result into the frame (out 1). fl_obs_runner_release_frames waits
 * for the copy. */
static void copy_taken(fl_obs_runner *r, slot *s, const pool *p, int out) {
  if (!s->has_taken)
    return;
  fl_obs_image img = s->taken;
  r->copying++;
  pthread_mutex_unlock(&r->mu);
  if (out)
    img.write(&img, s->out, p->layout);
  else
    img.read(&img, s->in, p->layout);
  pthread_mutex_lock(&r->mu);
  r->copying--;
  pthread_cond_broadcast(&r->copy_cv);
}

static void *worker(void *arg) {
  fl_obs_runner *r = arg;
  const FlApi *api = r->api;
  pthread_mutex_lock(&r->mu);
  for (;;) {
    int job;
    while (!r->stop && (job = next_job(r)) == 0) {
      if (r->want_valid && r->config.model[0] && !pool_fits(r) && r->retry_at_ns > now_ns() &&
          !(r->refused_gen == r->config_gen && r->refused_w == r->want_w &&
            r->refused_h == r->want_h)) {
        int64_t at = r->retry_at_ns;
        struct timespec ts = {(time_t)(at / 1000000000LL), (long)(at % 1000000000LL)};
        pthread_cond_timedwait(&r->cv, &r->mu, &ts);
      } else {
        pthread_cond_wait(&r->cv, &r->mu);
      }
    }
    if (r->stop)
      break;
    if (job == 1) {
      /* Set up: drop the old pool (and the connection if the settings changed), then connect and
       * make the pool for the frames' size. */
      drops d;
      pool *old = detach_pool(r, &d);
      fl_obs_config cfg = r->config;
      uint64_t gen = r->config_gen;
      uint32_t w = r->want_w, h = r->want_h;
      int need_client = r->client == NULL || r->client_gen != gen;
      int want = r->want_valid && cfg.model[0];
      pthread_mutex_unlock(&r->mu);
      worker_hand_back(r, &d);
      pool_release(api, old);
      if (need_client) {
        api->ReleaseClient(r->client);
        r->client = NULL;
      }
      int ok = want;
      char why[400];
      if (ok && need_client && connect_client(r, &cfg, why, sizeof why) != 0) {
        ok = 0;
        pthread_mutex_lock(&r->mu);
        fail(r, why, 0);
        pthread_mutex_unlock(&r->mu);
      }
      pool *p = NULL;
      if (ok) {
        pthread_mutex_lock(&r->mu);
        r->client_gen = gen; /* read under the lock by the video thread's checks */
        pthread_mutex_unlock(&r->mu);
        if ((r->model_h > 0 && r->model_h != h) || (r->model_w > 0 && r->model_w != w)) {
          pthread_mutex_lock(&r->mu);
          set_status(r, "not running: model '%s' takes %lldx%lld frames, these are %ux%u",
                     cfg.model, (long long)r->model_w, (long long)r->model_h, w, h);
          r->refused_w = w;
          r->refused_h = h;
          r->refused_gen = gen;
          pthread_mutex_unlock(&r->mu);
          ok = 0;
        } else {
          api->SetClientTimeout(r->client, SETUP_TIMEOUT_NS);
          FlStatus *st = pool_create(r, w, h, cfg.frames_in_flight, cfg.bgr, &p);
          if (st || p == NULL) {
            char what[400];
            snprintf(what, sizeof what, "sharing frames with the service failed: %s: %s",
                     st ? code_name(api, st) : "out_of_memory",
                     st ? api->GetErrorMessage(st) : "");
            api->ReleaseStatus(st);
            api->ReleaseClient(r->client);
            r->client = NULL;
            pthread_mutex_lock(&r->mu);
            fail(r, what, 0);
            pthread_mutex_unlock(&r->mu);
            ok = 0;
          }
        }
      }
      pthread_mutex_lock(&r->mu);
      if (ok) {
        r->pool = p;
        r->last_result_ns = now_ns(); /* the service has STALE_NS for its first result */
        r->filtered_on = 1;
        r->c.imports += (uint64_t)p->count;
        if (r->outage)
          r->c.reconnects++; /* the outage ends with the first result (logged then) */
        set_status(r, "running '%s' on %ux%u frames, %d in flight", cfg.model, w, h,
                   cfg.frames_in_flight);
      }
      continue;
    }
    /* job 2: run the oldest queued frame. A taken frame is copied in first, without the lock
     * (the slot is RUNNING: the video thread leaves it alone). */
    pool *p = r->pool;
    slot *s = oldest(p, SLOT_QUEUED);
    s->state = SLOT_RUNNING;
    FlSession *session = s->session;
    uint64_t seq = s->seq;
    copy_taken(r, s, p, 0);
    if (seq > p->signalled) {
      FlStatus *sig = api->SignalFence(p->in_fence, seq);
      api->ReleaseStatus(sig); /* values only go up here: it cannot fail */
      p->signalled = seq;
    }
    /* The deadline as set now (a change applies from the next run, on the same connection). */
    api->SetClientTimeout(r->client, deadline_ns(&r->config));
    r->run_started_ns = now_ns();
    pthread_mutex_unlock(&r->mu);
    FlRunResult res = {sizeof res, 0, 0, 0, 0, 0};
    FlStatus *st = api->Run(session, seq, seq, RUN_TIMEOUT_MS, &res);
    pthread_mutex_lock(&r->mu);
    r->run_started_ns = 0;
    if (st == NULL) {
      copy_taken(r, s, p, 1); /* the result goes into the frame it came from */
      s->state = SLOT_READY;
      r->c.filtered++;
      r->retry_delay_ns = RETRY_NS;
      if (r->outage) {
        blog(LOG_INFO, "[fenceline] connected again: model '%s'", r->config.model);
        r->outage = 0;
      }
    } else {
      s->state = SLOT_FREE; /* its taken frame, if any, goes with the pool below */
      char what[400];
      snprintf(what, sizeof what, "a run failed: %s: %s", code_name(api, st),
               api->GetErrorMessage(st));
      int timed_out = api->GetErrorCode(st) == FL_ERROR_TIMED_OUT;
      api->ReleaseStatus(st);
      /* Whatever failed, start again from a new connection: a killed or restarted service
       * lost every import, and the next attempt says what is wrong now. */
      drops d;
      pool *old = detach_pool(r, &d);
      FlClient *client = r->client;
      r->client = NULL;
      fail(r, what, timed_out);
      pthread_mutex_unlock(&r->mu);
      worker_hand_back(r, &d);
      pool_release(api, old);
      api->ReleaseClient(client);
      pthread_mutex_lock(&r->mu);
    }
  }
  drops d;
  pool *old = detach_pool(r, &d);
  pthread_mutex_unlock(&r->mu);
  worker_hand_back(r, &d);
  pthread_mutex_lock(&r->mu);
  int orphaned = r->orphaned;
  pthread_mutex_unlock(&r->mu);
  pool_release(api, old);
  api->ReleaseClient(r->client);
  r->client = NULL;
  if (orphaned) {
    pthread_cond_destroy(&r->copy_cv);
    pthread_cond_destroy(&r->cv);
    pthread_mutex_destroy(&r->mu);
    free(r->last_good);
    free(r);
    live_add(-1);
  }
  return NULL;
}

fl_obs_runner *fl_obs_runner_create(void) {
  fl_obs_runner *r = calloc(1, sizeof *r);
  if (r == NULL)
    return NULL;
  r->api = FlGetApi(FL_API_VERSION);
  pthread_condattr_t ca;
  pthread_condattr_init(&ca);
  pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
  pthread_mutex_init(&r->mu, NULL);
  pthread_cond_init(&r->cv, &ca);
  pthread_cond_init(&r->copy_cv, NULL);
  pthread_condattr_destroy(&ca);
  r->config.frames_in_flight = 2;
  r->config.deadline_ms = FL_OBS_DEADLINE_DEFAULT_MS;
  r->retry_delay_ns = RETRY_NS;
  set_status(r, "no model chosen");
  if (r->api == NULL || pthread_create(&r->thread, NULL, worker, r) != 0) {
    pthread_cond_destroy(&r->copy_cv);
    pthread_cond_destroy(&r->cv);
    pthread_mutex_destroy(&r->mu);
    free(r);
    return NULL;
  }
  return r;
}

void fl_obs_runner_destroy(fl_obs_runner *r) {
  if (r == NULL)
    return;
  /* The worker releases the pool and the connection itself: those calls reach the service, and
   * OBS's destroy thread must not wait for it. */
  live_add(1);
  /* Detached before it is told to stop: once the lock is released the worker may free r at any
   * moment, so nothing of r is read after that (reading r->thread there handed pthread_detach
   * whatever the freed memory held next, and it wrote through it). */
  pthread_detach(r->thread);
  pthread_mutex_lock(&r->mu);
  r->stop = 1;
  r->orphaned = 1;
  pthread_cond_signal(&r->cv);
  pthread_mutex_unlock(&r->mu);
}

int fl_obs_runner_wait_all(int timeout_ms) {
  struct timespec until;
  clock_gettime(CLOCK_REALTIME, &until);
  until.tv_sec += timeout_ms / 1000;
  until.tv_nsec += (long)(timeout_ms % 1000) * 1000000L;
  if (until.tv_nsec >= 1000000000L) {
    until.tv_sec++;
    until.tv_nsec -= 1000000000L;
  }
  pthread_mutex_lock(&live_mu);
  while (live > 0 && pthread_cond_timedwait(&live_cv, &live_mu, &until) != ETIMEDOUT) {
  }
  int left = live;
  pthread_mutex_unlock(&live_mu);
  return left;
}

void fl_obs_runner_configure(fl_obs_runner *r, const fl_obs_config *config) {
  pthread_mutex_lock(&r->mu);
  int reconnect = strcmp(r->config.model, config->model) != 0 ||
                  strcmp(r->config.socket, config->socket) != 0 ||
                  r->config.frames_in_flight != config->frames_in_flight ||
                  r->config.bgr != config->bgr;
  r->config = *config;
  if (r->config.deadline_ms < 0)
    r->config.deadline_ms = 0;
  if (r->config.frames_in_flight < 1)
    r->config.frames_in_flight = 1;
  if (r->config.frames_in_flight > FL_OBS_MAX_IN_FLIGHT)
    r->config.frames_in_flight = FL_OBS_MAX_IN_FLIGHT;
  if (reconnect) {
    r->config_gen++;
    r->retry_at_ns = 0;
    r->lg_valid = 0; /* another model's output is no fallback for this one */
    if (config->model[0])
      set_status(r, "connecting");
  }
  pthread_cond_signal(&r->cv);
  pthread_mutex_unlock(&r->mu);
}

/* Under mu: this frame's size is the one wanted (a new size wakes the worker: returns 1). */
static int want_size(fl_obs_runner *r, uint32_t width, uint32_t height) {
  if (r->want_valid && r->want_w == width && r->want_h == height)
    return 0;
  r->want_w = width;
  r->want_h = height;
  r->want_valid = 1;
  r->retry_at_ns = 0;
  return 1;
}

/* Under mu: the newest finished result of the pool; older ones it overtook, and the result
 * shown before (SLOT_HELD), are let go into d. */
static slot *newest_result(pool *p, drops *d) {
  slot *best = NULL;
  for (int i = 0; i < p->count; i++) {
    slot *s = &p->slots[i];
    if (s->state == SLOT_READY && (best == NULL || s->seq > best->seq))
      best = s;
  }
  for (int i = 0; best && i < p->count; i++) {
    slot *s = &p->slots[i];
    if (s != best && (s->state == SLOT_HELD || s->state == SLOT_READY)) {
      let_go(s, d);
      s->state = SLOT_FREE;
    }
  }
  return best;
}

/* Under mu: the slot this frame goes into, or NULL when every frame in flight has started and
 * it is not run; a frame it replaces is let go into d. */
static slot *queue_slot(fl_obs_runner *r, pool *p, drops *d) {
  /* This frame goes to the service unless frames_in_flight are already there: then it replaces
   * the oldest that has not started (the service runs the newest it can), or, when every one has
   * started, it is not run. Either way one frame is dropped and counted. */
  int busy = 0;
  slot *free_slot = NULL;
  for (int i = 0; i < p->count; i++) {
    slot *s = &p->slots[i];
    if (s->state == SLOT_QUEUED || s->state == SLOT_RUNNING)
      busy++;
    else if (s->state == SLOT_FREE && free_slot == NULL)
      free_slot = s;
  }
  slot *target = busy < p->in_flight ? free_slot : NULL;
  if (target == NULL) {
    r->c.dropped++;
    target = oldest(p, SLOT_QUEUED);
  }
  if (target) {
    let_go(target, d);
    target->seq = ++p->next_seq;
    target->state = SLOT_QUEUED;
    r->c.submitted++;
  }
  return target;
}

/* Under mu: a result is shown now (fresh: a new one). */
static void saw_result(fl_obs_runner *r, int64_t now) {
  if (now - r->last_result_ns > STALE_NS)
    r->streak_start_ns = now;
  r->last_result_ns = now;
}

/* The end of a frame's call (under mu): unlocks, hands back the frames let go, and wakes the
 * worker if asked, after the unlock (the worker it wakes takes the lock at once). */
static void frame_done(fl_obs_runner *r, const drops *d, int wake) {
  pthread_mutex_unlock(&r->mu);
  hand_back(d);
  if (wake)
    pthread_cond_signal(&r->cv);
}

const void *fl_obs_runner_take(fl_obs_runner *r, const fl_obs_image *img) {
  uint32_t width = img->width, height = img->height;
  pthread_mutex_lock(&r->mu);
  pool *p = r->pool;
  int64_t now = now_ns();
  int fits = p && p->width == width && p->height == height;
  /* Taken only where OBS's texture already shows a result of this size (it is shown again while
   * no newer one is ready) and the filtered frames are the ones to show. */
  int take = img->release && r->result_shown && r->shown_w == width && r->shown_h == height &&
             (fits || (p == NULL && r->config.fallback == FL_OBS_FALLBACK_LAST_GOOD)) &&
             (r->config.fallback == FL_OBS_FALLBACK_LAST_GOOD ||
              (r->filtered_on && now - r->last_result_ns <= STALE_NS));
  slot *best = NULL;
  drops d = {.n = 0};
  if (take && fits) {
    best = newest_result(p, &d);
    if (best && !best->has_taken) {
      /* The result of a frame copied in before frames were taken: that frame went back to OBS
       * long ago, so there is no frame to show it in. It is let go; the next result is shown.
       * (Copying it out here would copy this frame in too, and so on for every frame after.) */
      best->state = SLOT_FREE;
      best = NULL;
    }
  }
  if (!take) {
    pthread_mutex_unlock(&r->mu);
    hand_back(&d);
    fl_obs_runner_frame(r, img);
    return img->frame;
  }
  r->c.frames++;
  int wake = want_size(r, width, height);
  const void *show = NULL;
  if (fits) {
    slot *target = queue_slot(r, p, &d);
    if (target) {
      target->taken = *img;
      target->has_taken = 1;
      r->c.taken++;
      wake = 1;
    } else {
      d.img[d.n++] = *img; /* not run: handed back, and not shown */
    }
  } else {
    r->c.dropped++; /* no pool (the service is gone): not run */
    d.img[d.n++] = *img;
  }
  if (best) {
    saw_result(r, now);
    show = best->taken.frame; /* OBS's again: it releases the frame once it is shown */
    best->has_taken = 0;
    best->state = SLOT_FREE;
    r->c.shown++;
    r->shown = SHOWN_NEW;
  } else {
    r->c.fallbacks++;
    r->shown = SHOWN_AGAIN;
  }
  frame_done(r, &d, wake);
  return show;
}

void fl_obs_runner_release_frames(fl_obs_runner *r) {
  drops d = {.n = 0};
  pthread_mutex_lock(&r->mu);
  while (r->copying)
    pthread_cond_wait(&r->copy_cv, &r->mu);
  for (int i = 0; r->pool && i < r->pool->count; i++) {
    slot *s = &r->pool->slots[i];
    let_go(s, &d);
    if (s->state == SLOT_QUEUED || s->state == SLOT_READY)
      s->state = SLOT_FREE; /* a RUNNING one finishes; its result then stays in the slot */
  }
  r->result_shown = 0;
  pthread_mutex_unlock(&r->mu);
  hand_back(&d);
}

int fl_obs_runner_frame(fl_obs_runner *r, const fl_obs_image *img) {
  uint32_t width = img->width, height = img->height;
  int replaced = FL_OBS_NOT_SHOWN;
  drops d = {.n = 0};
  pthread_mutex_lock(&r->mu);
  r->c.frames++;
  int wake = want_size(r, width, height);
  pool *p = r->pool;
  if (p && p->width == width && p->height == height) {
    /* The newest finished result is shown; older ones it overtook are let go. A taken frame
     * that carries it is let go too: the result is copied from the slot. */
    slot *best = newest_result(p, &d), *held = NULL;
    if (best) {
      let_go(best, &d);
      best->state = SLOT_HELD;
    }
    for (int i = 0; i < p->count; i++)
      if (p->slots[i].state == SLOT_HELD)
        held = &p->slots[i];
    slot *target = queue_slot(r, p, &d);
    if (target) {
      img->read(img, target->in, p->layout);
      FlStatus *st = r->api->SignalFence(p->in_fence, target->seq);
      r->api->ReleaseStatus(st); /* values only go up here: it cannot fail */
      p->signalled = target->seq;
      wake = 1;
    }
    int64_t now = now_ns();
    if (best)
      saw_result(r, now);
    if (r->config.fallback == FL_OBS_FALLBACK_UNFILTERED) {
      int on = r->filtered_on;
      if (on && now - r->last_result_ns > STALE_NS)
        on = 0;
      else if (!on && best && now - r->streak_start_ns >= RECOVER_NS)
        on = 1;
      if (on != r->filtered_on)
        r->c.switches++;
      r->filtered_on = on;
    }
    int show = held && (r->config.fallback == FL_OBS_FALLBACK_LAST_GOOD || r->filtered_on);
    r->shown = !show ? SHOWN_UNFILTERED : best ? SHOWN_NEW : SHOWN_AGAIN;
    if (show) {
      /* A held result without a newer one was written when it was the newest. */
      if (best || !img->keeps_result) {
        img->write(img, held->out, p->layout);
        replaced = FL_OBS_WRITTEN;
      } else {
        replaced = FL_OBS_KEPT;
      }
    } else if (r->config.fallback == FL_OBS_FALLBACK_LAST_GOOD && r->lg_valid &&
               r->lg_w == width && r->lg_h == height) {
      /* A new pool (after a reconnection) before its first result. */
      img->write(img, r->last_good, r->lg_layout);
      replaced = FL_OBS_WRITTEN;
      r->shown = SHOWN_AGAIN;
    }
    if (best)
      r->c.shown++;
    else
      r->c.fallbacks++;
  } else {
    r->c.fallbacks++;
    r->shown = SHOWN_UNFILTERED;
    if (r->config.fallback == FL_OBS_FALLBACK_LAST_GOOD && r->lg_valid && r->lg_w == width &&
        r->lg_h == height) {
      img->write(img, r->last_good, r->lg_layout);
      replaced = FL_OBS_WRITTEN;
      r->shown = SHOWN_AGAIN;
    }
  }
  /* What OBS shows of this size now: a result (fl_obs_runner_take may keep it there), or not. */
  r->result_shown = replaced != FL_OBS_NOT_SHOWN;
  r->shown_w = width;
  r->shown_h = height;
  frame_done(r, &d, wake);
  return replaced;
}

void fl_obs_runner_add_video_ns(fl_obs_runner *r, uint64_t ns, uint64_t stage_ns) {
  pthread_mutex_lock(&r->mu);
  r->c.video_ns += ns;
  r->c.stage_ns += stage_ns;
  r->recent_ns[r->recent_count++ % FL_OBS_RECENT] = ns;
  pthread_mutex_unlock(&r->mu);
}

static int cmp_u64(const void *a, const void *b) {
  uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
  return x < y ? -1 : x > y;
}

void fl_obs_runner_unsupported(fl_obs_runner *r, const char *why) {
  pthread_mutex_lock(&r->mu);
  r->c.frames++;
  r->c.fallbacks++;
  set_status(r, "not running: %s", why);
  pthread_mutex_unlock(&r->mu);
}

void fl_obs_runner_counters(fl_obs_runner *r, fl_obs_counters *out) {
  uint64_t recent[FL_OBS_RECENT];
  pthread_mutex_lock(&r->mu);
  *out = r->c;
  size_t n = r->recent_count < FL_OBS_RECENT ? (size_t)r->recent_count : FL_OBS_RECENT;
  memcpy(recent, r->recent_ns, n * sizeof *recent);
  pthread_mutex_unlock(&r->mu);
  qsort(recent, n, sizeof *recent, cmp_u64);
  out->video_ns_p50 = n ? recent[n / 2] : 0;
}

void fl_obs_runner_status(fl_obs_runner *r, char *buf, size_t size) {
  pthread_mutex_lock(&r->mu);
  int64_t now = now_ns();
  char showing[200] = "";
  double since = r->last_result_ns ? (double)(now - r->last_result_ns) / 1e9 : 0;
  if (r->shown == SHOWN_NEW || (r->shown == SHOWN_AGAIN && since <= STALE_NS / 1e9))
    snprintf(showing, sizeof showing, "; showing the filtered frames");
  else if (r->shown == SHOWN_AGAIN)
    snprintf(showing, sizeof showing, "; showing the last good frame (no new result for %.1f s)",
             since);
  else if (r->shown == SHOWN_UNFILTERED && r->pool && r->last_result_ns &&
           r->config.fallback == FL_OBS_FALLBACK_UNFILTERED && r->c.filtered)
    snprintf(showing, sizeof showing,
             "; showing the unfiltered frames (%s)",
             since > STALE_NS / 1e9 ? "no new result for over a second"
                                    : "waiting for a second of steady results");
  else if (r->shown == SHOWN_UNFILTERED)
    snprintf(showing, sizeof showing, "; showing the unfiltered frames (no result yet)");
  char waiting[80] = "";
  if (r->run_started_ns && now - r->run_started_ns > STALE_NS)
    snprintf(waiting, sizeof waiting, "; the current run has taken %.1f s",
             (double)(now - r->run_started_ns) / 1e9);
  snprintf(buf, size, "%s%s%s; frames %llu, filtered %llu, dropped %llu", r->status, showing,
           waiting, (unsigned long long)r->c.frames, (unsigned long long)r->c.filtered,
           (unsigned long long)r->c.dropped);
  pthread_mutex_unlock(&r->mu);
}

int fl_obs_runner_connected(fl_obs_runner *r) {
  pthread_mutex_lock(&r->mu);
  int ok = r->pool != NULL;
  pthread_mutex_unlock(&r->mu);
  return ok;
}

/* ---- models -------------------------------------------------------------------------------- */

/* Appends the JSON strings of the array under "models" in json to a NUL-separated list. Names
 * are the service's model names (letters, digits, '.', '_', '-'): no escapes to undo. */
static char *parse_models(const char *json) {
  const char *p = strstr(json, "\"models\"");
  if (p == NULL || (p = strchr(p, '[')) == NULL)
    return NULL;
  const char *end = strchr(p, ']');
  if (end == NULL)
    return NULL;
  char *list = calloc((size_t)(end - p) + 2, 1);
  if (list == NULL)
    return NULL;
  char *w = list;
  for (const char *q = p; q < end; q++) {
    if (*q != '"')
      continue;
    const char *close = memchr(q + 1, '"', (size_t)(end - q - 1));
    if (close == NULL)
      break;
    memcpy(w, q + 1, (size_t)(close - q - 1));
    w += close - q - 1;
    *w++ = 0;
    q = close;
  }
  *w = 0;
  return list;
}

static char *list_models(const char *socket, int timeout_ms) {
  const FlApi *api = FlGetApi(FL_API_VERSION);
  FlClient *client = NULL;
  FlStatus *st = api->CreateClientWithTimeout(socket && socket[0] ? socket : NULL, "obs-list",
                                              (int64_t)timeout_ms * 1000000LL, &client);
  char *json = NULL, *list = NULL;
  if (!st)
    st = api->Describe(client, "models", "", &json);
  if (!st)
    list = parse_models(json);
  api->ReleaseStatus(st);
  api->FreeString(json);
  api->ReleaseClient(client);
  return list;
}

/* The properties dialog's model list: the last answer of the service at each socket, refreshed
 * by a thread of its own, so opening the dialog never waits for a service that hangs. */
static struct {
  pthread_mutex_t mu;
  pthread_cond_t cv;
  char socket[1024]; /* the socket the list is for */
  char *list;        /* NUL-separated, as list_models returns it; NULL: none yet */
  int64_t at_ns;     /* when the list was asked for */
  uint64_t done;     /* refreshes finished */
  int refreshing;
} models = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, "", NULL, 0, 0, 0};

static void *refresh_models(void *arg) {
  char *socket = arg;
  char *list = list_models(socket, 2000);
  pthread_mutex_lock(&models.mu);
  if (strcmp(models.socket, socket) == 0 && list) {
    free(models.list);
    models.list = list;
    list = NULL;
  }
  models.refreshing = 0;
  models.done++;
  pthread_cond_broadcast(&models.cv);
  pthread_mutex_unlock(&models.mu);
  free(list);
  free(socket);
  live_add(-1);
  return NULL;
}

static char *copy_list(const char *list) {
  size_t n = 0;
  while (list[n])
    n += strlen(list + n) + 1;
  char *out = malloc(n + 1);
  if (out)
    memcpy(out, list, n + 1);
  return out;
}

char *fl_obs_list_models(const char *socket, int wait_ms) {
  const char *sock = socket ? socket : "";
  pthread_mutex_lock(&models.mu);
  if (strcmp(models.socket, sock) != 0) {
    snprintf(models.socket, sizeof models.socket, "%s", sock);
    free(models.list);
    models.list = NULL;
    models.at_ns = 0;
  }
  uint64_t done = models.done;
  int64_t now = now_ns();
  if (!models.refreshing && now - models.at_ns > RETRY_NS) {
    char *arg = strdup(sock);
    pthread_t t;
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    live_add(1);
    if (arg && pthread_create(&t, &attr, refresh_models, arg) == 0) {
      models.refreshing = 1;
      models.at_ns = now;
    } else {
      free(arg);
      live_add(-1);
    }
    pthread_attr_destroy(&attr);
  }
  if (models.refreshing && wait_ms > 0) {
    struct timespec until;
    clock_gettime(CLOCK_REALTIME, &until);
    until.tv_nsec += (long)wait_ms * 1000000L;
    until.tv_sec += until.tv_nsec / 1000000000L;
    until.tv_nsec %= 1000000000L;
    while (models.done == done &&
           pthread_cond_timedwait(&models.cv, &models.mu, &until) != ETIMEDOUT) {
    }
  }
  char *out = models.list ? copy_list(models.list) : NULL;
  pthread_mutex_unlock(&models.mu);
  return out;
}
