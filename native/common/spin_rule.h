/* spin_rule.h: the one adaptive spin rule of fenceline (docs/streaming.md, "Waiting"), in C for
 * every waiter: the run engine's fence waits, the service's native receive and the Python
 * client's replies (importer/engine/adaptive_spin.h ReceiveSpin), the C client's reply and fence
 * waits (client/src/spin.c), and Python's waiters through fenceline.waiting.AdaptiveSpin, which
 * calls it (tests/unit/test_receive_spin.py).
 *
 * The rule: keep two moving averages (weight 1/8, a wait counting for at most OUTLIER times the
 * average) of the waits that spun first and of those that blocked at once, and use the faster
 * way (10% hysteresis); never spin while spun waits average above the budget. During one window
 * of 2^WINDOW_SHIFT ns in every WINDOWS_PER_PERIOD of CLOCK_MONOTONIC, use the other way, so that
 * both averages stay current and two processes waiting on each other explore together. A spin
 * lasts min(max_spin_ns, 4 * spin average + SLACK).
 *
 * Every field is read and written atomically (platform/atomic.h), so several threads may share a
 * rule (a C client's fence): a racing update may be lost, never torn. Plain C11. */
#ifndef FENCELINE_SPIN_RULE_H
#define FENCELINE_SPIN_RULE_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define FL_SPIN_WINDOW_SHIFT 21       /* exploration windows of 2.1 ms ... */
#define FL_SPIN_WINDOWS_PER_PERIOD 16 /* ... one in every 16 (every 34 ms, 6% of the time) */
#define FL_SPIN_SLACK_NS 10000
#define FL_SPIN_OUTLIER 4 /* a wait counts for at most this many times its average */

typedef struct fl_spin_rule {
  uint64_t max_spin_ns; /* int64 bits */
  uint64_t spin_avg;    /* double bits; all ones: no wait yet */
  uint64_t block_avg;
  uint32_t spinning; /* whether spinning is preferred now */
  uint32_t exploring;
} fl_spin_rule;

void fl_spin_rule_init(fl_spin_rule *s, int64_t max_spin_ns);
void fl_spin_rule_set_max(fl_spin_rule *s, int64_t max_spin_ns);
int64_t fl_spin_rule_max(const fl_spin_rule *s);
/* How long the next wait should spin before it blocks; now_ns is CLOCK_MONOTONIC. */
int64_t fl_spin_rule_budget(fl_spin_rule *s, int64_t now_ns);
/* How long the last wait took, and the budget it was given (0: it blocked at once). */
void fl_spin_rule_observe(fl_spin_rule *s, int64_t waited_ns, int64_t budget_ns);
int fl_spin_rule_spinning(const fl_spin_rule *s);
/* The moving average of the waits of the way now preferred (0 before any). */
double fl_spin_rule_average(const fl_spin_rule *s);

/* The rule's parts, for waiters with a way of their own (the Python client's nap,
 * importer/transport/posix/client_runs.cpp): the moving average after one more wait (avg < 0: none yet), and
 * whether now_ns (CLOCK_MONOTONIC) falls in an exploration window. */
double fl_spin_ema(double avg, double sample);
int fl_spin_exploring(int64_t now_ns);

#ifdef __cplusplus
}
#endif

#endif
