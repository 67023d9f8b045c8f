#include "host_memory.h"

#include <cstring>

#include "core/errors.h"
#include "platform/fault_guard.h"

namespace fl {

bool add_overflows(std::uint64_t a, std::uint64_t b, std::uint64_t *out) {
  *out = a + b;  // unsigned: wraps, never undefined
  return *out < a;
}

bool mul_overflows(std::uint64_t a, std::uint64_t b, std::uint64_t *out) {
  if (a != 0 && b > UINT64_MAX / a) return true;
  *out = a * b;
  return false;
}

bool Mapping::lost() const { return fault_guard::lost(guard_slot_); }

std::string errno_message(const std::string &what, int err) {
  return what + ": " + std::strerror(err);
}

void check_range(std::uint64_t offset, std::uint64_t nbytes, std::uint64_t size,
                 const char *what) {
  std::uint64_t end = 0;
  if (add_overflows(offset, nbytes, &end) || end > size) {
    throw Error(Code::InvalidArgument,
                std::string(what) + " [" + std::to_string(offset) + ", +" +
                    std::to_string(nbytes) + ") is outside the " + std::to_string(size) +
                    " bytes available");
  }
}

std::uint64_t mapped_range(std::uint64_t offset, std::uint64_t size, std::uint64_t object_size,
                           const char *object) {
  if (size == 0) {
    if (offset >= object_size)
      throw Error(Code::InvalidArgument, "offset_bytes " + std::to_string(offset) +
                                             " is not inside the " +
                                             std::to_string(object_size) + "-byte " + object);
    size = object_size - offset;
  }
  check_range(offset, size, object_size, "memory range");
  return size;
}

std::uint64_t tensor_nbytes(const std::vector<std::int64_t> &shape,
                            std::uint64_t element_size) {
  bool empty = false;
  for (std::int64_t d : shape) {
    if (d < 0) throw Error(Code::InvalidArgument, "tensor dimensions must not be negative");
    empty = empty || d == 0;
  }
  if (empty) return 0;  // whatever the other dimensions, an empty tensor needs no bytes
  std::uint64_t n = element_size;
  for (std::int64_t d : shape) {
    if (mul_overflows(n, static_cast<std::uint64_t>(d), &n))
      throw Error(Code::InvalidArgument, "tensor shape overflows 64-bit byte count");
  }
  return n;
}

const std::shared_ptr<Mapping> &HostMemory::mapping() const {
  if (!mapping_) throw Error(Code::InvalidArgument, "memory is closed");
  return mapping_;
}

TensorView::TensorView(std::shared_ptr<Mapping> mapping, std::uint64_t offset,
                       std::uint64_t element_size, std::vector<std::int64_t> shape,
                       bool need_write)
    : mapping_(std::move(mapping)), offset_(offset), shape_(std::move(shape)) {
  if (need_write && !mapping_->writable())
    throw Error(Code::InvalidArgument, "an output view needs memory imported read_write");
  nbytes_ = tensor_nbytes(shape_, element_size);
  check_range(offset_, nbytes_, mapping_->size(), "tensor view");
  // Kernels may use aligned loads: the element's address, not only the offset, must align
  // (an import can itself start at an odd offset into its object).
  const auto address = reinterpret_cast<std::uintptr_t>(mapping_->data()) + offset_;
  if (element_size > 1 && address % element_size != 0)
    throw Error(Code::InvalidArgument, "offset_bytes " + std::to_string(offset) +
                                           " does not align the tensor to its element size " +
                                           std::to_string(element_size));
}

}  // namespace fl
