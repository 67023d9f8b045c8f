/* What a renderer creates and maps itself: frame buffers in shared memory and host timeline
 * fences. The fence page and its operations are native/common/host_timeline.c, the same code the
 * service's importer runs; creating, opening and mapping the objects is the OS's part
 * (platform/<os>/shm.c). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"

struct FlFrame {
  fl_os_map map;
  char *name;    /* NULL for an anonymous frame */
  int owns_name; /* CreateFrame made it: ReleaseFrame unlinks it */
};

struct FlFence {
  fl_os_map map;
  fl_htl_wake *wake; /* Windows: the "<name>.wake" semaphore; NULL on Linux */
  char *name;
  int owns_name;
  fl_spin spin;
};

#define DEFAULT_FENCE_SPIN_NS 100000

static char *dup_string(const char *s) {
  size_t n = strlen(s) + 1;
  char *d = malloc(n);
  if (d != NULL) memcpy(d, s, n);
  return d;
}

/* ---- frames ------------------------------------------------------------------------------- */

static FlStatus *frame_from_map(fl_os_map *m, const char *name, int owns_name, FlFrame **out) {
  FlFrame *f = calloc(1, sizeof *f);
  char *name_copy = name != NULL ? dup_string(name) : NULL;
  if (f == NULL || (name != NULL && name_copy == NULL)) {
    free(f);
    free(name_copy);
    fl_os_map_close(m, owns_name ? name : NULL);
    return fl_status(FL_ERROR_RESOURCE_EXHAUSTED, "out of memory");
  }
  f->map = *m;
  f->name = name_copy;
  f->owns_name = owns_name;
  *out = f;
  return NULL;
}

FlStatus *fl_frame_create(const char *shm_name, uint64_t size, FlFrame **out) {
  if (out == NULL) return fl_status(FL_ERROR_INVALID_ARGUMENT, "CreateFrame: out is NULL");
  if (size == 0 || size > (uint64_t)SIZE_MAX / 2)
    return fl_status(FL_ERROR_INVALID_ARGUMENT, "CreateFrame: size_bytes must be positive");
  fl_os_map m;
  FlStatus *st = fl_os_map_create(shm_name, size, "fenceline-frame", &m);
  if (st != NULL) return st;
  return frame_from_map(&m, shm_name, shm_name != NULL, out);
}

FlStatus *fl_frame_open(const char *shm_name, FlAccess access, FlFrame **out) {
  if (out == NULL) return fl_status(FL_ERROR_INVALID_ARGUMENT, "OpenFrame: out is NULL");
  if (shm_name == NULL)
    return fl_status(FL_ERROR_INVALID_ARGUMENT, "OpenFrame needs the object's name");
  fl_os_map m;
  FlStatus *st = fl_os_map_open(shm_name, access == FL_ACCESS_READ_WRITE, 0, &m);
  if (st != NULL) return st;
  return frame_from_map(&m, shm_name, 0, out);
}

void *fl_frame_data(const FlFrame *f) { return f == NULL ? NULL : f->map.data; }
uint64_t fl_frame_size(const FlFrame *f) { return f == NULL ? 0 : f->map.size; }
int fl_frame_fd(const FlFrame *f) { return f == NULL ? -1 : fl_os_map_fd(&f->map); }
const char *fl_frame_name(const FlFrame *f) { return f == NULL ? NULL : f->name; }

void fl_frame_release(FlFrame *f) {
  if (f == NULL) return;
  fl_os_map_close(&f->map, f->owns_name ? f->name : NULL);
  free(f->name);
  free(f);
}

/* ---- fences ------------------------------------------------------------------------------- */

/* Takes over the mapped page (closed on failure); validates it unless `fresh`, in which case it
 * writes a fresh header. */
static FlStatus *fence_from_map(fl_os_map *m, const char *name, int owns_name, int fresh,
                                FlFence **out) {
  FlStatus *st = NULL;
  const char *unlink_name = owns_name ? name : NULL;
  if (fresh)
    fl_htl_init(m->data, 0);
  else if (fl_htl_validate(m->data, FL_HTL_PAGE_SIZE) != 0)
    st = fl_status(FL_ERROR_INVALID_ARGUMENT,
                   "not a host_timeline fence: expected a 4096-byte page with magic 0x46544C46 "
                   "and version 1 (docs/fences.md)");
  fl_htl_wake *wake = NULL;
  /* The creator makes the wake object only after the page is initialized, so an opener that
   * finds the wake object also finds a valid page. */
  if (st == NULL && name != NULL) st = fl_os_fence_wake(name, fresh, &wake);
  FlFence *f = NULL;
  char *name_copy = NULL;
  if (st == NULL) {
    f = calloc(1, sizeof *f);
    name_copy = name != NULL ? dup_string(name) : NULL;
    if (f == NULL || (name != NULL && name_copy == NULL))
      st = fl_status(FL_ERROR_RESOURCE_EXHAUSTED, "out of memory");
  }
  if (st != NULL) {
    free(f);
    free(name_copy);
    fl_htl_wake_close(wake);
    fl_os_map_close(m, unlink_name);
    return st;
  }
  f->map = *m;
  f->wake = wake;
  f->name = name_copy;
  f->owns_name = owns_name;
  fl_spin_init(&f->spin, DEFAULT_FENCE_SPIN_NS);
  *out = f;
  return NULL;
}

FlStatus *fl_fence_create(const char *shm_name, FlFence **out) {
  if (out == NULL) return fl_status(FL_ERROR_INVALID_ARGUMENT, "CreateFence: out is NULL");
  fl_os_map m;
  FlStatus *st = fl_os_map_create(shm_name, FL_HTL_PAGE_SIZE, "fenceline-fence", &m);
  if (st != NULL) return st;
  return fence_from_map(&m, shm_name, shm_name != NULL, 1, out);
}

FlStatus *fl_fence_open(const char *shm_name, FlFence **out) {
  if (out == NULL) return fl_status(FL_ERROR_INVALID_ARGUMENT, "OpenFence: out is NULL");
  if (shm_name == NULL)
    return fl_status(FL_ERROR_INVALID_ARGUMENT, "OpenFence needs the fence's name");
  fl_os_map m;
  FlStatus *st = fl_os_map_open(shm_name, 1, FL_HTL_PAGE_SIZE, &m);
  if (st != NULL) return st;
  return fence_from_map(&m, shm_name, 0, 0, out);
}

FlStatus *fl_fence_open_fd(int fd, FlFence **out) {
  if (out == NULL) return fl_status(FL_ERROR_INVALID_ARGUMENT, "OpenFenceFd: out is NULL");
  if (fd < 0) return fl_status(FL_ERROR_INVALID_ARGUMENT, "OpenFenceFd: invalid fd %d", fd);
  fl_os_map m;
  FlStatus *st = fl_os_map_open_fd(fd, FL_HTL_PAGE_SIZE, &m);
  if (st != NULL) return st;
  return fence_from_map(&m, NULL, 0, 0, out);
}

uint64_t fl_fence_value(const FlFence *f) { return f == NULL ? 0 : fl_htl_value(f->map.data); }

FlFenceStatus fl_fence_status(const FlFence *f) {
  return f == NULL ? FL_FENCE_LIVE : (FlFenceStatus)fl_htl_status(f->map.data);
}

int fl_fence_fd(const FlFence *f) { return f == NULL ? -1 : fl_os_map_fd(&f->map); }
const char *fl_fence_name(const FlFence *f) { return f == NULL ? NULL : f->name; }

FlStatus *fl_fence_signal(FlFence *f, uint64_t value) {
  if (f == NULL) return fl_status(FL_ERROR_INVALID_ARGUMENT, "SignalFence: fence is NULL");
  if (fl_htl_signal(f->map.data, f->wake, value) != 0)
    return fl_status(FL_ERROR_CONFLICT,
                     "signal value %llu is not above the fence's current value %llu",
                     (unsigned long long)value, (unsigned long long)fl_htl_value(f->map.data));
  return NULL;
}

FlStatus *fl_fence_wait(FlFence *f, uint64_t value, int64_t timeout_ns) {
  if (f == NULL) return fl_status(FL_ERROR_INVALID_ARGUMENT, "WaitFence: fence is NULL");
  int64_t t0 = fl_htl_now_ns();
  int64_t spin = fl_spin_budget(&f->spin);
  fl_htl_wait_result r =
      fl_htl_wait(f->map.data, f->wake, value, timeout_ns < 0 ? -1 : timeout_ns, spin);
  /* A timeout says how long nothing came, not how fast it comes (the rule's averages). */
  if (r != FL_HTL_TIMED_OUT) fl_spin_observe(&f->spin, fl_htl_now_ns() - t0, spin);
  switch (r) {
    case FL_HTL_REACHED: return NULL;
    case FL_HTL_TIMED_OUT:
      return fl_status(FL_ERROR_TIMED_OUT, "fence did not reach %llu within %g ms (it is at %llu)",
                       (unsigned long long)value, (double)timeout_ns / 1e6,
                       (unsigned long long)fl_htl_value(f->map.data));
    case FL_HTL_ABANDONED:
      return fl_status(FL_ERROR_DEVICE_LOST, "the fence was abandoned by its signaller");
    case FL_HTL_ERRORED: break;
  }
  return fl_status(FL_ERROR_DEVICE_LOST, "the fence reports an error at value %llu",
                   (unsigned long long)fl_htl_value(f->map.data));
}

FlStatus *fl_fence_set_status(FlFence *f, FlFenceStatus status) {
  if (f == NULL) return fl_status(FL_ERROR_INVALID_ARGUMENT, "SetFenceStatus: fence is NULL");
  if ((unsigned)status > FL_FENCE_ERROR)
    return fl_status(FL_ERROR_INVALID_ARGUMENT,
                     "fence status is 0 (live), 1 (abandoned) or 2 (error), got %u",
                     (unsigned)status);
  fl_htl_set_status(f->map.data, f->wake, (uint32_t)status);
  return NULL;
}

void fl_fence_set_max_spin(FlFence *f, int64_t ns) {
  if (f != NULL) fl_spin_set_max(&f->spin, ns);
}

void fl_fence_release(FlFence *f) {
  if (f == NULL) return;
  fl_htl_wake_close(f->wake);
  fl_os_map_close(&f->map, f->owns_name ? f->name : NULL);
  free(f->name);
  free(f);
}
