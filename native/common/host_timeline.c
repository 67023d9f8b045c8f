#include "host_timeline.h"

#include <string.h>

#include "platform/atomic.h"
#include "platform/htl_wake.h"

void fl_cpu_relax(void) { fl_cpu_pause(); }

void fl_cpu_relax_ns(int64_t ns) {
  const int64_t end = fl_htl_now_ns() + ns;
  do {
    fl_cpu_pause();
    fl_cpu_pause();
    fl_cpu_pause();
    fl_cpu_pause();
  } while (fl_htl_now_ns() < end);
}

void fl_htl_init(void *page, uint64_t initial_value) {
  fl_htl_page *p = (fl_htl_page *)page;
  memset(page, 0, FL_HTL_PAGE_SIZE);
  p->version = FL_HTL_VERSION;
  p->flags = FL_HTL_FLAG_COUNTED;
  fl_store_u64(&p->value, initial_value);
  /* The magic goes last, with release order: a reader that sees it sees the rest. */
  fl_store_u32(&p->magic, FL_HTL_MAGIC);
}

int fl_htl_validate(const void *page, size_t size) {
  const fl_htl_page *p = (const fl_htl_page *)page;
  if (size < FL_HTL_PAGE_SIZE) return -1;
  if (fl_load_u32(&p->magic) != FL_HTL_MAGIC) return -1;
  if (p->version != FL_HTL_VERSION) return -1;
  if ((p->flags & ~FL_HTL_FLAG_COUNTED) != 0 || fl_load_u32(&p->status) > FL_HTL_STATUS_ERROR)
    return -1;
  return 0;
}

uint64_t fl_htl_value(const void *page) {
  return fl_load_u64(&((const fl_htl_page *)page)->value);
}

uint32_t fl_htl_status(const void *page) {
  return fl_load_u32(&((const fl_htl_page *)page)->status);
}

int fl_htl_signal(void *page, fl_htl_wake *wake, uint64_t v) {
  fl_htl_page *p = (fl_htl_page *)page;
  uint64_t cur = fl_load_u64(&p->value);
  do {
    if (v <= cur) return -1;
  } while (!fl_cas_u64(&p->value, &cur, v));
  fl_fetch_add_u32(&p->seq, 1u);
  fl_htl_wake_all(p, wake);
  return 0;
}

void fl_htl_set_status(void *page, fl_htl_wake *wake, uint32_t status) {
  fl_htl_page *p = (fl_htl_page *)page;
  fl_store_u32(&p->status, status);
  fl_fetch_add_u32(&p->seq, 1u);
  fl_htl_wake_all(p, wake);
}

static int check(fl_htl_page *p, uint64_t target, fl_htl_wait_result *out) {
  uint64_t v = fl_load_u64(&p->value);
  uint32_t st = fl_load_u32(&p->status);
  if (v >= target) {
    *out = st == FL_HTL_STATUS_ERROR ? FL_HTL_ERRORED : FL_HTL_REACHED;
    return 1;
  }
  /* Abandoned, or a status this version does not define: nobody will make it right. */
  if (st != FL_HTL_STATUS_LIVE && st != FL_HTL_STATUS_ERROR) {
    *out = FL_HTL_ABANDONED;
    return 1;
  }
  return 0;
}

fl_htl_wait_result fl_htl_wait(void *page, fl_htl_wake *wake, uint64_t target,
                               int64_t timeout_ns, int64_t spin_ns) {
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
      fl_cpu_pause();
      if ((i & 63u) == 63u && fl_htl_now_ns() >= spin_end) break;
    }
  }
  for (;;) {
    /* Read seq before the value: a signal after this read changes seq, so the sleep returns at
     * once instead of sleeping through it. */
    uint32_t s = fl_load_u32(&p->seq);
    if (check(p, target, &r)) return r;
    int64_t remaining = -1;
    if (deadline >= 0) {
      remaining = deadline - fl_htl_now_ns();
      if (remaining <= 0) return FL_HTL_TIMED_OUT;
    }
    fl_htl_sleep(p, wake, s, remaining);
  }
}
