// Host memory imports, mapped once: on Linux a POSIX shared-memory object or a memfd/shm fd; on
// Windows a file mapping (section) by name or by handle. One implementation per OS
// (platform/<os>/host_memory.cpp); host_memory.cpp holds what both share.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace fl {

// The OS handle of a shared-memory object: an fd on POSIX, a section HANDLE on Windows.
using NativeHandle = std::intptr_t;

// One mapping of [offset, offset + size) of a shared-memory object. Owns the mapping and the OS
// handle; the destructor unmaps and closes. Never copied: shared by every view through shared_ptr.
class Mapping {
 public:
  // Takes ownership of fd, also when it throws. size 0 maps from offset to the end.
  static std::shared_ptr<Mapping> from_fd(int fd, std::uint64_t offset, std::uint64_t size,
                                          bool writable);
  // Windows: takes ownership of a section handle, also when it throws.
  static std::shared_ptr<Mapping> from_handle(NativeHandle handle, std::uint64_t offset,
                                              std::uint64_t size, bool writable);
  ~Mapping();
  Mapping(const Mapping &) = delete;
  Mapping &operator=(const Mapping &) = delete;

  std::uint8_t *data() const { return data_; }
  std::size_t size() const { return size_; }
  bool writable() const { return writable_; }
  int fd() const { return fd_; }  // -1 on Windows
  NativeHandle handle() const { return handle_; }  // the fd on POSIX
  // True when the object can no longer shrink, so the mapping can never fault.
  bool sealed() const { return sealed_; }
  // True once an access faulted because the object shrank (fault_guard.h): the range now
  // holds zero pages, not the renderer's memory, for good.
  bool lost() const;
  // Throws DeviceLost when the mapping was lost or the object now ends before its end.
  void check_size() const;

 private:
  Mapping() = default;
  std::uint64_t end_in_object_ = 0;
  bool sealed_ = false;
  void *map_base_ = nullptr;
  std::size_t map_length_ = 0;
  std::uint8_t *data_ = nullptr;
  std::size_t size_ = 0;
  int fd_ = -1;
  NativeHandle handle_ = -1;
  int guard_slot_ = -1;  // fault_guard.h; -1 where the OS needs no guard
  bool writable_ = false;
};

// Bytes needed by a tensor of `shape` with `element_size`-byte elements; throws InvalidArgument
// on a negative dimension or on overflow.
std::uint64_t tensor_nbytes(const std::vector<std::int64_t> &shape, std::uint64_t element_size);

// Checks that [offset, offset + nbytes) lies inside `size`, without overflow.
void check_range(std::uint64_t offset, std::uint64_t nbytes, std::uint64_t size,
                 const char *what);

// The byte count of an import's range [offset, offset + size) inside an object of object_size
// bytes, checked; size 0 means "to the end". `object` names it in the message ("object",
// "section"). Every platform's Mapping calls this before it maps anything.
std::uint64_t mapped_range(std::uint64_t offset, std::uint64_t size, std::uint64_t object_size,
                           const char *object);

// A memory import as Python sees it: a name (when it has one), the access mode and the mapping.
class HostMemory {
 public:
  enum class Origin { Imported, CreatedShm, CreatedMemfd };

  // Importer side.
  static std::shared_ptr<HostMemory> open_shm(const std::string &name, std::uint64_t offset,
                                              std::uint64_t size, bool writable);
  static std::shared_ptr<HostMemory> from_fd(int fd, std::uint64_t offset, std::uint64_t size,
                                             bool writable);
  static std::shared_ptr<HostMemory> from_handle(NativeHandle handle, std::uint64_t offset,
                                                 std::uint64_t size, bool writable);
  // Renderer side: the creator of a named object is the one who unlinks it. On Windows a name
  // that already exists is refused (it may be squatted), and create_memfd makes an unnamed
  // section that travels only as a duplicated handle.
  static std::shared_ptr<HostMemory> create_shm(const std::string &name, std::uint64_t size);
  static std::shared_ptr<HostMemory> create_memfd(const std::string &name, std::uint64_t size);

  const std::shared_ptr<Mapping> &mapping() const;  // throws after close()
  const std::string &name() const { return name_; }
  bool closed() const { return !mapping_; }
  Origin origin() const { return origin_; }
  void unlink();
  // Drops this object's hold on the mapping; views and arrays made from it keep theirs.
  void close() { mapping_.reset(); }

 private:
  std::shared_ptr<Mapping> mapping_;
  std::string name_;
  Origin origin_ = Origin::Imported;
  bool unlinked_ = false;
};

// A typed window into a mapping: (offset, nbytes) checked against the mapped size. Keeps the
// mapping alive for as long as it exists.
class TensorView {
 public:
  TensorView(std::shared_ptr<Mapping> mapping, std::uint64_t offset, std::uint64_t element_size,
             std::vector<std::int64_t> shape, bool need_write);
  std::uintptr_t address() const {
    return reinterpret_cast<std::uintptr_t>(mapping_->data() + offset_);
  }
  std::uint64_t offset() const { return offset_; }
  std::uint64_t nbytes() const { return nbytes_; }
  const std::vector<std::int64_t> &shape() const { return shape_; }
  const std::shared_ptr<Mapping> &mapping() const { return mapping_; }

 private:
  std::shared_ptr<Mapping> mapping_;
  std::uint64_t offset_;
  std::uint64_t nbytes_;
  std::vector<std::int64_t> shape_;
};

// Shared-memory object names. POSIX: a leading slash, then 1..250 of [A-Za-z0-9._-], no other
// slash. Windows: Local\ or Global\ (exactly so), then 1..240 characters without a backslash.
void check_shm_name(const std::string &name);

// Overflow-checked arithmetic, without compiler builtins (MSVC has none of GCC's).
bool add_overflows(std::uint64_t a, std::uint64_t b, std::uint64_t *out);
bool mul_overflows(std::uint64_t a, std::uint64_t b, std::uint64_t *out);

}  // namespace fl
