#include "seqpacket.h"

#include <fcntl.h>
#include <poll.h>
#include <sched.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <ctime>
#include <limits>

#include "common/fenceline_wire.h"
#include "common/fenceline_wire_io.h"
#include "common/run_page.h"
#include "common/host_timeline.h"
#include "core/errors.h"

#ifndef SO_PEERPIDFD
#define SO_PEERPIDFD 77  // Linux 6.5; older headers lack it, older kernels answer ENOPROTOOPT
#endif
#ifndef SYS_pidfd_open
#define SYS_pidfd_open 434  // the same number on every architecture but alpha
#endif

namespace fl {

namespace {

// The most fds one queued message can carry (SCM_MAX_FD): a purge takes them all.
constexpr std::size_t FL_PURGE_MAX_FDS = 253;

// One recvmsg; returns bytes received, 0 at EOF, -1 with errno.
ssize_t recv_once(int fd, std::string &buf, std::vector<char> &control, int flags,
                  int *msg_flags) {
  struct iovec iov {
    buf.data(), buf.size()
  };
  struct msghdr msg {};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  msg.msg_control = control.data();
  msg.msg_controllen = control.size();
  ssize_t n = ::recvmsg(fd, &msg, flags | MSG_CMSG_CLOEXEC);
  if (n >= 0) {
    *msg_flags = msg.msg_flags;
    control.resize(msg.msg_controllen);
  }
  return n;
}

std::vector<int> take_fds(const std::vector<char> &control) {
  std::vector<int> fds;
  struct msghdr msg {};
  msg.msg_control = const_cast<char *>(control.data());
  msg.msg_controllen = control.size();
  for (struct cmsghdr *c = CMSG_FIRSTHDR(&msg); c != nullptr; c = CMSG_NXTHDR(&msg, c)) {
    if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_RIGHTS) {
      const std::size_t n = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
      const int *p = reinterpret_cast<const int *>(CMSG_DATA(c));
      for (std::size_t i = 0; i < n; ++i) {
        int f;
        std::memcpy(&f, p + i, sizeof(int));
        fds.push_back(f);
      }
    }
  }
  return fds;
}

bool transient(int err) { return err == EAGAIN || err == EWOULDBLOCK || err == EINTR; }

// The per-thread receive buffers: a fresh 64 KiB buffer per frame would cost more than the
// receive. One extra byte tells a message of exactly max_bytes from a longer, truncated one even
// where MSG_TRUNC is not reported.
struct Buffers {
  std::string buf;
  std::vector<char> control;
  std::size_t control_size = 0;

  void prepare(std::size_t max_bytes, std::size_t max_fds) {
    buf.resize(max_bytes + 1);
    control_size = CMSG_SPACE(sizeof(int) * (max_fds > 0 ? max_fds : 1));
    control.resize(control_size);
  }
  ssize_t once(int fd, int *msg_flags) {
    control.resize(control_size);
    return recv_once(fd, buf, control, MSG_DONTWAIT, msg_flags);
  }
  // Blocks on a blocking socket (EAGAIN at once on a non-blocking one).
  ssize_t blocking(int fd, int *msg_flags) {
    control.resize(control_size);
    return recv_once(fd, buf, control, 0, msg_flags);
  }
};

thread_local Buffers buffers;

// What one successful recvmsg of n bytes (n >= 0) received.
Message finish(int fd, ssize_t n, int msg_flags, std::size_t max_bytes, std::size_t max_fds) {
  Message out;
  out.fds = take_fds(buffers.control);
  if (n == 0 && out.fds.empty()) {
    // recvmsg returns 0 both at end-of-file and for an empty message; only the first leaves
    // the socket hung up.
    struct pollfd p {
      fd, POLLRDHUP, 0
    };
    const int ready = ::poll(&p, 1, 0);
    if (ready < 0 || (ready == 1 && (p.revents & (POLLHUP | POLLRDHUP | POLLERR)) != 0)) {
      out.eof = true;
    } else {
      out.problem = "empty frame: every frame starts with the 16-byte header";
    }
    return out;
  }
  const bool too_many_fds = (msg_flags & MSG_CTRUNC) != 0 || out.fds.size() > max_fds;
  const bool too_long = (msg_flags & MSG_TRUNC) != 0 || static_cast<std::size_t>(n) > max_bytes;
  if (too_many_fds || too_long) {
    for (int f : out.fds) ::close(f);
    out.fds.clear();
    out.problem = too_long ? "frame longer than " + std::to_string(max_bytes) + " bytes"
                           : "frame carries more than " + std::to_string(max_fds) + " fds";
  }
  out.data.assign(buffers.buf.data(), std::min(static_cast<std::size_t>(n), max_bytes));
  return out;
}

// A failed recvmsg that is not transient: the peer's end, or an error to raise.
Message failed(int err) {
  if (err == ECONNRESET || err == EBADF || err == ENOTCONN) {
    Message out;
    out.eof = true;
    return out;
  }
  throw Error(Code::OsError, errno_message("recvmsg", err));
}

}  // namespace

bool try_recv_message(int fd, std::size_t max_bytes, std::size_t max_fds, Message &out) {
  buffers.prepare(max_bytes, max_fds);
  int msg_flags = 0;
  const ssize_t n = buffers.once(fd, &msg_flags);
  if (n >= 0) {
    out = finish(fd, n, msg_flags, max_bytes, max_fds);
    return true;
  }
  if (transient(errno)) return false;
  out = failed(errno);
  return true;
}

Message recv_message(int fd, std::size_t max_bytes, std::size_t max_fds, std::int64_t spin_ns,
                     bool block, int pidfd) {
  // Called after try_recv_message found the socket empty: only a spin or a wakeup gives a
  // reason to try again.
  buffers.prepare(max_bytes, max_fds);
  int msg_flags = 0;
  ssize_t n = -1;
  int err = EAGAIN;
  auto attempt = [&] {
    n = buffers.once(fd, &msg_flags);
    err = n < 0 ? errno : 0;
    return n >= 0 || !transient(err);
  };
  bool done = false;
  if (spin_ns > 0) {
    const std::int64_t end = fl_htl_now_ns() + spin_ns;
    for (unsigned i = 0; !(done = attempt()); ++i) {
      fl_cpu_relax_ns(FL_RECV_RETRY_NS);  // the socket's lock is the sender's too
      if ((i & 3u) == 3u && fl_htl_now_ns() >= end) break;
    }
  }
  if (!done && !block) {
    Message out;
    out.pending = true;
    return out;
  }
  if (!done && pidfd < 0) {
    // Nothing but the socket to watch: a receive that blocks is one system call after the
    // wakeup where a poll and then a receive are two. A non-blocking socket answers EAGAIN at
    // once, and is polled below.
    do {
      n = buffers.blocking(fd, &msg_flags);
      err = n < 0 ? errno : 0;
    } while (err == EINTR);
    done = n >= 0 || !transient(err);
  }
  while (!done) {
    struct pollfd p[2] = {{fd, POLLIN, 0}, {pidfd, POLLIN, 0}};
    if (::poll(p, pidfd >= 0 ? 2 : 1, -1) < 0) {
      if (errno == EINTR) continue;
    } else if (pidfd >= 0 && (p[1].revents & POLLIN) != 0) {
      // The process is gone: what it left queued is nobody's (purge_messages drops it).
      Message out;
      out.eof = true;
      out.peer_exited = true;
      return out;
    }
    done = attempt();
  }
  return n < 0 ? failed(err) : finish(fd, n, msg_flags, max_bytes, max_fds);
}

Message wait_frame(int fd, SpinGate &gate, ReceiveSpin &spin, std::int64_t &budget_ns,
                   int pidfd) {
  if (budget_ns > 0) {
    SpinSlot slot(gate);  // given back before the block
    if (slot) {
      Message m = recv_message(fd, FL_WIRE_MAX_FRAME, FL_WIRE_MAX_FDS, budget_ns, false);
      if (!m.pending) return m;
    } else {
      ++spin.denied;
      budget_ns = 0;
    }
  }
  return recv_message(fd, FL_WIRE_MAX_FRAME, FL_WIRE_MAX_FDS, 0, true, pidfd);
}

const std::array<std::uint8_t, 16> &nudge_frame() {
  static_assert(FL_WIRE_HEADER_SIZE == 16, "a NUDGE is one header");
  static const auto frame = [] {
    std::array<std::uint8_t, 16> f{};
    fl_wire_put_header(f.data(), FL_KIND_NUDGE, 0, 0);
    return f;
  }();
  return frame;
}

bool drop_nudge(Message &m) {
  FlWireHeader h;
  if (!m.problem.empty() || m.eof || m.data.size() != FL_WIRE_HEADER_SIZE ||
      !fl_wire_header_ok(reinterpret_cast<const std::uint8_t *>(m.data.data()), m.data.size(),
                         &h) ||
      h.kind != FL_KIND_NUDGE)
    return false;
  for (int f : m.fds) ::close(f);
  m = Message();
  return true;
}

int spin_page(int fd, std::int64_t budget_ns, bool (*news)(void *), void *arg, Message &m,
              bool yield) {
  const std::int64_t end = fl_htl_now_ns() + budget_ns;
  for (unsigned i = 1;; ++i) {
    if (news(arg)) return 1;
    // The socket: a frame that is not for the page (a control request, an error), or the
    // peer's end. Each look is a system call: one every 32 pauses (about a microsecond), or
    // every fourth yield.
    if ((i & (yield ? 3u : 31u)) == 0 &&
        try_recv_message(fd, FL_WIRE_MAX_FRAME, FL_WIRE_MAX_FDS, m) && !drop_nudge(m))
      return 0;
    if (yield) {
      ::sched_yield();
      if (fl_htl_now_ns() >= end) return -1;
      continue;
    }
    fl_cpu_pause();
    if ((i & 63u) == 0 && fl_htl_now_ns() >= end) return -1;
  }
}

bool block_page(int fd, int pidfd, std::uint32_t *sleeping, bool (*news)(void *), void *arg,
                Message &m) {
  for (;;) {
    // What the socket holds goes first: NUDGEs (one may be stale: sent while an earlier wait
    // found its news on the page at once), and any other message ends the wait.
    while (try_recv_message(fd, FL_WIRE_MAX_FRAME, FL_WIRE_MAX_FDS, m))
      if (!drop_nudge(m)) return false;
    fl_run_page_sleeping(sleeping, 1);
    if (news(arg)) {
      fl_run_page_sleeping(sleeping, 0);
      return true;
    }
    m = recv_message(fd, FL_WIRE_MAX_FRAME, FL_WIRE_MAX_FDS, 0, true, pidfd);
    fl_run_page_sleeping(sleeping, 0);
    if (!drop_nudge(m)) return false;
  }
}

bool wait_page(int fd, SpinGate &gate, ReceiveSpin &spin, std::int64_t &budget_ns, int pidfd,
               std::uint32_t *sleeping, bool (*news)(void *), void *arg, Message &m) {
  if (budget_ns > 0) {
    SpinSlot slot(gate);  // given back before the block
    if (slot) {
      const int r = spin_page(fd, budget_ns, news, arg, m);
      if (r >= 0) return r == 1;
    } else {
      ++spin.denied;
      budget_ns = 0;
    }
  }
  return block_page(fd, pidfd, sleeping, news, arg, m);
}

int try_send_message(int fd, const char *data, std::size_t size) {
  for (;;) {
    if (::send(fd, data, size, MSG_DONTWAIT | MSG_NOSIGNAL) >= 0) return 0;
    if (errno == EINTR) continue;
    return errno == EWOULDBLOCK ? EAGAIN : errno;
  }
}

int send_waiting(int fd, const char *data, std::size_t size, int pidfd, std::int64_t timeout_ns) {
  const std::int64_t deadline = timeout_ns < 0 ? -1 : fl_htl_now_ns() + timeout_ns;
  for (;;) {
    int wait_ms = -1;
    if (deadline >= 0) {
      const std::int64_t left = deadline - fl_htl_now_ns();
      if (left <= 0) return ETIMEDOUT;
      // Rounded up: a poll that ends a little early only polls again.
      wait_ms = static_cast<int>(
          std::min<std::int64_t>((left + 999999) / 1000000, std::numeric_limits<int>::max()));
    }
    struct pollfd p[2] = {{fd, POLLOUT, 0}, {pidfd, POLLIN, 0}};
    const int ready = ::poll(p, pidfd >= 0 ? 2 : 1, wait_ms);
    if (ready < 0 && errno != EINTR) return errno;
    if (ready > 0 && pidfd >= 0 && (p[1].revents & POLLIN) != 0) return ESRCH;
    // Writable, failed (the send says why), interrupted or timed out: try; a full socket waits
    // again until the deadline.
    const int err = try_send_message(fd, data, size);
    if (err != EAGAIN) return err;
  }
}

Purged purge_messages(int fd) {
  Purged out;
  ::shutdown(fd, SHUT_RDWR);
  // What can be queued is bounded by the socket's receive buffer; the bound on rounds only
  // keeps a socket that misbehaves from holding the caller.
  std::string buf(1, '\0');
  std::vector<char> control;
  for (int round = 0; round < 65536; ++round) {
    control.assign(CMSG_SPACE(sizeof(int) * FL_PURGE_MAX_FDS), 0);
    int msg_flags = 0;
    const ssize_t n = recv_once(fd, buf, control, MSG_DONTWAIT | MSG_TRUNC, &msg_flags);
    if (n < 0) {
      if (errno == EINTR) continue;
      break;  // EAGAIN: nothing left
    }
    const std::vector<int> fds = take_fds(control);
    for (int f : fds) ::close(f);
    out.fds += fds.size();
    if (n == 0 && fds.empty()) break;  // the end (shut down), or an empty message
    ++out.messages;
  }
  return out;
}

PeerProcess::PeerProcess(int sock) {
  struct ucred cred {};
  socklen_t len = sizeof cred;
  if (::getsockopt(sock, SOL_SOCKET, SO_PEERCRED, &cred, &len) == 0) pid_ = cred.pid;
  int pidfd = -1;
  len = sizeof pidfd;
  if (::getsockopt(sock, SOL_SOCKET, SO_PEERPIDFD, &pidfd, &len) == 0 && pidfd >= 0) {
    pidfd_ = pidfd;
    liveness_ = "pidfd (SO_PEERPIDFD)";
  } else if (errno == ESRCH) {
    gone_ = true;
    liveness_ = "the process that connected has exited";
  } else if (pid_ <= 0) {
    liveness_ = "socket hangup only: the peer's pid is not visible here (another pid namespace)";
  } else {
    const long fd = ::syscall(SYS_pidfd_open, pid_, 0);
    if (fd >= 0) {
      pidfd_ = static_cast<int>(fd);
      liveness_ = "pidfd (pidfd_open of the SO_PEERCRED pid)";
    } else if (errno == ESRCH) {
      gone_ = true;
      liveness_ = "the process that connected has exited";
    } else {
      liveness_ = "socket hangup only: " + errno_message("pidfd_open", errno) +
                  (errno == ENOSYS ? " (pidfds need Linux 5.3)" : "");
    }
  }
  if (pidfd_ >= 0) ::fcntl(pidfd_, F_SETFD, FD_CLOEXEC);
}

PeerProcess::~PeerProcess() { close(); }

bool process_exited(int pidfd) {
  if (pidfd < 0) return false;
  struct pollfd p {
    pidfd, POLLIN, 0
  };
  return ::poll(&p, 1, 0) > 0 && (p.revents & POLLIN) != 0;
}

bool PeerProcess::exited() const { return gone_ || process_exited(pidfd_); }

void PeerProcess::close() {
  if (pidfd_ >= 0) ::close(pidfd_);
  pidfd_ = -1;
}

}  // namespace fl
