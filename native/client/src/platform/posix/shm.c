/* POSIX shared memory for frames and fences: memfds and shm_open names, mapped with mmap. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "internal.h"

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

static FlStatus *object_size(int fd, uint64_t *size) {
  struct stat st;
  if (fstat(fd, &st) != 0) return fl_status_errno("fstat", errno);
  if (!S_ISREG(st.st_mode))
    return fl_status(FL_ERROR_INVALID_ARGUMENT, "the handle is not a shared-memory object");
  *size = (uint64_t)st.st_size;
  return NULL;
}

/* Maps `size` bytes of fd into *out; fd is owned by *out on success and closed on failure. */
static FlStatus *map_fd(int fd, int writable, uint64_t size, fl_os_map *out) {
  void *data = mmap(NULL, (size_t)size, PROT_READ | (writable ? PROT_WRITE : 0), MAP_SHARED, fd, 0);
  if (data == MAP_FAILED) {
    int err = errno;
    close(fd);
    return fl_status_errno("mmap", err);
  }
  out->handle = fd;
  out->data = data;
  out->size = size;
  return NULL;
}

FlStatus *fl_os_map_create(const char *name, uint64_t size, const char *label, fl_os_map *out) {
  int fd;
  if (name == NULL) {
    /* Sealing allowed: the service seals imports against shrinking (a shrink under its mapping
     * would fault it); otherwise it checks the size before every run. */
    fd = memfd_create(label, MFD_CLOEXEC | MFD_ALLOW_SEALING);
    if (fd < 0) return fl_status_errno("memfd_create", errno);
  } else {
    FlStatus *st = fl_check_shm_name(name);
    if (st != NULL) return st;
    fd = shm_open(name, O_RDWR | O_CLOEXEC | O_CREAT | O_EXCL, 0600);
    if (fd < 0) {
      char what[300];
      snprintf(what, sizeof what, "shm_open %s", name);
      return fl_status_errno(what, errno);
    }
  }
  FlStatus *st = NULL;
  if (ftruncate(fd, (off_t)size) != 0) {
    st = fl_status_errno("ftruncate", errno);
    close(fd);
  } else {
    st = map_fd(fd, 1, size, out);
  }
  if (st != NULL && name != NULL) shm_unlink(name);
  return st;
}

static FlStatus *map_existing(int fd, int writable, uint64_t map_bytes, const char *what,
                              fl_os_map *out) {
  uint64_t size = 0;
  FlStatus *st = object_size(fd, &size);
  if (st == NULL && size < map_bytes)
    st = fl_status(FL_ERROR_INVALID_ARGUMENT,
                   "not a host_timeline fence: the object has %llu bytes, a fence page %llu",
                   (unsigned long long)size, (unsigned long long)map_bytes);
  else if (st == NULL && size == 0)
    st = fl_status(FL_ERROR_INVALID_ARGUMENT, "shared-memory object %s is empty", what);
  if (st != NULL) {
    close(fd);
    return st;
  }
  return map_fd(fd, writable, map_bytes != 0 ? map_bytes : size, out);
}

FlStatus *fl_os_map_open(const char *name, int writable, uint64_t map_bytes, fl_os_map *out) {
  FlStatus *st = fl_check_shm_name(name);
  if (st != NULL) return st;
  int fd = shm_open(name, (writable ? O_RDWR : O_RDONLY) | O_CLOEXEC, 0600);
  if (fd < 0) {
    char what[300];
    snprintf(what, sizeof what, "shm_open %s", name);
    return fl_status_errno(what, errno);
  }
  return map_existing(fd, writable, map_bytes, name, out);
}

FlStatus *fl_os_map_open_fd(int fd, uint64_t map_bytes, fl_os_map *out) {
  int own = fcntl(fd, F_DUPFD_CLOEXEC, 0);
  if (own < 0) return fl_status_errno("dup", errno);
  return map_existing(own, 1, map_bytes, "(fd)", out);
}

void fl_os_map_close(fl_os_map *m, const char *unlink_name) {
  munmap(m->data, (size_t)m->size);
  close((int)m->handle);
  if (unlink_name != NULL) shm_unlink(unlink_name);
}

int fl_os_map_fd(const fl_os_map *m) { return (int)m->handle; }

FlStatus *fl_os_fence_wake(const char *name, int create, fl_htl_wake **out) {
  (void)name;
  (void)create;
  *out = NULL; /* the futex lives in the page */
  return NULL;
}
