// The Python client's end of a connection (fenceline.client.IpcClient on a Unix socket): a RUN
// is packed and sent in one native call, and its reply waited for and read in another; every
// other frame is sent and received through it too.
//
// Why native: a renderer's thread that waited through a model's run finds its caches holding
// the model's frame, not the interpreter's code and objects, and each Python step between the
// reply's arrival and the caller then costs microseconds (after a 720p run on the 2-CPU VM:
// reading the reply in Python took 9 us, against 1 us after a 64x64 one). The wait follows the
// one spin rule (../common/spin_rule.h) as the C client's does, rationed by the process's
// SpinGate (fenceline.waiting): spin while that has paid, else block at once.
#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <deque>
#include <memory>
#include <optional>
#include <string>

#include <poll.h>
#include <pybind11/pybind11.h>
#include <pybind11/typing.h>
#include <sched.h>
#include <sys/prctl.h>
#include <unistd.h>

#include <cmath>
#include <cstdlib>

#include "common/fenceline_wire.h"
#include "common/fenceline_wire_io.h"
#include "common/host_timeline.h"
#include "engine/adaptive_spin.h"
#include "run_page_map.h"
#include "seqpacket.h"

namespace py = pybind11;

namespace fl {
namespace {

constexpr std::size_t kRunFrame = FL_WIRE_HEADER_SIZE + sizeof(FlWireRun);
constexpr std::size_t kRunReplyFrame = FL_WIRE_HEADER_SIZE + sizeof(FlWireRunReply);

[[noreturn]] void raise_errno(int err) {
  errno = err;
  PyErr_SetFromErrno(PyExc_OSError);
  throw py::error_already_set();
}

// A switch read from the environment once: on unless `name` is set to 0 (to compare).
bool switched_on(const char *name) {
  const char *v = std::getenv(name);
  return v == nullptr || std::strcmp(v, "0") != 0;
}

// Naps. A reply that takes a model's run to come (a 720p frame: about a hundred microseconds
// on 16 cores) comes later than any spin budget, so the rule blocks for it, and the reply then
// wakes a sleeping thread: tens of microseconds on a VM, after the reply came. A nap sleeps on
// a precise timer (1 us of slack) until just before the reply is due, then spins, so that the
// wakeup is paid while the model runs. Napping is a way of waiting like spinning, and costs the
// renderer the spin's CPU: it is used only while it pays, trying the other way in exploration
// windows. FENCELINE_NAP=0 turns it off (to compare).
//
// What it is judged on: a wait's handoff, the wait less the time the service reports for the frame
// (the reply's total_us: its fence wait, the model and the signal). The model's own run varies by
// more from frame to frame (15-20 us at 720p on 16 cores) than a wakeup costs, so whole waits
// compared over a few exploration windows decide by chance; the handoffs differ by the wakeup
// alone. The nap tries the other way in exploration windows of its own, half a period after the
// spin rule's, and no handoff of a wait begun in the spin rule's windows counts: the service
// explores its own receive's way then (blocked, it picks the RUN up a wakeup later, which is in the
// handoff); a nap that explored in those windows judged the way it tried there on longer handoffs,
// and the way it took first kept looking the better one. Napping starts once napped handoffs are
// shorter than blocked ones by 1% of the wait (where a wakeup is a small share of a long wait, it
// is not worth a spin's CPU; a 4K frame's goal is 5% over the floor, and on 16 cores a wakeup there
// costs 2-3%), and stops when they are no shorter.
//
// Where the nap ends: two deviations before the average wait, and the spin after it lasts to two
// deviations past it, kMaxSpin at most. Where the waits spread wider than that, the spin covers
// their middle instead, the nap ending kMaxSpin / 2 before the average (ended earlier, most
// spins ran out before the reply: 60% of the naps for replies 1 ms +- 120 us apart, 42% now). A
// wait far off the others (a stall: the renderer's thread descheduled) counts as kReach
// deviations away at most: counted whole, one 3.5-ms wait among 1-ms ones lifted the deviation
// tenfold, the next naps ended hundreds of microseconds early, their spins ran out before the
// reply, and those missed naps turned napping off for 130-200 frames.
//
// While the service says its cores are shared (a RUN reply's FL_WIRE_REPLY_CPUS_SHARED: several
// renderers' runs on its CPUs, its onnxruntime pools at idle priority) the renderer neither naps
// nor stays runnable: a renderer that spins or yields is picked before the pools' idle-priority
// threads and takes a core from the model's run; each of several renderers judged its nap by its
// own handoff, and the runs they all waited for went slower (on an H100 host's 16 cores, 8
// renderers at 720p ran 7% more frames with napping and staying off).
//
// How late a nap ends is measured, and the nap is that much shorter. On a machine whose cores
// the model's threads fill, a nap's timer makes the renderer runnable and it runs only once a
// core frees (lateness of 100-250 us for a 720p frame on the 2-CPU VM), which says nothing about
// the timer: a nap shortened by all of it would go below any use, and (napping off) would never
// be measured again. So at most half of the wait's low end goes to lateness.
class ReplyNap {
 public:
  static constexpr std::int64_t kMinWait = 40'000;     // shorter waits: the spin rule's
  static constexpr std::int64_t kMaxWait = 5'000'000;  // longer: one wakeup is a small share
  static constexpr std::int64_t kGuard = 10'000;       // wake this much earlier still
  static constexpr std::int64_t kMaxSpin = 200'000;    // the longest spin after a nap
  static constexpr double kWorth = 0.01;               // of the wait, to start napping
  static constexpr double kReach = 4;  // deviations: how far off the average a wait counts

  // The next wait's nap (0: none) and the spin after it. `shared`: the last reply said the
  // service's cores are shared (FL_WIRE_REPLY_CPUS_SHARED): no nap, and the wait, blocked, is
  // not judged (a handoff there is not one of the renderer's own choosing).
  std::pair<std::int64_t, std::int64_t> plan(std::int64_t now_ns, bool shared = false) {
    judged_ = !shared && fl_spin_exploring(now_ns) == 0;
    if (shared || !enabled_ || wait_avg_ < kMinWait || wait_avg_ > kMaxWait) return {0, 0};
    const bool explore = exploring(now_ns);
    if (explored_ && !explore) decide();
    explored_ = explore;
    if (napping_ == explore) return {0, 0};
    const double low = wait_avg_ - 2 * wait_dev_;
    const double late = late_avg_ < low / 2 ? late_avg_ : low / 2;
    double nap = low - late - kGuard;
    double spin = wait_avg_ + 2 * wait_dev_ + kGuard - nap;
    if (spin > kMaxSpin) {  // the waits spread wider than a spin: it covers their middle
      nap = std::max(nap, wait_avg_ - late - kMaxSpin / 2);
      spin = kMaxSpin;
    }
    if (nap < kGuard) return {0, 0};
    return {static_cast<std::int64_t>(nap), static_cast<std::int64_t>(spin)};
  }

  // How long a wait took, and how: napped (nap_ns > 0; late_ns: how late the nap ended, -1
  // when it did not run its whole length), blocked at once (`blocked`) or spun first.
  void observe(std::int64_t waited_ns, std::int64_t nap_ns, std::int64_t late_ns,
               bool blocked) {
    const double w = static_cast<double>(waited_ns);
    if (wait_avg_ < 0) {
      wait_avg_ = w;
    } else {  // a stall counts as a wait kReach deviations away, no further
      const double reach = kReach * wait_dev_ + kGuard;
      const double near = std::clamp(w, wait_avg_ - reach, wait_avg_ + reach);
      wait_dev_ += (std::fabs(near - wait_avg_) - wait_dev_) * 0.125;
      wait_avg_ += (near - wait_avg_) * 0.125;
    }
    if (nap_ns > 0 && late_ns >= 0)
      late_avg_ += (static_cast<double>(late_ns) - late_avg_) * 0.25;
    way_ = nap_ns > 0 ? kNapped : blocked ? kBlocked : kSpun;
    waited_ = w;
  }

  // The service's time for the frame whose reply ended the last wait (its total_us).
  void served(std::uint32_t service_us) {
    service_avg_ = fl_spin_ema(service_avg_, 1000.0 * service_us);
    if (way_ == kSpun || !judged_) return;
    const double handoff = waited_ - 1000.0 * service_us;
    if (handoff < 0) return;  // the service's clock and ours: not worth a sample
    double &avg = way_ == kNapped ? nap_handoff_ : block_handoff_;
    avg = fl_spin_ema(avg, handoff);
    if (way_ == kNapped && !explored_) decide();
    way_ = kSpun;
  }

  // No wait to judge: the next reply was there at once.
  void forget() { way_ = kSpun; }

  bool napping() const { return enabled_ && napping_; }

  // Whether the service's own part of a frame (the model's run, mostly) takes long enough that
  // the renderer stays runnable before it sleeps: a wait that is long only because other
  // renderers' frames go first (64x64 with four renderers on two CPUs) does not.
  bool long_runs() const { return service_avg_ >= kMinWait; }

 private:
  enum Way { kSpun, kNapped, kBlocked };

  // The nap's exploration windows: the spin rule's, half a period later.
  static bool exploring(std::int64_t now_ns) {
    constexpr std::int64_t kHalfPeriod = std::int64_t{FL_SPIN_WINDOWS_PER_PERIOD / 2}
                                         << FL_SPIN_WINDOW_SHIFT;
    return fl_spin_exploring(now_ns - kHalfPeriod) != 0;
  }

  void decide() {
    if (nap_handoff_ < 0 || block_handoff_ < 0) return;
    const double worth = napping_ ? 0 : kWorth * wait_avg_;
    napping_ = nap_handoff_ + worth < block_handoff_;
  }

  const bool enabled_ = switched_on("FENCELINE_NAP");
  bool napping_ = false;
  bool explored_ = false;
  bool judged_ = true;  // the last wait's handoff counts: it began outside the spin rule's windows
  Way way_ = kSpun;
  double waited_ = 0;
  double wait_avg_ = -1, wait_dev_ = 0;
  double service_avg_ = -1;  // ns: the replies' total_us
  double nap_handoff_ = -1, block_handoff_ = -1;
  double late_avg_ = 20'000;  // the timer's wakeup on a VM: re-measured by every nap
};

// Staying runnable. Once a RUN is posted, the service starts the model within microseconds,
// and the model wakes onnxruntime's pool threads. A core that went idle meanwhile (the renderer
// asleep on it) takes tens of microseconds to wake on a VM: on the 2-CPU VM the pool thread
// woken there then starts ~20 us late, and a 720p run takes 240 us where the floor's runs,
// back to back, take 200. So before it naps or blocks for a long reply, the renderer gives its
// core away with sched_yield instead of sleeping: a pool thread woken there runs at once, and
// the renderer, still runnable, gets the core back when that thread is done, with no wakeup.
// Yields that come back at once say the core is idle: after kStayIdle of those the renderer
// sleeps as before, so an idle core costs it at most that much CPU a frame. It stays at most
// kStayLongest, past the run's start: several renderers staying runnable through long waits on
// a full machine take turns with each other's yields (8 renderers at 720p on 2 CPUs: 120-190 us
// of renderer CPU a frame more, against 0-20 us within 50 us). And only where the service's
// own part of a frame is long (ReplyNap::long_runs): a pool to wake, a run to wait out. Where
// the renderer's yields find its core idle kQuietStays times in a row (cores to spare: the
// pool's threads start on others), it stops staying but in the spin rule's exploration windows,
// where it looks again. Nor while the service's cores are shared (as naps: ReplyNap).
// FENCELINE_STAY=0 turns it off (to compare).
constexpr std::int64_t kStayIdle = 20'000;
constexpr std::int64_t kStayLongest = 50'000;
constexpr std::int64_t kQuickYield = 5'000;  // a yield back sooner found nothing else to run
constexpr unsigned kQuietStays = 16;

// Yields the core until the page's reply (1; `news` null: no page) or a socket message (0, in
// `m`) comes, the core was idle for kStayIdle, or `until` (CLOCK_MONOTONIC) passed (-1).
// `contended`: set when a yield came back late (another thread had the core meanwhile).
int stay_runnable(int fd, bool (*news)(void *), void *page, std::int64_t until, Message &m,
                  bool &contended) {
  std::int64_t idle = 0, last = fl_htl_now_ns();
  for (unsigned i = 1;; ++i) {
    if (news != nullptr && news(page)) return 1;
    // The socket: each look a system call, every fourth turn while the page is watched.
    if ((news == nullptr || (i & 3u) == 0) &&
        try_recv_message(fd, FL_WIRE_MAX_FRAME, FL_WIRE_MAX_FDS, m) && !drop_nudge(m))
      return 0;
    const std::int64_t before = fl_htl_now_ns();
    ::sched_yield();
    const std::int64_t after = fl_htl_now_ns();
    if (after - before < kQuickYield)
      idle += after - last;
    else
      contended = true;
    last = after;
    if (idle >= kStayIdle || after >= until) return -1;
  }
}

// A nap of nap_ns on a precise timer that ends early when a message comes: true when one came
// (or the socket failed: the receive after it says so), else with `late_ns` set.
bool nap_for(int fd, std::int64_t nap_ns, std::int64_t &late_ns) {
  const int slack = ::prctl(PR_GET_TIMERSLACK, 0, 0, 0, 0);
  ::prctl(PR_SET_TIMERSLACK, 1000UL, 0, 0, 0);
  const std::int64_t start = fl_htl_now_ns();
  struct timespec t {
    static_cast<time_t>(nap_ns / 1000000000), static_cast<long>(nap_ns % 1000000000)
  };
  struct pollfd p {
    fd, POLLIN, 0
  };
  const int r = ::ppoll(&p, 1, &t, nullptr);
  if (r == 0) late_ns = fl_htl_now_ns() - start - nap_ns;
  if (slack > 0) ::prctl(PR_SET_TIMERSLACK, static_cast<unsigned long>(slack), 0, 0, 0);
  return r != 0;
}

class ClientSocket {
 public:
  // `reply_type`: what a RUN reply becomes (fenceline.protocol.codec.RunReply), called with its
  // five fields.
  ClientSocket(int fd, std::int64_t max_spin_ns, py::object reply_type)
      : fd_(fd), spin_(max_spin_ns), reply_type_(std::move(reply_type)) {}

  // Sends one frame; a full socket waits with the GIL released. OSError when the socket failed.
  void send(const py::bytes &data) {
    char *p = nullptr;
    Py_ssize_t n = 0;
    if (PyBytes_AsStringAndSize(data.ptr(), &p, &n) != 0) throw py::error_already_set();
    send_raw(p, static_cast<std::size_t>(n));
  }

  // A RUN sent ahead (IpcClient.send_run), its reply read by receive in the order sent: posted on
  // the run page while it has a free slot and nothing of this connection is in flight on the
  // socket (a RUN, i.e. not RUN_ASYNC), else sent on the socket. The service serves a socket
  // frame after the page's RUNs posted before it (docs/ipc.md, "The run page"), so replies
  // keep the order sent either way. OSError when a send failed.
  void send_run(std::uint16_t kind, std::uint32_t request_id, const py::bytes &session_id,
                std::uint64_t wait_value, std::uint64_t signal_value, std::uint32_t timeout_ms) {
    if (page_ && kind == FL_KIND_RUN && on_socket_ == 0 && sent_.size() < slots_) {
      post(kind, request_id, session_id, wait_value, signal_value, timeout_ms);
      sent_.push_back({request_id, seq_, true});
      return;
    }
    send_run_frame(kind, request_id, session_id, wait_value, signal_value, timeout_ms);
    sent_.push_back({request_id, 0, false});
    ++on_socket_;
  }

  // The RUN's frame on the socket.
  void send_run_frame(std::uint16_t kind, std::uint32_t request_id, const py::bytes &session_id,
                      std::uint64_t wait_value, std::uint64_t signal_value,
                      std::uint32_t timeout_ms) {
    std::uint8_t frame[kRunFrame];
    FlWireRun run;
    copy_session_id(session_id, run.session_id);
    run.wait_value = wait_value;
    run.signal_value = signal_value;
    run.timeout_ms = timeout_ms;
    run.flags = 0;
    fl_wire_put_header(frame, kind, request_id, sizeof(FlWireRun));
    fl_wire_put_run(frame + FL_WIRE_HEADER_SIZE, &run);
    send_raw(reinterpret_cast<const char *>(frame), sizeof frame);
  }

  // The next frame the service sent, waited for by the spin rule: with `run_reply`, the RUN
  // reply to `request_id` as a reply_type; any other frame as bytes (the caller decodes it: an
  // error, a control reply); a str saying why a message was no frame; None at the service's
  // end. Fds a message carried are closed: the service sends none to a client.
  // With `run_reply`, the reply to the oldest RUN in flight (send_run) is read where it comes:
  // its slot on the run page when it was posted there.
  py::object receive(std::uint32_t request_id, SpinGate &gate, bool run_reply) {
    if (run_reply && !sent_.empty()) {
      const Sent oldest = sent_.front();
      sent_.pop_front();
      if (oldest.on_page) {
        nap_.forget();
        return page_reply(oldest.seq, request_id, make_plan(), gate);
      }
      --on_socket_;
    }
    return receive_planned(request_id, gate, run_reply, nullptr);
  }

  // The run page (../common/run_page.h): a new page and its memfd, for OPEN_RUN_PAGE.
  int make_page() {
    page_ = RunPageMap::create();
    return page_->fd();
  }

  // After OPEN_RUN_PAGE: its memfd is closed here; the page is used from now on when the
  // service took it, with the slots it serves (1 when its answer names none), else forgotten.
  void keep_page(bool taken, std::uint32_t slots) {
    if (!page_) return;
    page_->close_fd();
    if (!taken) page_.reset();
    slots_ = fl_run_page_slots(slots);
  }

  bool has_page() const { return static_cast<bool>(page_); }

  // A RUN on the run page while replies come soon enough to spin (or nap) for: posted there (a
  // NUDGE sent when the service sleeps), its reply read there, waited for as receive waits; a
  // reply the service sends on the socket instead (an ERROR: a refusal or a failed run) is
  // received as receive does. A reply worth sleeping for is a RUN on the socket instead, whose
  // message wakes the sleeper anyway (docs/ipc.md, "The run page"). OSError when a send failed.
  py::object run_page(std::uint16_t kind, std::uint32_t request_id, const py::bytes &session_id,
                      std::uint64_t wait_value, std::uint64_t signal_value,
                      std::uint32_t timeout_ms, SpinGate &gate) {
    if (!page_) throw py::value_error("no run page: open one first");
    if (!sent_.empty()) throw py::value_error("RUNs are in flight: read their replies first");
    nap_.forget();
    const Plan plan = make_plan();
    if (plan.nap == 0 && plan.budget == 0) {
      send_run_frame(kind, request_id, session_id, wait_value, signal_value, timeout_ms);
      return receive_planned(request_id, gate, true, &plan);
    }
    post(kind, request_id, session_id, wait_value, signal_value, timeout_ms);
    return page_reply(seq_, request_id, plan, gate);
  }

  // How the connection's RUNs used the run page: posted there, and answered there (the others'
  // replies came on the socket: refusals, failures).
  py::typing::Dict<py::str, py::int_> page_counts() const {
    py::typing::Dict<py::str, py::int_> d;
    d["posted"] = posted_;
    d["answered"] = page_answered_;
    return d;
  }

  ReceiveSpin &spin() { return spin_; }
  bool napping() const { return nap_.napping(); }

  // How the waits went, counted since the connection opened (IpcClient.waits).
  struct Waits {
    std::uint64_t spun = 0;             // spun first (then blocked if the spin ran out)
    std::uint64_t napped = 0;           // napped, then spun
    std::uint64_t nap_missed = 0;       // of those, the waits whose spin ran out: then blocked
    std::uint64_t blocked = 0;          // blocked at once
    std::uint64_t stayed = 0;           // stayed runnable first (stay_runnable)
    std::uint64_t stayed_answered = 0;  // of those, the waits whose answer came meanwhile
  } waits;

 private:
  // How the next wait goes, planned once when it starts (t0, CLOCK_MONOTONIC): a nap of `nap`
  // ns and a spin of `nap_spin` after it, or (no nap) a spin of `budget` ns, then a block;
  // `stay`: a long wait that stays runnable before its nap or block (stay_runnable).
  struct Plan {
    std::int64_t t0, nap, nap_spin, budget;
    bool stay;
  };

  Plan make_plan() {
    const std::int64_t t0 = fl_htl_now_ns();
    if (spin_.max_spin_ns() == 0) return {t0, 0, 0, 0, false};  // always block
    const auto [nap, nap_spin] = nap_.plan(t0, shared_);
    const std::int64_t budget = nap > 0 ? 0 : spin_.budget_ns(t0);
    const bool stay = stay_on_ && !shared_ && nap_.long_runs() && budget == 0 &&
                      (quiet_stays_ < kQuietStays || fl_spin_exploring(t0) != 0);
    return {t0, nap, nap_spin, budget, stay};
  }

  // The reply to a RUN posted on the run page, looked for in its slot.
  struct PageWatch {
    FlRunPage *page;
    std::uint32_t slots, seq;
    FlRunPageReply reply;
    static bool news(void *arg) {
      auto *w = static_cast<PageWatch *>(arg);
      return fl_run_page_reply(w->page, w->slots, w->seq, &w->reply) != 0;
    }
  };

  // A RUN in flight: on the page (its seq) or on the socket.
  struct Sent {
    std::uint32_t request_id, seq;
    bool on_page;
  };

  // Posts a RUN on the page as RUN ++seq_, in its slot (a NUDGE sent when the service sleeps);
  // the caller knows the slot is free.
  void post(std::uint16_t kind, std::uint32_t request_id, const py::bytes &session_id,
            std::uint64_t wait_value, std::uint64_t signal_value, std::uint32_t timeout_ms) {
    FlRunPageRun run{seq_ + 1, kind, request_id, timeout_ms, {}, wait_value, signal_value};
    copy_session_id(session_id, run.session_id);
    ++seq_;
    ++posted_;
    if (fl_run_page_post(page_->page(), slots_, &run))
      send_raw(reinterpret_cast<const char *>(nudge_frame().data()), nudge_frame().size());
  }

  // The reply to the page's RUN `seq`, waited for as `plan` says: read in its slot, or (a
  // refusal, a failed run: the slot says so) on the socket, where it comes before any later
  // RUN's reply. The service writes the slot before it sends anything later on the socket, so
  // a socket frame that came during the wait while the slot holds the answer is a later RUN's
  // reply: it is kept for the next receive (a wait looks at the socket first).
  py::object page_reply(std::uint32_t seq, std::uint32_t request_id, const Plan &plan,
                        SpinGate &gate) {
    PageWatch w{page_->page(), slots_, seq, {}};
    Message m;
    if (!PageWatch::news(&w) && (pending_ || !wait(plan, gate, &w, m))) {
      if (pending_) {  // the slot was written before it came: no answer there is no answer
        m = std::move(*pending_);
        pending_.reset();
      }
      if (!PageWatch::news(&w) || w.reply.status != FL_RUN_PAGE_ANSWERED)
        return frame_of(m, request_id, true);  // this RUN's ERROR, or the service's end
      pending_ = std::move(m);
    }
    if (w.reply.status == FL_RUN_PAGE_ON_SOCKET)
      return receive_planned(request_id, gate, true, nullptr);
    if (w.reply.status != FL_RUN_PAGE_ANSWERED || w.reply.request_id != request_id)
      return py::str("the run page's reply does not answer this RUN");
    ++page_answered_;
    return run_reply_of(w.reply.run);
  }

  // receive, its first wait planned already when `first` is given (a RUN that run_page sent on
  // the socket).
  py::object receive_planned(std::uint32_t request_id, SpinGate &gate, bool run_reply,
                             const Plan *first) {
    nap_.forget();
    Message m;
    if (pending_) {  // a frame a wait on the page received ahead of its turn
      m = std::move(*pending_);
      pending_.reset();
      return frame_of(m, request_id, run_reply);
    }
    do {
      if (!try_recv_message(fd_, FL_WIRE_MAX_FRAME, FL_WIRE_MAX_FDS, m))
        wait(first != nullptr ? *first : make_plan(), gate, nullptr, m);
      first = nullptr;
    } while (drop_nudge(m));  // a late NUDGE of the run page says nothing here
    return frame_of(m, request_id, run_reply);
  }

  // One wait for what the service sends next, as `plan` says, with the GIL released: the
  // socket's next message, or (with `page`: a RUN posted on the run page) the RUN's reply there,
  // whichever comes first. True when the page's reply came; false with `m` holding the socket's
  // message. A nap holds a spinner slot through the nap and its spin, and tells the service it
  // sleeps (the page's client_sleeping), so that a reply there comes with a NUDGE; the block
  // comes after the slot is given back. A long wait stays runnable first (stay_runnable), in
  // the slot of its nap or a slot of its own. The wait is observed by the spin rule and the nap.
  bool wait(const Plan &plan, SpinGate &gate, PageWatch *page, Message &m) {
    py::gil_scoped_release nogil;
    std::int64_t late = -1, budget = plan.budget;
    bool napped = false;
    int got = -1;  // as spin_for
    if (plan.nap > 0) {
      SpinSlot slot(gate);
      if (slot) {
        napped = true;
        const std::int64_t nap_end = plan.t0 + plan.nap;
        if (plan.stay) got = stay_for(page, std::min(nap_end, plan.t0 + kStayLongest), m);
        if (got < 0) {
          if (page != nullptr) fl_run_page_sleeping(&page->page->client_sleeping, 1);
          const std::int64_t left = nap_end - fl_htl_now_ns();
          const bool came = (page != nullptr && PageWatch::news(page)) ||
                            (left > 0 && nap_for(fd_, left, late));
          if (page != nullptr) fl_run_page_sleeping(&page->page->client_sleeping, 0);
          got = spin_for(page, came ? 0 : plan.nap_spin, m, true);
        }
      } else {
        ++spin_.denied;  // no slot for a nap: block
      }
    } else if (budget > 0) {
      SpinSlot slot(gate);
      if (slot) {
        got = spin_for(page, budget, m);
      } else {
        ++spin_.denied;
        budget = 0;
      }
    } else if (plan.stay) {
      SpinSlot slot(gate);
      if (slot) got = stay_for(page, plan.t0 + kStayLongest, m);
    }
    if (napped) {
      ++waits.napped;
      if (got < 0) ++waits.nap_missed;
    } else {
      ++(budget > 0 ? waits.spun : waits.blocked);
    }
    if (got < 0) got = block_for(page, m) ? 1 : 0;
    const std::int64_t waited = fl_htl_now_ns() - plan.t0;
    if (napped) {
      nap_.observe(waited, plan.nap, late, false);
    } else {
      spin_.observe(waited, budget);
      nap_.observe(waited, 0, -1, budget == 0);
    }
    return got == 1;
  }

  // stay_runnable on the page's reply (with `page`) or the socket, counted.
  int stay_for(PageWatch *page, std::int64_t until, Message &m) {
    bool contended = false;
    const int got =
        stay_runnable(fd_, page != nullptr ? PageWatch::news : nullptr, page, until, m, contended);
    quiet_stays_ = contended ? 0 : quiet_stays_ + 1;
    ++waits.stayed;
    if (got >= 0) ++waits.stayed_answered;
    return got;
  }

  // A spin of `ns` (none when 0; `yield`: as spin_page): 1 when the page's reply came, 0 when
  // `m` came, -1 when nothing did.
  int spin_for(PageWatch *page, std::int64_t ns, Message &m, bool yield = false) {
    if (page != nullptr) return spin_page(fd_, ns, PageWatch::news, page, m, yield);
    m = recv_message(fd_, FL_WIRE_MAX_FRAME, FL_WIRE_MAX_FDS, ns, false);
    return m.pending ? -1 : 0;
  }

  // A block until the page's reply (true) or the socket's message (false, in `m`) comes.
  bool block_for(PageWatch *page, Message &m) {
    if (page != nullptr)
      return block_page(fd_, -1, &page->page->client_sleeping, PageWatch::news, page, m);
    m = recv_message(fd_, FL_WIRE_MAX_FRAME, FL_WIRE_MAX_FDS, 0, true);
    return false;
  }

  py::object run_reply_of(const FlWireRunReply &r) {
    nap_.served(r.total_us);
    shared_ = (r.flags & FL_WIRE_REPLY_CPUS_SHARED) != 0;
    return reply_type_(r.signal_value, r.wait_us, r.infer_us, r.total_us, r.flags);
  }

  // A received message as receive returns it: with `run_reply`, the RUN reply to `request_id`
  // as a reply_type; any other frame as bytes; a str saying why a message was no frame; None
  // at the service's end. Fds a message carried are closed: the service sends none to a client.
  py::object frame_of(Message &m, std::uint32_t request_id, bool run_reply) {
    for (int f : m.fds) ::close(f);
    if (!m.problem.empty()) return py::str(m.problem);
    if (m.eof) return py::none();
    const auto *p = reinterpret_cast<const std::uint8_t *>(m.data.data());
    FlWireHeader h;
    if (run_reply && m.data.size() == kRunReplyFrame && fl_wire_header_ok(p, m.data.size(), &h) &&
        h.kind == (FL_KIND_RUN | FL_WIRE_REPLY_BIT) && h.request_id == request_id) {
      FlWireRunReply r;
      fl_wire_get_run_reply(p + FL_WIRE_HEADER_SIZE, &r);
      return run_reply_of(r);
    }
    return py::bytes(m.data);
  }

  static void copy_session_id(const py::bytes &session_id, std::uint8_t *out) {
    char *sid = nullptr;
    Py_ssize_t sid_len = 0;
    if (PyBytes_AsStringAndSize(session_id.ptr(), &sid, &sid_len) != 0)
      throw py::error_already_set();
    if (sid_len != FL_WIRE_SESSION_ID_BYTES)
      throw py::value_error("a session id is 16 bytes on the wire");
    std::memcpy(out, sid, FL_WIRE_SESSION_ID_BYTES);
  }

  void send_raw(const char *data, std::size_t n) {
    int err = try_send_message(fd_, data, n);
    if (err == EAGAIN) {
      py::gil_scoped_release nogil;
      err = send_waiting(fd_, data, n, -1, -1);
    }
    if (err != 0) raise_errno(err);
  }

  int fd_;
  ReceiveSpin spin_;
  ReplyNap nap_;
  py::object reply_type_;
  std::unique_ptr<RunPageMap> page_;
  std::uint32_t slots_ = 1;  // the page's slots the service serves
  std::uint32_t seq_ = 0;    // the last RUN posted on the page
  std::deque<Sent> sent_;    // the RUNs sent ahead whose replies are to be read, oldest first
  std::optional<Message> pending_;  // a socket frame received ahead of its turn (page_reply)
  std::uint32_t on_socket_ = 0;  // of them, those sent on the socket
  std::uint64_t posted_ = 0, page_answered_ = 0;
  unsigned quiet_stays_ = 0;  // stays in a row whose yields found the core idle
  bool shared_ = false;  // the last RUN reply said the service's cores are shared: no nap, no stay
  const bool stay_on_ = switched_on("FENCELINE_STAY");
};

}  // namespace

void bind_client_runs(py::module_ &mod) {
  py::class_<ReplyNap>(mod, "ReplyNap",
                       "The Python client's nap rule alone (ClientSocket's, for tests): fed "
                       "waits, it plans the next one's nap and the spin after it.")
      .def(py::init<>())
      .def(
          "plan",
          [](ReplyNap &n, std::int64_t now_ns,
             bool shared) -> py::typing::Tuple<py::int_, py::int_> {
            const auto [nap, spin] = n.plan(now_ns, shared);
            return py::make_tuple(nap, spin);
          },
          py::arg("now_ns"), py::arg("shared") = false,
          "(nap_ns, spin_ns) for a wait starting at now_ns; (0, 0): no nap. shared: the last "
          "reply said the service's cores are shared (no nap, the wait not judged).")
      .def("observe", &ReplyNap::observe, py::arg("waited_ns"), py::arg("nap_ns"),
           py::arg("late_ns"), py::arg("blocked"))
      .def("served", &ReplyNap::served, py::arg("service_us"))
      .def_property_readonly("napping", &ReplyNap::napping);
  py::class_<ClientSocket>(mod, "ClientSocket",
                           "The Python client's end of a connection to the service: sends, and "
                           "receives waited for by the spin rule, a RUN's reply read natively.")
      .def(py::init<int, std::int64_t, py::object>(), py::arg("fd"), py::arg("max_spin_ns"),
           py::arg("reply_type"))
      .def("send", &ClientSocket::send, py::arg("data"))
      .def("send_run", &ClientSocket::send_run, py::arg("kind"), py::arg("request_id"),
           py::arg("session_id"), py::arg("wait_value"), py::arg("signal_value"),
           py::arg("timeout_ms"))
      .def("make_page", &ClientSocket::make_page,
           "A new run page (docs/ipc.md): its memfd, to send with OPEN_RUN_PAGE.")
      .def("keep_page", &ClientSocket::keep_page, py::arg("taken"), py::arg("slots") = 1,
           "Closes the page's memfd; keeps the page when the service took it, with the slots "
           "it serves (RUNs in flight there).")
      .def_property_readonly("page_counts", &ClientSocket::page_counts,
                             "RUNs posted on the run page, and of them those answered there.")
      .def_property_readonly("has_page", &ClientSocket::has_page)
      .def("run_page", &ClientSocket::run_page, py::arg("kind"), py::arg("request_id"),
           py::arg("session_id"), py::arg("wait_value"), py::arg("signal_value"),
           py::arg("timeout_ms"), py::arg("gate"))
      .def("receive", &ClientSocket::receive, py::arg("request_id"), py::arg("gate"),
           py::arg("run_reply") = true)
      .def_property_readonly("spinning", [](ClientSocket &c) { return c.spin().spinning(); })
      .def_property_readonly("average_wait_ns",
                             [](ClientSocket &c) { return c.spin().average_wait_ns(); })
      .def_property_readonly("denied", [](ClientSocket &c) { return c.spin().denied; })
      .def_property_readonly("napping", &ClientSocket::napping)
      .def_property_readonly(
          "waits",
          [](const ClientSocket &c) -> py::typing::Dict<py::str, py::int_> {
            const auto &w = c.waits;
            py::typing::Dict<py::str, py::int_> d;
            d["spun"] = w.spun;
            d["napped"] = w.napped;
            d["nap_missed"] = w.nap_missed;
            d["blocked"] = w.blocked;
            d["stayed"] = w.stayed;
            d["stayed_answered"] = w.stayed_answered;
            return d;
          },
          "How the waits for the service went since the connection opened, counted: spun "
          "first, napped (nap_missed: of those, the ones whose spin ran out before the answer), "
          "blocked at once; stayed runnable first (stayed_answered: the answer came meanwhile).");
}

}  // namespace fl
