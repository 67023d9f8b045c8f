#include "platform/fault_guard.h"

#include <signal.h>
#include <sys/mman.h>

#include <atomic>
#include <cerrno>
#include <mutex>
#include <vector>

namespace fl::fault_guard {

namespace {

// The handler reads slots without locks, so a slot's fields are atomics and `begin` is written
// last on registration and first on removal. Slots are never freed, only reused.
struct Slot {
  std::atomic<std::uintptr_t> begin{0};
  std::atomic<std::size_t> length{0};
  std::atomic<int> prot{0};
  std::atomic<int> lost{0};
};

// Every connection's imports and Triton regions together; the handler scans only up to the
// highest slot ever used.
constexpr int kSlots = 65536;
Slot slots[kSlots];
std::atomic<int> high_water{0};
std::atomic<std::uint64_t> faults{0};
std::atomic<std::uint64_t> live_ranges{0};
std::atomic<std::uint64_t> live_bytes{0};

// Registration and removal only, never in the handler. Never destroyed: a mapping may still be
// released while the process exits, after static destructors have run.
std::mutex &table_lock = *new std::mutex;
std::vector<int> &free_slots = *new std::vector<int>;

struct sigaction previous {};
std::once_flag installed;

// Async-signal-safe: atomics and one mmap system call.
bool absorb(std::uintptr_t addr) {
  const int hi = high_water.load(std::memory_order_acquire);
  for (int i = 0; i < hi; ++i) {
    Slot &s = slots[i];
    const std::uintptr_t b = s.begin.load(std::memory_order_acquire);
    if (b == 0 || addr < b) continue;
    const std::size_t len = s.length.load(std::memory_order_relaxed);
    if (addr - b >= len) continue;
    void *p = ::mmap(reinterpret_cast<void *>(b), len, s.prot.load(std::memory_order_relaxed),
                     MAP_FIXED | MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (p == MAP_FAILED) return false;
    s.lost.store(1, std::memory_order_release);
    faults.fetch_add(1, std::memory_order_relaxed);
    return true;
  }
  return false;
}

void on_sigbus(int sig, siginfo_t *info, void *context) {
  const int saved_errno = errno;
  // si_code > 0: raised by the kernel for an access, so si_addr is the faulting address (not
  // a kill(2) from someone, which carries no address).
  if (info != nullptr && info->si_code > 0 &&
      absorb(reinterpret_cast<std::uintptr_t>(info->si_addr))) {
    errno = saved_errno;
    return;
  }
  errno = saved_errno;
  if ((previous.sa_flags & SA_SIGINFO) != 0 && previous.sa_sigaction != nullptr) {
    previous.sa_sigaction(sig, info, context);
    return;
  }
  if (previous.sa_handler != SIG_DFL && previous.sa_handler != SIG_IGN &&
      previous.sa_handler != nullptr) {
    previous.sa_handler(sig);
    return;
  }
  // Not ours and nobody else's: die as without us (ignoring a fault would loop forever).
  struct sigaction dfl {};
  dfl.sa_handler = SIG_DFL;
  sigemptyset(&dfl.sa_mask);
  ::sigaction(SIGBUS, &dfl, nullptr);
  ::raise(SIGBUS);
}

void install() {
  struct sigaction sa {};
  sa.sa_sigaction = &on_sigbus;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_SIGINFO | SA_ONSTACK;
  ::sigaction(SIGBUS, &sa, &previous);
}

}  // namespace

int add(void *base, std::size_t length, int prot) {
  std::call_once(installed, install);
  std::lock_guard<std::mutex> lock(table_lock);
  int i;
  if (!free_slots.empty()) {
    i = free_slots.back();
    free_slots.pop_back();
  } else {
    i = high_water.load(std::memory_order_relaxed);
    if (i >= kSlots) return -1;
  }
  Slot &s = slots[i];
  s.length.store(length, std::memory_order_relaxed);
  s.prot.store(prot, std::memory_order_relaxed);
  s.lost.store(0, std::memory_order_relaxed);
  s.begin.store(reinterpret_cast<std::uintptr_t>(base), std::memory_order_release);
  if (i == high_water.load(std::memory_order_relaxed))
    high_water.store(i + 1, std::memory_order_release);
  live_ranges.fetch_add(1, std::memory_order_relaxed);
  live_bytes.fetch_add(length, std::memory_order_relaxed);
  return i;
}

void remove(int slot) {
  if (slot < 0 || slot >= kSlots) return;
  std::lock_guard<std::mutex> lock(table_lock);
  Slot &s = slots[slot];
  s.begin.store(0, std::memory_order_release);
  live_ranges.fetch_sub(1, std::memory_order_relaxed);
  live_bytes.fetch_sub(s.length.load(std::memory_order_relaxed), std::memory_order_relaxed);
  free_slots.push_back(slot);
}

bool lost(int slot) {
  return slot >= 0 && slot < kSlots && slots[slot].lost.load(std::memory_order_acquire) != 0;
}

Stats stats() {
  return {live_ranges.load(std::memory_order_relaxed), live_bytes.load(std::memory_order_relaxed),
          faults.load(std::memory_order_relaxed)};
}

}  // namespace fl::fault_guard
