/* Host timeline fence: one 4096-byte shared page that any process can signal and wait on.
 *
 * The layout is the wire format (docs/fences.md); it only grows by appending fields.
 *
 *   offset  0  u32 magic    0x46544C46
 *   offset  4  u16 version  1
 *   offset  6  u16 flags    0, or FL_HTL_FLAG_COUNTED
 *   offset  8  u64 value    atomic, never decreases
 *   offset 16  u32 seq      futex word, incremented by every signal and status change
 *   offset 20  u32 status   0 live, 1 abandoned, 2 error
 *   offset 24  u32 waiters  sleepers now (on Linux: counted on FL_HTL_FLAG_COUNTED pages)
 *
 * Plain C (C11 or C++17, GCC, Clang or MSVC) so the service's importer and the C client share
 * one implementation. Every function is safe to call from any thread or process that maps the
 * page.
 *
 * Waking sleepers is the one part that differs per OS (platform/<os>/htl_wake.c): Linux sleeps on
 * a futex on `seq`, which needs nothing beside the page; Windows has no cross-process futex
 * (WaitOnAddress only works inside one process), so a page there comes with a named semaphore,
 * its wake object, named after the page's section name plus ".wake" (docs/fences.md).
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

/* flags: every sleeper counts itself in `waiters` while it sleeps, so a signaller that sees
 * none skips the wake (on Linux a FUTEX_WAKE system call per signal; Windows counts always).
 * fl_htl_init sets it; pages without it (made by other implementations) are woken always. */
#define FL_HTL_FLAG_COUNTED 0x1u

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
  uint32_t waiters;
} fl_htl_page;

/* What wakes sleepers in other processes: NULL on Linux (the futex is in the page itself); on
 * Windows the page's named semaphore. Owned by whoever opened it (fl_htl_wake_close). */
typedef struct fl_htl_wake fl_htl_wake;

/* Suffix appended to a fence page's name to name its wake object (Windows). */
#define FL_HTL_WAKE_SUFFIX ".wake"

/* A Windows wake semaphore's maximum count (docs/fences.md): LONG_MAX, so that releasing it
 * once per sleeper never passes the maximum (a release that would fails whole, waking nobody). */
#define FL_HTL_WAKE_MAX_COUNT 0x7fffffffL

/* Opens (create = 0) or creates (create = 1) the wake object of the fence page named `name`
 * (UTF-8). Returns 0 and sets *out (NULL where the OS needs none), or a negative error:
 * FL_HTL_E_NOT_FOUND, FL_HTL_E_EXISTS (create: the name was already taken, maybe squatted),
 * FL_HTL_E_WRONG_TYPE (the name belongs to another kind of object), FL_HTL_E_WAKE_COUNT (open,
 * Windows: a semaphore whose maximum count is not FL_HTL_WAKE_MAX_COUNT), FL_HTL_E_WAKE_UNREADABLE
 * (open, Windows: its maximum count cannot be read), FL_HTL_E_OS. */
int fl_htl_wake_open(const char *name, int create, fl_htl_wake **out);
void fl_htl_wake_close(fl_htl_wake *w); /* NULL is fine */

/* Handles instead of names (Windows; docs/windows.md, "Handles"). With name NULL and create 1,
 * fl_htl_wake_open makes an unnamed wake object, for a fence page that travels as a handle.
 * fl_htl_wake_adopt takes ownership of a wake object's OS handle (a semaphore HANDLE already
 * duplicated into this process), also when it fails, and checks its maximum count as open
 * does; fl_htl_wake_native is the OS handle (-1 where there is none). On Linux there is no wake
 * object: adopt answers FL_HTL_E_OS. */
int fl_htl_wake_adopt(intptr_t handle, fl_htl_wake **out);
intptr_t fl_htl_wake_native(const fl_htl_wake *w);

#define FL_HTL_E_NOT_FOUND (-2)
#define FL_HTL_E_EXISTS (-3)
#define FL_HTL_E_WRONG_TYPE (-4)
#define FL_HTL_E_OS (-5)
#define FL_HTL_E_WAKE_COUNT (-6)
#define FL_HTL_E_WAKE_UNREADABLE (-7)

/* Results of fl_htl_wait. */
typedef enum fl_htl_wait_result {
  FL_HTL_REACHED = 0,   /* value >= target */
  FL_HTL_TIMED_OUT = 1, /* the deadline passed first */
  FL_HTL_ABANDONED = 2, /* status is abandoned: the signaller is gone */
  FL_HTL_ERRORED = 3    /* status is error: the signaller reported a failed value */
} fl_htl_wait_result;

/* Writes a fresh header (value 0, status live). Only the creator of a page calls this. */
void fl_htl_init(void *page, uint64_t initial_value);

/* 0 when `size` bytes at `page` hold a valid version-1 fence (flags 0 or FL_HTL_FLAG_COUNTED,
 * a defined status), else -1. */
int fl_htl_validate(const void *page, size_t size);

uint64_t fl_htl_value(const void *page);
uint32_t fl_htl_status(const void *page);

/* Sets value to v if v is above the current value, then wakes every waiter.
 * Returns 0, or -1 (nothing changed) when v is not above the current value. */
int fl_htl_signal(void *page, fl_htl_wake *wake, uint64_t v);

/* Sets the status word (live, abandoned, error) and wakes every waiter. */
void fl_htl_set_status(void *page, fl_htl_wake *wake, uint32_t status);

/* Waits until value >= target. Spins for up to spin_ns first (with a CPU pause), then sleeps (the
 * futex, or the wake object). timeout_ns < 0 waits forever. A status other than live or error
 * (abandoned, or undefined) ends the wait early unless the target is already reached. Without a
 * wake object on Windows it sleeps in 1 ms slices instead. */
fl_htl_wait_result fl_htl_wait(void *page, fl_htl_wake *wake, uint64_t target,
                               int64_t timeout_ns, int64_t spin_ns);

/* Monotonic clock in nanoseconds, the clock that deadlines above are measured on. */
int64_t fl_htl_now_ns(void);

/* One CPU pause instruction, for spin loops elsewhere. */
void fl_cpu_relax(void);

/* Pauses for about ns nanoseconds of the clock above (pause instructions, the clock read every
 * fourth), whatever one pause instruction takes on this CPU (10 ns to over 40 ns). */
void fl_cpu_relax_ns(int64_t ns);

/* Between two tries of a spinning socket receive (the service's, the C client's). Each try
 * takes the socket's lock, which the peer's send needs too: a spinner that retried at once
 * would slow the very message it waits for. With the try's own system call, about a
 * microsecond from one try to the next. */
#define FL_RECV_RETRY_NS 300

#ifdef __cplusplus
}
#endif

#endif
