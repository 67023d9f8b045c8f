// Host timeline fences (docs/fences.md) over a shared page held by a HostMemory.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "common/host_timeline.h"
#include "host_memory.h"

namespace fl {

class HostFence {
 public:
  // Importer side: validates magic and version.
  static std::shared_ptr<HostFence> open_shm(const std::string &name);
  static std::shared_ptr<HostFence> from_fd(int fd);  // takes ownership of fd
  // Windows: a fence page's section and its wake semaphore, both duplicated into this process
  // (docs/windows.md, "Handles"); takes ownership of both, also when it throws.
  static std::shared_ptr<HostFence> from_handles(NativeHandle section, NativeHandle wake);
  // Signaller side: creates and initialises the page at value 0.
  static std::shared_ptr<HostFence> create_shm(const std::string &name);
  static std::shared_ptr<HostFence> create_memfd(const std::string &name);

  std::uint64_t value() const;
  std::uint32_t status() const;
  // Throws Conflict when v is not above the current value.
  void signal(std::uint64_t v);
  void set_status(std::uint32_t status);
  // 0 reached, 1 timed out, 2 abandoned, 3 errored (fl_htl_wait_result). The caller releases
  // the GIL; the page stays mapped for the whole wait even if close() runs meanwhile.
  // Every access throws DeviceLost once the page shrank under the mapping (fault_guard.h).
  int wait(std::uint64_t target, std::int64_t timeout_ns, std::int64_t spin_ns) const;

  HostMemory &memory() { return *memory_; }
  // The wake object's OS handle (Windows: the semaphore), -1 where there is none.
  NativeHandle wake_handle() const { return wake_ ? fl_htl_wake_native(wake_.get()) : -1; }
  void close() {
    memory_->close();
    wake_.reset();
  }

 private:
  HostFence(std::shared_ptr<HostMemory> m, std::shared_ptr<fl_htl_wake> wake);
  void *page() const;
  std::shared_ptr<HostMemory> memory_;
  // The page's wake object (Windows: its named semaphore; null on Linux). Shared so that a wait
  // in progress keeps it open through close().
  std::shared_ptr<fl_htl_wake> wake_;
};

}  // namespace fl
