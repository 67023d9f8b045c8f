// The service's one shutdown flag (fenceline.runtime.service.Runtime.closing): set once, when
// the service starts to stop, and read by every transport and by the run engine, which
// reads it without the GIL. From then on every RUN is answered `unavailable`.
#pragma once

#include <atomic>

namespace fl {

class Shutdown {
 public:
  void set() { set_.store(true, std::memory_order_release); }
  bool is_set() const { return set_.load(std::memory_order_acquire); }

 private:
  std::atomic<bool> set_{false};
};

}  // namespace fl
