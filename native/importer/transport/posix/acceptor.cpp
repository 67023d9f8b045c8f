// The Unix socket's accept loop (fenceline.ipc.server), run by its accept thread with the GIL
// released: a flood of connections that the service refuses costs its Python side nothing
// (docs/reliability.md, "Connections").
//
// The loop accepts every connection waiting (one wakeup takes a batch), reads the peer's uid
// (SO_PEERCRED) and looks it up in the refusal table that Python keeps: a frame for every uid
// while the total limit is reached, a frame per uid at its own limit or not on the allow-list.
// A connection the table refuses is refused here; any other goes to Python, which decides (the
// limits are counted there, once) and admits it or hands it back through refuse().
//
// A refused peer gets its answer as the reply to its first request (so a client reads it where
// it reads its HELLO reply), then the service's end is shut down for writing and read until the
// peer closes: closing a Unix socket with unread data would reset the peer before it read the
// answer. Each refusal is held for at most grace_s once answered.
//
// The answers the table gives one uid are paced: a burst of `burst`, then `per_s` a second. A
// uid past that waits, its connection accepted but unanswered, for its turn: a flooder that
// waits for its answers (as every client does) sleeps meanwhile instead of taking a CPU, and
// the service spends at most per_s answers' worth of CPU a second on it. At most `burst` of
// one uid's connections wait at once, and at most max_pending refused connections are held
// at once, answering and waiting; one past either is closed at once without an answer.
// Whatever fds a refused peer sends are closed by the kernel (nothing is received with them).
//
// A connection the table does not refuse, of a uid Python named as allowed (greet()), while
// that uid's connections and all connections, Python's (admitted()) and those greeted here
// together, are below the limits greet() was given, is greeted here: its HELLO is answered with
// the reply Python made for the features it asks for (the request id set) and nothing more
// happens until its next frame, its end or greet_s: a connection that only says HELLO and
// closes never reaches Python (no thread, no interpreter time). Its next frame, one this loop
// does not answer (anything but a HELLO greeting.h reads: fds, another kind, a name it does not
// read as printable ASCII), or greet_s without either hands it to Python, that frame still
// queued, with the features its HELLO was answered for and the client's name, which Python
// logs as it logs a HELLO it answers. The
// greetings are paced as the refusals are, in the same uid's bucket, and held within
// max_pending with them; past the pace's waiting room one is closed unanswered, past
// max_pending it goes to Python at once.
//
// When the process is out of fds, the loop sheds one waiting connection with the out-of-fds
// frame through an fd held in reserve, stops listening for a backoff (10 ms doubling to
// 500 ms) and tries again; Python hears of each round, and of accepting again.
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>
#include <pybind11/typing.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "common/fenceline_wire_io.h"
#include "common/host_timeline.h"
#include "core/errors.h"
#include "greeting.h"

namespace py = pybind11;

namespace fl {
namespace {

using Frame = std::shared_ptr<const std::string>;

constexpr std::int64_t kMs = 1000000;
constexpr std::int64_t kBackoffFirstNs = 10 * kMs, kBackoffMostNs = 500 * kMs;
constexpr std::int64_t kReportEveryNs = 1000 * kMs;  // refusals made here, told to Python
constexpr int kBatch = 64;                           // accepts per wakeup, at most
constexpr std::size_t kMostUids = 65536;             // entries of the per-uid table, at most
constexpr std::size_t kMostGreeted = 65536;          // uids greet() names, at most

bool out_of_fds(int err) {
  return err == EMFILE || err == ENFILE || err == ENOBUFS || err == ENOMEM;
}

Frame frame_of(const py::bytes &b) {
  std::string s = b;
  FlWireHeader h;
  if (!fl_wire_header_ok(reinterpret_cast<const std::uint8_t *>(s.data()), s.size(), &h) ||
      h.kind != FL_KIND_ERROR || h.body_length < 4)
    throw py::value_error("a refusal is an encoded ERROR frame");
  return std::make_shared<const std::string>(std::move(s));
}

struct Held {
  Frame frame;
  std::uint64_t seq = 0;
};

// A connection waiting for its uid's turn: refused with `frame`, or greeted (none).
struct Waiting {
  int fd = -1, pid = 0;
  Frame frame;
};

// One uid's pace: tokens refill at per_s up to burst; connections wait in order for one.
struct Bucket {
  double tokens = 0;
  std::int64_t at = 0;
  std::deque<Waiting> waiting;
};

// A connection being greeted: its peer, its file status flags to give back with it, and the
// features its last HELLO answered here asked for (bits of greet()'s names) and the client's
// name it gave ("?": none; no value: no HELLO answered here), which Python logs.
struct Greeting {
  std::uint32_t uid = 0;
  int pid = 0, flags = 0;
  std::uint64_t seq = 0;
  std::uint32_t features = 0;
  std::optional<std::string> client;
};

// greet()'s HELLO replies, one for each set of the features it names (replies[bits]).
struct Hello {
  std::vector<std::string> replies, features;
  std::size_t max_features = 0;
};
constexpr std::size_t kMostFeatures = 8;  // names greet() takes, at most (2^8 replies)

// What the loop tells Python.
struct Event {
  enum Kind { None, Stopped, Peer, OutOfFds, Accepting, Refused, Failed } kind = None;
  int fd = -1, pid = 0, err = 0;
  std::uint32_t uid = 0, features = 0;
  std::optional<std::string> client;
  std::vector<std::tuple<std::uint32_t, std::uint32_t, std::uint64_t>> refused;
};

class Acceptor {
 public:
  Acceptor(int listen_fd, const py::bytes &out_of_fds_frame, double grace_s,
           std::size_t max_pending, double per_s, std::size_t burst, double greet_s)
      : listen_(listen_fd),
        out_of_fds_(frame_of(out_of_fds_frame)),
        grace_ns_(static_cast<std::int64_t>(grace_s * 1e9)),
        greet_ns_(static_cast<std::int64_t>(greet_s * 1e9)),
        max_pending_(max_pending),
        per_ns_(per_s / 1e9),
        burst_(static_cast<double>(burst)),
        buf_(FL_WIRE_MAX_FRAME + 1) {
    if (grace_s <= 0 || grace_s > 3600) throw py::value_error("grace_s is in (0, 3600]");
    if (!(per_s > 0) || burst < 1) throw py::value_error("per_s > 0 and burst >= 1");
    if (!(greet_s > 0) || greet_s > 3600) throw py::value_error("greet_s is in (0, 3600]");
    // Made now: a refusal may come when the process has no fd to spare.
    epoll_ = ::epoll_create1(EPOLL_CLOEXEC);
    wake_ = ::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    spare_ = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
    const int flags = ::fcntl(listen_, F_GETFL);
    if (epoll_ < 0 || wake_ < 0 || flags < 0 ||
        ::fcntl(listen_, F_SETFL, flags | O_NONBLOCK) < 0 || !watch(listen_, EPOLLIN, false) ||
        !watch(wake_, EPOLLIN, false)) {
      const int err = errno;
      release();
      throw Error(Code::OsError, errno_message("the IPC accept loop", err));
    }
  }
  ~Acceptor() { release(); }
  Acceptor(const Acceptor &) = delete;
  Acceptor &operator=(const Acceptor &) = delete;

  // -- the table (Python keeps it: fenceline.ipc.server) -------------------------------------

  void limit(std::uint32_t uid, const py::object &frame) {
    Frame f = frame.is_none() ? nullptr : frame_of(frame.cast<py::bytes>());
    std::lock_guard<std::mutex> lock(mu_);
    if (!f)
      by_uid_.erase(uid);
    else if (by_uid_.size() < kMostUids || by_uid_.count(uid))
      by_uid_[uid] = std::move(f);  // past the most, Python decides each of the others itself
  }

  // Greets the connections of these uids here from now on, answering a HELLO that asks for
  // features (bits of these names) with replies[bits] (its request id set); None: no more
  // greetings.
  void greet(const py::object &replies, const std::vector<std::string> &features,
             std::size_t max_features, const std::vector<std::uint32_t> &uids,
             std::size_t max_per_uid, std::size_t max_total) {
    std::shared_ptr<Hello> hello;
    if (!replies.is_none()) {
      hello = std::make_shared<Hello>();
      hello->replies = replies.cast<std::vector<std::string>>();
      hello->features = features;
      hello->max_features = max_features;
      if (features.size() > kMostFeatures || hello->replies.size() != (1u << features.size()))
        throw py::value_error("a greeting has one reply for each set of its features");
      for (const std::string &r : hello->replies) {
        FlWireHeader h;
        if (!fl_wire_header_ok(reinterpret_cast<const std::uint8_t *>(r.data()), r.size(), &h) ||
            h.kind != (FL_KIND_HELLO | FL_WIRE_REPLY_BIT))
          throw py::value_error("a greeting is an encoded HELLO reply");
      }
      if (uids.size() > kMostGreeted) throw py::value_error("too many uids to greet");
    }
    std::lock_guard<std::mutex> lock(mu_);
    hello_ = std::move(hello);
    greeted_uids_.clear();
    if (hello_) greeted_uids_.insert(uids.begin(), uids.end());
    max_per_uid_ = max_per_uid;
    max_total_ = max_total;
  }

  // Python's count of uid's connections, and of all, each time one is admitted or forgotten.
  void admitted(std::uint32_t uid, std::size_t n, std::size_t total) {
    std::lock_guard<std::mutex> lock(mu_);
    if (n == 0)
      admitted_.erase(uid);
    else
      admitted_[uid] = n;
    admitted_total_ = total;
  }

  // The connections being greeted here, of uid and of all: Python counts them with its own.
  py::typing::Tuple<py::int_, py::int_> greeting(std::uint32_t uid) {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = greeting_of_.find(uid);
    return py::make_tuple(it == greeting_of_.end() ? 0 : it->second, greeting_total_);
  }

  void full(const py::object &frame) {
    Frame f = frame.is_none() ? nullptr : frame_of(frame.cast<py::bytes>());
    std::lock_guard<std::mutex> lock(mu_);
    full_ = std::move(f);
  }

  // Refuses a connection Python accepted from next_event: owns fd from here on.
  void refuse(int fd, const py::bytes &frame) {
    Frame f = frame_of(frame);
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (!stopped_) {
        incoming_.emplace_back(fd, std::move(f));
        fd = -1;
      }
    }
    if (fd >= 0) ::close(fd);
    poke();
  }

  void stop() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stopped_ = true;
    }
    poke();
  }

  bool accepting() const { return accepting_.load(); }
  std::size_t held() const { return held_count_.load(); }
  std::size_t waiting() const { return waiting_count_.load(); }
  std::uint64_t dropped() const { return dropped_.load(); }
  std::uint64_t greeted() const { return greeted_count_.load(); }

  // Runs the loop until something needs Python: ("peer", (fd, pid, uid, features, client))
  // for a connection the table does not refuse (the caller owns fd; features and client: what
  // the HELLO answered here asked for and the name it gave); ("refused", [(uid, error code, count), ...])
  // at most once a second while refusals are made here; ("out_of_fds", message) for each
  // round without fds; ("accepting", None) once it accepts again; None once stopped.
  py::object next_event() {
    if (!named_) {  // what top -H and /proc/<pid>/task/<tid>/comm show (fenceline bench --flood)
      ::pthread_setname_np(::pthread_self(), "fl-ipc-accept");
      named_ = true;
    }
    Event ev;
    {
      py::gil_scoped_release nogil;
      ev = loop();
    }
    switch (ev.kind) {
      case Event::Peer:
        return py::make_tuple("peer", py::make_tuple(ev.fd, ev.pid, ev.uid, ev.features,
                                                    ev.client ? py::object(py::str(*ev.client))
                                                              : py::object(py::none())));
      case Event::Refused: {
        py::list l;
        for (const auto &[uid, code, n] : ev.refused) l.append(py::make_tuple(uid, code, n));
        return py::make_tuple("refused", l);
      }
      case Event::OutOfFds:
        return py::make_tuple("out_of_fds", py::str(std::strerror(ev.err)));
      case Event::Accepting:
        return py::make_tuple("accepting", py::none());
      case Event::Failed:
        errno = ev.err;
        PyErr_SetFromErrno(PyExc_OSError);
        throw py::error_already_set();
      default:
        return py::none();
    }
  }

 private:
  bool watch(int fd, std::uint32_t events, bool modify) {
    struct epoll_event e {};
    e.events = events;
    e.data.fd = fd;
    return ::epoll_ctl(epoll_, modify ? EPOLL_CTL_MOD : EPOLL_CTL_ADD, fd, &e) == 0;
  }

  void poke() {
    const std::uint64_t one = 1;
    if (wake_ >= 0) {
      [[maybe_unused]] const ssize_t n = ::write(wake_, &one, sizeof one);
    }
  }

  void close_waiting() {
    for (auto &[uid, b] : buckets_)
      for (const Waiting &w : b.waiting) ::close(w.fd);
    buckets_.clear();
    slow_.clear();
    waiting_count_ = 0;
  }

  void close_greetings() {
    for (auto &[fd, g] : greeting_) ::close(fd);
    greeting_.clear();
    greet_deadlines_.clear();
    std::lock_guard<std::mutex> lock(mu_);
    greeting_of_.clear();
    greeting_total_ = 0;
  }

  void release() {
    close_waiting();
    close_greetings();
    for (auto &[fd, h] : held_) ::close(fd);
    held_.clear();
    held_count_ = 0;
    for (const Event &e : events_)
      if (e.kind == Event::Peer) ::close(e.fd);
    events_.clear();
    for (auto &[fd, f] : incoming_) ::close(fd);
    incoming_.clear();
    for (int *fd : {&epoll_, &wake_, &spare_})
      if (*fd >= 0) {
        ::close(*fd);
        *fd = -1;
      }
  }

  Event loop() {
    for (;;) {
      std::vector<std::pair<int, Frame>> incoming;
      {
        std::lock_guard<std::mutex> lock(mu_);
        if (stopped_) break;
        incoming.swap(incoming_);
      }
      for (auto &[fd, f] : incoming) hold(fd, std::move(f));
      const std::int64_t now = fl_htl_now_ns();
      if (backoff_until_ != 0 && now >= backoff_until_) retry();
      if (!events_.empty()) {
        Event e = std::move(events_.front());
        events_.pop_front();
        return e;
      }
      if (!counts_.empty() && now >= reported_ + kReportEveryNs) {
        Event e;
        e.kind = Event::Refused;
        for (const auto &[key, n] : counts_) e.refused.emplace_back(key.first, key.second, n);
        counts_.clear();
        reported_ = now;
        forget_rested(now);
        return e;
      }
      release_due(now);
      expire(now);
      expire_greetings(now);
      if (!events_.empty()) continue;  // a greeting handed over
      std::int64_t until = -1;
      if (!deadlines_.empty()) until = deadlines_.front().first;
      if (!greet_deadlines_.empty()) until = earliest(until, greet_deadlines_.front().first);
      if (!slow_.empty()) until = earliest(until, next_due());
      if (!counts_.empty()) until = earliest(until, reported_ + kReportEveryNs);
      if (backoff_until_ != 0) until = earliest(until, backoff_until_);
      int timeout_ms = -1;
      if (until >= 0)  // rounded up: a wait that ends early only loops again
        timeout_ms = static_cast<int>(std::max<std::int64_t>(0, (until - now + kMs - 1) / kMs));
      struct epoll_event ready[64];
      const int n = ::epoll_wait(epoll_, ready, 64, timeout_ms);
      if (n < 0 && errno != EINTR) {
        Event e;
        e.kind = Event::Failed;
        e.err = errno;
        return e;
      }
      for (int i = 0; i < n; ++i) {
        const int fd = ready[i].data.fd;
        if (fd == listen_) {
          accept_batch();
        } else if (fd == wake_) {
          std::uint64_t v;
          [[maybe_unused]] auto r = ::read(wake_, &v, sizeof v);
        } else if (greeting_.count(fd) != 0) {
          greet_step(fd);
        } else {
          step(fd);
        }
      }
    }
    // Stopped: what is held, and what Python was not handed yet, is closed now.
    std::vector<std::pair<int, Frame>> incoming;
    {
      std::lock_guard<std::mutex> lock(mu_);
      incoming.swap(incoming_);
    }
    for (auto &[fd, f] : incoming) ::close(fd);
    close_waiting();
    close_greetings();
    for (auto &[fd, h] : held_) ::close(fd);
    held_.clear();
    held_count_ = 0;
    deadlines_.clear();
    for (const Event &ev : events_)
      if (ev.kind == Event::Peer) ::close(ev.fd);
    events_.clear();
    Event e;
    e.kind = Event::Stopped;
    return e;
  }

  static std::int64_t earliest(std::int64_t a, std::int64_t b) {
    return a < 0 ? b : std::min(a, b);
  }

  void accept_batch() {
    for (int k = 0; k < kBatch && listening_; ++k) {
      const int c = ::accept4(listen_, nullptr, nullptr, SOCK_CLOEXEC);
      if (c < 0) {
        const int err = errno;
        if (err == EAGAIN || err == EWOULDBLOCK) return;
        if (err == EINTR || err == ECONNABORTED || err == EPROTO) continue;
        if (out_of_fds(err)) {
          shed(err);
          return;
        }
        listening_ = false;  // nothing more is accepted: Python says so and ends
        watch(listen_, 0, true);
        accepting_ = false;
        Event e;
        e.kind = Event::Failed;
        e.err = err;
        events_.push_back(std::move(e));
        return;
      }
      backoff_ns_ = kBackoffFirstNs;
      if (!accepting_.exchange(true)) {
        Event e;
        e.kind = Event::Accepting;
        events_.push_back(std::move(e));
      }
      identify(c);
    }
  }

  void identify(int c) {
    struct ucred cred {};
    socklen_t len = sizeof cred;
    if (::getsockopt(c, SOL_SOCKET, SO_PEERCRED, &cred, &len) != 0) {
      ::close(c);  // gone before it could be identified
      return;
    }
    Frame f;
    bool greet = false;
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (full_) {
        f = full_;
      } else {
        auto it = by_uid_.find(cred.uid);
        if (it != by_uid_.end()) f = it->second;
      }
      greet = !f && hello_ && greeted_uids_.count(cred.uid) != 0;
      if (greet) {  // within the limits, counting those greeted or waiting to be
        const auto a = admitted_.find(cred.uid);
        const auto g = greeting_of_.find(cred.uid);
        const std::size_t of_uid = (a == admitted_.end() ? 0 : a->second) +
                                   (g == greeting_of_.end() ? 0 : g->second);
        greet = of_uid < max_per_uid_ && admitted_total_ + greeting_total_ < max_total_;
        if (greet) {  // counted from now, waiting for its turn or greeted
          ++greeting_of_[cred.uid];
          ++greeting_total_;
        }
      }
    }
    if (!f && !greet) {
      hand_over(c, cred.pid, cred.uid);
      return;
    }
    if (f) {
      const auto *p = reinterpret_cast<const std::uint8_t *>(f->data());
      ++counts_[{cred.uid, fl_wire_get_error_code(p + FL_WIRE_HEADER_SIZE)}];
    }
    pace(cred.uid, c, cred.pid, std::move(f));
  }

  // A greeting that ended: no longer counted against uid's limits.
  void ungreet(std::uint32_t uid) {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = greeting_of_.find(uid);
    if (it == greeting_of_.end()) return;
    if (--it->second == 0) greeting_of_.erase(it);
    --greeting_total_;
  }

  void hand_over(int fd, int pid, std::uint32_t uid, std::uint32_t features = 0,
                 std::optional<std::string> client = std::nullopt) {
    Event e;
    e.kind = Event::Peer;
    e.fd = fd;
    e.pid = pid;
    e.uid = uid;
    e.features = features;
    e.client = std::move(client);
    events_.push_back(std::move(e));
  }

  // An answer whose uid's turn came: a refusal held, or a greeting.
  void answer(std::uint32_t uid, const Waiting &w) {
    if (w.frame)
      hold(w.fd, w.frame);
    else
      start_greeting(w.fd, w.pid, uid);
  }

  // -- the pace of one uid's refusals ---------------------------------------------------------

  void refill(Bucket &b, std::int64_t now) const {
    b.tokens = std::min(burst_, b.tokens + static_cast<double>(now - b.at) * per_ns_);
    b.at = now;
  }

  void pace(std::uint32_t uid, int fd, int pid, Frame f) {
    if (pending() >= max_pending_) {
      if (!f) {  // a greeting: Python serves it as it did before greetings
        ungreet(uid);
        hand_over(fd, pid, uid);
        return;
      }
      ++dropped_;
      ::close(fd);
      return;
    }
    const std::int64_t now = fl_htl_now_ns();
    auto [it, fresh] = buckets_.try_emplace(uid);
    Bucket &b = it->second;
    if (fresh) {
      b.tokens = burst_;
      b.at = now;
    }
    refill(b, now);
    if (b.waiting.empty() && b.tokens >= 1) {
      b.tokens -= 1;
      answer(uid, Waiting{fd, pid, std::move(f)});
      return;
    }
    if (static_cast<double>(b.waiting.size()) >= burst_) {  // one uid's share of the fds
      if (!f) ungreet(uid);
      ++dropped_;
      ::close(fd);
      return;
    }
    b.waiting.push_back(Waiting{fd, pid, std::move(f)});
    ++waiting_count_;
    slow_.insert(uid);
  }

  // Answers the waiting connections whose turn has come.
  void release_due(std::int64_t now) {
    for (auto u = slow_.begin(); u != slow_.end();) {
      Bucket &b = buckets_[*u];
      refill(b, now);
      while (!b.waiting.empty() && b.tokens >= 1) {
        b.tokens -= 1;
        const Waiting w = std::move(b.waiting.front());
        b.waiting.pop_front();
        --waiting_count_;
        answer(*u, w);
      }
      u = b.waiting.empty() ? slow_.erase(u) : std::next(u);
    }
  }

  std::int64_t next_due() const {
    std::int64_t due = -1;
    for (const std::uint32_t uid : slow_) {
      const Bucket &b = buckets_.at(uid);
      due = earliest(due, b.at + static_cast<std::int64_t>((1 - b.tokens) / per_ns_) + 1);
    }
    return due;
  }

  // Buckets full again and with nobody waiting are forgotten (a fresh one is full).
  void forget_rested(std::int64_t now) {
    for (auto it = buckets_.begin(); it != buckets_.end();) {
      refill(it->second, now);
      it = it->second.waiting.empty() && it->second.tokens >= burst_ ? buckets_.erase(it)
                                                                      : std::next(it);
    }
  }

  // Out of fds: shed one waiting connection through the spare fd, stop listening for a while.
  void shed(int err) {
    accepting_ = false;
    if (spare_ >= 0) {
      ::close(spare_);
      spare_ = -1;
      const int c = ::accept4(listen_, nullptr, nullptr, SOCK_CLOEXEC);
      if (c >= 0) hold(c, out_of_fds_);
    }
    listening_ = false;
    watch(listen_, 0, true);
    backoff_until_ = fl_htl_now_ns() + backoff_ns_;
    backoff_ns_ = std::min(backoff_ns_ * 2, kBackoffMostNs);
    Event e;
    e.kind = Event::OutOfFds;
    e.err = err;
    events_.push_back(std::move(e));
  }

  void retry() {
    backoff_until_ = 0;
    if (spare_ < 0) spare_ = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
    listening_ = true;
    watch(listen_, EPOLLIN, true);
    if (spare_ < 0) return;  // the next accept fails again: another round
    const int probe = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
    if (probe < 0) return;
    ::close(probe);
    if (!accepting_.exchange(true)) {
      Event e;
      e.kind = Event::Accepting;
      events_.push_back(std::move(e));
    }
  }

  // Connections held here: refusals answering, greetings, and those waiting for their turn.
  std::size_t pending() const { return held_.size() + greeting_.size() + waiting_count_; }

  void hold(int fd, Frame f) {
    const int flags = ::fcntl(fd, F_GETFL);
    if (pending() >= max_pending_ || flags < 0 ||
        ::fcntl(fd, F_SETFL, flags | O_NONBLOCK) < 0 || !watch(fd, EPOLLIN, false)) {
      ++dropped_;
      ::close(fd);
      return;
    }
    const std::uint64_t seq = ++seq_;
    held_[fd] = Held{std::move(f), seq};
    held_count_ = held_.size();
    deadlines_.emplace_back(fl_htl_now_ns() + grace_ns_, std::make_pair(fd, seq));
    step(fd);  // a first request already there is answered at once
  }

  void drop(int fd) {
    held_.erase(fd);
    held_count_ = held_.size();
    ::close(fd);  // which takes it out of the epoll set
  }

  // Every refusal has the same grace: the deadlines are in order of their holds.
  void expire(std::int64_t now) {
    while (!deadlines_.empty() && deadlines_.front().first <= now) {
      const auto [fd, seq] = deadlines_.front().second;
      deadlines_.pop_front();
      auto it = held_.find(fd);
      if (it != held_.end() && it->second.seq == seq) drop(fd);
    }
  }

  // -- greetings ------------------------------------------------------------------------------

  void start_greeting(int fd, int pid, std::uint32_t uid) {
    const int flags = ::fcntl(fd, F_GETFL);
    if (pending() >= max_pending_ || flags < 0 ||
        ::fcntl(fd, F_SETFL, flags | O_NONBLOCK) < 0 || !watch(fd, EPOLLIN | EPOLLRDHUP, false)) {
      if (flags >= 0) ::fcntl(fd, F_SETFL, flags);
      ungreet(uid);
      hand_over(fd, pid, uid);
      return;
    }
    const std::uint64_t seq = ++seq_;
    greeting_[fd] = Greeting{uid, pid, flags, seq};
    greet_deadlines_.emplace_back(fl_htl_now_ns() + greet_ns_, std::make_pair(fd, seq));
    greet_step(fd);  // a HELLO already there is answered at once
  }

  // Python's from here: out of the epoll set, its flags as accepted, its next frame queued.
  void greeting_done(int fd, bool to_python) {
    auto it = greeting_.find(fd);
    const Greeting g = it->second;
    greeting_.erase(it);
    ungreet(g.uid);
    if (!to_python) {
      ::close(fd);
      return;
    }
    ::epoll_ctl(epoll_, EPOLL_CTL_DEL, fd, nullptr);
    ::fcntl(fd, F_SETFL, g.flags);
    hand_over(fd, g.pid, g.uid, g.features, g.client);
  }

  void expire_greetings(std::int64_t now) {
    while (!greet_deadlines_.empty() && greet_deadlines_.front().first <= now) {
      const auto [fd, seq] = greet_deadlines_.front().second;
      greet_deadlines_.pop_front();
      auto it = greeting_.find(fd);
      if (it != greeting_.end() && it->second.seq == seq) greeting_done(fd, true);
    }
  }

  // Looks at the next frame without taking it (nor any fds it carries): a HELLO greeting.h
  // reads is taken and answered, the peer's end closes the connection, anything else goes to
  // Python.
  void greet_step(int fd) {
    for (;;) {
      struct iovec iov {
        buf_.data(), buf_.size()
      };
      struct msghdr msg {};
      msg.msg_iov = &iov;
      msg.msg_iovlen = 1;
      const ssize_t n = ::recvmsg(fd, &msg, MSG_PEEK | MSG_DONTWAIT);
      if (n < 0 && errno == EINTR) continue;
      if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return;
      if (n < 0) {
        greeting_done(fd, false);  // reset: nobody to answer
        return;
      }
      if (n == 0 && (msg.msg_flags & MSG_CTRUNC) == 0) {
        // The peer's end, or an empty message (Python answers that one).
        struct pollfd p {
          fd, POLLRDHUP, 0
        };
        const bool end = ::poll(&p, 1, 0) == 1 && (p.revents & (POLLHUP | POLLRDHUP | POLLERR));
        greeting_done(fd, !end);
        return;
      }
      FlWireHeader h;
      const auto size = static_cast<std::size_t>(n);
      std::shared_ptr<const Hello> hello;
      {
        std::lock_guard<std::mutex> lock(mu_);
        hello = hello_;
      }
      long asked = -1;
      std::string client = "?";  // as Python logs a HELLO that names none
      if ((msg.msg_flags & (MSG_CTRUNC | MSG_TRUNC)) == 0 && size <= FL_WIRE_MAX_FRAME &&
          fl_wire_header_ok(buf_.data(), size, &h) && h.kind == FL_KIND_HELLO && hello)
        asked = HelloReader(buf_.data() + FL_WIRE_HEADER_SIZE, size - FL_WIRE_HEADER_SIZE)
                    .features(hello->features, hello->max_features, &client);
      if (asked < 0) {
        greeting_done(fd, true);
        return;
      }
      std::string out = hello->replies[static_cast<std::size_t>(asked)];
      FlWireHeader ours;
      fl_wire_get_header(reinterpret_cast<const std::uint8_t *>(out.data()), &ours);
      fl_wire_put_header(reinterpret_cast<std::uint8_t *>(out.data()), ours.kind, h.request_id,
                         ours.body_length);
      if (::recv(fd, buf_.data(), buf_.size(), MSG_DONTWAIT) != n ||
          ::send(fd, out.data(), out.size(), MSG_DONTWAIT | MSG_NOSIGNAL) < 0) {
        greeting_done(fd, false);
        return;
      }
      greeting_[fd].features = static_cast<std::uint32_t>(asked);
      greeting_[fd].client = std::move(client);
      ++greeted_count_;
    }
  }

  // Reads what the peer sent and answers its first request; drops the connection once the
  // peer is done (or failed).
  void step(int fd) {
    auto it = held_.find(fd);
    if (it == held_.end()) return;
    for (;;) {
      const ssize_t n = ::recv(fd, buf_.data(), buf_.size(), MSG_DONTWAIT);
      if (n < 0 && errno == EINTR) continue;
      if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return;
      if (n <= 0) break;
      Frame &f = it->second.frame;
      if (!f) continue;  // answered already: read to the peer's end
      FlWireHeader h;
      const std::uint32_t request_id =
          fl_wire_header_ok(buf_.data(), static_cast<std::size_t>(n), &h) ? h.request_id : 0;
      std::string reply = *f;
      FlWireHeader ours;
      fl_wire_get_header(reinterpret_cast<const std::uint8_t *>(reply.data()), &ours);
      fl_wire_put_header(reinterpret_cast<std::uint8_t *>(reply.data()), ours.kind, request_id,
                         ours.body_length);
      f.reset();
      if (::send(fd, reply.data(), reply.size(), MSG_DONTWAIT | MSG_NOSIGNAL) < 0) break;
      ::shutdown(fd, SHUT_WR);
    }
    drop(fd);
  }

  const int listen_;  // Python's socket owns it
  const Frame out_of_fds_;
  const std::int64_t grace_ns_, greet_ns_;
  const std::size_t max_pending_;
  const double per_ns_, burst_;  // the pace: tokens per ns, and the most saved up
  int epoll_ = -1, wake_ = -1, spare_ = -1;
  std::vector<std::uint8_t> buf_;

  std::mutex mu_;  // the table, incoming_ and stopped_
  std::unordered_map<std::uint32_t, Frame> by_uid_;
  Frame full_;
  std::shared_ptr<const Hello> hello_;        // greet()'s replies, or none
  std::set<std::uint32_t> greeted_uids_;      // greet()'s uids
  std::size_t max_per_uid_ = 0, max_total_ = 0;  // greet()'s limits
  std::unordered_map<std::uint32_t, std::size_t> admitted_;  // Python's counts (admitted())
  std::size_t admitted_total_ = 0;
  // Connections being greeted or waiting for their turn to be, by uid and in all.
  std::unordered_map<std::uint32_t, std::size_t> greeting_of_;
  std::size_t greeting_total_ = 0;
  std::vector<std::pair<int, Frame>> incoming_;
  bool stopped_ = false;

  // The loop's own (one thread at a time runs it).
  std::unordered_map<int, Held> held_;
  std::unordered_map<int, Greeting> greeting_;
  std::deque<std::pair<std::int64_t, std::pair<int, std::uint64_t>>> greet_deadlines_;
  std::deque<std::pair<std::int64_t, std::pair<int, std::uint64_t>>> deadlines_;
  std::deque<Event> events_;
  std::map<std::pair<std::uint32_t, std::uint32_t>, std::uint64_t> counts_;
  std::unordered_map<std::uint32_t, Bucket> buckets_;
  std::set<std::uint32_t> slow_;  // uids with connections waiting
  std::int64_t reported_ = 0, backoff_until_ = 0, backoff_ns_ = kBackoffFirstNs;
  std::uint64_t seq_ = 0;
  bool listening_ = true;
  bool named_ = false;
  std::atomic<bool> accepting_{true};
  std::atomic<std::size_t> held_count_{0}, waiting_count_{0};
  std::atomic<std::uint64_t> dropped_{0}, greeted_count_{0};
};

}  // namespace

void bind_acceptor(py::module_ &mod) {
  py::class_<Acceptor, std::shared_ptr<Acceptor>>(
      mod, "Acceptor",
      "The Unix socket's accept loop: accepts, identifies each peer (SO_PEERCRED) and refuses "
      "here, without the GIL, the connections that the refusal table names (limit(), full()); "
      "the others go to Python (next_event). Refuses a connection by answering its first "
      "request with the table's ERROR frame (the request id set), shutting it down for writing "
      "and reading until the peer closes, for at most grace_s. The table's answers to one uid "
      "come at most per_s a second after a burst of burst; the others wait, unanswered, for "
      "their turn, at most burst of them. Past that, or past max_pending held at once "
      "(answering and waiting), one more is closed unanswered. listen_fd stays the caller's "
      "(made non-blocking here).")
      .def(py::init<int, const py::bytes &, double, std::size_t, double, std::size_t, double>(),
           py::arg("listen_fd"), py::arg("out_of_fds"), py::arg("grace_s"),
           py::arg("max_pending"), py::arg("per_s"), py::arg("burst"), py::arg("greet_s"))
      .def("admitted", &Acceptor::admitted, py::arg("uid"), py::arg("connections"),
           py::arg("total"),
           "Python's count of uid's connections and of all, after each admission or close.")
      .def("greeting", &Acceptor::greeting, py::arg("uid"),
           "(uid's, all) connections greeted here or waiting to be: count them as admitted.")
      .def("greet", &Acceptor::greet, py::arg("replies"), py::arg("features"),
           py::arg("max_features"), py::arg("uids"), py::arg("max_per_uid"),
           py::arg("max_total"),
           "Greets these uids' connections here from now on, while a uid's connections "
           "(admitted() and greeted here) are below max_per_uid and all below max_total: a "
           "HELLO of {} or {\"client\":\"NAME\",\"features\":[\"NAME\",...]} (either "
           "field or none, no spaces, at most max_features features, names printable ASCII) "
           "is answered with replies[bits], an encoded HELLO reply (its request id set), bit i "
           "set when it asked for features[i] (at most 8 names: 2^len(features) replies); "
           "paced as refusals are. The connection goes to Python with its next frame (left "
           "queued), or after greet_s, as ('peer', (fd, pid, uid, bits, client)), and is closed "
           "here "
           "when the peer closes first. None: no more greetings.")
      .def("limit", &Acceptor::limit, py::arg("uid"), py::arg("frame"),
           "Refuses uid's connections with this ERROR frame from now on (None: no more).")
      .def("full", &Acceptor::full, py::arg("frame"),
           "Refuses every connection with this ERROR frame from now on (None: no more).")
      .def("refuse", &Acceptor::refuse, py::arg("fd"), py::arg("frame"),
           "Refuses a connection that next_event handed over, with this ERROR frame; owns fd.")
      .def("next_event", &Acceptor::next_event,
           "Runs the loop (the GIL released) until something needs Python: ('peer', (fd, pid, "
           "uid, features, client)), the caller owning fd (features: the bits of greet()'s "
           "names that the HELLO answered here asked for, 0 when none was; client: the name it "
           "gave, '?' when it named none, None when no HELLO was answered here, for Python to "
           "log); ('refused', [(uid, error code, count), ...]), at most "
           "once a second while refusals are made here; ('out_of_fds', why) for each round "
           "without fds (one waiting connection shed, accepting paused); ('accepting', None) "
           "once it accepts again; None once stopped. Raises OSError when accepting fails "
           "otherwise. One thread at a time.")
      .def("stop", &Acceptor::stop, "next_event returns None; what is held is closed.")
      .def_property_readonly("accepting", &Acceptor::accepting,
                             "False while out of fds, or after accepting failed")
      .def_property_readonly("held", &Acceptor::held, "refused connections answering now")
      .def_property_readonly("waiting", &Acceptor::waiting,
                             "refused connections waiting for their turn now")
      .def_property_readonly("dropped", &Acceptor::dropped,
                             "connections closed unanswered: refusals past max_pending, and "
                             "refusals or greetings past a uid's waiting room")
      .def_property_readonly("greeted", &Acceptor::greeted,
                             "HELLOs answered here, since the loop began");
}

}  // namespace fl
