// D3D12 heaps, committed resources and fences imported into CUDA (docs/windows.md, "D3D12").
//
// Everything here is pure and portable: it turns a renderer's request into the exact
// descriptor cuImportExternalMemory / cuImportExternalSemaphore receive, picks the CUDA device
// by adapter LUID and answers the capability question from facts about the platform. None of it
// touches Windows or CUDA, so the same decisions are tested on Linux (pytest through _native) and
// under Wine (d3d12_check.exe); the backend (cuda_backend.cpp) only executes what they decide.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace fl::d3d12 {

// cuda.h ABI values (CUexternalMemoryHandleType, CUexternalSemaphoreHandleType, flags).
constexpr int kMemoryHandleTypeD3D12Heap = 4;
constexpr int kMemoryHandleTypeD3D12Resource = 5;
constexpr int kSemaphoreHandleTypeD3D12Fence = 4;
constexpr unsigned kExternalMemoryDedicated = 0x1;
// CreateSharedHandle limits a name to MAX_PATH characters, the terminating NUL included.
constexpr std::size_t kMaxNameUnits = 259;

// Exactly one of name and handle. The name is the one given to ID3D12Device::CreateSharedHandle;
// the handle is an NT handle already duplicated into this process (over the pipe).
struct Source {
  std::optional<std::string> name;  // UTF-8
  std::optional<std::uint64_t> handle;
};

struct MemoryRequest {
  std::string kind;  // "d3d12_heap" or "d3d12_resource"
  Source source;
  std::uint64_t size = 0;         // D3D12_HEAP_DESC.SizeInBytes or the resource's allocation size
  std::uint64_t offset = 0;       // start of the mapped range inside the heap or resource
  std::uint64_t mapped_size = 0;  // 0 maps from offset to the end
  std::optional<bool> dedicated;  // unset: what the kind requires
};

// CUDA_EXTERNAL_MEMORY_HANDLE_DESC + CUDA_EXTERNAL_MEMORY_BUFFER_DESC, as values.
struct MemoryDescriptor {
  int handle_type = 0;
  unsigned flags = 0;
  std::uint64_t size = 0;
  std::u16string name;       // empty when imported by handle; NUL-terminated by c_str()
  std::uint64_t handle = 0;  // 0 when imported by name
  std::uint64_t offset = 0;
  std::uint64_t mapped_size = 0;
  bool by_name() const { return handle == 0; }
};

struct SemaphoreDescriptor {
  int handle_type = 0;
  unsigned flags = 0;
  std::u16string name;
  std::uint64_t handle = 0;
  bool by_name() const { return handle == 0; }
};

// Throw Error(InvalidArgument) with the rule that was broken.
MemoryDescriptor memory_descriptor(const MemoryRequest &request);
SemaphoreDescriptor fence_descriptor(const Source &source);

// A shared-object name as UTF-16: 1 to kMaxNameUnits units, an optional "Global\" or "Local\"
// namespace prefix, no other backslash, no NUL. Throws InvalidArgument naming the rule.
std::u16string shared_name(const std::string &utf8);
// A handle value that can name a kernel object here: not 0, not a pseudo-handle, 32 bits.
std::uint64_t nt_handle(std::uint64_t value);

// An adapter LUID as one number: (HighPart << 32) | LowPart, i.e. the 8 bytes of the LUID struct
// (DXGI_ADAPTER_DESC1.AdapterLuid, ID3D12Device::GetAdapterLuid, cuDeviceGetLuid) read as a
// little-endian integer.
std::uint64_t luid_from_bytes(const std::string &raw8);
std::string luid_text(std::uint64_t luid);  // "HighPart:LowPart" in hex, as tools print it

struct LuidDevice {
  int ordinal = 0;
  std::string name;
  std::optional<std::uint64_t> luid;  // unset where the driver reports none (not WDDM)
};
// The ordinal of the device whose LUID is the renderer's adapter LUID. InvalidArgument, listing
// every device and its LUID, when none matches.
int select_by_luid(const std::vector<LuidDevice> &devices, std::uint64_t luid);

// What the capability answer depends on.
struct Platform {
  bool windows = false;
  bool driver_loaded = false;  // nvcuda.dll loaded and cuInit succeeded
  std::string driver_reason;   // why not, when driver_loaded is false
  bool has_luid_query = false;  // the driver exports cuDeviceGetLuid
  int device_count = 0;
};
struct Capability {
  bool supported = false;
  std::string reason;  // "" when supported
};
Capability capability(const Platform &platform);

}  // namespace fl::d3d12
