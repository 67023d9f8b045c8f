#include "host_timeline.h"

#include <errno.h>
#include <limits.h>
#include <linux/futex.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

/* GCC/Clang __atomic builtins work on plain fields from both C and C++, so the page struct
 * stays a plain, documented layout. */
#define LOAD_ACQ(p) __atomic_load_n((p), __ATOMIC_ACQUIRE)

void fl_cpu_relax(void) {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  __asm__ __volatile__("yield");
#endif
}

int64_t fl_htl_now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/* Shared (not private) futex ops: waiters and wakers live in different processes. */
static void futex_wake_all(uint32_t *word) {
  syscall(SYS_futex, word, FUTEX_WAKE, INT_MAX, NULL, NULL, 0);
}

static void futex_wait(uint32_t *word, uint32_t expected, int64_t timeout_ns) {
  if (timeout_ns < 0) {
    syscall(SYS_futex, word, FUTEX_WAIT, expected, NULL, NULL, 0);
    return;
  }
  struct timespec rel;
  rel.tv_sec = (time_t)(timeout_ns / 1000000000);
  rel.tv_nsec = (long)(timeout_ns % 1000000000);
  syscall(SYS_futex, word, FUTEX_WAIT, expected, &rel, NULL, 0);
}

void fl_htl_init(void *page, uint64_t initial_value) {
  fl_htl_page *p = (fl_htl_page *)page;
  memset(page, 0, FL_HTL_PAGE_SIZE);
  p->version = FL_HTL_VERSION;
  p->flags = 0;
  __atomic_store_n(&p->value, initial_value, __ATOMIC_RELAXED);
  /* The magic goes last, with release order: a reader that sees it sees the rest. */
  __atomic_store_n(&p->magic, FL_HTL_MAGIC, __ATOMIC_RELEASE);
}

int fl_htl_validate(const void *page, size_t size) {
  const fl_htl_page *p = (const fl_htl_page *)page;
  if (size < FL_HTL_PAGE_SIZE) return -1;
  if (LOAD_ACQ(&p->magic) != FL_HTL_MAGIC) return -1;
  if (p->version != FL_HTL_VERSION) return -1;
  return 0;
}

uint64_t fl_htl_value(const void *page) {
  return LOAD_ACQ(&((const fl_htl_page *)page)->value);
}

uint32_t fl_htl_status(const void *page) {
  return LOAD_ACQ(&((const fl_htl_page *)page)->status);
}

int fl_htl_signal(void *page, uint64_t v) {
  fl_htl_page *p = (fl_htl_page *)page;
  uint64_t cur = LOAD_ACQ(&p->value);
  do {
    if (v <= cur) return -1;
  } while (!__atomic_compare_exchange_n(&p->value, &cur, v, 1, __ATOMIC_RELEASE,
                                        __ATOMIC_ACQUIRE));
  __atomic_fetch_add(&p->seq, 1u, __ATOMIC_RELEASE);
  futex_wake_all(&p->seq);
  return 0;
}

void fl_htl_set_status(void *page, uint32_t status) {
  fl_htl_page *p = (fl_htl_page *)page;
  __atomic_store_n(&p->status, status, __ATOMIC_RELEASE);
  __atomic_fetch_add(&p->seq, 1u, __ATOMIC_RELEASE);
  futex_wake_all(&p->seq);
}

static int check(fl_htl_page *p, uint64_t target, fl_htl_wait_result *out) {
  uint64_t v = LOAD_ACQ(&p->value);
  uint32_t st = LOAD_ACQ(&p->status);
  if (v >= target) {
    *out = st == FL_HTL_STATUS_ERROR ? FL_HTL_ERRORED : FL_HTL_REACHED;
    return 1;
  }
  if (st == FL_HTL_STATUS_ABANDONED) {
    *out = FL_HTL_ABANDONED;
    return 1;
  }
  return 0;
}

fl_htl_wait_result fl_htl_wait(void *page, uint64_t target, int64_t timeout_ns, int64_t spin_ns) {
  fl_htl_page *p = (fl_htl_page *)page;
  fl_htl_wait_result r;
  if (check(p, target, &r)) return r;
  int64_t start = fl_htl_now_ns();
  int64_t deadline = timeout_ns < 0 ? -1 : start + timeout_ns;
  if (spin_ns > 0) {
    int64_t spin_end = start + spin_ns;
    if (deadline >= 0 && spin_end > deadline) spin_end = deadline;
    for (unsigned i = 0;; ++i) {
      if (check(p, target, &r)) return r;
      fl_cpu_relax();
      if ((i & 63u) == 63u && fl_htl_now_ns() >= spin_end) break;
    }
  }
  for (;;) {
    /* Read seq before the value: a signal after this read changes seq, so FUTEX_WAIT returns
     * at once instead of sleeping through it. */
    uint32_t s = LOAD_ACQ(&p->seq);
    if (check(p, target, &r)) return r;
    int64_t remaining = -1;
    if (deadline >= 0) {
      remaining = deadline - fl_htl_now_ns();
      if (remaining <= 0) return FL_HTL_TIMED_OUT;
    }
    futex_wait(&p->seq, s, remaining);
  }
}
