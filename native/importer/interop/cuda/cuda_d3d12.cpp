#include "cuda_d3d12.h"

#ifdef _WIN32
#ifndef NOMINMAX
#define NOMINMAX
#endif
#ifndef WIN32_LEAN_AND_MEAN
#define WIN32_LEAN_AND_MEAN
#endif
#include <windows.h>
#endif

#include <vector>

#include "core/errors.h"

namespace fl::cuda {

namespace {

struct HandleGuard {
  std::uint64_t handle;
  ~HandleGuard() {
    if (handle) close_nt_handle(handle);
  }
};

void require_capability() {
  const d3d12::Capability c = d3d12_capability();
  if (!c.supported)
    throw Error(Code::Unsupported, "D3D12 imports are not available here: " + c.reason);
}

void require_device(const std::shared_ptr<Device> &device) {
  if (!device) throw Error(Code::InvalidArgument, "a D3D12 import needs a CUDA device");
}

}  // namespace

d3d12::Platform d3d12_platform() {
  d3d12::Platform p;
#ifdef _WIN32
  p.windows = true;
#endif
  p.driver_loaded = available();
  p.driver_reason = unavailable_reason();
  p.has_luid_query = has_luid_query();
  p.device_count = static_cast<int>(devices().size());
  return p;
}

d3d12::Capability d3d12_capability() { return d3d12::capability(d3d12_platform()); }

std::shared_ptr<Device> device_by_luid(std::uint64_t luid) {
  require_capability();
  std::vector<d3d12::LuidDevice> listed;
  for (const DeviceInfo &info : devices()) {
    d3d12::LuidDevice d;
    d.ordinal = info.ordinal;
    d.name = info.name;
    if (info.luid) d.luid = d3d12::luid_from_bytes(*info.luid);
    listed.push_back(d);
  }
  return Device::by_ordinal(d3d12::select_by_luid(listed, luid));
}

std::shared_ptr<ExternalMemory> import_d3d12_memory(std::shared_ptr<Device> device,
                                                    const d3d12::MemoryDescriptor &desc) {
  HandleGuard guard{desc.handle};
  require_capability();
  require_device(device);
  return ExternalMemory::import_win32(std::move(device), desc.handle_type, desc.handle,
                                      desc.by_name() ? desc.name.c_str() : nullptr, desc.size,
                                      desc.flags, desc.offset, desc.mapped_size);
}

std::shared_ptr<ExternalSemaphore> import_d3d12_fence(std::shared_ptr<Device> device,
                                                      const d3d12::SemaphoreDescriptor &desc) {
  HandleGuard guard{desc.handle};
  require_capability();
  require_device(device);
  return ExternalSemaphore::import_win32(std::move(device), desc.handle_type, desc.handle,
                                         desc.by_name() ? desc.name.c_str() : nullptr);
}

void close_nt_handle(std::uint64_t handle) {
#ifdef _WIN32
  if (handle) ::CloseHandle(reinterpret_cast<HANDLE>(static_cast<std::uintptr_t>(handle)));
#else
  (void)handle;
#endif
}

}  // namespace fl::cuda
