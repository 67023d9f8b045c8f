#include "internal.h"

/* A blocking wakeup across CPUs costs tens of microseconds, more than a small model's run, while
 * spinning costs a core: spin for twice the recent average wait, never past max_ns, and not at
 * all once waits run longer than the budget. The same rule as fenceline.waiting.AdaptiveSpin. */

void fl_spin_init(fl_spin *s, int64_t max_ns) {
  s->max_ns = (uint64_t)(max_ns < 0 ? 0 : max_ns);
  s->avg_ns = 0;
}

void fl_spin_set_max(fl_spin *s, int64_t max_ns) {
  fl_store_u64(&s->max_ns, (uint64_t)(max_ns < 0 ? 0 : max_ns));
}

int64_t fl_spin_budget(fl_spin *s) {
  int64_t max = (int64_t)fl_load_u64(&s->max_ns);
  int64_t avg = (int64_t)fl_load_u64(&s->avg_ns);
  if (max == 0 || avg > max) return 0;
  int64_t b = 2 * avg;
  if (b < 2000) b = 2000;
  return b < max ? b : max;
}

void fl_spin_observe(fl_spin *s, int64_t waited_ns) {
  /* Racing observers may lose an update; the average stays a sensible estimate. */
  int64_t avg = (int64_t)fl_load_u64(&s->avg_ns);
  fl_store_u64(&s->avg_ns, (uint64_t)(avg + (waited_ns - avg) / 8));
}
