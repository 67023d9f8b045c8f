// The CUDA backend: Vulkan-exported memory and timeline semaphores, CUDA IPC memory and (on
// Windows) D3D12 heaps, resources and fences, imported through the CUDA driver API. The driver
// (libcuda.so.1, nvcuda.dll) is loaded at run time, so the same build works on machines without
// CUDA; there available() is false and every import raises Unsupported.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace fl::cuda {

// True once libcuda.so.1 loaded, cuInit succeeded and at least one device exists. Never throws.
bool available();
// Why available() is false ("" when it is true).
std::string unavailable_reason();

struct DeviceInfo {
  int ordinal;
  std::string name;
  std::string uuid;  // 16 raw bytes
  std::uint64_t total_memory = 0;  // bytes (cuDeviceTotalMem)
  std::optional<std::string> luid;  // 8 raw bytes (cuDeviceGetLuid), Windows devices only
};
std::vector<DeviceInfo> devices();  // empty when unavailable
// Whether the loaded driver exports cuDeviceGetLuid (false when unavailable).
bool has_luid_query();

// One CUDA device and its primary context (the one onnxruntime's CUDA EP uses), retained for as
// long as any object made on it lives.
class Device {
 public:
  static std::shared_ptr<Device> by_uuid(const std::string &uuid);  // 16 raw bytes
  static std::shared_ptr<Device> by_ordinal(int ordinal);
  ~Device();
  Device(const Device &) = delete;
  Device &operator=(const Device &) = delete;

  int ordinal() const { return ordinal_; }
  const std::string &name() const { return name_; }
  const std::string &uuid() const { return uuid_; }
  std::uint64_t total_memory() const { return total_memory_; }
  // Makes the primary context current on the calling thread.
  void bind() const;
  // bind() for a destructor: false when the context is gone (process teardown), and then there
  // is nothing left to free.
  bool bind_for_release() const noexcept;

 private:
  Device() = default;
  int ordinal_ = -1;
  int handle_ = -1;  // CUdevice
  void *context_ = nullptr;
  std::string name_;
  std::string uuid_;
  std::uint64_t total_memory_ = 0;
};

// Device memory the service did not allocate: an imported Vulkan OPAQUE_FD allocation mapped as
// one linear buffer, or a CUDA IPC allocation of another process. The destructor frees the
// mapped pointer first, then the handle behind it.
class ExternalMemory {
 public:
  // fd is owned from here on: CUDA owns it once the import succeeds, and it is closed here when
  // anything fails. Maps [offset, offset + size) of an allocation of allocation_size bytes; size 0
  // maps to the end.
  static std::shared_ptr<ExternalMemory> import_opaque_fd(std::shared_ptr<Device> device, int fd,
                                                          std::uint64_t allocation_size,
                                                          std::uint64_t offset,
                                                          std::uint64_t size, bool dedicated);
  // handle: the 64 bytes of a cudaIpcMemHandle_t; size: how much of the allocation to use.
  static std::shared_ptr<ExternalMemory> open_ipc(std::shared_ptr<Device> device,
                                                  const std::string &handle, std::uint64_t size);
  // A Win32 import by NT handle or by name (exactly one), with CUDA's handle type and flags as
  // given (cuda_d3d12.cpp decides them). Maps [offset, offset + size) of allocation_size bytes.
  // The handle stays the caller's: CUDA takes its own reference.
  static std::shared_ptr<ExternalMemory> import_win32(std::shared_ptr<Device> device, int type,
                                                      std::uint64_t handle,
                                                      const char16_t *name,
                                                      std::uint64_t allocation_size,
                                                      unsigned flags, std::uint64_t offset,
                                                      std::uint64_t size);
  ~ExternalMemory();
  ExternalMemory(const ExternalMemory &) = delete;
  ExternalMemory &operator=(const ExternalMemory &) = delete;

  std::uint64_t pointer() const { return pointer_; }
  std::uint64_t size() const { return size_; }
  const std::shared_ptr<Device> &device() const { return device_; }

 private:
  ExternalMemory() = default;
  void map(std::uint64_t offset, std::uint64_t size);  // external_ as one linear buffer
  std::shared_ptr<Device> device_;
  void *external_ = nullptr;  // CUexternalMemory, null for IPC memory
  std::uint64_t pointer_ = 0;
  std::uint64_t size_ = 0;
  bool ipc_ = false;
};

// A Vulkan timeline semaphore imported from an OPAQUE_FD, or a D3D12 fence.
class ExternalSemaphore {
 public:
  // fd is owned from here on, as for import_opaque_fd.
  static std::shared_ptr<ExternalSemaphore> import_timeline_fd(std::shared_ptr<Device> device,
                                                               int fd);
  // A Win32 import by NT handle or by name (exactly one); the handle stays the caller's.
  static std::shared_ptr<ExternalSemaphore> import_win32(std::shared_ptr<Device> device,
                                                         int type, std::uint64_t handle,
                                                         const char16_t *name);
  ~ExternalSemaphore();
  ExternalSemaphore(const ExternalSemaphore &) = delete;
  ExternalSemaphore &operator=(const ExternalSemaphore &) = delete;

  void *handle() const { return handle_; }
  const std::shared_ptr<Device> &device() const { return device_; }

 private:
  ExternalSemaphore() = default;
  std::shared_ptr<Device> device_;
  void *handle_ = nullptr;  // CUexternalSemaphore
};

// A CUDA graph captured from a stream (Stream::end_capture), instantiated and ready to launch.
// The destructor destroys the executable graph.
class Graph {
 public:
  ~Graph();
  Graph(const Graph &) = delete;
  Graph &operator=(const Graph &) = delete;
  std::size_t nodes() const { return nodes_; }

 private:
  friend class Stream;
  Graph() = default;
  std::shared_ptr<Device> device_;
  void *exec_ = nullptr;  // CUgraphExec
  std::size_t nodes_ = 0;
};

// A non-blocking CUDA stream with one completion event. Everything is enqueued, nothing waits on
// the host except synchronize().
class Stream {
 public:
  explicit Stream(std::shared_ptr<Device> device);
  ~Stream();  // the driver releases the stream once queued work is done
  Stream(const Stream &) = delete;
  Stream &operator=(const Stream &) = delete;

  std::uintptr_t handle() const { return reinterpret_cast<std::uintptr_t>(stream_); }
  const std::shared_ptr<Device> &device() const { return device_; }
  void wait(const ExternalSemaphore &sem, std::uint64_t value);
  void signal(const ExternalSemaphore &sem, std::uint64_t value);
  // Records the completion event after everything enqueued so far.
  void record();
  // Whether the work before the last record() is done.
  bool done() const;
  // Spins up to spin_ns, then polls with growing sleeps; timeout_ns < 0 waits forever. Returns
  // true once done, false on timeout. Call with the GIL released.
  bool synchronize(std::int64_t timeout_ns, std::int64_t spin_ns) const;
  // While a trace records: enqueues a host function that records the frame's GPU completion
  // (trace.h, kGpuDone) when the stream gets there. It holds the stream's later work until it
  // has run, so it is only enqueued while tracing. False when nothing was enqueued (no trace,
  // or a driver without cuLaunchHostFunc).
  bool trace_completion(std::uint64_t session, std::uint64_t frame);
  // Starts capturing the work this thread enqueues on the stream into a graph instead of
  // running it (thread-local mode: other threads' CUDA calls are not affected; a call of this
  // thread that cannot be captured, such as a synchronization, fails and spoils the capture).
  // Unsupported when the driver lacks graphs.
  void begin_capture();
  // Ends the capture and instantiates what was captured; throws when the capture was spoiled
  // (the stream is usable again either way).
  std::shared_ptr<Graph> end_capture();
  // Enqueues the graph's work on this stream.
  void launch(const Graph &graph);

 private:
  std::shared_ptr<Device> device_;
  void *stream_ = nullptr;  // CUstream
  void *event_ = nullptr;   // CUevent
};

}  // namespace fl::cuda
