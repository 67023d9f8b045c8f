// Survives renderers that shrink what they shared with us (docs/reliability.md, "Shrunk
// memory"). A shared-memory object truncated under one of our mappings makes the next access of
// the lost pages raise SIGBUS in whichever thread touches them: onnxruntime's workers, a fence
// wait, numpy. Sealing prevents that only where the creator allowed it, and fstat before a run
// cannot protect the run itself. So every host mapping the importer makes is registered here,
// and a process-wide SIGBUS handler turns a fault inside a registered range into anonymous zero
// pages over the whole range (the faulting instruction then retries and succeeds) plus a "lost"
// mark that the run, wait or signal reports as device_lost afterwards.
//
// One implementation per OS: platform/posix/fault_guard.cpp; on Windows a mapped section cannot
// shrink, and platform/win32/fault_guard.cpp only counts.
#pragma once

#include <cstddef>
#include <cstdint>

namespace fl::fault_guard {

// Registers [base, base + length), mapped with `prot`. Installs the handler on first use.
// Returns the slot, or -1 when the table is full (the caller refuses the import).
int add(void *base, std::size_t length, int prot);

// Forgets a slot; call before unmapping. -1 is ignored.
void remove(int slot);

// True once a fault inside the slot's range has been absorbed.
bool lost(int slot);

struct Stats {
  std::uint64_t ranges;  // registered now: the host mappings the importer holds
  std::uint64_t bytes;   // their total length
  std::uint64_t faults;  // faults absorbed since the process started
};
Stats stats();

}  // namespace fl::fault_guard
