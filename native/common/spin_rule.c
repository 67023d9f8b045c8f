#include "spin_rule.h"

#include <string.h>

#include "platform/atomic.h"

#define NONE UINT64_MAX

static uint64_t bits(double v) {
  uint64_t b;
  memcpy(&b, &v, sizeof b);
  return b;
}

static double value(uint64_t b) {
  double v;
  memcpy(&v, &b, sizeof v);
  return v;
}

double fl_spin_ema(double avg, double sample) {
  if (avg < 0) return sample;
  double capped = sample < FL_SPIN_OUTLIER * avg ? sample : FL_SPIN_OUTLIER * avg;
  return avg + (capped - avg) * 0.125;
}

int fl_spin_exploring(int64_t now_ns) {
  return (now_ns >> FL_SPIN_WINDOW_SHIFT) % FL_SPIN_WINDOWS_PER_PERIOD == 0;
}

/* The moving average after one more wait (spin_rule.h). */
static uint64_t ema(uint64_t avg_bits, double sample) {
  return bits(fl_spin_ema(avg_bits == NONE ? -1.0 : value(avg_bits), sample));
}

void fl_spin_rule_init(fl_spin_rule *s, int64_t max_spin_ns) {
  s->max_spin_ns = (uint64_t)(max_spin_ns < 0 ? 0 : max_spin_ns);
  s->spin_avg = NONE;
  s->block_avg = NONE;
  s->spinning = 1;
  s->exploring = 0;
}

void fl_spin_rule_set_max(fl_spin_rule *s, int64_t max_spin_ns) {
  fl_store_u64(&s->max_spin_ns, (uint64_t)(max_spin_ns < 0 ? 0 : max_spin_ns));
}

int64_t fl_spin_rule_max(const fl_spin_rule *s) {
  return (int64_t)fl_load_u64(&s->max_spin_ns);
}

static void decide(fl_spin_rule *s) {
  uint64_t sa = fl_load_u64(&s->spin_avg), ba = fl_load_u64(&s->block_avg);
  uint32_t spinning = fl_load_u32(&s->spinning);
  if (sa != NONE && value(sa) > (double)fl_spin_rule_max(s))
    spinning = 0; /* the event comes later than any spin: sleep at once */
  else if (sa != NONE && ba != NONE)
    spinning = value(sa) < value(ba) * (spinning ? 1.1 : 0.9);
  fl_store_u32(&s->spinning, spinning);
}

/* Whether the next wait falls in an exploration window; decides again when one ends. */
static int window(fl_spin_rule *s, int64_t now_ns) {
  int explore = fl_spin_exploring(now_ns);
  if (fl_load_u32(&s->exploring) && !explore) decide(s);
  fl_store_u32(&s->exploring, (uint32_t)explore);
  return explore;
}

int64_t fl_spin_rule_budget(fl_spin_rule *s, int64_t now_ns) {
  int64_t max = fl_spin_rule_max(s);
  if (max == 0) return 0;
  int explore = window(s, now_ns); /* first: the end of a window may change the choice */
  if ((int)(fl_load_u32(&s->spinning) != 0) == explore) return 0;
  uint64_t sa = fl_load_u64(&s->spin_avg);
  if (sa == NONE) return max;
  /* Generous against jitter: a miss costs a full wakeup, far more than a few extra
   * microseconds of spin on a hit. */
  double b = 4 * value(sa) + FL_SPIN_SLACK_NS;
  return b < (double)max ? (int64_t)b : max;
}

void fl_spin_rule_observe(fl_spin_rule *s, int64_t waited_ns, int64_t budget_ns) {
  uint64_t *avg = budget_ns ? &s->spin_avg : &s->block_avg;
  fl_store_u64(avg, ema(fl_load_u64(avg), (double)waited_ns));
  if (!fl_load_u32(&s->exploring)) decide(s);
}

int fl_spin_rule_spinning(const fl_spin_rule *s) {
  return fl_load_u32(&s->spinning) && fl_spin_rule_max(s) > 0;
}

double fl_spin_rule_average(const fl_spin_rule *s) {
  uint64_t a = fl_load_u64(fl_load_u32(&s->spinning) ? &s->spin_avg : &s->block_avg);
  return a == NONE ? 0.0 : value(a);
}

