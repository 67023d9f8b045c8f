#include "host_fence.h"

#include "../common/host_timeline.h"
#include "errors.h"

namespace fl {

HostFence::HostFence(std::shared_ptr<HostMemory> m) : memory_(std::move(m)) {}

namespace {
std::shared_ptr<HostMemory> validated(std::shared_ptr<HostMemory> m) {
  const auto &map = m->mapping();
  if (fl_htl_validate(map->data(), map->size()) != 0)
    throw Error(Code::InvalidArgument,
                "not a host_timeline fence: expected a 4096-byte page with magic 0x46544C46 "
                "and version 1 (docs/fences.md)");
  return m;
}
}  // namespace

std::shared_ptr<HostFence> HostFence::open_shm(const std::string &name) {
  return std::shared_ptr<HostFence>(
      new HostFence(validated(HostMemory::open_shm(name, 0, 0, true))));
}

std::shared_ptr<HostFence> HostFence::from_fd(int fd) {
  return std::shared_ptr<HostFence>(new HostFence(validated(HostMemory::from_fd(fd, 0, 0, true))));
}

std::shared_ptr<HostFence> HostFence::create_shm(const std::string &name) {
  auto m = HostMemory::create_shm(name, FL_HTL_PAGE_SIZE);
  fl_htl_init(m->mapping()->data(), 0);
  return std::shared_ptr<HostFence>(new HostFence(std::move(m)));
}

std::shared_ptr<HostFence> HostFence::create_memfd(const std::string &name) {
  auto m = HostMemory::create_memfd(name, FL_HTL_PAGE_SIZE);
  fl_htl_init(m->mapping()->data(), 0);
  return std::shared_ptr<HostFence>(new HostFence(std::move(m)));
}

namespace {
// A fence page that shrank under us reads as zeros from then on (fault_guard.h): whatever an
// access returned after that is not the renderer's, so every access is checked afterwards.
void check_lost(const Mapping &m) {
  if (m.lost())
    throw Error(Code::DeviceLost,
                "the fence page shrank while mapped: the fence is lost; release it");
}
// Long waits wake this often to notice a lost page: a waiter asleep on the futex is not woken
// when the page is truncated.
constexpr std::int64_t kLostCheckNs = 50'000'000;
}  // namespace

void *HostFence::page() const {
  const auto &m = memory_->mapping();
  check_lost(*m);
  return m->data();
}

std::uint64_t HostFence::value() const {
  const std::uint64_t v = fl_htl_value(page());
  check_lost(*memory_->mapping());
  return v;
}

std::uint32_t HostFence::status() const {
  const std::uint32_t s = fl_htl_status(page());
  check_lost(*memory_->mapping());
  return s;
}

void HostFence::signal(std::uint64_t v) {
  const int r = fl_htl_signal(page(), v);
  check_lost(*memory_->mapping());
  if (r != 0)
    throw Error(Code::Conflict, "signal value " + std::to_string(v) +
                                    " is not above the fence's current value " +
                                    std::to_string(value()));
}

void HostFence::set_status(std::uint32_t status) {
  if (status > FL_HTL_STATUS_ERROR)
    throw Error(Code::InvalidArgument, "fence status is 0 (live), 1 (abandoned) or 2 (error)");
  fl_htl_set_status(page(), status);
  check_lost(*memory_->mapping());
}

int HostFence::wait(std::uint64_t target, std::int64_t timeout_ns, std::int64_t spin_ns) const {
  std::shared_ptr<Mapping> hold = memory_->mapping();
  check_lost(*hold);
  const std::int64_t deadline = timeout_ns < 0 ? -1 : fl_htl_now_ns() + timeout_ns;
  for (;;) {
    std::int64_t slice = kLostCheckNs;
    if (deadline >= 0) {
      const std::int64_t left = deadline - fl_htl_now_ns();
      if (left < slice) slice = left > 0 ? left : 0;
    }
    const auto r = fl_htl_wait(hold->data(), target, slice, spin_ns);
    check_lost(*hold);
    if (r != FL_HTL_TIMED_OUT || (deadline >= 0 && fl_htl_now_ns() >= deadline))
      return static_cast<int>(r);
    spin_ns = 0;
  }
}

}  // namespace fl
