// The runs on the CPU and the large frames' turn (cpu_runs.h; runtime/ort_options.py, "Large
// frames take turns").
#include "cpu_runs.h"

#include <pybind11/pybind11.h>
#include <pybind11/typing.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstdlib>
#include <mutex>
#include <string>

#include "common/host_timeline.h"

#ifdef __linux__
#include <fcntl.h>
#include <unistd.h>
#endif

namespace py = pybind11;

namespace fl {
namespace {

// How long the turn waits for its session's next frame after a run (the renderer's reply
// read, its next RUN sent: 30-60 us p50 measured on two CPUs), and for how long in all one
// session keeps it while others wait: a scheduler's slice, after which the others go first in
// turn.
constexpr std::int64_t kKeepNs = 300'000;
constexpr std::int64_t kSliceNs = 4'000'000;
// Turns are worth taking only while sessions come back for the turn kept for them: one run
// at a time on cold frames is slower than a run per core. Of every kJudged turns kept, fewer
// than half taken back by their sessions (renderers slower to answer, a loaded machine)
// turns the turns off for kOffNs; the runs then go as they come, one per core.
constexpr int kJudged = 64;
constexpr std::int64_t kOffNs = 1'000'000'000;

std::atomic<int> cpu_runs{0};
std::atomic<bool> shared{false};
thread_local std::int64_t turn_kept_until = 0;

#ifdef __linux__
// A sysfs file's text ("3\n", "32768K\n") into `out`, NUL-ended; false where it can't be read.
// Plain open/read: no iostreams in this module. Built by GCC 13, their locale code lands in the
// module beside the process's libstdc++, and `ifstream >> int` crashed the service on first use
// (a SIGSEGV inside `std::istream::operator>>(int&)` and a `codecvt` facet, on a 16-core GCC 13
// build: the module carried 260 iostream and `codecvt` symbols of its own).
bool read_sysfs(const std::string &path, char (&out)[32]) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  const ssize_t n = ::read(fd, out, sizeof out - 1);
  ::close(fd);
  if (n <= 0) return false;
  out[n] = '\0';
  return true;
}
#endif

std::int64_t read_llc() {
#ifdef __linux__
  // The highest cache level of cpu0: its size ("32768K").
  long best_level = 0;
  std::int64_t best = 0;
  for (int i = 0; i < 8; ++i) {
    const std::string dir = "/sys/devices/system/cpu/cpu0/cache/index" + std::to_string(i) + "/";
    char level_text[32], size_text[32];
    if (!read_sysfs(dir + "level", level_text) || !read_sysfs(dir + "size", size_text)) continue;
    char *end = nullptr;
    const long level = std::strtol(level_text, &end, 10);
    if (end == level_text) continue;
    std::int64_t bytes = std::strtoll(size_text, &end, 10);
    if (end == size_text || bytes <= 0) continue;
    if (*end == 'K') bytes <<= 10;
    else if (*end == 'M') bytes <<= 20;
    else if (*end == 'G') bytes <<= 30;
    if (level > best_level) {
      best_level = level;
      best = bytes;
    }
  }
  return best_level >= 2 ? best : 0;
#else
  return 0;
#endif
}

// The one turn of the large frames: held by one run at a time; kept after a run for its
// session's next frame (kKeepNs) until the session has had it for kSliceNs; otherwise handed
// to the waiting runs in the order they came.
class Turn {
 public:
  // Whether turns are taken now (not while off, after too few kept turns were taken back).
  bool on(std::int64_t now) const { return now >= off_until_.load(std::memory_order_relaxed); }

  struct Counts {
    long long runs, taken_back, expired, turned_off;
  };
  Counts counts() {
    std::lock_guard<std::mutex> lock(mu_);
    return {runs_, taken_back_total_, expired_total_, turned_off_};
  }

  void enter(const void *who) {
    std::unique_lock<std::mutex> lock(mu_);
    ++runs_;
    const std::int64_t now = fl_htl_now_ns();
    if (!busy_ && kept_for_ == who && now < kept_until_) {
      busy_ = true;
      kept_for_ = nullptr;  // the slice goes on from since_
      judge(true, now);
      return;
    }
    const std::uint64_t ticket = next_ticket_++;
    for (;;) {
      const std::int64_t t = fl_htl_now_ns();
      if (kept_for_ != nullptr && t >= kept_until_) {
        kept_for_ = nullptr;
        judge(false, t);
      }
      if (ticket == serving_ && !busy_ && kept_for_ == nullptr) break;
      if (ticket == serving_ && !busy_)
        cv_.wait_for(lock, std::chrono::nanoseconds(kept_until_ - t));
      else
        cv_.wait(lock);
    }
    ++serving_;
    busy_ = true;
    since_ = fl_htl_now_ns();
    cv_.notify_all();  // the next ticket is at the head now
  }

  // Returns until when the turn is kept for `who` (0: handed on).
  std::int64_t leave(const void *who) {
    std::int64_t until = 0;
    {
      std::lock_guard<std::mutex> lock(mu_);
      busy_ = false;
      const std::int64_t now = fl_htl_now_ns();
      if (now - since_ < kSliceNs && on(now)) {
        kept_for_ = who;
        until = kept_until_ = now + kKeepNs;
      }
    }
    cv_.notify_all();
    return until;
  }

 private:
  // A kept turn taken back by its session (true) or expired; with mu_ held.
  void judge(bool taken_back, std::int64_t now) {
    taken_back_ += taken_back ? 1 : 0;
    ++(taken_back ? taken_back_total_ : expired_total_);
    if (++judged_ < kJudged) return;
    if (taken_back_ * 2 < judged_) {
      off_until_.store(now + kOffNs, std::memory_order_relaxed);
      ++turned_off_;
    }
    judged_ = taken_back_ = 0;
  }

  std::mutex mu_;
  std::condition_variable cv_;
  std::atomic<std::int64_t> off_until_{0};
  int judged_ = 0, taken_back_ = 0;
  long long runs_ = 0, taken_back_total_ = 0, expired_total_ = 0, turned_off_ = 0;
  bool busy_ = false;
  const void *kept_for_ = nullptr;
  std::int64_t kept_until_ = 0, since_ = 0;
  std::uint64_t next_ticket_ = 0, serving_ = 0;
};

Turn &large_turn() {
  static Turn t;
  return t;
}

}  // namespace

std::int64_t last_level_cache_bytes() {
  static const std::int64_t bytes = read_llc();
  return bytes;
}

CpuRun::CpuRun(const void *who, std::int64_t frame_bytes, int full) : who_(who) {
  const int in_flight = cpu_runs.fetch_add(1, std::memory_order_relaxed) + 1;  // this one too
  if (full <= 0 || in_flight < full) return;
  const std::int64_t llc = last_level_cache_bytes();
  if (who == nullptr || llc <= 0 || frame_bytes * 4 < llc || !large_turn().on(fl_htl_now_ns())) {
    single = true;
    return;
  }
  if (PyGILState_Check() != 0) {
    py::gil_scoped_release nogil;
    large_turn().enter(who);
  } else {
    large_turn().enter(who);
  }
  turn = true;
}

CpuRun::~CpuRun() {
  cpu_runs.fetch_sub(1, std::memory_order_relaxed);
  if (turn) turn_kept_until = large_turn().leave(who_);
}

std::int64_t take_turn_kept_until() {
  const std::int64_t until = turn_kept_until;
  turn_kept_until = 0;
  return until;
}

bool cpus_shared() { return shared.load(std::memory_order_relaxed); }

void bind_cpu_runs(py::module_ &mod) {
  mod.def(
      "set_cpus_shared", [](bool on) { shared.store(on, std::memory_order_relaxed); },
      py::arg("on"),
      "Whether the service's runs on the CPU share its cores with other renderers' runs now "
      "(its pools at idle priority): every RUN reply to a client that asked for the reply's "
      "flags says so from now on.");
  mod.def("cpus_shared", &cpus_shared, "What set_cpus_shared said last (False at first).");
  mod.def(
      "large_frame_turns",
      []() -> py::typing::Dict<py::str, py::int_> {
        const auto c = large_turn().counts();
        py::typing::Dict<py::str, py::int_> d;
        d["cache_bytes"] = last_level_cache_bytes();
        d["runs"] = c.runs;
        d["kept_taken_back"] = c.taken_back;
        d["kept_expired"] = c.expired;
        d["turned_off"] = c.turned_off;
        return d;
      },
      "The large frames' turns since the process started: the last-level cache's bytes (0: "
      "unknown, no turns), runs that took the turn, turns kept that their session took back "
      "or that expired, and times the turns were turned off for a second.");
}

}  // namespace fl
