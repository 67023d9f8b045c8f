// The spin rationing and the adaptive spin of fenceline.waiting, for waits done in native code
// (the service connection's receive in host_runs.cpp, the Python client's in client_runs.cpp).
// The rule itself is native/common/spin_rule.h, which the C client follows too;
// fenceline.waiting's SpinGate is this gate, so Python and native waiters share one count of
// spinners.
#pragma once

#include <atomic>
#include <cstdint>

#include "common/spin_rule.h"

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

// A slot of `gate` held for one spin, given back when it goes; false when every slot was taken.
class SpinSlot {
 public:
  explicit SpinSlot(SpinGate &gate) : gate_(gate.try_enter() ? &gate : nullptr) {}
  ~SpinSlot() {
    if (gate_ != nullptr) gate_->leave();
  }
  SpinSlot(const SpinSlot &) = delete;
  SpinSlot &operator=(const SpinSlot &) = delete;
  explicit operator bool() const { return gate_ != nullptr; }

 private:
  SpinGate *gate_;
};

// The spin rule (spin_rule.h) of one waiter, as fenceline.waiting.AdaptiveSpin. Not thread-safe.
class ReceiveSpin {
 public:
  explicit ReceiveSpin(std::int64_t max_spin_ns) { fl_spin_rule_init(&rule_, max_spin_ns); }
  // How long the next wait should spin before it blocks; `now_ns` is CLOCK_MONOTONIC.
  std::int64_t budget_ns(std::int64_t now_ns) { return fl_spin_rule_budget(&rule_, now_ns); }
  // How long the last wait took and the budget it was given (0: it blocked at once).
  void observe(std::int64_t waited_ns, std::int64_t budget_ns) {
    fl_spin_rule_observe(&rule_, waited_ns, budget_ns);
  }
  bool spinning() const { return fl_spin_rule_spinning(&rule_) != 0; }
  double average_wait_ns() const { return fl_spin_rule_average(&rule_); }
  std::int64_t max_spin_ns() const { return fl_spin_rule_max(&rule_); }
  void set_max_spin_ns(std::int64_t max_spin_ns) { fl_spin_rule_set_max(&rule_, max_spin_ns); }
  // Waits that blocked at once: every spinner slot was taken (counted by whoever waited by
  // this rule, native code or fenceline.waiting.AdaptiveSpin).
  std::uint64_t denied = 0;

 private:
  fl_spin_rule rule_;
};

}  // namespace fl
