#include "seqpacket.h"

#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "../common/host_timeline.h"
#include "errors.h"

namespace fl {

namespace {

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

}  // namespace

Message recv_message(int fd, std::size_t max_bytes, std::size_t max_fds, std::int64_t spin_ns) {
  // One extra byte tells a message of exactly max_bytes from a longer, truncated one even where
  // MSG_TRUNC is not reported.
  // Reused per thread: a fresh 64 KiB buffer per frame would cost more than the receive.
  thread_local std::string buf;
  thread_local std::vector<char> control;
  buf.resize(max_bytes + 1);
  const std::size_t control_size = CMSG_SPACE(sizeof(int) * (max_fds > 0 ? max_fds : 1));
  control.resize(control_size);
  int msg_flags = 0;
  auto transient = [] { return errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR; };
  ssize_t n = -1;
  bool hard_error = false;
  if (spin_ns > 0) {
    const std::int64_t end = fl_htl_now_ns() + spin_ns;
    for (unsigned i = 0;; ++i) {
      control.resize(control_size);
      n = recv_once(fd, buf, control, MSG_DONTWAIT, &msg_flags);
      if (n >= 0) break;
      if (!transient()) {
        hard_error = true;
        break;
      }
      fl_cpu_relax();
      if ((i & 15u) == 15u && fl_htl_now_ns() >= end) break;
    }
  }
  while (n < 0 && !hard_error) {
    struct pollfd p {
      fd, POLLIN, 0
    };
    if (::poll(&p, 1, -1) < 0 && errno == EINTR) continue;
    control.resize(control_size);
    n = recv_once(fd, buf, control, MSG_DONTWAIT, &msg_flags);
    if (n < 0 && !transient()) hard_error = true;
  }
  Message out;
  if (n < 0) {
    if (errno == ECONNRESET || errno == EBADF || errno == ENOTCONN) {
      out.eof = true;
      return out;
    }
    throw Error(Code::OsError, errno_message("recvmsg", errno));
  }
  out.fds = take_fds(control);
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
  out.data.assign(buf.data(), std::min(static_cast<std::size_t>(n), max_bytes));
  return out;
}

}  // namespace fl
