/* One connection to the service: framing (docs/ipc.md), request ids, errors and the client-side
 * deadline. The OS carries the frames (platform/<os>/transport.c: a Unix socket or a named pipe).
 * Every exchange holds the client's lock, so one request is in flight per connection and replies
 * always answer the request just sent. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fenceline_wire_io.h" /* native/common: the frames' one reader and writer */
#include "internal.h"
#include "platform/mutex.h"
#include "platform/transport.h"

/* The wire contract is fenceline_wire.h; these are its names here. */
#define FRAME_MAGIC FL_WIRE_MAGIC
#define FRAME_VERSION FL_WIRE_VERSION
#define HEADER_SIZE FL_WIRE_HEADER_SIZE
#define MAX_FRAME FL_WIRE_MAX_FRAME
#define REPLY_BIT FL_WIRE_REPLY_BIT
#define RUN_BODY_SIZE ((uint32_t)sizeof(FlWireRun))
#define RUN_REPLY_BODY_SIZE ((uint32_t)sizeof(FlWireRunReply))
#define DEFAULT_CLIENT_SPIN_NS 100000
/* The service's own wait for a RUN with FL_TIMEOUT_DEFAULT (its --run-timeout default). */
#define SERVICE_DEFAULT_RUN_TIMEOUT_NS 10000000000LL

struct FlClient {
  fl_refcount refs; /* the user's reference plus one per handle made from the client */
  fl_mutex lock;
  fl_conn *conn; /* NULL once closed */
  int broken;    /* a transport or protocol error, or a deadline, closed the connection */
  uint32_t next_id;
  uint64_t timeout_ns; /* int64 bits: the client-side deadline of one exchange, < 0 none */
  fl_spin spin;
  char *server_info;
  uint8_t *send_buf; /* MAX_FRAME bytes */
  uint8_t *recv_buf; /* MAX_FRAME + 1 bytes: one extra tells a full frame from a truncated one */
  int page;          /* the run page (docs/ipc.md): 0 not asked for yet, 1 in use, -1 none */
  uint32_t page_seq; /* the last RUN posted there */
};

/* ---- default path ------------------------------------------------------------------------ */

FlStatus *fl_default_socket_path(char *buf, size_t size) {
  if (buf == NULL) return fl_status(FL_ERROR_INVALID_ARGUMENT, "GetDefaultSocketPath: buf is NULL");
  return fl_conn_default_path(buf, size);
}

/* ---- lifetime ----------------------------------------------------------------------------- */

void fl_client_ref(FlClient *c) { fl_ref_inc(&c->refs); }

void fl_client_unref(FlClient *c) {
  if (!fl_ref_dec(&c->refs)) return;
  fl_conn_close(c->conn);
  fl_mutex_destroy(&c->lock);
  free(c->server_info);
  free(c->send_buf);
  free(c->recv_buf);
  free(c);
}

/* Closes the connection; the service then releases everything this connection created. Caller
 * holds the lock. */
static void close_locked(FlClient *c) {
  fl_conn_close(c->conn);
  c->conn = NULL;
}

void fl_client_release(FlClient *c) {
  if (c == NULL) return;
  fl_mutex_lock(&c->lock);
  close_locked(c);
  fl_mutex_unlock(&c->lock);
  fl_client_unref(c);
}

const char *fl_client_server_info(const FlClient *c) { return c == NULL ? "" : c->server_info; }

void fl_client_set_max_spin(FlClient *c, int64_t ns) {
  if (c != NULL) fl_spin_set_max(&c->spin, ns);
}

void fl_client_set_timeout(FlClient *c, int64_t ns) {
  if (c != NULL) fl_store_u64(&c->timeout_ns, (uint64_t)(ns < 0 ? -1 : ns));
}

/* ---- one exchange ------------------------------------------------------------------------- */

/* Marks the connection broken and closes it; `st` (owned) says why. */
static FlStatus *broken_status(FlClient *c, FlStatus *st) {
  c->broken = 1;
  close_locked(c);
  FlStatus *out = fl_status(fl_status_code(st), "%s; the connection is closed",
                            fl_status_message(st));
  fl_status_release(st);
  return out;
}

static FlStatus *broken(FlClient *c, FlErrorCode code, const char *what) {
  return broken_status(c, fl_status(code, "%s", what));
}

/* A deadline that passed: the late reply would answer a request nobody waits for any more, so
 * the connection cannot be used again. */
static FlStatus *timed_out(FlClient *c, FlStatus *st, int64_t budget_ns) {
  fl_status_release(st);
  c->broken = 1;
  close_locked(c);
  return fl_status(FL_ERROR_TIMED_OUT,
                   "the service did not answer within %.3f s (the client's deadline, "
                   "SetClientTimeout); the connection is closed: create a new client",
                   (double)budget_ns / 1e9);
}

static FlStatus *error_reply(const uint8_t *body, size_t len) {
  if (len < 4) return fl_status(FL_ERROR_PROTOCOL, "the service sent an ERROR without a code");
  uint32_t code = fl_wire_get_error_code(body);
  char message[1024];
  if (fl_json_get_string((const char *)body + 4, len - 4, "error", message, sizeof message) != 0)
    snprintf(message, sizeof message, "the service reported error code %u", (unsigned)code);
  /* Codes are append-only on the service side: pass a code this library does not know through
   * unchanged so the caller can still tell it apart. */
  if (code == 0 || code >= FL_ERROR_TRANSPORT) code = FL_ERROR_INTERNAL;
  return fl_status((FlErrorCode)code, "%s", message);
}

/* The ERROR a service sends (request_id 0) before it closes a connection it refuses (peer not
 * allowed, shutting down), when one is waiting in [p, p+n); else NULL. */
static FlStatus *refusal(const uint8_t *p, size_t n) {
  FlWireHeader h;
  if (n < HEADER_SIZE + sizeof(FlWireErrorBody) || !fl_wire_header_ok(p, n, &h) ||
      h.kind != FL_KIND_ERROR || h.request_id != 0)
    return NULL;
  return error_reply(p + HEADER_SIZE, n - HEADER_SIZE);
}

/* The absolute deadline of one exchange that may also wait `extra_ns` in the service; -1: none. */
static int64_t deadline_for(FlClient *c, int64_t extra_ns, int64_t *budget_ns) {
  int64_t t = (int64_t)fl_load_u64(&c->timeout_ns);
  *budget_ns = t;
  if (t < 0) return -1;
  *budget_ns = t + extra_ns;
  return fl_htl_now_ns() + t + extra_ns;
}

static FlStatus *receive_locked(FlClient *c, uint16_t kind, uint32_t request_id, int64_t deadline,
                                int64_t budget, int spin_first, const uint8_t **body,
                                size_t *body_len);

/* Sends the frame in send_buf and receives its reply, all before the client's deadline (plus
 * extra_ns the service may legitimately wait, e.g. a RUN's timeout). On success *body and
 * *body_len describe the reply body inside recv_buf. Caller holds the lock. */
static FlStatus *exchange_locked(FlClient *c, size_t frame_len, int fd, uint16_t kind,
                                 uint32_t request_id, int64_t extra_ns, const uint8_t **body,
                                 size_t *body_len) {
  int64_t budget = 0;
  int64_t deadline = deadline_for(c, extra_ns, &budget);
  int fatal = 0;
  FlStatus *st = fl_conn_send(c->conn, c->send_buf, frame_len, fd, deadline, &fatal);
  size_t n = 0;
  if (st != NULL) {
    if (!fatal) return st;
    if (fl_status_code(st) == FL_ERROR_TIMED_OUT) return timed_out(c, st, budget);
    /* The service closed the connection; a refusal it sent first says why. */
    if (fl_conn_recv(c->conn, c->recv_buf, MAX_FRAME + 1, &n, 0, fl_htl_now_ns()) == NULL) {
      FlStatus *why = refusal(c->recv_buf, n);
      if (why != NULL) {
        fl_status_release(st);
        c->broken = 1;
        close_locked(c);
        return why;
      }
    }
    return broken_status(c, st);
  }
  return receive_locked(c, kind, request_id, deadline, budget, 1, body, body_len);
}

/* Receives the reply to the request just sent (by exchange_locked, or on the run page), before
 * `deadline` (`budget`: the time it allowed); `spin`: whether the wait may spin first (it has
 * spun already after the run page's wait). Late NUDGEs of the run page are skipped. Caller holds
 * the lock. */
static FlStatus *receive_locked(FlClient *c, uint16_t kind, uint32_t request_id, int64_t deadline,
                                int64_t budget, int spin_first, const uint8_t **body,
                                size_t *body_len) {
  size_t n = 0;
  FlStatus *st = NULL;
  FlWireHeader h;
  do {
    int64_t t0 = fl_htl_now_ns();
    int64_t spin = spin_first ? fl_spin_budget(&c->spin) : 0;
    st = fl_conn_recv(c->conn, c->recv_buf, MAX_FRAME + 1, &n, spin, deadline);
    if (st == NULL && spin_first) fl_spin_observe(&c->spin, fl_htl_now_ns() - t0, spin);
    if (st != NULL) {
      if (fl_status_code(st) == FL_ERROR_TIMED_OUT) return timed_out(c, st, budget);
      return broken_status(c, st);
    }
  } while (n == HEADER_SIZE && fl_wire_header_ok(c->recv_buf, n, &h) && h.kind == FL_KIND_NUDGE);
  if (n > MAX_FRAME)
    return broken(c, FL_ERROR_PROTOCOL, "the service sent a frame longer than 65536 bytes");
  const uint8_t *p = c->recv_buf;
  FlStatus *refused = refusal(p, n);
  if (refused != NULL) {
    c->broken = 1;
    close_locked(c);
    return refused;
  }
  if (n < HEADER_SIZE || (fl_wire_get_header(p, &h), h.magic != FRAME_MAGIC))
    return broken(c, FL_ERROR_PROTOCOL, "the service's reply is not a fenceline frame");
  if (h.version != FRAME_VERSION)
    return broken(c, FL_ERROR_PROTOCOL, "the service speaks another protocol version");
  uint16_t rkind = h.kind;
  uint32_t rid = h.request_id;
  uint32_t len = h.body_length;
  if (len != n - HEADER_SIZE)
    return broken(c, FL_ERROR_PROTOCOL, "the service's reply has a wrong body_length");
  /* request_id 0 is the service's answer to a frame it could not read at all. */
  if (rid != request_id && !(rkind == FL_KIND_ERROR && rid == 0))
    return broken(c, FL_ERROR_PROTOCOL, "the service's reply answers another request");
  if (rkind == FL_KIND_ERROR) return error_reply(p + HEADER_SIZE, len);
  if (rkind != (kind | REPLY_BIT))
    return broken(c, FL_ERROR_PROTOCOL, "the service's reply is of the wrong kind");
  *body = p + HEADER_SIZE;
  *body_len = len;
  return NULL;
}

static FlStatus *usable_locked(FlClient *c) {
  if (c->conn != NULL) return NULL;
  return fl_status(FL_ERROR_TRANSPORT, c->broken
                                           ? "the connection was closed after an earlier error; "
                                             "create a new client"
                                           : "the client is released");
}

static uint32_t next_id_locked(FlClient *c) {
  if (++c->next_id == 0) c->next_id = 1; /* 0 is reserved for unreadable frames */
  return c->next_id;
}

FlStatus *fl_client_call(FlClient *c, uint16_t kind, const char *body, size_t body_len, int fd,
                         char **reply, size_t *reply_len) {
  if (body_len > MAX_FRAME - HEADER_SIZE)
    return fl_status(FL_ERROR_INVALID_ARGUMENT,
                     "the request body of %zu bytes exceeds the %u a frame holds", body_len,
                     MAX_FRAME - HEADER_SIZE);
  fl_mutex_lock(&c->lock);
  FlStatus *st = usable_locked(c);
  const uint8_t *rbody = NULL;
  size_t rlen = 0;
  if (st == NULL) {
    uint32_t rid = next_id_locked(c);
    fl_wire_put_header(c->send_buf, kind, rid, (uint32_t)body_len);
    memcpy(c->send_buf + HEADER_SIZE, body, body_len);
    st = exchange_locked(c, HEADER_SIZE + body_len, fd, kind, rid, 0, &rbody, &rlen);
  }
  if (st == NULL && fl_json_validate((const char *)rbody, rlen) != 0)
    st = broken(c, FL_ERROR_PROTOCOL, "the service's reply is not JSON");
  if (st == NULL) {
    char *copy = malloc(rlen + 1);
    if (copy == NULL) {
      st = fl_status(FL_ERROR_RESOURCE_EXHAUSTED, "out of memory");
    } else {
      memcpy(copy, rbody, rlen);
      copy[rlen] = '\0';
      *reply = copy;
      if (reply_len != NULL) *reply_len = rlen;
    }
  }
  fl_mutex_unlock(&c->lock);
  return st;
}

/* Hands the service a run page (docs/ipc.md, "The run page"), within the deadline of the RUN
 * that asks for it (`extra_ns`: what the service may wait on top); a service that takes none (an
 * older one) or an OS without one (Windows) leaves the client on the socket alone. A failure of
 * the connection itself is the RUN's. Caller holds the lock. */
static FlStatus *open_page_locked(FlClient *c, int64_t extra_ns) {
  c->page = -1;
  int fd = -1;
  FlStatus *st = fl_conn_page_make(c->conn, &fd);
  if (st != NULL) {
    fl_status_release(st);
    return NULL;
  }
  uint32_t rid = next_id_locked(c);
  static const char body[] = "{}";
  fl_wire_put_header(c->send_buf, FL_KIND_OPEN_RUN_PAGE, rid, sizeof body - 1);
  memcpy(c->send_buf + HEADER_SIZE, body, sizeof body - 1);
  const uint8_t *rbody = NULL;
  size_t rlen = 0;
  st = exchange_locked(c, HEADER_SIZE + sizeof body - 1, fd, FL_KIND_OPEN_RUN_PAGE, rid,
                       extra_ns, &rbody, &rlen);
  if (c->conn == NULL) return st; /* closed: the deadline passed, or the service went away */
  fl_conn_page_keep(c->conn, st == NULL);
  if (st == NULL) c->page = 1;
  fl_status_release(st);
  return NULL;
}

/* A RUN on the run page, its reply spun for `spin` ns first: *answered = 1 with *reply set when
 * the page answered it; 0 when its reply comes on the socket (the caller receives it). Caller
 * holds the lock. */
static FlStatus *page_run_locked(FlClient *c, const FlWireRun *run, uint32_t rid, int64_t wait_ns,
                                 int64_t spin, FlWireRunReply *reply, int *answered) {
  FlRunPageRun posted = {++c->page_seq, FL_KIND_RUN, rid, run->timeout_ms, {0},
                         run->wait_value, run->signal_value};
  memcpy(posted.session_id, run->session_id, sizeof posted.session_id);
  int64_t budget = 0;
  int64_t deadline = deadline_for(c, wait_ns, &budget);
  int64_t t0 = fl_htl_now_ns();
  FlRunPageReply got;
  FlStatus *st = fl_conn_page_run(c->conn, &posted, spin, deadline, &got, answered);
  if (st != NULL) {
    if (fl_status_code(st) == FL_ERROR_TIMED_OUT) return timed_out(c, st, budget);
    return broken_status(c, st);
  }
  fl_spin_observe(&c->spin, fl_htl_now_ns() - t0, spin);
  if (!*answered) return NULL;
  if (got.request_id != rid)
    return broken(c, FL_ERROR_PROTOCOL, "the run page's reply answers another request");
  *reply = got.run;
  return NULL;
}

FlStatus *fl_client_run(FlClient *c, uint16_t kind, const uint8_t session_id[16],
                        uint64_t wait_value, uint64_t signal_value, uint32_t timeout_ms,
                        FlRunResult *out) {
  fl_mutex_lock(&c->lock);
  FlStatus *st = usable_locked(c);
  const uint8_t *rbody = NULL;
  size_t rlen = 0;
  FlWireRunReply reply = {0, 0, 0, 0, 0}; /* from the run page or the socket */
  /* The service may wait timeout_ms for the fence before it answers: not a hang. */
  int64_t wait_ns = timeout_ms == FL_TIMEOUT_DEFAULT ? SERVICE_DEFAULT_RUN_TIMEOUT_NS
                                                     : (int64_t)timeout_ms * 1000000;
  if (st == NULL && kind == FL_KIND_RUN && c->page == 0) st = open_page_locked(c, wait_ns);
  if (st == NULL) {
    uint32_t rid = next_id_locked(c);
    uint8_t *p = c->send_buf;
    FlWireRun run;
    memcpy(run.session_id, session_id, FL_WIRE_SESSION_ID_BYTES);
    run.wait_value = wait_value;
    run.signal_value = signal_value;
    run.timeout_ms = timeout_ms;
    run.flags = 0;
    fl_wire_put_header(p, kind, rid, RUN_BODY_SIZE);
    fl_wire_put_run(p + HEADER_SIZE, &run);
    /* RUN and RUN_ASYNC are both answered with a RUN reply. */
    /* One RUN at a time on the run page while replies come soon enough to spin for; one that
     * takes long enough to sleep for comes on the socket, whose message wakes the sleeper
     * anyway (docs/ipc.md, "The run page"). */
    int64_t spin = kind == FL_KIND_RUN && c->page == 1 ? fl_spin_budget(&c->spin) : 0;
    int answered = 0;
    if (spin > 0) {
      st = page_run_locked(c, &run, rid, wait_ns, spin, &reply, &answered);
      if (st == NULL && !answered) {
        int64_t budget = 0;
        int64_t deadline = deadline_for(c, wait_ns, &budget);
        st = receive_locked(c, FL_KIND_RUN, rid, deadline, budget, 0, &rbody, &rlen);
      }
    } else {
      st = exchange_locked(c, HEADER_SIZE + RUN_BODY_SIZE, -1, FL_KIND_RUN, rid, wait_ns,
                           &rbody, &rlen);
    }
    if (st == NULL && !answered) {
      if (rlen != RUN_REPLY_BODY_SIZE)
        st = broken(c, FL_ERROR_PROTOCOL, "the service's RUN reply has the wrong size");
      else
        fl_wire_get_run_reply(rbody, &reply);
    }
  }
  if (st == NULL && out != NULL) {
    out->signal_value = reply.signal_value;
    out->wait_us = reply.wait_us;
    out->infer_us = reply.infer_us;
    out->total_us = reply.total_us;
    out->reserved = 0;
  }
  fl_mutex_unlock(&c->lock);
  return st;
}

/* ---- create ------------------------------------------------------------------------------- */

FlStatus *fl_client_create_with_timeout(const char *path, const char *name, int64_t timeout_ns,
                                        FlClient **out) {
  if (out == NULL) return fl_status(FL_ERROR_INVALID_ARGUMENT, "CreateClient: out is NULL");
  char default_path[512];
  if (path == NULL) {
    FlStatus *st = fl_default_socket_path(default_path, sizeof default_path);
    if (st != NULL) return st;
    path = default_path;
  }
  FlClient *c = calloc(1, sizeof *c);
  if (c == NULL) return fl_status(FL_ERROR_RESOURCE_EXHAUSTED, "out of memory");
  fl_ref_init(&c->refs);
  fl_spin_init(&c->spin, DEFAULT_CLIENT_SPIN_NS);
  c->timeout_ns = (uint64_t)(timeout_ns < 0 ? -1 : timeout_ns);
  c->send_buf = malloc(MAX_FRAME);
  c->recv_buf = malloc(MAX_FRAME + 1);
  if (c->send_buf == NULL || c->recv_buf == NULL || fl_mutex_init(&c->lock) != 0) {
    free(c->send_buf);
    free(c->recv_buf);
    free(c);
    return fl_status(FL_ERROR_RESOURCE_EXHAUSTED, "out of memory");
  }
  int64_t budget = 0;
  FlStatus *st = fl_conn_open(path, deadline_for(c, 0, &budget), &c->conn);
  if (st == NULL) {
    char body[320];
    fl_json_writer w;
    fl_jw_init(&w, body, sizeof body);
    fl_jw_begin_object(&w);
    fl_jw_key(&w, "client");
    char label[200];
    snprintf(label, sizeof label, "%s", name != NULL ? name : "c");
    fl_jw_string(&w, label);
    /* It reads the RUN reply's flags (docs/ipc.md, "HELLO"), and ignores them: it does not
     * nap, and FlRunResult.reserved stays 0. */
    fl_jw_key(&w, "features");
    fl_jw_begin_array(&w);
    fl_jw_string(&w, FL_WIRE_FEATURE_REPLY_FLAGS);
    fl_jw_end_array(&w);
    fl_jw_end_object(&w);
    if (w.overflow)
      st = fl_status(FL_ERROR_INVALID_ARGUMENT, "client_name is too long");
    else
      st = fl_client_call(c, FL_KIND_HELLO, body, w.len, -1, &c->server_info, NULL);
  }
  if (st != NULL) {
    fl_client_unref(c);
    return st;
  }
  *out = c;
  return NULL;
}

FlStatus *fl_client_create(const char *path, const char *name, FlClient **out) {
  return fl_client_create_with_timeout(path, name, FL_CLIENT_TIMEOUT_DEFAULT_NS, out);
}
