#include "host_fence.h"

#include "core/errors.h"

namespace fl {

HostFence::HostFence(std::shared_ptr<HostMemory> m, std::shared_ptr<fl_htl_wake> wake)
    : memory_(std::move(m)), wake_(std::move(wake)) {}

namespace {

std::string wake_count_problem(int rc) {
  const std::string rule =
      ": create it with a maximum count of 0x7FFFFFFF (CreateSemaphoreW(NULL, 0, 0x7FFFFFFF, "
      "name)), so that one release per sleeper can wake every waiter (docs/fences.md)";
  return rc == FL_HTL_E_WAKE_COUNT ? "has another maximum count" + rule
                                   : "cannot be queried for its maximum count (the handle needs "
                                     "SEMAPHORE_QUERY_STATE access)" + rule;
}

// name nullptr: an unnamed wake object (create only), for a page that travels as a handle.
std::shared_ptr<fl_htl_wake> wake_for(const std::string *name, bool create) {
  fl_htl_wake *w = nullptr;
  const int rc = fl_htl_wake_open(name ? name->c_str() : nullptr, create ? 1 : 0, &w);
  if (rc == 0) return std::shared_ptr<fl_htl_wake>(w, fl_htl_wake_close);
  if (name == nullptr) throw Error(Code::OsError, "cannot create an unnamed wake semaphore");
  const std::string wake_name = *name + FL_HTL_WAKE_SUFFIX;
  switch (rc) {
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
    case FL_HTL_E_WAKE_COUNT:
    case FL_HTL_E_WAKE_UNREADABLE:
      throw Error(Code::InvalidArgument, "the fence's wake semaphore '" + wake_name + "' " +
                                             wake_count_problem(rc));
    default:
      throw Error(Code::OsError, "cannot open the fence's wake semaphore '" + wake_name + "'");
  }
}

std::shared_ptr<HostMemory> validated(std::shared_ptr<HostMemory> m) {
  const auto &map = m->mapping();
  if (fl_htl_validate(map->data(), map->size()) != 0)
    throw Error(Code::InvalidArgument,
                "not a host_timeline fence: expected a 4096-byte page with magic 0x46544C46, "
                "version 1, flags 0 or 1 and status 0, 1 or 2 (docs/fences.md)");
  return m;
}
}  // namespace

std::shared_ptr<HostFence> HostFence::open_shm(const std::string &name) {
  auto m = validated(HostMemory::open_shm(name, 0, 0, true));
  return std::shared_ptr<HostFence>(new HostFence(std::move(m), wake_for(&name, false)));
}

std::shared_ptr<HostFence> HostFence::from_fd(int fd) {
  return std::shared_ptr<HostFence>(
      new HostFence(validated(HostMemory::from_fd(fd, 0, 0, true)), nullptr));
}

std::shared_ptr<HostFence> HostFence::from_handles(NativeHandle section, NativeHandle wake) {
  // The wake handle is adopted first: from here on both are owned, whatever throws.
  fl_htl_wake *w = nullptr;
  const int rc = fl_htl_wake_adopt(wake, &w);
  std::shared_ptr<fl_htl_wake> owned_wake(w, fl_htl_wake_close);
#ifdef _WIN32
  auto m = HostMemory::from_handle(section, 0, 0, true);
  if (rc == FL_HTL_E_WAKE_COUNT || rc == FL_HTL_E_WAKE_UNREADABLE)
    throw Error(Code::InvalidArgument, "the fence's wake semaphore " + wake_count_problem(rc));
  if (rc != 0) throw Error(Code::InvalidArgument, "invalid wake semaphore handle");
  return std::shared_ptr<HostFence>(new HostFence(validated(std::move(m)), std::move(owned_wake)));
#else
  // A POSIX "handle" would be an fd this process never received: touch nothing.
  (void)section;
  (void)rc;
  throw Error(Code::Unsupported, "fence pages travel as handles only on Windows");
#endif
}

std::shared_ptr<HostFence> HostFence::create_shm(const std::string &name) {
  auto m = HostMemory::create_shm(name, FL_HTL_PAGE_SIZE);
  auto wake = wake_for(&name, true);
  fl_htl_init(m->mapping()->data(), 0);
  return std::shared_ptr<HostFence>(new HostFence(std::move(m), std::move(wake)));
}

std::shared_ptr<HostFence> HostFence::create_memfd(const std::string &name) {
  auto m = HostMemory::create_memfd(name, FL_HTL_PAGE_SIZE);
  // Linux needs no wake object; Windows gets an unnamed semaphore that travels beside the page.
  auto wake = wake_for(nullptr, true);
  fl_htl_init(m->mapping()->data(), 0);
  return std::shared_ptr<HostFence>(new HostFence(std::move(m), std::move(wake)));
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
  const int r = fl_htl_signal(page(), wake_.get(), v);
  check_lost(*memory_->mapping());
  if (r != 0)
    throw Error(Code::Conflict, "signal value " + std::to_string(v) +
                                    " is not above the fence's current value " +
                                    std::to_string(value()));
}

void HostFence::set_status(std::uint32_t status) {
  if (status > FL_HTL_STATUS_ERROR)
    throw Error(Code::InvalidArgument, "fence status is 0 (live), 1 (abandoned) or 2 (error)");
  fl_htl_set_status(page(), wake_.get(), status);
  check_lost(*memory_->mapping());
}

int HostFence::wait(std::uint64_t target, std::int64_t timeout_ns, std::int64_t spin_ns) const {
  std::shared_ptr<Mapping> hold = memory_->mapping();
  std::shared_ptr<fl_htl_wake> wake = wake_;
  check_lost(*hold);
  const std::int64_t deadline = timeout_ns < 0 ? -1 : fl_htl_now_ns() + timeout_ns;
  for (;;) {
    std::int64_t slice = kLostCheckNs;
    if (deadline >= 0) {
      const std::int64_t left = deadline - fl_htl_now_ns();
      if (left < slice) slice = left > 0 ? left : 0;
    }
    const auto r = fl_htl_wait(hold->data(), wake.get(), target, slice, spin_ns);
    check_lost(*hold);
    if (r != FL_HTL_TIMED_OUT || (deadline >= 0 && fl_htl_now_ns() >= deadline))
      return static_cast<int>(r);
    spin_ns = 0;
  }
}

}  // namespace fl
