// Overflow-safe bounds arithmetic (declared in host_memory.h). Kept apart from the POSIX
// mappings because every importer uses it, the Windows builds and the D3D12 path included.
#include <string>

#include "errors.h"
#include "host_memory.h"

namespace fl {

void check_range(std::uint64_t offset, std::uint64_t nbytes, std::uint64_t size,
                 const char *what) {
  std::uint64_t end = 0;
  if (__builtin_add_overflow(offset, nbytes, &end) || end > size) {
    throw Error(Code::InvalidArgument,
                std::string(what) + " [" + std::to_string(offset) + ", +" +
                    std::to_string(nbytes) + ") is outside the " + std::to_string(size) +
                    " bytes available");
  }
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
    if (__builtin_mul_overflow(n, static_cast<std::uint64_t>(d), &n))
      throw Error(Code::InvalidArgument, "tensor shape overflows 64-bit byte count");
  }
  return n;
}

}  // namespace fl
