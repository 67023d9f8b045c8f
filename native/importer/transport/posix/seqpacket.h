// One SOCK_SEQPACKET message with its SCM_RIGHTS fds, each way. A receive tries once before it
// waits; a wait spins briefly, then blocks (a wakeup across CPUs costs tens of microseconds on
// a small machine, and a spin catches a prompt message), as the spin rule says
// (adaptive_spin.h, ../common/spin_rule.h).
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "engine/adaptive_spin.h"

namespace fl {

struct Message {
  std::string data;      // empty with eof set when the peer closed
  std::vector<int> fds;  // owned by the caller
  bool eof = false;
  // Set for a message that cannot be a frame: over max_bytes (data holds its first max_bytes),
  // over max_fds (its fds are closed already), or empty.
  std::string problem;
  bool pending = false;  // nothing came within the spin of a wait that may not block
  bool peer_exited = false;  // eof because the peer's process exited (recv_message's pidfd)
};

// One receive that never waits: true with `out` set when a message (or the peer's end) was
// there, false when the socket is empty. Throws OsError for failures of the socket itself.
bool try_recv_message(int fd, std::size_t max_bytes, std::size_t max_fds, Message &out);

// Receives one message once try_recv_message found the socket empty (so it does not try again
// before it waits): a spin of spin_ns (none when 0), then (with `block`) a block. Without
// `block` a wait that got nothing returns with `pending` set. A malformed message is consumed and described in `problem`. The block also
// watches `pidfd` (-1: none): once that process has exited it returns with eof and
// `peer_exited` set, leaving what it sent queued (purge_messages drops it). Throws OsError for
// failures of the socket itself.
Message recv_message(int fd, std::size_t max_bytes, std::size_t max_fds, std::int64_t spin_ns,
                     bool block, int pidfd = -1);

// A frame of the wire protocol, once try_recv_message found the socket empty, waited for as
// `spin` says: a spin of `budget_ns` while a slot of `gate` is free (none free: counted in
// spin.denied, and `budget_ns` becomes 0, the wait's way for spin.observe), then a block that
// watches pidfd (-1: none). Blocks: release the GIL around it. The caller observes the wait.
Message wait_frame(int fd, SpinGate &gate, ReceiveSpin &spin, std::int64_t &budget_ns,
                   int pidfd);

// A wait for the run page (../common/run_page.h) or the socket, whichever brings news first:
// true when `news()` (the page's RUN for the service, its reply for a client) said so, else
// false with `m` holding the socket's message (its peer's end, a malformed one: as wait_frame).
// NUDGE frames are read and dropped here. The spin, of `budget_ns` while a slot of `gate` is
// free (else counted in spin.denied, `budget_ns` then 0), looks at the page at every pause and
// at the socket every microsecond or so; the block sets `sleeping` (the page's word for this
// side), looks at the page once more, then blocks on the socket, which the other side nudges.
// Blocks: release the GIL around it. The caller observes the wait.
bool wait_page(int fd, SpinGate &gate, ReceiveSpin &spin, std::int64_t &budget_ns, int pidfd,
               std::uint32_t *sleeping, bool (*news)(void *), void *arg, Message &m);
// wait_page's two parts, for a waiter that holds its spinner slot already (a napping client):
// a spin of budget_ns (1: news; 0: `m` came; -1: nothing came), and a block. With `yield`, each
// turn of the spin gives the core to any thread that waits for it (sched_yield) instead of a
// pause: for a spin while a model's run may still need every core (after a nap), not for short
// spins between frames, where many yielding spinners on few cores trade the cores among
// themselves (64x64 with four renderers on two CPUs: 70-86 us p50 against 7-13 us).
int spin_page(int fd, std::int64_t budget_ns, bool (*news)(void *), void *arg, Message &m,
              bool yield = false);
bool block_page(int fd, int pidfd, std::uint32_t *sleeping, bool (*news)(void *), void *arg,
                Message &m);

// The NUDGE frame, a bare header: what one side sends to wake the other.
const std::array<std::uint8_t, 16> &nudge_frame();

// True when `m` is a NUDGE, which carries nothing to read (the run page has the news): its fds
// are closed and `m` is emptied.
bool drop_nudge(Message &m);

// One send without waiting: 0 when sent, EAGAIN when the socket's buffer is full (then
// send_waiting), else the errno.
int try_send_message(int fd, const char *data, std::size_t size);

// Sends one message once try_send_message found the socket full: waits while it stays full,
// for at most timeout_ns (< 0: no limit) and only while the process behind pidfd (-1: none)
// lives. 0 when sent; ETIMEDOUT when the time ran out; ESRCH when that process exited; else
// the send's errno (the peer closed its end). Blocks: release the GIL around it.
int send_waiting(int fd, const char *data, std::size_t size, int pidfd, std::int64_t timeout_ns);

// Reads and drops everything queued on a connection that is being closed, closing every fd
// those messages carried (a message may carry the peer's own end: dropping it lets that end
// go). The socket is shut down first so that nothing more arrives. Returns {messages, fds}.
struct Purged {
  std::size_t messages = 0, fds = 0;
};
Purged purge_messages(int fd);

// True once the process behind `pidfd` has exited (a poll that does not wait); false for -1.
bool process_exited(int pidfd);

// The process at the other end of a connection (the one that connected: SO_PEERCRED's), watched
// through a pidfd, so that its exit ends every wait on the connection even where the socket
// never hangs up: a renderer can queue its own end in a message to the service and die, and the
// only reference to that end is then in the service's receive queue. The pidfd comes from
// SO_PEERPIDFD (Linux 6.5: it names the very process that connected), else pidfd_open of the
// SO_PEERCRED pid (Linux 5.3); without either the connection is watched by its hangup alone,
// and `liveness()` says why.
class PeerProcess {
 public:
  explicit PeerProcess(int sock);  // never throws
  ~PeerProcess();
  PeerProcess(const PeerProcess &) = delete;
  PeerProcess &operator=(const PeerProcess &) = delete;

  int pidfd() const { return pidfd_; }  // -1: not watched (see liveness), or closed
  int pid() const { return pid_; }      // SO_PEERCRED's, 0 when not visible here
  const std::string &liveness() const { return liveness_; }
  // True once the process has exited (a poll of the pidfd that does not wait), or when it had
  // exited before the connection was taken.
  bool exited() const;
  void close();

 private:
  int pidfd_ = -1;
  int pid_ = 0;
  bool gone_ = false;
  std::string liveness_;
};

}  // namespace fl
