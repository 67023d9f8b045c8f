// Windows: a section cannot shrink while it is mapped, so there is no fault to absorb and the
// Windows mappings do not register (platform/win32/host_memory.cpp).
#include "platform/fault_guard.h"

namespace fl::fault_guard {

int add(void *, std::size_t, int) { return 0; }

void remove(int) {}

bool lost(int) { return false; }

Stats stats() { return {0, 0, 0}; }

}  // namespace fl::fault_guard
