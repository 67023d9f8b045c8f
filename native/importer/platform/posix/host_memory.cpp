// POSIX host memory: shm_open by name, memfd, fds received over the IPC socket, mmap.
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "common/errno_code.h"
#include "core/errors.h"
#include "platform/fault_guard.h"
#include "interop/host/host_memory.h"

namespace fl {

namespace {

// Closes an fd on scope exit unless released.
struct FdGuard {
  int fd;
  ~FdGuard() {
    if (fd >= 0) ::close(fd);
  }
  int release() {
    int f = fd;
    fd = -1;
    return f;
  }
};

[[noreturn]] void throw_os(const std::string &what, int err) {
  throw Error(static_cast<Code>(fl_wire_code_for_errno(err)), errno_message(what, err));
}

std::uint64_t page_size() {
  static const std::uint64_t p = static_cast<std::uint64_t>(::sysconf(_SC_PAGESIZE));
  return p;
}

}  // namespace

std::shared_ptr<Mapping> Mapping::from_fd(int fd, std::uint64_t offset, std::uint64_t size,
                                          bool writable) {
  FdGuard guard{fd};
  if (fd < 0) throw Error(Code::InvalidArgument, "invalid file descriptor");
  struct stat st {};
  if (::fstat(fd, &st) != 0) throw_os("fstat", errno);
  if (!S_ISREG(st.st_mode))
    throw Error(Code::InvalidArgument, "the handle is not a shared-memory object");
  const auto object_size = static_cast<std::uint64_t>(st.st_size);
  size = mapped_range(offset, size, object_size, "object");
  const std::uint64_t aligned = offset - offset % page_size();
  const std::uint64_t delta = offset - aligned;
  const std::uint64_t length = size + delta;  // cannot overflow: offset + size <= object_size
  if (length > SIZE_MAX) throw Error(Code::InvalidArgument, "memory range too large");
  const int prot = PROT_READ | (writable ? PROT_WRITE : 0);
  void *base = ::mmap(nullptr, static_cast<std::size_t>(length), prot, MAP_SHARED, fd,
                      static_cast<off_t>(aligned));
  if (base == MAP_FAILED) throw_os("mmap", errno);
  std::shared_ptr<Mapping> m(new Mapping());
  m->map_base_ = base;
  m->map_length_ = static_cast<std::size_t>(length);
  m->data_ = static_cast<std::uint8_t *>(base) + delta;
  m->size_ = static_cast<std::size_t>(size);
  m->fd_ = guard.release();
  m->handle_ = m->fd_;
  m->writable_ = writable;
  m->end_in_object_ = offset + size;
  m->guard_slot_ = fault_guard::add(base, m->map_length_, prot);
  if (m->guard_slot_ < 0)
    throw Error(Code::ResourceExhausted, "too many shared-memory mappings in this service");
  // A renderer that shrinks its object under our mapping makes our next access fault (SIGBUS),
  // which fault_guard absorbs. Seal memfds against shrinking where the creator allowed sealing,
  // so that cannot happen at all; everything else is also checked with fstat before each run
  // (check_size), to fail early rather than run on zero pages.
  if (::fcntl(m->fd_, F_ADD_SEALS, F_SEAL_SHRINK) == 0) {
    m->sealed_ = true;
  } else {
    const int seals = ::fcntl(m->fd_, F_GET_SEALS);
    m->sealed_ = seals >= 0 && (seals & F_SEAL_SHRINK) != 0;
  }
  return m;
}

void Mapping::check_size() const {
  if (lost())
    throw Error(Code::DeviceLost,
                "the shared memory shrank while mapped: the import is lost; release it");
  if (sealed_) return;
  struct stat st {};
  if (::fstat(fd_, &st) != 0) throw Error(Code::DeviceLost, errno_message("fstat", errno));
  if (static_cast<std::uint64_t>(st.st_size) < end_in_object_)
    throw Error(Code::DeviceLost, "the shared memory was truncated to " +
                                      std::to_string(st.st_size) + " bytes while mapped");
}

Mapping::~Mapping() {
  fault_guard::remove(guard_slot_);
  if (map_base_) ::munmap(map_base_, map_length_);
  if (fd_ >= 0) ::close(fd_);
}

void check_shm_name(const std::string &name) {
  if (name.size() < 2 || name.size() > 251 || name[0] != '/')
    throw Error(Code::InvalidArgument,
                "shared-memory names are '/' followed by 1 to 250 characters");
  for (std::size_t i = 1; i < name.size(); ++i) {
    const char c = name[i];
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                    c == '.' || c == '_' || c == '-';
    if (!ok)
      throw Error(Code::InvalidArgument,
                  "shared-memory names may hold only letters, digits, '.', '_' and '-' after "
                  "the leading '/'");
  }
  if (name == "/." || name == "/..")
    throw Error(Code::InvalidArgument, "'.' and '..' are not shared-memory names");
}

std::shared_ptr<HostMemory> HostMemory::open_shm(const std::string &name, std::uint64_t offset,
                                                 std::uint64_t size, bool writable) {
  check_shm_name(name);
  int fd = ::shm_open(name.c_str(), (writable ? O_RDWR : O_RDONLY) | O_CLOEXEC, 0);
  if (fd < 0) throw_os("shm_open " + name, errno);
  auto h = std::make_shared<HostMemory>();
  h->mapping_ = Mapping::from_fd(fd, offset, size, writable);
  h->name_ = name;
  return h;
}

std::shared_ptr<HostMemory> HostMemory::from_fd(int fd, std::uint64_t offset, std::uint64_t size,
                                                bool writable) {
  auto h = std::make_shared<HostMemory>();
  h->mapping_ = Mapping::from_fd(fd, offset, size, writable);
  return h;
}

std::shared_ptr<HostMemory> HostMemory::create_shm(const std::string &name, std::uint64_t size) {
  check_shm_name(name);
  if (size == 0) throw Error(Code::InvalidArgument, "size must be positive");
  int fd = ::shm_open(name.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (fd < 0) throw_os("shm_open " + name, errno);
  if (::ftruncate(fd, static_cast<off_t>(size)) != 0) {
    int err = errno;
    ::close(fd);
    ::shm_unlink(name.c_str());
    throw_os("ftruncate", err);
  }
  auto h = std::make_shared<HostMemory>();
  try {
    h->mapping_ = Mapping::from_fd(fd, 0, size, true);
  } catch (...) {
    ::shm_unlink(name.c_str());
    throw;
  }
  h->name_ = name;
  h->origin_ = Origin::CreatedShm;
  return h;
}

std::shared_ptr<HostMemory> HostMemory::create_memfd(const std::string &name,
                                                     std::uint64_t size) {
  if (size == 0) throw Error(Code::InvalidArgument, "size must be positive");
  int fd = ::memfd_create(name.c_str(), MFD_CLOEXEC | MFD_ALLOW_SEALING);
  if (fd < 0) throw_os("memfd_create", errno);
  if (::ftruncate(fd, static_cast<off_t>(size)) != 0) {
    int err = errno;
    ::close(fd);
    throw_os("ftruncate", err);
  }
  auto h = std::make_shared<HostMemory>();
  h->mapping_ = Mapping::from_fd(fd, 0, size, true);
  h->origin_ = Origin::CreatedMemfd;
  return h;
}

void HostMemory::unlink() {
  if (origin_ != Origin::CreatedShm)
    throw Error(Code::Conflict, "only the creator of a named object unlinks it");
  if (unlinked_) return;
  unlinked_ = true;
  ::shm_unlink(name_.c_str());
}

std::shared_ptr<Mapping> Mapping::from_handle(NativeHandle handle, std::uint64_t offset,
                                              std::uint64_t size, bool writable) {
  return from_fd(static_cast<int>(handle), offset, size, writable);
}

std::shared_ptr<HostMemory> HostMemory::from_handle(NativeHandle handle, std::uint64_t offset,
                                                    std::uint64_t size, bool writable) {
  return from_fd(static_cast<int>(handle), offset, size, writable);
}

}  // namespace fl
