/* run_page.h: the run page (docs/ipc.md, "The run page"), a RUN and its reply in shared memory
 * beside the Unix socket, so that a frame's handoff is a store the other side sees, not two
 * messages through the kernel. The service's connection loop (importer/engine/host_runs.cpp), the
 * Python client (importer/transport/posix/client_runs.cpp) and the C client (client/src/client.c) use it.
 *
 * The client makes the page (a sealed memfd of FL_RUN_PAGE_SIZE bytes) and hands it to the
 * service with OPEN_RUN_PAGE. Then, for one RUN at a time:
 * - the client writes the request's fields, then a new request_seq, then reads
 *   service_sleeping: when set, it sends a NUDGE frame on the socket (the service blocks there);
 * - the service, seeing request_seq change, serves the RUN as one from the socket. When it
 *   answered here, it writes the reply's fields with status FL_RUN_PAGE_ANSWERED; else (a refusal or
 *   a failed run) status FL_RUN_PAGE_ON_SOCKET, and the reply comes on the
 *   socket as ever. Then reply_seq = the request's seq, then it reads client_sleeping: when set,
 *   a NUDGE on the socket wakes the client.
 * A side sets its *_sleeping word before it blocks on the socket and looks at the page once
 * more; with the store, a full fence and the load on both sides (Dekker), a RUN or a reply is
 * never missed by both. A NUDGE carries nothing: whoever reads one looks at the page.
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

typedef struct FlRunPage {
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
  uint32_t service_sleeping; /* the service blocks on the socket: nudge it */
  uint8_t pad2[60];
  uint32_t client_sleeping; /* the client blocks on the socket: nudge it */
  uint8_t pad3[60];
} FlRunPage;

FL_WIRE_STATIC_ASSERT(offsetof(FlRunPage, reply_seq) == 64, "the reply's line at 64");
FL_WIRE_STATIC_ASSERT(offsetof(FlRunPage, reply_flags) == 96, "the reply's flags at 96");
FL_WIRE_STATIC_ASSERT(offsetof(FlRunPage, service_sleeping) == 128, "service_sleeping at 128");
FL_WIRE_STATIC_ASSERT(offsetof(FlRunPage, client_sleeping) == 192, "client_sleeping at 192");
FL_WIRE_STATIC_ASSERT(sizeof(FlRunPage) == 256, "the page's used part is 256 bytes");

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

/* The client: posts a RUN; returns whether the service must be nudged. */
static inline int fl_run_page_post(FlRunPage *p, const FlRunPageRun *r) {
  uint64_t sid[2];
  memcpy(sid, r->session_id, sizeof sid);
  fl_store_u32(&p->kind, r->kind);
  fl_store_u32(&p->request_id, r->request_id);
  fl_store_u32(&p->timeout_ms, r->timeout_ms);
  fl_store_u64(&p->session_id[0], sid[0]);
  fl_store_u64(&p->session_id[1], sid[1]);
  fl_store_u64(&p->wait_value, r->wait_value);
  fl_store_u64(&p->signal_value, r->signal_value);
  fl_store_u32(&p->request_seq, r->seq);
  fl_fence_seq_cst();
  return fl_load_u32(&p->service_sleeping) != 0;
}

/* The service: 1 when a RUN newer than *last came (read into *out, *last moved on), else 0. */
static inline int fl_run_page_take(FlRunPage *p, uint32_t *last, FlRunPageRun *out) {
  uint32_t seq = fl_load_u32(&p->request_seq);
  if (seq == *last) return 0;
  uint64_t sid[2];
  out->seq = seq;
  out->kind = fl_load_u32(&p->kind);
  out->request_id = fl_load_u32(&p->request_id);
  out->timeout_ms = fl_load_u32(&p->timeout_ms);
  sid[0] = fl_load_u64(&p->session_id[0]);
  sid[1] = fl_load_u64(&p->session_id[1]);
  memcpy(out->session_id, sid, sizeof sid);
  out->wait_value = fl_load_u64(&p->wait_value);
  out->signal_value = fl_load_u64(&p->signal_value);
  *last = seq;
  return 1;
}

/* The service: answers the RUN of r->seq; returns whether the client must be nudged. */
static inline int fl_run_page_answer(FlRunPage *p, const FlRunPageReply *r) {
  fl_store_u32(&p->status, r->status);
  fl_store_u32(&p->reply_request_id, r->request_id);
  fl_store_u64(&p->reply_signal_value, r->run.signal_value);
  fl_store_u32(&p->wait_us, r->run.wait_us);
  fl_store_u32(&p->infer_us, r->run.infer_us);
  fl_store_u32(&p->total_us, r->run.total_us);
  fl_store_u32(&p->reply_flags, r->run.flags);
  fl_store_u32(&p->reply_seq, r->seq);
  fl_fence_seq_cst();
  return fl_load_u32(&p->client_sleeping) != 0;
}

/* The client: 1 when the reply to the RUN of `seq` is there (read into *out), else 0. */
static inline int fl_run_page_reply(const FlRunPage *p, uint32_t seq, FlRunPageReply *out) {
  if (fl_load_u32(&p->reply_seq) != seq) return 0;
  out->seq = seq;
  out->status = fl_load_u32(&p->status);
  out->request_id = fl_load_u32(&p->reply_request_id);
  out->run.signal_value = fl_load_u64(&p->reply_signal_value);
  out->run.wait_us = fl_load_u32(&p->wait_us);
  out->run.infer_us = fl_load_u32(&p->infer_us);
  out->run.total_us = fl_load_u32(&p->total_us);
  out->run.flags = fl_load_u32(&p->reply_flags);
  return 1;
}

#endif
