/* Linux: sleepers wait on a shared futex on the page's `seq` word; no wake object is needed.
 * Every sleeper counts itself in `waiters` while it sleeps; on a page that says so
 * (FL_HTL_FLAG_COUNTED) a signaller that sees no sleeper skips FUTEX_WAKE, a system call that
 * costs a renderer microseconds per frame when its caches are cold. As on Windows: the sleeper
 * counts itself before the kernel compares `seq`, and the signaller bumps `seq` before it reads
 * `waiters`, both with sequentially consistent read-modify-writes, so either the sleeper sees
 * the new `seq` and does not sleep, or the signaller sees the sleeper. */
#include <limits.h>
#include <linux/futex.h>
#include <stddef.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "../atomic.h"
#include "../htl_wake.h"

int64_t fl_htl_now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

int fl_htl_wake_open(const char *name, int create, fl_htl_wake **out) {
  (void)name;
  (void)create;
  *out = NULL;
  return 0;
}

void fl_htl_wake_close(fl_htl_wake *w) { (void)w; }

int fl_htl_wake_adopt(intptr_t handle, fl_htl_wake **out) {
  (void)handle;
  *out = NULL;
  return FL_HTL_E_OS;
}

intptr_t fl_htl_wake_native(const fl_htl_wake *w) {
  (void)w;
  return -1;
}

/* Shared (not private) futex ops: waiters and wakers live in different processes. */
void fl_htl_wake_all(fl_htl_page *p, fl_htl_wake *w) {
  (void)w;
  if ((p->flags & FL_HTL_FLAG_COUNTED) != 0) {
    fl_fence_seq_cst();
    if (fl_load_u32(&p->waiters) == 0) return;
  }
  syscall(SYS_futex, &p->seq, FUTEX_WAKE, INT_MAX, NULL, NULL, 0);
}

void fl_htl_sleep(fl_htl_page *p, fl_htl_wake *w, uint32_t seen_seq, int64_t timeout_ns) {
  (void)w;
  struct timespec rel;
  rel.tv_sec = (time_t)(timeout_ns / 1000000000);
  rel.tv_nsec = (long)(timeout_ns % 1000000000);
  fl_fetch_add_u32(&p->waiters, 1u);
  syscall(SYS_futex, &p->seq, FUTEX_WAIT, seen_seq, timeout_ns < 0 ? NULL : &rel, NULL, 0);
  fl_fetch_add_u32(&p->waiters, (uint32_t)-1);
}
