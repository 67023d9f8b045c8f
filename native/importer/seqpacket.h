// One SOCK_SEQPACKET message with its SCM_RIGHTS fds, each way. A receive tries once before it
// waits; a wait may nap on a timer first, then spins briefly, then blocks (a wakeup across CPUs
// costs ~70 us on a small machine: a nap pays it before the message comes, a spin catches a
// prompt one). The plan of each wait comes from fenceline.waiting.AdaptiveSpin.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace fl {

struct Message {
  std::string data;      // empty with eof set when the peer closed
  std::vector<int> fds;  // owned by the caller
  bool eof = false;
  // Set for a message that cannot be a frame: over max_bytes (data holds its first max_bytes),
  // over max_fds (its fds are closed already), or empty.
  std::string problem;
  // How much later than planned a nap that ran its whole length ended (timer slack and the
  // wakeup); -1 when there was no nap or the message came during it.
  std::int64_t nap_late_ns = -1;
  bool pending = false;  // nothing came within the nap and spin of a wait that may not block
};

// One receive that never waits: true with `out` set when a message (or the peer's end) was
// there, false when the socket is empty. Throws OsError for failures of the socket itself.
bool try_recv_message(int fd, std::size_t max_bytes, std::size_t max_fds, Message &out);

// Receives one message once try_recv_message found the socket empty (so it does not try again
// before it waits): a nap of nap_ns on a timer, a spin of spin_ns, then (with `block`) a
// block; each part is skipped when 0. Without `block` a wait that got nothing returns with
// `pending` set. A malformed message is consumed and described in `problem`. Throws OsError
// for failures of the socket itself.
Message recv_message(int fd, std::size_t max_bytes, std::size_t max_fds, std::int64_t nap_ns,
                     std::int64_t spin_ns, bool block);

// One send without waiting: 0 when sent, EAGAIN when the socket's buffer is full (then
// wait_writable and try again), else the errno.
int try_send_message(int fd, const char *data, std::size_t size);
// Blocks until the socket can take a message (or has failed: the send then says why).
void wait_writable(int fd);

}  // namespace fl
