// Receiving one SOCK_SEQPACKET message with its SCM_RIGHTS fds, spinning briefly before it
// blocks (a wakeup across CPUs costs ~70 us on a small machine; a spin catches a prompt reply).
#pragma once

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
};

// Receives one message; a malformed one is consumed and described in `problem`. Throws OsError
// for failures of the socket itself. spin_ns 0 blocks at once.
Message recv_message(int fd, std::size_t max_bytes, std::size_t max_fds, std::int64_t spin_ns);

}  // namespace fl
