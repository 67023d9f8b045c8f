/* The service's SOCK_SEQPACKET Unix socket: one message per frame, fds passed as SCM_RIGHTS. */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "fenceline_wire_io.h"
#include "platform/transport.h"

struct fl_conn {
  int fd;
  FlRunPage *page; /* the run page, NULL without one */
  int page_fd;     /* its memfd until fl_conn_page_keep, else -1 */
};

FlStatus *fl_conn_default_path(char *buf, size_t size) {
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

FlStatus *fl_conn_open(const char *path, int64_t deadline_ns, fl_conn **out) {
  /* A Unix socket connect does not block on a live listener (the backlog takes it), so the
   * deadline only matters for the exchanges that follow. */
  (void)deadline_ns;
  struct sockaddr_un addr;
  memset(&addr, 0, sizeof addr);
  addr.sun_family = AF_UNIX;
  if (strlen(path) >= sizeof addr.sun_path)
    return fl_status(FL_ERROR_INVALID_ARGUMENT, "socket path is longer than %zu bytes: %s",
                     sizeof addr.sun_path - 1, path);
  memcpy(addr.sun_path, path, strlen(path) + 1);
  fl_conn *c = malloc(sizeof *c);
  if (c == NULL) return fl_status(FL_ERROR_RESOURCE_EXHAUSTED, "out of memory");
  c->page = NULL;
  c->page_fd = -1;
  int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
  if (fd < 0) {
    free(c);
    return fl_status_errno("socket", errno);
  }
  int rc;
  do {
    rc = connect(fd, (struct sockaddr *)&addr, sizeof addr);
  } while (rc != 0 && errno == EINTR);
  if (rc != 0) {
    int err = errno;
    close(fd);
    free(c);
    return fl_status(FL_ERROR_TRANSPORT,
                     "cannot connect to the fenceline socket %s: %s (is `fenceline serve` "
                     "running?)",
                     path, strerror(err));
  }
  c->fd = fd;
  *out = c;
  return NULL;
}

void fl_conn_close(fl_conn *c) {
  if (c == NULL) return;
  fl_conn_page_keep(c, 0);
  close(c->fd);
  free(c);
}

/* Milliseconds poll may sleep before the deadline: -1 without one, rounded up so a wait never
 * ends just short of it. */
static int poll_ms(int64_t deadline_ns) {
  if (deadline_ns < 0) return -1;
  int64_t left = deadline_ns - fl_htl_now_ns();
  if (left <= 0) return 0;
  int64_t ms = (left + 999999) / 1000000;
  return ms > 1000000 ? 1000000 : (int)ms;
}

FlStatus *fl_conn_send(fl_conn *c, const uint8_t *buf, size_t len, int fd, int64_t deadline_ns,
                       int *fatal) {
  struct iovec iov = {(void *)buf, len};
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
  *fatal = 1;
  for (;;) {
    /* Non-blocking, so a service that stopped reading cannot hold us past the deadline; MSG_NOSIGNAL:
     * a dead service must not SIGPIPE the renderer. */
    ssize_t n = sendmsg(c->fd, &msg, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n >= 0) return NULL;
    int err = errno;
    if (err == EINTR) continue;
    if (err == EAGAIN || err == EWOULDBLOCK) {
      int ms = poll_ms(deadline_ns);
      if (ms == 0) return fl_status(FL_ERROR_TIMED_OUT, "the service stopped reading");
      struct pollfd p = {c->fd, POLLOUT, 0};
      if (poll(&p, 1, ms) < 0 && errno != EINTR)
        return fl_status(FL_ERROR_TRANSPORT, "poll on the service socket failed: %s",
                         strerror(errno));
      continue;
    }
    if (err == EBADF && fd >= 0) { /* the caller's fd, not the socket */
      *fatal = 0;
      return fl_status(FL_ERROR_INVALID_ARGUMENT, "fd %d is not an open file descriptor", fd);
    }
    return fl_status(FL_ERROR_TRANSPORT, "sending to the service failed: %s", strerror(err));
  }
}

static ssize_t recv_once(fl_conn *c, uint8_t *buf, size_t cap, int *msg_flags) {
  struct iovec iov = {buf, cap};
  union {
    char buf[CMSG_SPACE(sizeof(int) * FL_WIRE_MAX_FDS)];
    struct cmsghdr align;
  } control;
  struct msghdr msg;
  memset(&msg, 0, sizeof msg);
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  msg.msg_control = control.buf;
  msg.msg_controllen = sizeof control.buf;
  ssize_t n = recvmsg(c->fd, &msg, MSG_DONTWAIT | MSG_CMSG_CLOEXEC);
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

FlStatus *fl_conn_recv(fl_conn *c, uint8_t *buf, size_t cap, size_t *len, int64_t spin_ns,
                       int64_t deadline_ns) {
  int msg_flags = 0;
  ssize_t n = -1;
  errno = EAGAIN; /* "nothing received yet" when there is no spin */
  if (spin_ns > 0) {
    int64_t end = fl_htl_now_ns() + spin_ns;
    for (unsigned i = 0;; ++i) {
      n = recv_once(c, buf, cap, &msg_flags);
      if (n >= 0 || !transient(errno)) break;
      fl_cpu_relax_ns(FL_RECV_RETRY_NS); /* the socket's lock is the service's send's too */
      if ((i & 3u) == 3u && fl_htl_now_ns() >= end) break;
    }
  }
  while (n < 0 && transient(errno)) {
    n = recv_once(c, buf, cap, &msg_flags);
    if (n >= 0 || !transient(errno)) break;
    int ms = poll_ms(deadline_ns);
    if (ms == 0) return fl_status(FL_ERROR_TIMED_OUT, "no reply from the service");
    struct pollfd p = {c->fd, POLLIN, 0};
    if (poll(&p, 1, ms) < 0 && errno != EINTR)
      return fl_status(FL_ERROR_TRANSPORT, "poll on the service socket failed: %s",
                       strerror(errno));
    errno = EAGAIN;
  }
  if (n < 0 && errno == ECONNRESET) {
    /* The service closed while our request was unread. The error is reported once; what it
     * sent before closing (a refusal, say) is still queued behind it. */
    n = recv_once(c, buf, cap, &msg_flags);
    if (n < 0) errno = ECONNRESET;
  }
  if (n < 0)
    return fl_status(FL_ERROR_TRANSPORT, "receiving from the service failed: %s",
                     strerror(errno));
  if (n == 0) return fl_status(FL_ERROR_TRANSPORT, "the service closed the connection");
  *len = (msg_flags & MSG_TRUNC) != 0 ? cap : (size_t)n;
  return NULL;
}

/* ---- the run page ------------------------------------------------------------------------- */

FlStatus *fl_conn_page_make(fl_conn *c, int *fd) {
  *fd = -1;
  int m = memfd_create("fenceline-run-page", MFD_CLOEXEC | MFD_ALLOW_SEALING);
  if (m < 0) return fl_status_errno("memfd_create", errno);
  if (ftruncate(m, FL_RUN_PAGE_SIZE) != 0 ||
      fcntl(m, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) != 0) {
    FlStatus *st = fl_status_errno("sealing the run page", errno);
    close(m);
    return st;
  }
  void *p = mmap(NULL, FL_RUN_PAGE_SIZE, PROT_READ | PROT_WRITE, MAP_SHARED, m, 0);
  if (p == MAP_FAILED) {
    FlStatus *st = fl_status_errno("mmap of the run page", errno);
    close(m);
    return st;
  }
  fl_conn_page_keep(c, 0);
  c->page = (FlRunPage *)p;
  c->page_fd = m;
  *fd = m;
  return NULL;
}

void fl_conn_page_keep(fl_conn *c, int taken) {
  if (c->page_fd >= 0) close(c->page_fd);
  c->page_fd = -1;
  if (!taken && c->page != NULL) {
    munmap(c->page, FL_RUN_PAGE_SIZE);
    c->page = NULL;
  }
}

int fl_conn_has_page(const fl_conn *c) { return c->page != NULL; }

/* What waits on the socket: 1 when a NUDGE was there (taken), 0 when another message (or the
 * service's end) is, left for fl_conn_recv; -1 when nothing is. */
static int socket_news(fl_conn *c) {
  uint8_t head[FL_WIRE_HEADER_SIZE + 1];
  ssize_t n = recv(c->fd, head, sizeof head, MSG_PEEK | MSG_DONTWAIT);
  if (n < 0) return transient(errno) ? -1 : 0;
  FlWireHeader h;
  if (n != FL_WIRE_HEADER_SIZE || !fl_wire_header_ok(head, (size_t)n, &h) ||
      h.kind != FL_KIND_NUDGE)
    return 0;
  int flags = 0;
  recv_once(c, head, sizeof head, &flags); /* a NUDGE carries nothing (any fd is closed) */
  return 1;
}

FlStatus *fl_conn_page_run(fl_conn *c, const FlRunPageRun *run, int64_t spin_ns,
                           int64_t deadline_ns, FlRunPageReply *reply, int *answered) {
  FlRunPage *page = c->page;
  *answered = 0;
  if (fl_run_page_post(page, 1u, run)) {
    uint8_t nudge[FL_WIRE_HEADER_SIZE];
    int fatal = 0;
    fl_wire_put_header(nudge, FL_KIND_NUDGE, 0, 0);
    FlStatus *st = fl_conn_send(c, nudge, sizeof nudge, -1, deadline_ns, &fatal);
    if (st != NULL) return st;
  }
  int got = fl_run_page_reply(page, 1u, run->seq, reply);
  if (!got && spin_ns > 0) {
    int64_t end = fl_htl_now_ns() + spin_ns;
    for (unsigned i = 1; !(got = fl_run_page_reply(page, 1u, run->seq, reply)); ++i) {
      /* The socket every microsecond or so: a reply sent there, or the service's end. */
      if ((i & 31u) == 0 && socket_news(c) == 0) return NULL;
      fl_cpu_pause();
      if ((i & 63u) == 0 && fl_htl_now_ns() >= end) break;
    }
  }
  while (!got) {
    /* What the socket holds goes first: NUDGEs (one may be stale: sent while an earlier wait
     * found its reply on the page at once), and any other message ends the wait. */
    int news;
    while ((news = socket_news(c)) == 1) {
    }
    if (news == 0) break;
    fl_run_page_sleeping(&page->client_sleeping, 1);
    if ((got = fl_run_page_reply(page, 1u, run->seq, reply))) break;
    news = socket_news(c);
    if (news == 0) break;
    if (news < 0) {
      int ms = poll_ms(deadline_ns);
      if (ms == 0) {
        fl_run_page_sleeping(&page->client_sleeping, 0);
        return fl_status(FL_ERROR_TIMED_OUT, "no reply from the service");
      }
      struct pollfd p = {c->fd, POLLIN, 0};
      if (poll(&p, 1, ms) < 0 && errno != EINTR) {
        fl_run_page_sleeping(&page->client_sleeping, 0);
        return fl_status(FL_ERROR_TRANSPORT, "poll on the service socket failed: %s",
                         strerror(errno));
      }
    }
  }
  fl_run_page_sleeping(&page->client_sleeping, 0);
  if (!got) got = fl_run_page_reply(page, 1u, run->seq, reply);
  *answered = got && reply->status == FL_RUN_PAGE_ANSWERED;
  return NULL;
}
