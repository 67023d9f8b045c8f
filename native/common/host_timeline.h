/* Host timeline fence: one 4096-byte shared page that any process can signal and wait on.
 *
 * The layout is the wire format (docs/fences.md); it only grows by appending fields.
 *
 *   offset  0  u32 magic    0x46544C46
 *   offset  4  u16 version  1
 *   offset  6  u16 flags    0
 *   offset  8  u64 value    atomic, never decreases
 *   offset 16  u32 seq      futex word, incremented by every signal and status change
 *   offset 20  u32 status   0 live, 1 abandoned, 2 error
 *
 * Plain C (C11 or C++17) so the service's importer and the C client share one implementation.
 * Every function is safe to call from any thread or process that maps the page.
 */
#ifndef FENCELINE_HOST_TIMELINE_H
#define FENCELINE_HOST_TIMELINE_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define FL_HTL_MAGIC 0x46544C46u
#define FL_HTL_VERSION 1u
#define FL_HTL_PAGE_SIZE 4096u

#define FL_HTL_STATUS_LIVE 0u
#define FL_HTL_STATUS_ABANDONED 1u
#define FL_HTL_STATUS_ERROR 2u

typedef struct fl_htl_page {
  uint32_t magic;
  uint16_t version;
  uint16_t flags;
  uint64_t value;
  uint32_t seq;
  uint32_t status;
} fl_htl_page;

/* Results of fl_htl_wait. */
typedef enum fl_htl_wait_result {
  FL_HTL_REACHED = 0,   /* value >= target */
  FL_HTL_TIMED_OUT = 1, /* the deadline passed first */
  FL_HTL_ABANDONED = 2, /* status is abandoned: the signaller is gone */
  FL_HTL_ERRORED = 3    /* status is error: the signaller reported a failed value */
} fl_htl_wait_result;

/* Writes a fresh header (value 0, status live). Only the creator of a page calls this. */
void fl_htl_init(void *page, uint64_t initial_value);

/* 0 when `size` bytes at `page` hold a valid version-1 fence, else -1. */
int fl_htl_validate(const void *page, size_t size);

uint64_t fl_htl_value(const void *page);
uint32_t fl_htl_status(const void *page);

/* Sets value to v if v is above the current value, then wakes every waiter.
 * Returns 0, or -1 (nothing changed) when v is not above the current value. */
int fl_htl_signal(void *page, uint64_t v);

/* Sets the status word (live, abandoned, error) and wakes every waiter. */
void fl_htl_set_status(void *page, uint32_t status);

/* Waits until value >= target. Spins for up to spin_ns first (with a CPU pause), then sleeps on
 * the futex. timeout_ns < 0 waits forever. A status other than live ends the wait early unless
 * the target is already reached. */
fl_htl_wait_result fl_htl_wait(void *page, uint64_t target, int64_t timeout_ns, int64_t spin_ns);

/* Monotonic clock in nanoseconds, the clock that deadlines above are measured on. */
int64_t fl_htl_now_ns(void);

/* One CPU pause instruction, for spin loops elsewhere. */
void fl_cpu_relax(void);

#ifdef __cplusplus
}
#endif

#endif
