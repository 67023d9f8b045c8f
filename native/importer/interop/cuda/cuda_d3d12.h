// D3D12 objects into CUDA: what d3d12_interop.h decides, executed on the CUDA backend. Only
// Windows with an NVIDIA driver ever gets past d3d12_capability(); elsewhere every import raises
// Unsupported with the capability's reason, before anything reaches the driver.
#pragma once

#include <cstdint>
#include <memory>

#include "cuda_backend.h"
#include "interop/d3d12/d3d12_interop.h"

namespace fl::cuda {

// The platform facts of this process, and the answer capability discovery reports.
d3d12::Platform d3d12_platform();
d3d12::Capability d3d12_capability();

// The CUDA device whose LUID is the renderer's adapter LUID (ID3D12Device::GetAdapterLuid).
std::shared_ptr<Device> device_by_luid(std::uint64_t luid);

// A descriptor's NT handle is owned from here on, also when these throw: CUDA takes its own
// reference, so the handle is closed once the import is done or has failed.
std::shared_ptr<ExternalMemory> import_d3d12_memory(std::shared_ptr<Device> device,
                                                    const d3d12::MemoryDescriptor &desc);
std::shared_ptr<ExternalSemaphore> import_d3d12_fence(std::shared_ptr<Device> device,
                                                      const d3d12::SemaphoreDescriptor &desc);

// CloseHandle on Windows; nothing elsewhere, where no NT handle can have been received.
void close_nt_handle(std::uint64_t handle);

}  // namespace fl::cuda
