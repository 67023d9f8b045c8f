/* One connection to the service's SOCK_SEQPACKET socket: framing (docs/ipc.md), fd passing and
 * the spin-then-poll receive. Every exchange holds the client's lock, so one request is in
 * flight per connection and replies always answer the request just sent. */
#include <errno.h>
#include <poll.h>
#include <stddef.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "host_timeline.h"
#include "internal.h"

/* The wire contract is fenceline_wire.h; these are its names here. */
#define FRAME_MAGIC FL_WIRE_MAGIC
#define FRAME_VERSION FL_WIRE_VERSION
#define HEADER_SIZE FL_WIRE_HEADER_SIZE
#define MAX_FRAME FL_WIRE_MAX_FRAME
#define MAX_FDS FL_WIRE_MAX_FDS
#define REPLY_BIT FL_WIRE_REPLY_BIT
#define RUN_BODY_SIZE ((uint32_t)sizeof(FlWireRun))
#define RUN_REPLY_BODY_SIZE ((uint32_t)sizeof(FlWireRunReply))
#define DEFAULT_CLIENT_SPIN_NS 100000

struct FlClient {
  atomic_int refs; /* the user's reference plus one per handle made from the client */
  pthread_mutex_t lock;
  int fd;     /* -1 once closed */
  int broken; /* a transport or protocol error closed the connection */
  uint32_t next_id;
  fl_spin spin;
  char *server_info;
  uint8_t *send_buf; /* MAX_FRAME bytes */
  uint8_t *recv_buf; /* MAX_FRAME + 1 bytes: one extra tells a full frame from a truncated one */
};

/* ---- little-endian packing ---------------------------------------------------------------- */

static void put_u16(uint8_t *p, uint16_t v) {
  p[0] = (uint8_t)v;
  p[1] = (uint8_t)(v >> 8);
}

static void put_u32(uint8_t *p, uint32_t v) {
  for (int i = 0; i < 4; ++i) p[i] = (uint8_t)(v >> (8 * i));
}

static void put_u64(uint8_t *p, uint64_t v) {
  for (int i = 0; i < 8; ++i) p[i] = (uint8_t)(v >> (8 * i));
}

static uint16_t get_u16(const uint8_t *p) { return (uint16_t)(p[0] | (p[1] << 8)); }

static uint32_t get_u32(const uint8_t *p) {
  return (uint32_t)p[0] | ((uint32_t)p[1] << 8) | ((uint32_t)p[2] << 16) | ((uint32_t)p[3] << 24);
}

static uint64_t get_u64(const uint8_t *p) {
  return (uint64_t)get_u32(p) | ((uint64_t)get_u32(p + 4) << 32);
}

static void put_header(uint8_t *p, uint16_t kind, uint32_t request_id, uint32_t body_len) {
  put_u32(p, FRAME_MAGIC);
  put_u16(p + 4, FRAME_VERSION);
  put_u16(p + 6, kind);
  put_u32(p + 8, request_id);
  put_u32(p + 12, body_len);
}

/* ---- socket path and connect -------------------------------------------------------------- */

FlStatus *fl_default_socket_path(char *buf, size_t size) {
  if (buf == NULL) return fl_status(FL_ERROR_INVALID_ARGUMENT, "GetDefaultSocketPath: buf is NULL");
  /* The same order as the service and the Python client: $FENCELINE_SOCKET, then
   * $XDG_RUNTIME_DIR/fenceline/fenceline.sock, then a per-user directory under /tmp. */
  const char *explicit_path = getenv("FENCELINE_SOCKET");
  const char *base = getenv("XDG_RUNTIME_DIR");
  char path[4096];
  int n;
  if (explicit_path != NULL && explicit_path[0] != '\0')
    n = snprintf(path, sizeof path, "%s", explicit_path);
  else if (base != NULL && base[0] != '\0')
    n = snprintf(path, sizeof path, "%s/fenceline/fenceline.sock", base);
  else
    n = snprintf(path, sizeof path, "/tmp/fenceline-%u/fenceline/fenceline.sock",
                 (unsigned)getuid());
  if (n < 0 || (size_t)n >= sizeof path || (size_t)n >= size)
    return fl_status(FL_ERROR_INVALID_ARGUMENT,
                     "GetDefaultSocketPath: the path needs %d bytes, buf has %zu", n + 1, size);
  memcpy(buf, path, (size_t)n + 1);
  return NULL;
}

static FlStatus *connect_socket(const char *path, int *out_fd) {
  struct sockaddr_un addr;
  memset(&addr, 0, sizeof addr);
  addr.sun_family = AF_UNIX;
  if (strlen(path) >= sizeof addr.sun_path)
    return fl_status(FL_ERROR_INVALID_ARGUMENT, "socket path is longer than %zu bytes: %s",
                     sizeof addr.sun_path - 1, path);
  memcpy(addr.sun_path, path, strlen(path) + 1);
  int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
  if (fd < 0) return fl_status_errno("socket", errno);
  int rc;
  do {
    rc = connect(fd, (struct sockaddr *)&addr, sizeof addr);
  } while (rc != 0 && errno == EINTR);
  if (rc != 0) {
    int err = errno;
    close(fd);
    return fl_status(FL_ERROR_TRANSPORT,
                     "cannot connect to the fenceline socket %s: %s (is `fenceline serve` "
                     "running?)",
                     path, strerror(err));
  }
  *out_fd = fd;
  return NULL;
}

/* ---- lifetime ----------------------------------------------------------------------------- */

void fl_client_ref(FlClient *c) { atomic_fetch_add_explicit(&c->refs, 1, memory_order_relaxed); }

void fl_client_unref(FlClient *c) {
  if (atomic_fetch_sub_explicit(&c->refs, 1, memory_order_acq_rel) != 1) return;
  if (c->fd >= 0) close(c->fd);
  pthread_mutex_destroy(&c->lock);
  free(c->server_info);
  free(c->send_buf);
  free(c->recv_buf);
  free(c);
}

/* Closes the socket; the service then releases everything this connection created. Caller
 * holds the lock. */
static void close_locked(FlClient *c) {
  if (c->fd >= 0) {
    close(c->fd);
    c->fd = -1;
  }
}

void fl_client_release(FlClient *c) {
  if (c == NULL) return;
  pthread_mutex_lock(&c->lock);
  close_locked(c);
  pthread_mutex_unlock(&c->lock);
  fl_client_unref(c);
}

const char *fl_client_server_info(const FlClient *c) { return c == NULL ? "" : c->server_info; }

void fl_client_set_max_spin(FlClient *c, int64_t ns) {
  if (c != NULL) atomic_store_explicit(&c->spin.max_ns, ns < 0 ? 0 : ns, memory_order_relaxed);
}

/* ---- one exchange ------------------------------------------------------------------------- */

static FlStatus *broken(FlClient *c, FlErrorCode code, const char *what, int err) {
  c->broken = 1;
  close_locked(c);
  if (err != 0) return fl_status(code, "%s: %s; the connection is closed", what, strerror(err));
  return fl_status(code, "%s; the connection is closed", what);
}

static ssize_t recv_once(FlClient *c, int flags, int *msg_flags);
static FlStatus *refusal(const uint8_t *p, size_t n);

static FlStatus *send_frame(FlClient *c, size_t len, int fd) {
  struct iovec iov = {c->send_buf, len};
  struct msghdr msg;
  memset(&msg, 0, sizeof msg);
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  union {
    char buf[CMSG_SPACE(sizeof(int))];
    struct cmsghdr align;
  } control;
  if (fd >= 0) {
    memset(&control, 0, sizeof control);
    msg.msg_control = control.buf;
    msg.msg_controllen = sizeof control.buf;
    struct cmsghdr *cm = CMSG_FIRSTHDR(&msg);
    cm->cmsg_level = SOL_SOCKET;
    cm->cmsg_type = SCM_RIGHTS;
    cm->cmsg_len = CMSG_LEN(sizeof(int));
    memcpy(CMSG_DATA(cm), &fd, sizeof(int));
  }
  ssize_t n;
  do {
    n = sendmsg(c->fd, &msg, MSG_NOSIGNAL); /* a dead service must not SIGPIPE the renderer */
  } while (n < 0 && errno == EINTR);
  if (n < 0) {
    int err = errno;
    if (err == EBADF && fd >= 0) /* the caller's fd, not the socket */
      return fl_status(FL_ERROR_INVALID_ARGUMENT, "fd %d is not an open file descriptor", fd);
    if (err == EPIPE || err == ECONNRESET) {
      /* The service closed the connection; a refusal says why before it closes. */
      int flags = 0;
      ssize_t got = recv_once(c, MSG_DONTWAIT, &flags);
      if (got < 0 && errno == ECONNRESET) got = recv_once(c, MSG_DONTWAIT, &flags);
      FlStatus *why = got > 0 ? refusal(c->recv_buf, (size_t)got) : NULL;
      if (why != NULL) {
        c->broken = 1;
        close_locked(c);
        return why;
      }
    }
    return broken(c, FL_ERROR_TRANSPORT, "sending to the service failed", err);
  }
  return NULL;
}

static ssize_t recv_once(FlClient *c, int flags, int *msg_flags) {
  struct iovec iov = {c->recv_buf, MAX_FRAME + 1};
  union {
    char buf[CMSG_SPACE(sizeof(int) * MAX_FDS)];
    struct cmsghdr align;
  } control;
  struct msghdr msg;
  memset(&msg, 0, sizeof msg);
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  msg.msg_control = control.buf;
  msg.msg_controllen = sizeof control.buf;
  ssize_t n = recvmsg(c->fd, &msg, flags | MSG_CMSG_CLOEXEC);
  if (n < 0) return n;
  *msg_flags = msg.msg_flags;
  /* Replies carry no fds today; close any so a newer service cannot leak them into us. */
  for (struct cmsghdr *cm = CMSG_FIRSTHDR(&msg); cm != NULL; cm = CMSG_NXTHDR(&msg, cm)) {
    if (cm->cmsg_level != SOL_SOCKET || cm->cmsg_type != SCM_RIGHTS) continue;
    size_t count = (cm->cmsg_len - CMSG_LEN(0)) / sizeof(int);
    for (size_t i = 0; i < count; ++i) {
      int f;
      memcpy(&f, CMSG_DATA(cm) + i * sizeof(int), sizeof(int));
      close(f);
    }
  }
  return n;
}

static int transient(int err) { return err == EAGAIN || err == EWOULDBLOCK || err == EINTR; }

/* Receives one frame: spins with non-blocking reads for the adaptive budget, then sleeps in
 * poll. Returns its length, or a status. */
static FlStatus *recv_frame(FlClient *c, size_t *out_len) {
  int64_t t0 = fl_htl_now_ns();
  int64_t budget = fl_spin_budget(&c->spin);
  int msg_flags = 0;
  ssize_t n = -1;
  errno = EAGAIN; /* "nothing received yet" when there is no spin */
  if (budget > 0) {
    int64_t end = t0 + budget;
    for (unsigned i = 0;; ++i) {
      n = recv_once(c, MSG_DONTWAIT, &msg_flags);
      if (n >= 0 || !transient(errno)) break;
      fl_cpu_relax();
      if ((i & 15u) == 15u && fl_htl_now_ns() >= end) break;
    }
  }
  while (n < 0 && transient(errno)) {
    struct pollfd p = {c->fd, POLLIN, 0};
    if (poll(&p, 1, -1) < 0 && errno != EINTR)
      return broken(c, FL_ERROR_TRANSPORT, "poll on the service socket failed", errno);
    n = recv_once(c, MSG_DONTWAIT, &msg_flags);
  }
  if (n < 0 && errno == ECONNRESET) {
    /* The service closed while our request was unread. The error is reported once; what it
     * sent before closing (a refusal, say) is still queued behind it. */
    n = recv_once(c, MSG_DONTWAIT, &msg_flags);
    if (n < 0) errno = ECONNRESET;
  }
  fl_spin_observe(&c->spin, fl_htl_now_ns() - t0);
  if (n < 0) return broken(c, FL_ERROR_TRANSPORT, "receiving from the service failed", errno);
  if (n == 0) return broken(c, FL_ERROR_TRANSPORT, "the service closed the connection", 0);
  if ((msg_flags & MSG_TRUNC) != 0 || (size_t)n > MAX_FRAME)
    return broken(c, FL_ERROR_PROTOCOL, "the service sent a frame longer than 65536 bytes", 0);
  *out_len = (size_t)n;
  return NULL;
}

static FlStatus *error_reply(const uint8_t *body, size_t len) {
  if (len < 4) return fl_status(FL_ERROR_PROTOCOL, "the service sent an ERROR without a code");
  uint32_t code = get_u32(body);
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
  if (n < HEADER_SIZE + 4 || get_u32(p) != FRAME_MAGIC || get_u16(p + 4) != FRAME_VERSION ||
      get_u16(p + 6) != FL_KIND_ERROR || get_u32(p + 8) != 0 || get_u32(p + 12) != n - HEADER_SIZE)
    return NULL;
  return error_reply(p + HEADER_SIZE, n - HEADER_SIZE);
}

/* Sends the frame in send_buf and receives its reply. On success *body and *body_len describe
 * the reply body inside recv_buf. Caller holds the lock. */
static FlStatus *exchange_locked(FlClient *c, size_t frame_len, int fd, uint16_t kind,
                                 uint32_t request_id, const uint8_t **body, size_t *body_len) {
  FlStatus *st = send_frame(c, frame_len, fd);
  if (st != NULL) return st;
  size_t n = 0;
  st = recv_frame(c, &n);
  if (st != NULL) return st;
  const uint8_t *p = c->recv_buf;
  FlStatus *refused = refusal(p, n);
  if (refused != NULL) {
    c->broken = 1;
    close_locked(c);
    return refused;
  }
  if (n < HEADER_SIZE || get_u32(p) != FRAME_MAGIC)
    return broken(c, FL_ERROR_PROTOCOL, "the service's reply is not a fenceline frame", 0);
  if (get_u16(p + 4) != FRAME_VERSION)
    return broken(c, FL_ERROR_PROTOCOL, "the service speaks another protocol version", 0);
  uint16_t rkind = get_u16(p + 6);
  uint32_t rid = get_u32(p + 8);
  uint32_t len = get_u32(p + 12);
  if (len != n - HEADER_SIZE)
    return broken(c, FL_ERROR_PROTOCOL, "the service's reply has a wrong body_length", 0);
  /* request_id 0 is the service's answer to a frame it could not read at all. */
  if (rid != request_id && !(rkind == FL_KIND_ERROR && rid == 0))
    return broken(c, FL_ERROR_PROTOCOL, "the service's reply answers another request", 0);
  if (rkind == FL_KIND_ERROR) return error_reply(p + HEADER_SIZE, len);
  if (rkind != (kind | REPLY_BIT))
    return broken(c, FL_ERROR_PROTOCOL, "the service's reply is of the wrong kind", 0);
  *body = p + HEADER_SIZE;
  *body_len = len;
  return NULL;
}

static FlStatus *usable_locked(FlClient *c) {
  if (c->fd >= 0) return NULL;
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
  pthread_mutex_lock(&c->lock);
  FlStatus *st = usable_locked(c);
  const uint8_t *rbody = NULL;
  size_t rlen = 0;
  if (st == NULL) {
    uint32_t rid = next_id_locked(c);
    put_header(c->send_buf, kind, rid, (uint32_t)body_len);
    memcpy(c->send_buf + HEADER_SIZE, body, body_len);
    st = exchange_locked(c, HEADER_SIZE + body_len, fd, kind, rid, &rbody, &rlen);
  }
  if (st == NULL && fl_json_validate((const char *)rbody, rlen) != 0)
    st = broken(c, FL_ERROR_PROTOCOL, "the service's reply is not JSON", 0);
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
  pthread_mutex_unlock(&c->lock);
  return st;
}

FlStatus *fl_client_run(FlClient *c, uint16_t kind, const uint8_t session_id[16],
                        uint64_t wait_value, uint64_t signal_value, uint32_t timeout_ms,
                        FlRunResult *out) {
  pthread_mutex_lock(&c->lock);
  FlStatus *st = usable_locked(c);
  const uint8_t *rbody = NULL;
  size_t rlen = 0;
  if (st == NULL) {
    uint32_t rid = next_id_locked(c);
    uint8_t *p = c->send_buf;
    put_header(p, kind, rid, RUN_BODY_SIZE);
    uint8_t *b = p + HEADER_SIZE;
    memcpy(b + offsetof(FlWireRun, session_id), session_id, FL_WIRE_SESSION_ID_BYTES);
    put_u64(b + offsetof(FlWireRun, wait_value), wait_value);
    put_u64(b + offsetof(FlWireRun, signal_value), signal_value);
    put_u32(b + offsetof(FlWireRun, timeout_ms), timeout_ms);
    put_u32(b + offsetof(FlWireRun, flags), 0);
    /* RUN and RUN_ASYNC are both answered with a RUN reply. */
    st = exchange_locked(c, HEADER_SIZE + RUN_BODY_SIZE, -1, FL_KIND_RUN, rid, &rbody, &rlen);
  }
  if (st == NULL && rlen != RUN_REPLY_BODY_SIZE)
    st = broken(c, FL_ERROR_PROTOCOL, "the service's RUN reply has the wrong size", 0);
  if (st == NULL && out != NULL) {
    out->signal_value = get_u64(rbody + offsetof(FlWireRunReply, signal_value));
    out->wait_us = get_u32(rbody + offsetof(FlWireRunReply, wait_us));
    out->infer_us = get_u32(rbody + offsetof(FlWireRunReply, infer_us));
    out->total_us = get_u32(rbody + offsetof(FlWireRunReply, total_us));
    out->reserved = 0;
  }
  pthread_mutex_unlock(&c->lock);
  return st;
}

/* ---- create ------------------------------------------------------------------------------- */

FlStatus *fl_client_create(const char *path, const char *name, FlClient **out) {
  if (out == NULL) return fl_status(FL_ERROR_INVALID_ARGUMENT, "CreateClient: out is NULL");
  char default_path[256];
  if (path == NULL) {
    FlStatus *st = fl_default_socket_path(default_path, sizeof default_path);
    if (st != NULL) return st;
    path = default_path;
  }
  FlClient *c = calloc(1, sizeof *c);
  if (c == NULL) return fl_status(FL_ERROR_RESOURCE_EXHAUSTED, "out of memory");
  c->fd = -1;
  atomic_init(&c->refs, 1);
  fl_spin_init(&c->spin, DEFAULT_CLIENT_SPIN_NS);
  c->send_buf = malloc(MAX_FRAME);
  c->recv_buf = malloc(MAX_FRAME + 1);
  if (c->send_buf == NULL || c->recv_buf == NULL || pthread_mutex_init(&c->lock, NULL) != 0) {
    free(c->send_buf);
    free(c->recv_buf);
    free(c);
    return fl_status(FL_ERROR_RESOURCE_EXHAUSTED, "out of memory");
  }
  FlStatus *st = connect_socket(path, &c->fd);
  if (st == NULL) {
    char body[320];
    fl_json_writer w;
    fl_jw_init(&w, body, sizeof body);
    fl_jw_begin_object(&w);
    fl_jw_key(&w, "client");
    char label[200];
    snprintf(label, sizeof label, "%s", name != NULL ? name : "c");
    fl_jw_string(&w, label);
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
