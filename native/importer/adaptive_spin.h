// The spin rationing and the adaptive spin of fenceline.waiting, for waits done in native code
// (the IPC connection's receive in host_runs.cpp). fenceline.waiting documents the rules; its
// SpinGate is this gate, so Python and native waiters share one count of spinners.
#pragma once

#include <atomic>
#include <cstdint>
#include <optional>

namespace fl {

// At most `slots` waiters spin at once; entering never waits.
class SpinGate {
 public:
  explicit SpinGate(int slots) : slots_(slots) {}
  bool try_enter() {
    int n = spinning_.load(std::memory_order_relaxed);
    while (n < slots_)
      if (spinning_.compare_exchange_weak(n, n + 1, std::memory_order_acquire)) return true;
    return false;
  }
  void leave() { spinning_.fetch_sub(1, std::memory_order_release); }
  int slots() const { return slots_; }
  int spinning() const { return spinning_.load(std::memory_order_relaxed); }

 private:
  const int slots_;
  std::atomic<int> spinning_{0};
};

// AdaptiveSpin without naps (fenceline.waiting.AdaptiveSpin: the same constants, averages,
// exploration windows and choice). One waiter; not thread-safe.
class ReceiveSpin {
 public:
  explicit ReceiveSpin(std::int64_t max_spin_ns) : max_spin_ns_(max_spin_ns) {}
  // How long the next wait should spin before it blocks; `now_ns` is CLOCK_MONOTONIC.
  std::int64_t budget_ns(std::int64_t now_ns);
  // How long the last wait took and the budget it was given (0: it blocked at once).
  void observe(std::int64_t waited_ns, std::int64_t budget_ns);
  bool spinning() const { return spinning_ && max_spin_ns_ > 0; }
  double average_wait_ns() const { return (spinning_ ? spin_avg_ : block_avg_).value_or(0.0); }
  std::int64_t max_spin_ns() const { return max_spin_ns_; }
  std::uint64_t denied = 0;  // waits that blocked at once: every spinner slot was taken

 private:
  bool window(std::int64_t now_ns);
  void decide();
  std::int64_t max_spin_ns_;
  std::optional<double> spin_avg_, block_avg_;
  bool spinning_ = true;
  bool exploring_ = false;
};

}  // namespace fl
