/* The per-OS half of host_timeline.c: the monotonic clock and how sleepers are woken.
 * Private to native/common; one implementation per OS in platform/<os>/htl_wake.c. */
#ifndef FENCELINE_PLATFORM_HTL_WAKE_H
#define FENCELINE_PLATFORM_HTL_WAKE_H

#include "../host_timeline.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Wakes every sleeper; called after `seq` was incremented. */
void fl_htl_wake_all(fl_htl_page *p, fl_htl_wake *w);

/* Sleeps while `seq` still equals `seen_seq`, for at most timeout_ns (< 0: no limit). May return
 * early; the caller checks again. */
void fl_htl_sleep(fl_htl_page *p, fl_htl_wake *w, uint32_t seen_seq, int64_t timeout_ns);

#ifdef __cplusplus
}
#endif

#endif
