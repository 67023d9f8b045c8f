/* The service's SOCK_SEQPACKET Unix socket: one message per frame, fds passed as SCM_RIGHTS. */
#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "platform/transport.h"

struct fl_conn {
  int fd;
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
