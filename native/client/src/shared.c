/* What a renderer creates and maps itself: frame buffers in shared memory and host timeline
 * fences. The fence page and its operations are native/common/host_timeline.c, the same code the
 * service's importer runs. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "host_timeline.h"
#include "internal.h"

struct FlFrame {
  int fd;
  void *data;
  uint64_t size;
  char *name;    /* NULL for a memfd */
  int owns_name; /* CreateFrame made it: ReleaseFrame unlinks it */
};

struct FlFence {
  int fd;
  void *page;
  char *name;
  int owns_name;
  fl_spin spin;
};

#define DEFAULT_FENCE_SPIN_NS 100000

FlStatus *fl_check_shm_name(const char *name) {
  if (name == NULL) return fl_status(FL_ERROR_INVALID_ARGUMENT, "shared-memory name is NULL");
  size_t n = strlen(name);
  if (n < 2 || n > 251 || name[0] != '/')
    return fl_status(FL_ERROR_INVALID_ARGUMENT,
                     "shared-memory names are '/' followed by 1 to 250 characters, got \"%.64s\"",
                     name);
  for (size_t i = 1; i < n; ++i) {
    char c = name[i];
    int ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
             c == '.' || c == '_' || c == '-';
    if (!ok)
      return fl_status(FL_ERROR_INVALID_ARGUMENT,
                       "shared-memory names may hold only letters, digits, '.', '_' and '-' "
                       "after the leading '/', got \"%.64s\"",
                       name);
  }
  if (strcmp(name, "/.") == 0 || strcmp(name, "/..") == 0)
    return fl_status(FL_ERROR_INVALID_ARGUMENT, "'.' and '..' are not shared-memory names");
  return NULL;
}

static char *dup_string(const char *s) {
  size_t n = strlen(s) + 1;
  char *d = malloc(n);
  if (d != NULL) memcpy(d, s, n);
  return d;
}

/* Opens (creating when `create`) a shared-memory fd of `size` bytes: a memfd when name is NULL. */
static FlStatus *open_object(const char *name, int create, int writable, uint64_t size,
                             const char *memfd_label, int *out_fd) {
  int fd;
  if (name == NULL) {
    /* Sealing allowed: the service seals imports against shrinking (a shrink under its mapping
     * would fault it); otherwise it checks the size before every run. */
    fd = memfd_create(memfd_label, MFD_CLOEXEC | MFD_ALLOW_SEALING);
    if (fd < 0) return fl_status_errno("memfd_create", errno);
  } else {
    FlStatus *st = fl_check_shm_name(name);
    if (st != NULL) return st;
    int flags = (writable ? O_RDWR : O_RDONLY) | O_CLOEXEC | (create ? O_CREAT | O_EXCL : 0);
    fd = shm_open(name, flags, 0600);
    if (fd < 0) {
      char what[300];
      snprintf(what, sizeof what, "shm_open %s", name);
      return fl_status_errno(what, errno);
    }
  }
  if (create && ftruncate(fd, (off_t)size) != 0) {
    int err = errno;
    close(fd);
    if (name != NULL) shm_unlink(name);
    return fl_status_errno("ftruncate", err);
  }
  *out_fd = fd;
  return NULL;
}

static FlStatus *object_size(int fd, uint64_t *size) {
  struct stat st;
  if (fstat(fd, &st) != 0) return fl_status_errno("fstat", errno);
  if (!S_ISREG(st.st_mode))
    return fl_status(FL_ERROR_INVALID_ARGUMENT, "the handle is not a shared-memory object");
  *size = (uint64_t)st.st_size;
  return NULL;
}

/* ---- frames ------------------------------------------------------------------------------- */

static FlStatus *frame_from_fd(int fd, const char *name, int owns_name, int writable,
                               uint64_t size, FlFrame **out) {
  FlFrame *f = calloc(1, sizeof *f);
  char *name_copy = name != NULL ? dup_string(name) : NULL;
  if (f == NULL || (name != NULL && name_copy == NULL)) {
    free(f);
    free(name_copy);
    return fl_status(FL_ERROR_RESOURCE_EXHAUSTED, "out of memory");
  }
  void *data = mmap(NULL, (size_t)size, PROT_READ | (writable ? PROT_WRITE : 0), MAP_SHARED, fd, 0);
  if (data == MAP_FAILED) {
    int err = errno;
    free(f);
    free(name_copy);
    return fl_status_errno("mmap", err);
  }
  f->fd = fd;
  f->data = data;
  f->size = size;
  f->name = name_copy;
  f->owns_name = owns_name;
  *out = f;
  return NULL;
}

FlStatus *fl_frame_create(const char *shm_name, uint64_t size, FlFrame **out) {
  if (out == NULL) return fl_status(FL_ERROR_INVALID_ARGUMENT, "CreateFrame: out is NULL");
  if (size == 0 || size > (uint64_t)SIZE_MAX / 2)
    return fl_status(FL_ERROR_INVALID_ARGUMENT, "CreateFrame: size_bytes must be positive");
  int fd;
  FlStatus *st = open_object(shm_name, 1, 1, size, "fenceline-frame", &fd);
  if (st != NULL) return st;
  st = frame_from_fd(fd, shm_name, shm_name != NULL, 1, size, out);
  if (st != NULL) {
    close(fd);
    if (shm_name != NULL) shm_unlink(shm_name);
  }
  return st;
}

FlStatus *fl_frame_open(const char *shm_name, FlAccess access, FlFrame **out) {
  if (out == NULL) return fl_status(FL_ERROR_INVALID_ARGUMENT, "OpenFrame: out is NULL");
  if (shm_name == NULL)
    return fl_status(FL_ERROR_INVALID_ARGUMENT, "OpenFrame needs the object's name");
  int writable = access == FL_ACCESS_READ_WRITE;
  int fd;
  FlStatus *st = open_object(shm_name, 0, writable, 0, NULL, &fd);
  if (st != NULL) return st;
  uint64_t size = 0;
  st = object_size(fd, &size);
  if (st == NULL && size == 0)
    st = fl_status(FL_ERROR_INVALID_ARGUMENT, "shared-memory object %s is empty", shm_name);
  if (st == NULL) st = frame_from_fd(fd, shm_name, 0, writable, size, out);
  if (st != NULL) close(fd);
  return st;
}

void *fl_frame_data(const FlFrame *f) { return f == NULL ? NULL : f->data; }
uint64_t fl_frame_size(const FlFrame *f) { return f == NULL ? 0 : f->size; }
int fl_frame_fd(const FlFrame *f) { return f == NULL ? -1 : f->fd; }
const char *fl_frame_name(const FlFrame *f) { return f == NULL ? NULL : f->name; }

void fl_frame_release(FlFrame *f) {
  if (f == NULL) return;
  munmap(f->data, (size_t)f->size);
  close(f->fd);
  if (f->owns_name) shm_unlink(f->name);
  free(f->name);
  free(f);
}

/* ---- fences ------------------------------------------------------------------------------- */

/* Maps the fence page of fd (owned from here on, also on failure); validates it unless `fresh`,
 * in which case it writes a fresh header. */
static FlStatus *fence_from_fd(int fd, const char *name, int owns_name, int fresh,
                               FlFence **out) {
  FlStatus *st = NULL;
  if (!fresh) {
    uint64_t size = 0;
    st = object_size(fd, &size);
    if (st == NULL && size < FL_HTL_PAGE_SIZE)
      st = fl_status(FL_ERROR_INVALID_ARGUMENT,
                     "not a host_timeline fence: the object has %llu bytes, a fence page 4096",
                     (unsigned long long)size);
    if (st != NULL) {
      close(fd);
      return st;
    }
  }
  FlFence *f = calloc(1, sizeof *f);
  char *name_copy = name != NULL ? dup_string(name) : NULL;
  if (f == NULL || (name != NULL && name_copy == NULL)) {
    free(f);
    free(name_copy);
    close(fd);
    return fl_status(FL_ERROR_RESOURCE_EXHAUSTED, "out of memory");
  }
  void *page = mmap(NULL, FL_HTL_PAGE_SIZE, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (page == MAP_FAILED) {
    int err = errno;
    free(f);
    free(name_copy);
    close(fd);
    return fl_status_errno("mmap", err);
  }
  if (fresh) {
    fl_htl_init(page, 0);
  } else if (fl_htl_validate(page, FL_HTL_PAGE_SIZE) != 0) {
    munmap(page, FL_HTL_PAGE_SIZE);
    free(f);
    free(name_copy);
    close(fd);
    return fl_status(FL_ERROR_INVALID_ARGUMENT,
                     "not a host_timeline fence: expected a 4096-byte page with magic 0x46544C46 "
                     "and version 1 (docs/fences.md)");
  }
  f->fd = fd;
  f->page = page;
  f->name = name_copy;
  f->owns_name = owns_name;
  fl_spin_init(&f->spin, DEFAULT_FENCE_SPIN_NS);
  *out = f;
  return NULL;
}

FlStatus *fl_fence_create(const char *shm_name, FlFence **out) {
  if (out == NULL) return fl_status(FL_ERROR_INVALID_ARGUMENT, "CreateFence: out is NULL");
  int fd;
  FlStatus *st = open_object(shm_name, 1, 1, FL_HTL_PAGE_SIZE, "fenceline-fence", &fd);
  if (st != NULL) return st;
  st = fence_from_fd(fd, shm_name, shm_name != NULL, 1, out);
  if (st != NULL && shm_name != NULL) shm_unlink(shm_name);
  return st;
}

FlStatus *fl_fence_open(const char *shm_name, FlFence **out) {
  if (out == NULL) return fl_status(FL_ERROR_INVALID_ARGUMENT, "OpenFence: out is NULL");
  if (shm_name == NULL)
    return fl_status(FL_ERROR_INVALID_ARGUMENT, "OpenFence needs the fence's name");
  int fd;
  FlStatus *st = open_object(shm_name, 0, 1, 0, NULL, &fd);
  if (st != NULL) return st;
  return fence_from_fd(fd, shm_name, 0, 0, out);
}

FlStatus *fl_fence_open_fd(int fd, FlFence **out) {
  if (out == NULL) return fl_status(FL_ERROR_INVALID_ARGUMENT, "OpenFenceFd: out is NULL");
  if (fd < 0) return fl_status(FL_ERROR_INVALID_ARGUMENT, "OpenFenceFd: invalid fd %d", fd);
  int own = fcntl(fd, F_DUPFD_CLOEXEC, 0);
  if (own < 0) return fl_status_errno("dup", errno);
  return fence_from_fd(own, NULL, 0, 0, out);
}

uint64_t fl_fence_value(const FlFence *f) { return f == NULL ? 0 : fl_htl_value(f->page); }

FlFenceStatus fl_fence_status(const FlFence *f) {
  return f == NULL ? FL_FENCE_LIVE : (FlFenceStatus)fl_htl_status(f->page);
}

int fl_fence_fd(const FlFence *f) { return f == NULL ? -1 : f->fd; }
const char *fl_fence_name(const FlFence *f) { return f == NULL ? NULL : f->name; }

FlStatus *fl_fence_signal(FlFence *f, uint64_t value) {
  if (f == NULL) return fl_status(FL_ERROR_INVALID_ARGUMENT, "SignalFence: fence is NULL");
  if (fl_htl_signal(f->page, NULL, value) != 0)
    return fl_status(FL_ERROR_CONFLICT,
                     "signal value %llu is not above the fence's current value %llu",
                     (unsigned long long)value, (unsigned long long)fl_htl_value(f->page));
  return NULL;
}

FlStatus *fl_fence_wait(FlFence *f, uint64_t value, int64_t timeout_ns) {
  if (f == NULL) return fl_status(FL_ERROR_INVALID_ARGUMENT, "WaitFence: fence is NULL");
  int64_t t0 = fl_htl_now_ns();
  fl_htl_wait_result r = fl_htl_wait(f->page, NULL, value, timeout_ns < 0 ? -1 : timeout_ns,
                                     fl_spin_budget(&f->spin));
  fl_spin_observe(&f->spin, fl_htl_now_ns() - t0);
  switch (r) {
    case FL_HTL_REACHED: return NULL;
    case FL_HTL_TIMED_OUT:
      return fl_status(FL_ERROR_TIMED_OUT, "fence did not reach %llu within %g ms (it is at %llu)",
                       (unsigned long long)value, (double)timeout_ns / 1e6,
                       (unsigned long long)fl_htl_value(f->page));
    case FL_HTL_ABANDONED:
      return fl_status(FL_ERROR_DEVICE_LOST, "the fence was abandoned by its signaller");
    case FL_HTL_ERRORED: break;
  }
  return fl_status(FL_ERROR_DEVICE_LOST, "the fence reports an error at value %llu",
                   (unsigned long long)fl_htl_value(f->page));
}

FlStatus *fl_fence_set_status(FlFence *f, FlFenceStatus status) {
  if (f == NULL) return fl_status(FL_ERROR_INVALID_ARGUMENT, "SetFenceStatus: fence is NULL");
  if ((unsigned)status > FL_FENCE_ERROR)
    return fl_status(FL_ERROR_INVALID_ARGUMENT,
                     "fence status is 0 (live), 1 (abandoned) or 2 (error), got %u",
                     (unsigned)status);
  fl_htl_set_status(f->page, NULL, (uint32_t)status);
  return NULL;
}

void fl_fence_set_max_spin(FlFence *f, int64_t ns) {
  if (f != NULL) atomic_store_explicit(&f->spin.max_ns, ns < 0 ? 0 : ns, memory_order_relaxed);
}

void fl_fence_release(FlFence *f) {
  if (f == NULL) return;
  munmap(f->page, FL_HTL_PAGE_SIZE);
  close(f->fd);
  if (f->owns_name) shm_unlink(f->name);
  free(f->name);
  free(f);
}
