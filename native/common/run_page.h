/* run_page.h: the run page (docs/ipc.md, "The run page"), RUNs and their replies in shared memory
 * beside the Unix socket, so that a frame's handoff is a store the other side sees, not two
 * messages through the kernel. The service's connection loop (importer/engine/host_runs.cpp), the
 * Python client (importer/transport/posix/client_runs.cpp) and the C client (client/src/client.c) use it.
 *
 * The client makes the page (a sealed memfd of FL_RUN_PAGE_SIZE bytes) and hands it to the
 * service with OPEN_RUN_PAGE, asking for `slots` (1 when it names none); the service answers how
 * many it serves, a power of two up to FL_RUN_PAGE_SLOTS. The RUNs posted there are numbered 1, 2,
 * 3, ... (request_seq; it wraps at 2**32) and RUN `seq` lives in slot seq % slots, so up to
 * `slots` RUNs are in flight at once, answered in their order. For each RUN:
 * - the client writes the request's fields in its slot, then request_seq = seq, then reads
 *   service_sleeping: when set, it sends a NUDGE frame on the socket (the service blocks there).
 *   It posts RUN seq only once it has read the reply to seq - slots (the slot's last occupant);
 * - the service takes the RUNs in order: only RUN last + 1, from its own slot (a seq written
 *   anywhere else, or again, is never taken, so no RUN is served twice). It serves it through
 *   the run engine's one entry. When it answered there, it writes the reply's fields in the
 *   slot with status FL_RUN_PAGE_ANSWERED; else (a refusal or a failed run) status
 *   FL_RUN_PAGE_ON_SOCKET, and the ERROR comes on the socket, in its turn among the socket's
 *   replies. Then the slot's reply_seq = seq, then it reads client_sleeping: when set, a NUDGE
 *   on the socket wakes the client.
 * A side sets its *_sleeping word before it blocks on the socket and looks at the page once
 * more; with the store, a full fence and the load on both sides (Dekker), a RUN or a reply is
 * never missed by both. A NUDGE carries nothing: whoever reads one looks at the page. One word
 * a side is enough: each side waits for one thing at a time (the service for RUN last + 1, the
 * client for the reply of its oldest RUN in flight).
 *
 * Layout: slot 0 is the page's first 128 bytes and the sleeping words follow it, as they were
 * when the page held one RUN, so a client that asks for no slots (the C client, which has no
 * API for RUNs in flight) posts every RUN in slot 0 as before; slots 1.. follow the sleeping
 * words. Each slot is two 64-byte lines, the client's request and the service's reply, so the
 * two sides never write the same cache line. Eight slots: a renderer keeps two or three frames
 * in flight (double or triple buffering), and 8 * 128 + 256 bytes leave the page's rest free.
 *
 * The page never leaves the machine: fields are in host order. Every field is read and written
 * with platform/atomic.h (the other side may write at any time; a hostile client's torn request
 * is a RUN like any malformed one). Plain C11 and C++, header-only, no OS calls. */
#ifndef FENCELINE_RUN_PAGE_H
#define FENCELINE_RUN_PAGE_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "fenceline_wire.h"
#include "platform/atomic.h"

#define FL_RUN_PAGE_SIZE 4096u
#define FL_RUN_PAGE_ANSWERED 0u
#define FL_RUN_PAGE_ON_SOCKET 1u

#define FL_RUN_PAGE_SLOTS 8u /* the most slots a page has; a power of two */

/* One RUN's place on the page: the client's line, then the service's. */
typedef struct FlRunPageSlot {
  /* The client's line: the RUN. */
  uint32_t request_seq;
  uint32_t kind; /* FL_KIND_RUN */
  uint32_t request_id;
  uint32_t timeout_ms;
  uint64_t session_id[2]; /* the session id's 16 bytes */
  uint64_t wait_value;
  uint64_t signal_value;
  uint8_t pad0[16];
  /* The service's line: its answer. */
  uint32_t reply_seq;
  uint32_t status; /* FL_RUN_PAGE_ANSWERED or FL_RUN_PAGE_ON_SOCKET */
  uint32_t reply_request_id;
  uint32_t wait_us;
  uint64_t reply_signal_value;
  uint32_t infer_us;
  uint32_t total_us;
  uint32_t reply_flags; /* the RUN reply's flags */
  uint8_t pad1[28];
} FlRunPageSlot;

typedef struct FlRunPage {
  FlRunPageSlot first; /* slot 0 */
  uint32_t service_sleeping; /* the service blocks on the socket: nudge it */
  uint8_t pad2[60];
  uint32_t client_sleeping; /* the client blocks on the socket: nudge it */
  uint8_t pad3[60];
  FlRunPageSlot more[FL_RUN_PAGE_SLOTS - 1]; /* slots 1.. */
} FlRunPage;

FL_WIRE_STATIC_ASSERT(sizeof(FlRunPageSlot) == 128, "a slot is two lines");
FL_WIRE_STATIC_ASSERT(offsetof(FlRunPageSlot, reply_seq) == 64, "the reply's line at 64");
FL_WIRE_STATIC_ASSERT(offsetof(FlRunPageSlot, reply_flags) == 96, "the reply's flags at 96");
FL_WIRE_STATIC_ASSERT(offsetof(FlRunPage, service_sleeping) == 128, "service_sleeping at 128");
FL_WIRE_STATIC_ASSERT(offsetof(FlRunPage, client_sleeping) == 192, "client_sleeping at 192");
FL_WIRE_STATIC_ASSERT(offsetof(FlRunPage, more) == 256, "slot 1 at 256");
FL_WIRE_STATIC_ASSERT(sizeof(FlRunPage) <= FL_RUN_PAGE_SIZE, "the slots fit the page");

/* The slot of RUN `seq` on a page of `slots` slots (a power of two, FL_RUN_PAGE_SLOTS at most). */
static inline FlRunPageSlot *fl_run_page_slot(FlRunPage *p, uint32_t seq, uint32_t slots) {
  uint32_t i = seq & (slots - 1u) & (FL_RUN_PAGE_SLOTS - 1u);
  return i == 0 ? &p->first : &p->more[i - 1u];
}

/* The slots a service serves when a client asks for `asked`: the largest power of two not above
 * it, FL_RUN_PAGE_SLOTS at most; 1 for 0. */
static inline uint32_t fl_run_page_slots(uint32_t asked) {
  uint32_t n = 1;
  while (n * 2u <= asked && n * 2u <= FL_RUN_PAGE_SLOTS) n *= 2u;
  return n;
}

/* A request as the service reads it, or the client writes it. */
typedef struct FlRunPageRun {
  uint32_t seq;
  uint32_t kind;
  uint32_t request_id;
  uint32_t timeout_ms;
  uint8_t session_id[FL_WIRE_SESSION_ID_BYTES];
  uint64_t wait_value;
  uint64_t signal_value;
} FlRunPageRun;

/* A reply as the client reads it, or the service writes it: `run` is the RUN reply's body, as the
 * socket would have carried it (its fields are 0 with FL_RUN_PAGE_ON_SOCKET). */
typedef struct FlRunPageReply {
  uint32_t seq;
  uint32_t status;
  uint32_t request_id;
  FlWireRunReply run;
} FlRunPageReply;

/* Sets a side's sleeping word, then a full fence: the caller then looks at the page once more
 * before it blocks (1), or has stopped blocking (0). */
static inline void fl_run_page_sleeping(uint32_t *word, uint32_t on) {
  fl_store_u32(word, on);
  fl_fence_seq_cst();
}

/* The client: posts a RUN in its slot; returns whether the service must be nudged. */
static inline int fl_run_page_post(FlRunPage *p, uint32_t slots, const FlRunPageRun *r) {
  FlRunPageSlot *s = fl_run_page_slot(p, r->seq, slots);
  uint64_t sid[2];
  memcpy(sid, r->session_id, sizeof sid);
  fl_store_u32(&s->kind, r->kind);
  fl_store_u32(&s->request_id, r->request_id);
  fl_store_u32(&s->timeout_ms, r->timeout_ms);
  fl_store_u64(&s->session_id[0], sid[0]);
  fl_store_u64(&s->session_id[1], sid[1]);
  fl_store_u64(&s->wait_value, r->wait_value);
  fl_store_u64(&s->signal_value, r->signal_value);
  fl_store_u32(&s->request_seq, r->seq);
  fl_fence_seq_cst();
  return fl_load_u32(&p->service_sleeping) != 0;
}

/* The service: 1 when RUN *last + 1 is posted in its slot (read into *out, *last moved on), else
 * 0. */
static inline int fl_run_page_take(FlRunPage *p, uint32_t slots, uint32_t *last,
                                   FlRunPageRun *out) {
  const uint32_t seq = *last + 1u;
  FlRunPageSlot *s = fl_run_page_slot(p, seq, slots);
  if (fl_load_u32(&s->request_seq) != seq) return 0;
  uint64_t sid[2];
  out->seq = seq;
  out->kind = fl_load_u32(&s->kind);
  out->request_id = fl_load_u32(&s->request_id);
  out->timeout_ms = fl_load_u32(&s->timeout_ms);
  sid[0] = fl_load_u64(&s->session_id[0]);
  sid[1] = fl_load_u64(&s->session_id[1]);
  memcpy(out->session_id, sid, sizeof sid);
  out->wait_value = fl_load_u64(&s->wait_value);
  out->signal_value = fl_load_u64(&s->signal_value);
  *last = seq;
  return 1;
}

/* The service: answers the RUN of r->seq in its slot; returns whether the client must be
 * nudged. */
static inline int fl_run_page_answer(FlRunPage *p, uint32_t slots, const FlRunPageReply *r) {
  FlRunPageSlot *s = fl_run_page_slot(p, r->seq, slots);
  fl_store_u32(&s->status, r->status);
  fl_store_u32(&s->reply_request_id, r->request_id);
  fl_store_u64(&s->reply_signal_value, r->run.signal_value);
  fl_store_u32(&s->wait_us, r->run.wait_us);
  fl_store_u32(&s->infer_us, r->run.infer_us);
  fl_store_u32(&s->total_us, r->run.total_us);
  fl_store_u32(&s->reply_flags, r->run.flags);
  fl_store_u32(&s->reply_seq, r->seq);
  fl_fence_seq_cst();
  return fl_load_u32(&p->client_sleeping) != 0;
}

/* The client: 1 when the reply to the RUN of `seq` is in its slot (read into *out), else 0. */
static inline int fl_run_page_reply(FlRunPage *p, uint32_t slots, uint32_t seq,
                                    FlRunPageReply *out) {
  const FlRunPageSlot *s = fl_run_page_slot(p, seq, slots);
  if (fl_load_u32(&s->reply_seq) != seq) return 0;
  out->seq = seq;
  out->status = fl_load_u32(&s->status);
  out->request_id = fl_load_u32(&s->reply_request_id);
  out->run.signal_value = fl_load_u64(&s->reply_signal_value);
  out->run.wait_us = fl_load_u32(&s->wait_us);
  out->run.infer_us = fl_load_u32(&s->infer_us);
  out->run.total_us = fl_load_u32(&s->total_us);
  out->run.flags = fl_load_u32(&s->reply_flags);
  return 1;
}

#endif
