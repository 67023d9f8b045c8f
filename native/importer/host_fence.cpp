#include "host_fence.h"

#include "errors.h"

namespace fl {

HostFence::HostFence(std::shared_ptr<HostMemory> m, std::shared_ptr<fl_htl_wake> wake)
    : memory_(std::move(m)), wake_(std::move(wake)) {}

namespace {

std::shared_ptr<fl_htl_wake> wake_for(const std::string &name, bool create) {
  fl_htl_wake *w = nullptr;
  const int rc = fl_htl_wake_open(name.c_str(), create ? 1 : 0, &w);
  const std::string wake_name = name + FL_HTL_WAKE_SUFFIX;
  switch (rc) {
    case 0:
      return std::shared_ptr<fl_htl_wake>(w, fl_htl_wake_close);
    case FL_HTL_E_NOT_FOUND:
      throw Error(Code::NotFound, "the fence's wake semaphore '" + wake_name +
                                      "' does not exist: a Windows host_timeline fence is a "
                                      "section and a semaphore (docs/fences.md)");
    case FL_HTL_E_EXISTS:
      throw Error(Code::Conflict, "'" + wake_name +
                                      "' already exists (another process holds the name); pick "
                                      "a fresh fence name");
    case FL_HTL_E_WRONG_TYPE:
      throw Error(Code::InvalidArgument,
                  "'" + wake_name + "' names another kind of object, not a semaphore");
    default:
      throw Error(Code::OsError, "cannot open the fence's wake semaphore '" + wake_name + "'");
  }
}

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
  auto m = validated(HostMemory::open_shm(name, 0, 0, true));
  return std::shared_ptr<HostFence>(new HostFence(std::move(m), wake_for(name, false)));
}

std::shared_ptr<HostFence> HostFence::from_fd(int fd) {
  return std::shared_ptr<HostFence>(
      new HostFence(validated(HostMemory::from_fd(fd, 0, 0, true)), nullptr));
}

std::shared_ptr<HostFence> HostFence::create_shm(const std::string &name) {
  auto m = HostMemory::create_shm(name, FL_HTL_PAGE_SIZE);
  auto wake = wake_for(name, true);
  fl_htl_init(m->mapping()->data(), 0);
  return std::shared_ptr<HostFence>(new HostFence(std::move(m), std::move(wake)));
}

std::shared_ptr<HostFence> HostFence::create_memfd(const std::string &name) {
  auto m = HostMemory::create_memfd(name, FL_HTL_PAGE_SIZE);
  fl_htl_init(m->mapping()->data(), 0);
  return std::shared_ptr<HostFence>(new HostFence(std::move(m), nullptr));
}

std::uint64_t HostFence::value() const { return fl_htl_value(page()); }
std::uint32_t HostFence::status() const { return fl_htl_status(page()); }

void HostFence::signal(std::uint64_t v) {
  if (fl_htl_signal(page(), wake_.get(), v) != 0)
    throw Error(Code::Conflict, "signal value " + std::to_string(v) +
                                    " is not above the fence's current value " +
                                    std::to_string(value()));
}

void HostFence::set_status(std::uint32_t status) {
  if (status > FL_HTL_STATUS_ERROR)
    throw Error(Code::InvalidArgument, "fence status is 0 (live), 1 (abandoned) or 2 (error)");
  fl_htl_set_status(page(), wake_.get(), status);
}

int HostFence::wait(std::uint64_t target, std::int64_t timeout_ns, std::int64_t spin_ns) const {
  std::shared_ptr<Mapping> hold = memory_->mapping();
  std::shared_ptr<fl_htl_wake> wake = wake_;
  return static_cast<int>(fl_htl_wait(hold->data(), wake.get(), target, timeout_ns, spin_ns));
}

}  // namespace fl
