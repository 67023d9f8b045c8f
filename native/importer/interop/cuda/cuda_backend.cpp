#include "cuda_backend.h"

#ifdef _WIN32
#include <io.h>
#define FL_CLOSE_FD ::_close
#else
#include <unistd.h>
#define FL_CLOSE_FD ::close
#endif

#include <chrono>
#include <cstring>
#include <map>
#include <mutex>
#include <optional>
#include <thread>

#include "core/errors.h"
#include "interop/host/host_memory.h"
#include "platform/dynlib.h"
#include "core/trace.h"

namespace fl::cuda {

namespace {

// The few driver API types used here, declared from the documented ABI (cuda.h, CUDA 11.4+)
// rather than included: building needs no CUDA headers.
using CUresult = int;
using CUdevice = int;
using CUdeviceptr = unsigned long long;
using CUcontext = void *;
using CUstream = void *;
using CUevent = void *;
using CUexternalMemory = void *;
using CUexternalSemaphore = void *;
using CUhostFn = void (*)(void *);
using CUgraph = void *;
using CUgraphExec = void *;
using CUgraphNode = void *;
constexpr int CU_STREAM_CAPTURE_MODE_THREAD_LOCAL = 1;

constexpr CUresult CUDA_SUCCESS = 0;
constexpr CUresult CUDA_ERROR_INVALID_VALUE = 1;
constexpr CUresult CUDA_ERROR_OUT_OF_MEMORY = 2;
constexpr CUresult CUDA_ERROR_INVALID_HANDLE = 400;
constexpr CUresult CUDA_ERROR_NOT_READY = 600;
constexpr CUresult CUDA_ERROR_ILLEGAL_ADDRESS = 700;
constexpr CUresult CUDA_ERROR_LAUNCH_FAILED = 719;

constexpr int CU_EXTERNAL_MEMORY_HANDLE_TYPE_OPAQUE_FD = 1;
constexpr unsigned CUDA_EXTERNAL_MEMORY_DEDICATED = 0x1;
constexpr int CU_EXTERNAL_SEMAPHORE_HANDLE_TYPE_TIMELINE_SEMAPHORE_FD = 9;
constexpr unsigned CU_STREAM_NON_BLOCKING = 0x1;
constexpr unsigned CU_EVENT_DISABLE_TIMING = 0x2;
constexpr unsigned CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS = 0x1;

struct CUuuid {
  char bytes[16];
};
struct CUipcMemHandle {
  char reserved[64];
};

struct CUDA_EXTERNAL_MEMORY_HANDLE_DESC {
  int type;
  union {
    int fd;
    struct {
      void *handle;
      const void *name;
    } win32;
    const void *nvSciBufObject;
  } handle;
  unsigned long long size;
  unsigned int flags;
  unsigned int reserved[16];
};
static_assert(sizeof(CUDA_EXTERNAL_MEMORY_HANDLE_DESC) == 104, "cuda.h ABI");

struct CUDA_EXTERNAL_MEMORY_BUFFER_DESC {
  unsigned long long offset;
  unsigned long long size;
  unsigned int flags;
  unsigned int reserved[16];
};
static_assert(sizeof(CUDA_EXTERNAL_MEMORY_BUFFER_DESC) == 88, "cuda.h ABI");

struct CUDA_EXTERNAL_SEMAPHORE_HANDLE_DESC {
  int type;
  union {
    int fd;
    struct {
      void *handle;
      const void *name;
    } win32;
    const void *nvSciSyncObj;
  } handle;
  unsigned int flags;
  unsigned int reserved[16];
};
static_assert(sizeof(CUDA_EXTERNAL_SEMAPHORE_HANDLE_DESC) == 96, "cuda.h ABI");

// Wait and signal parameters share one layout for what is used here: params.fence.value first,
// then the nvSciSync union, the keyed-mutex struct and reserved words (72 bytes in all).
struct CUDA_EXTERNAL_SEMAPHORE_PARAMS {
  struct {
    unsigned long long fence_value;
    unsigned long long nv_sci_sync;
    unsigned char keyed_mutex_and_reserved[56];
  } params;
  unsigned int flags;
  unsigned int reserved[16];
};
static_assert(sizeof(CUDA_EXTERNAL_SEMAPHORE_PARAMS) == 144, "cuda.h ABI");

struct Api {
  CUresult (*cuInit)(unsigned);
  CUresult (*cuGetErrorName)(CUresult, const char **);
  CUresult (*cuDeviceGetCount)(int *);
  CUresult (*cuDeviceGet)(CUdevice *, int);
  CUresult (*cuDeviceGetName)(char *, int, CUdevice);
  CUresult (*cuDeviceGetUuid)(CUuuid *, CUdevice);
  CUresult (*cuDeviceTotalMem)(std::size_t *, CUdevice);
  CUresult (*cuDevicePrimaryCtxRetain)(CUcontext *, CUdevice);
  CUresult (*cuDevicePrimaryCtxRelease)(CUdevice);
  CUresult (*cuCtxGetCurrent)(CUcontext *);
  CUresult (*cuCtxSetCurrent)(CUcontext);
  CUresult (*cuImportExternalMemory)(CUexternalMemory *, const CUDA_EXTERNAL_MEMORY_HANDLE_DESC *);
  CUresult (*cuExternalMemoryGetMappedBuffer)(CUdeviceptr *, CUexternalMemory,
                                              const CUDA_EXTERNAL_MEMORY_BUFFER_DESC *);
  CUresult (*cuDestroyExternalMemory)(CUexternalMemory);
  CUresult (*cuMemFree)(CUdeviceptr);
  CUresult (*cuImportExternalSemaphore)(CUexternalSemaphore *,
                                        const CUDA_EXTERNAL_SEMAPHORE_HANDLE_DESC *);
  CUresult (*cuDestroyExternalSemaphore)(CUexternalSemaphore);
  CUresult (*cuWaitExternalSemaphoresAsync)(const CUexternalSemaphore *,
                                            const CUDA_EXTERNAL_SEMAPHORE_PARAMS *, unsigned,
                                            CUstream);
  CUresult (*cuSignalExternalSemaphoresAsync)(const CUexternalSemaphore *,
                                              const CUDA_EXTERNAL_SEMAPHORE_PARAMS *, unsigned,
                                              CUstream);
  CUresult (*cuStreamCreate)(CUstream *, unsigned);
  CUresult (*cuStreamDestroy)(CUstream);
  CUresult (*cuEventCreate)(CUevent *, unsigned);
  CUresult (*cuEventDestroy)(CUevent);
  CUresult (*cuEventRecord)(CUevent, CUstream);
  CUresult (*cuEventQuery)(CUevent);
  CUresult (*cuIpcOpenMemHandle)(CUdeviceptr *, CUipcMemHandle, unsigned);
  CUresult (*cuIpcCloseMemHandle)(CUdeviceptr);
  CUresult (*cuMemGetAddressRange)(CUdeviceptr *, std::size_t *, CUdeviceptr);
  // Optional: only D3D12 imports need it (Windows drivers; Linux ones answer NOT_SUPPORTED).
  CUresult (*cuDeviceGetLuid)(char *, unsigned *, CUdevice);
  // Optional: only a trace's GPU completion moments need it (CUDA 10+).
  CUresult (*cuLaunchHostFunc)(CUstream, CUhostFn, void *);
  // Optional: CUDA graphs of a session's model run (CUDA 11.4+); without them sessions run
  // the model through onnxruntime on each frame.
  CUresult (*cuStreamBeginCapture)(CUstream, int);
  CUresult (*cuStreamEndCapture)(CUstream, CUgraph *);
  CUresult (*cuGraphInstantiateWithFlags)(CUgraphExec *, CUgraph, unsigned long long);
  CUresult (*cuGraphLaunch)(CUgraphExec, CUstream);
  CUresult (*cuGraphDestroy)(CUgraph);
  CUresult (*cuGraphExecDestroy)(CUgraphExec);
  CUresult (*cuGraphGetNodes)(CUgraph, CUgraphNode *, std::size_t *);
};

struct Loaded {
  Api api{};
  bool ok = false;
  std::string reason;
};

template <typename F>
bool load(void *lib, F &slot, const char *name, const char *versioned = nullptr) {
  void *p = versioned ? dynlib::symbol(lib, versioned) : nullptr;
  if (!p) p = dynlib::symbol(lib, name);
  slot = reinterpret_cast<F>(p);
  return p != nullptr;
}

const Loaded &loaded() {
  static Loaded l = [] {
    Loaded r;
    // Kept open for the life of the process: the driver cannot be unloaded safely.
    void *lib = dynlib::open(dynlib::kCudaDriver);
    if (!lib) {
      r.reason = std::string("the CUDA driver (") + dynlib::kCudaDriver +
                 ") is not installed: " + dynlib::last_error();
      return r;
    }
    Api &a = r.api;
    const char *missing = nullptr;
#define FL_LOAD(fn, ...) \
  if (!missing && !load(lib, a.fn, #fn, ##__VA_ARGS__)) missing = #fn
    FL_LOAD(cuInit);
    FL_LOAD(cuGetErrorName);
    FL_LOAD(cuDeviceGetCount);
    FL_LOAD(cuDeviceGet);
    FL_LOAD(cuDeviceGetName);
    FL_LOAD(cuDeviceGetUuid, "cuDeviceGetUuid_v2");
    FL_LOAD(cuDeviceTotalMem, "cuDeviceTotalMem_v2");
    FL_LOAD(cuDevicePrimaryCtxRetain);
    FL_LOAD(cuDevicePrimaryCtxRelease, "cuDevicePrimaryCtxRelease_v2");
    FL_LOAD(cuCtxGetCurrent);
    FL_LOAD(cuCtxSetCurrent);
    FL_LOAD(cuImportExternalMemory);
    FL_LOAD(cuExternalMemoryGetMappedBuffer);
    FL_LOAD(cuDestroyExternalMemory);
    FL_LOAD(cuMemFree, "cuMemFree_v2");
    FL_LOAD(cuImportExternalSemaphore);
    FL_LOAD(cuDestroyExternalSemaphore);
    FL_LOAD(cuWaitExternalSemaphoresAsync);
    FL_LOAD(cuSignalExternalSemaphoresAsync);
    FL_LOAD(cuStreamCreate);
    FL_LOAD(cuStreamDestroy, "cuStreamDestroy_v2");
    FL_LOAD(cuEventCreate);
    FL_LOAD(cuEventDestroy, "cuEventDestroy_v2");
    FL_LOAD(cuEventRecord);
    FL_LOAD(cuEventQuery);
    FL_LOAD(cuIpcOpenMemHandle, "cuIpcOpenMemHandle_v2");
    FL_LOAD(cuIpcCloseMemHandle);
    FL_LOAD(cuMemGetAddressRange, "cuMemGetAddressRange_v2");
#undef FL_LOAD
    load(lib, a.cuDeviceGetLuid, "cuDeviceGetLuid");
    load(lib, a.cuLaunchHostFunc, "cuLaunchHostFunc");
    load(lib, a.cuStreamBeginCapture, "cuStreamBeginCapture", "cuStreamBeginCapture_v2");
    load(lib, a.cuStreamEndCapture, "cuStreamEndCapture");
    load(lib, a.cuGraphInstantiateWithFlags, "cuGraphInstantiateWithFlags");
    load(lib, a.cuGraphLaunch, "cuGraphLaunch");
    load(lib, a.cuGraphDestroy, "cuGraphDestroy");
    load(lib, a.cuGraphExecDestroy, "cuGraphExecDestroy");
    load(lib, a.cuGraphGetNodes, "cuGraphGetNodes");
    if (missing) {
      r.reason = std::string("the CUDA driver lacks ") + missing + " (driver too old)";
      return r;
    }
    CUresult rc = a.cuInit(0);
    if (rc != CUDA_SUCCESS) {
      const char *n = nullptr;
      a.cuGetErrorName(rc, &n);
      r.reason = std::string("cuInit failed: ") + (n ? n : std::to_string(rc));
      return r;
    }
    int count = 0;
    if (a.cuDeviceGetCount(&count) != CUDA_SUCCESS || count == 0) {
      r.reason = "the CUDA driver sees no device";
      return r;
    }
    r.ok = true;
    return r;
  }();
  return l;
}

const Api &api() {
  const Loaded &l = loaded();
  if (!l.ok) throw Error(Code::Unsupported, "CUDA is not available here: " + l.reason);
  return l.api;
}

std::string error_name(CUresult rc) {
  const char *n = nullptr;
  if (loaded().api.cuGetErrorName) loaded().api.cuGetErrorName(rc, &n);
  return n ? n : "CUDA error " + std::to_string(rc);
}

void check(CUresult rc, const char *what) {
  if (rc == CUDA_SUCCESS) return;
  std::string msg = std::string(what) + " failed: " + error_name(rc);
  switch (rc) {
    case CUDA_ERROR_INVALID_VALUE:
    case CUDA_ERROR_INVALID_HANDLE:
      throw Error(Code::InvalidArgument, msg);
    case CUDA_ERROR_OUT_OF_MEMORY:
      throw Error(Code::ResourceExhausted, msg);
    case CUDA_ERROR_ILLEGAL_ADDRESS:
    case CUDA_ERROR_LAUNCH_FAILED:
      throw Error(Code::DeviceLost, msg);
    default:
      throw Error(Code::OsError, msg);
  }
}

std::string hex(const std::string &raw) {
  static const char *digits = "0123456789abcdef";
  std::string out;
  for (unsigned char c : raw) {
    out += digits[c >> 4];
    out += digits[c & 15];
  }
  return out;
}

// Devices are shared: one primary-context retain per device for as long as anything uses it.
std::mutex devices_lock;
std::map<int, std::weak_ptr<Device>> device_cache;

struct FdGuard {
  int fd;
  ~FdGuard() {
    if (fd >= 0) FL_CLOSE_FD(fd);
  }
};

// The device's adapter LUID where the driver has one (Windows WDDM devices), else none.
std::optional<std::string> luid_of(const Api &a, CUdevice d) {
  if (!a.cuDeviceGetLuid) return std::nullopt;
  char luid[8] = {0};
  unsigned node_mask = 0;
  if (a.cuDeviceGetLuid(luid, &node_mask, d) != CUDA_SUCCESS) return std::nullopt;
  return std::string(luid, 8);
}

}  // namespace

bool available() { return loaded().ok; }

bool has_luid_query() { return loaded().api.cuDeviceGetLuid != nullptr; }

std::string unavailable_reason() { return loaded().ok ? "" : loaded().reason; }

std::vector<DeviceInfo> devices() {
  std::vector<DeviceInfo> out;
  if (!available()) return out;
  const Api &a = api();
  int count = 0;
  if (a.cuDeviceGetCount(&count) != CUDA_SUCCESS) return out;
  for (int i = 0; i < count; ++i) {
    CUdevice d = 0;
    char name[256] = {0};
    CUuuid uuid{};
    std::size_t total = 0;
    if (a.cuDeviceGet(&d, i) != CUDA_SUCCESS) continue;
    a.cuDeviceGetName(name, sizeof(name) - 1, d);
    a.cuDeviceGetUuid(&uuid, d);
    a.cuDeviceTotalMem(&total, d);
    out.push_back({i, name, std::string(uuid.bytes, 16), total, luid_of(a, d)});
  }
  return out;
}

std::shared_ptr<Device> Device::by_ordinal(int ordinal) {
  const Api &a = api();
  {
    std::lock_guard<std::mutex> lock(devices_lock);
    auto it = device_cache.find(ordinal);
    if (it != device_cache.end()) {
      if (auto d = it->second.lock()) return d;
    }
  }
  int count = 0;
  check(a.cuDeviceGetCount(&count), "cuDeviceGetCount");
  if (ordinal < 0 || ordinal >= count) {
    throw Error(Code::InvalidArgument, "CUDA device " + std::to_string(ordinal) +
                                           " does not exist; this machine has " +
                                           std::to_string(count));
  }
  // Built outside the lock: retaining a primary context the first time creates it, which takes
  // long, and another GPU's imports must not wait for that.
  std::shared_ptr<Device> d(new Device());
  d->ordinal_ = ordinal;
  check(a.cuDeviceGet(&d->handle_, ordinal), "cuDeviceGet");
  char name[256] = {0};
  check(a.cuDeviceGetName(name, sizeof(name) - 1, d->handle_), "cuDeviceGetName");
  d->name_ = name;
  CUuuid uuid{};
  check(a.cuDeviceGetUuid(&uuid, d->handle_), "cuDeviceGetUuid");
  d->uuid_.assign(uuid.bytes, 16);
  std::size_t total = 0;
  check(a.cuDeviceTotalMem(&total, d->handle_), "cuDeviceTotalMem");
  d->total_memory_ = total;
  CUcontext ctx = nullptr;
  check(a.cuDevicePrimaryCtxRetain(&ctx, d->handle_), "cuDevicePrimaryCtxRetain");
  d->context_ = ctx;
  std::lock_guard<std::mutex> lock(devices_lock);
  auto &slot = device_cache[ordinal];
  if (auto other = slot.lock()) return other;  // built meanwhile by another thread; ours releases
  slot = d;
  return d;
}

std::shared_ptr<Device> Device::by_uuid(const std::string &uuid) {
  if (uuid.size() != 16) throw Error(Code::InvalidArgument, "a device UUID is 16 bytes");
  api();
  std::string seen;
  for (const DeviceInfo &info : devices()) {
    if (info.uuid == uuid) return by_ordinal(info.ordinal);
    seen += (seen.empty() ? "" : ", ") + std::to_string(info.ordinal) + ": " + info.name + " " +
            hex(info.uuid);
  }
  throw Error(Code::InvalidArgument,
              "no CUDA device here has the renderer's device UUID " + hex(uuid) +
                  " (the service and the renderer must use the same GPU; CUDA devices here: " +
                  seen + ")");
}

Device::~Device() {
  if (context_) loaded().api.cuDevicePrimaryCtxRelease(handle_);
}

void Device::bind() const {
  const Api &a = loaded().api;
  CUcontext current = nullptr;
  if (a.cuCtxGetCurrent(&current) == CUDA_SUCCESS && current == context_) return;
  check(a.cuCtxSetCurrent(context_), "cuCtxSetCurrent");
}

bool Device::bind_for_release() const noexcept {
  try {
    bind();
    return true;
  } catch (const Error &) {
    return false;
  }
}

std::shared_ptr<ExternalMemory> ExternalMemory::import_opaque_fd(std::shared_ptr<Device> device,
                                                                 int fd,
                                                                 std::uint64_t allocation_size,
                                                                 std::uint64_t offset,
                                                                 std::uint64_t size,
                                                                 bool dedicated) {
  FdGuard guard{fd};
  if (fd < 0) throw Error(Code::InvalidArgument, "invalid file descriptor");
  if (allocation_size == 0)
    throw Error(Code::InvalidArgument,
                "opaque_fd memory needs allocation_size_bytes: the size of the Vulkan allocation "
                "(VkMemoryAllocateInfo.allocationSize)");
  if (offset >= allocation_size)
    throw Error(Code::InvalidArgument, "offset_bytes " + std::to_string(offset) +
                                           " is not inside the " +
                                           std::to_string(allocation_size) + "-byte allocation");
  if (size == 0) size = allocation_size - offset;
  check_range(offset, size, allocation_size, "mapped range");
  const Api &a = api();
  device->bind();
  CUDA_EXTERNAL_MEMORY_HANDLE_DESC desc;
  std::memset(&desc, 0, sizeof(desc));
  desc.type = CU_EXTERNAL_MEMORY_HANDLE_TYPE_OPAQUE_FD;
  desc.handle.fd = fd;
  desc.size = allocation_size;
  desc.flags = dedicated ? CUDA_EXTERNAL_MEMORY_DEDICATED : 0;
  std::shared_ptr<ExternalMemory> m(new ExternalMemory());
  m->device_ = std::move(device);
  CUexternalMemory ext = nullptr;
  check(a.cuImportExternalMemory(&ext, &desc), "cuImportExternalMemory");
  guard.fd = -1;  // the driver owns the fd now
  m->external_ = ext;
  m->map(offset, size);
  return m;
}

std::shared_ptr<ExternalMemory> ExternalMemory::import_win32(
    std::shared_ptr<Device> device, int type, std::uint64_t handle, const char16_t *name,
    std::uint64_t allocation_size, unsigned flags, std::uint64_t offset, std::uint64_t size) {
  if ((handle == 0) == (name == nullptr))
    throw Error(Code::InvalidArgument, "a Win32 import takes exactly one of handle and name");
  check_range(offset, size, allocation_size, "mapped range");
  const Api &a = api();
  device->bind();
  CUDA_EXTERNAL_MEMORY_HANDLE_DESC desc;
  std::memset(&desc, 0, sizeof(desc));
  desc.type = type;
  desc.handle.win32.handle = reinterpret_cast<void *>(static_cast<std::uintptr_t>(handle));
  desc.handle.win32.name = name;  // UTF-16, what the driver reads as LPCWSTR
  desc.size = allocation_size;
  desc.flags = flags;
  std::shared_ptr<ExternalMemory> m(new ExternalMemory());
  m->device_ = std::move(device);
  CUexternalMemory ext = nullptr;
  check(a.cuImportExternalMemory(&ext, &desc), "cuImportExternalMemory");
  m->external_ = ext;
  m->map(offset, size);
  return m;
}

void ExternalMemory::map(std::uint64_t offset, std::uint64_t size) {
  CUDA_EXTERNAL_MEMORY_BUFFER_DESC buf;
  std::memset(&buf, 0, sizeof(buf));
  buf.offset = offset;
  buf.size = size;
  CUdeviceptr ptr = 0;
  check(loaded().api.cuExternalMemoryGetMappedBuffer(&ptr, external_, &buf),
        "cuExternalMemoryGetMappedBuffer");
  pointer_ = ptr;
  size_ = size;
}

std::shared_ptr<ExternalMemory> ExternalMemory::open_ipc(std::shared_ptr<Device> device,
                                                         const std::string &handle,
                                                         std::uint64_t size) {
  if (handle.size() != sizeof(CUipcMemHandle))
    throw Error(Code::InvalidArgument, "a CUDA IPC memory handle is 64 bytes, not " +
                                           std::to_string(handle.size()));
  if (size == 0)
    throw Error(Code::InvalidArgument, "cuda_ipc memory needs size_bytes (the region's size)");
  const Api &a = api();
  device->bind();
  CUipcMemHandle h;
  std::memcpy(h.reserved, handle.data(), sizeof(h.reserved));
  std::shared_ptr<ExternalMemory> m(new ExternalMemory());
  m->device_ = std::move(device);
  CUdeviceptr ptr = 0;
  check(a.cuIpcOpenMemHandle(&ptr, h, CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS), "cuIpcOpenMemHandle");
  m->ipc_ = true;
  m->pointer_ = ptr;
  // The handle names the whole allocation: a size past its end would let views reach memory
  // that is not the client's.
  CUdeviceptr base = 0;
  std::size_t allocated = 0;
  check(a.cuMemGetAddressRange(&base, &allocated, ptr), "cuMemGetAddressRange");
  if (size > allocated - (ptr - base))
    throw Error(Code::InvalidArgument, "size " + std::to_string(size) +
                                           " is past the end of the CUDA allocation of " +
                                           std::to_string(allocated) + " bytes");
  m->size_ = size;
  return m;
}

ExternalMemory::~ExternalMemory() {
  const Api &a = loaded().api;
  if (!device_ || !device_->bind_for_release()) return;
  if (ipc_) {
    if (pointer_) a.cuIpcCloseMemHandle(pointer_);
    return;
  }
  // The mapped buffer first, then the memory it maps.
  if (pointer_) a.cuMemFree(pointer_);
  if (external_) a.cuDestroyExternalMemory(external_);
}

std::shared_ptr<ExternalSemaphore> ExternalSemaphore::import_timeline_fd(
    std::shared_ptr<Device> device, int fd) {
  FdGuard guard{fd};
  if (fd < 0) throw Error(Code::InvalidArgument, "invalid file descriptor");
  const Api &a = api();
  device->bind();
  CUDA_EXTERNAL_SEMAPHORE_HANDLE_DESC desc;
  std::memset(&desc, 0, sizeof(desc));
  desc.type = CU_EXTERNAL_SEMAPHORE_HANDLE_TYPE_TIMELINE_SEMAPHORE_FD;
  desc.handle.fd = fd;
  std::shared_ptr<ExternalSemaphore> s(new ExternalSemaphore());
  s->device_ = std::move(device);
  CUexternalSemaphore h = nullptr;
  check(a.cuImportExternalSemaphore(&h, &desc),
        "cuImportExternalSemaphore (is it a timeline semaphore exported as OPAQUE_FD?)");
  guard.fd = -1;
  s->handle_ = h;
  return s;
}

std::shared_ptr<ExternalSemaphore> ExternalSemaphore::import_win32(std::shared_ptr<Device> device,
                                                                   int type,
                                                                   std::uint64_t handle,
                                                                   const char16_t *name) {
  if ((handle == 0) == (name == nullptr))
    throw Error(Code::InvalidArgument, "a Win32 import takes exactly one of handle and name");
  const Api &a = api();
  device->bind();
  CUDA_EXTERNAL_SEMAPHORE_HANDLE_DESC desc;
  std::memset(&desc, 0, sizeof(desc));
  desc.type = type;
  desc.handle.win32.handle = reinterpret_cast<void *>(static_cast<std::uintptr_t>(handle));
  desc.handle.win32.name = name;
  std::shared_ptr<ExternalSemaphore> s(new ExternalSemaphore());
  s->device_ = std::move(device);
  CUexternalSemaphore h = nullptr;
  check(a.cuImportExternalSemaphore(&h, &desc), "cuImportExternalSemaphore");
  s->handle_ = h;
  return s;
}

ExternalSemaphore::~ExternalSemaphore() {
  if (!handle_ || !device_->bind_for_release()) return;
  loaded().api.cuDestroyExternalSemaphore(handle_);
}

Stream::Stream(std::shared_ptr<Device> device) : device_(std::move(device)) {
  const Api &a = api();
  device_->bind();
  CUstream s = nullptr;
  check(a.cuStreamCreate(&s, CU_STREAM_NON_BLOCKING), "cuStreamCreate");
  CUevent e = nullptr;
  CUresult rc = a.cuEventCreate(&e, CU_EVENT_DISABLE_TIMING);
  if (rc != CUDA_SUCCESS) {
    a.cuStreamDestroy(s);
    check(rc, "cuEventCreate");
  }
  stream_ = s;
  event_ = e;
}

Stream::~Stream() {
  if (!device_->bind_for_release()) return;
  const Api &a = loaded().api;
  a.cuEventDestroy(event_);
  a.cuStreamDestroy(stream_);
}

namespace {

// One wait or signal of a timeline semaphore at `value`, queued on `stream`: the two calls take
// the same arguments.
using SemaphoresAsync = CUresult (*)(const CUexternalSemaphore *,
                                     const CUDA_EXTERNAL_SEMAPHORE_PARAMS *, unsigned int,
                                     CUstream);

void queue_semaphore(SemaphoresAsync call, const char *what, const ExternalSemaphore &sem,
                     std::uint64_t value, CUstream stream) {
  CUDA_EXTERNAL_SEMAPHORE_PARAMS p;
  std::memset(&p, 0, sizeof(p));
  p.params.fence_value = value;
  CUexternalSemaphore h = sem.handle();
  check(call(&h, &p, 1, stream), what);
}

}  // namespace

void Stream::wait(const ExternalSemaphore &sem, std::uint64_t value) {
  device_->bind();
  queue_semaphore(loaded().api.cuWaitExternalSemaphoresAsync, "cuWaitExternalSemaphoresAsync",
                  sem, value, stream_);
}

void Stream::signal(const ExternalSemaphore &sem, std::uint64_t value) {
  device_->bind();
  queue_semaphore(loaded().api.cuSignalExternalSemaphoresAsync,
                  "cuSignalExternalSemaphoresAsync", sem, value, stream_);
}

void Stream::record() {
  device_->bind();
  check(loaded().api.cuEventRecord(event_, stream_), "cuEventRecord");
}

bool Stream::done() const {
  device_->bind();
  CUresult rc = loaded().api.cuEventQuery(event_);
  if (rc == CUDA_ERROR_NOT_READY) return false;
  check(rc, "cuEventQuery");
  return true;
}

bool Stream::synchronize(std::int64_t timeout_ns, std::int64_t spin_ns) const {
  using clock = std::chrono::steady_clock;
  const auto start = clock::now();
  auto elapsed = [&] {
    return std::chrono::duration_cast<std::chrono::nanoseconds>(clock::now() - start).count();
  };
  while (elapsed() < spin_ns) {
    if (done()) return true;
  }
  // The driver's blocking waits sleep in coarse steps on some machines; poll with sleeps that
  // grow from 20 us to 1 ms instead, so short waits stay short.
  std::int64_t nap_ns = 20'000;
  for (;;) {
    if (done()) return true;
    const std::int64_t t = elapsed();
    if (timeout_ns >= 0 && t >= timeout_ns) return false;
    std::int64_t nap = nap_ns;
    if (timeout_ns >= 0 && timeout_ns - t < nap) nap = timeout_ns - t;
    std::this_thread::sleep_for(std::chrono::nanoseconds(nap));
    if (nap_ns < 1'000'000) nap_ns *= 2;
  }
}

namespace {

struct GpuDone {
  std::uint64_t session, frame;
};

// Runs on the driver's callback thread once the stream gets here: no CUDA call allowed, and
// none made.
void gpu_done(void *p) {
  std::unique_ptr<GpuDone> d(static_cast<GpuDone *>(p));
  trace::mark(trace::kGpuDone, d->session, d->frame, trace::now_ns());
}

}  // namespace

bool Stream::trace_completion(std::uint64_t session, std::uint64_t frame) {
  const Api &a = loaded().api;
  if (a.cuLaunchHostFunc == nullptr || !trace::on()) return false;
  device_->bind();
  auto *d = new GpuDone{session, frame};
  if (a.cuLaunchHostFunc(stream_, gpu_done, d) != CUDA_SUCCESS) {
    delete d;
    return false;
  }
  return true;
}

namespace {

bool has_graphs(const Api &a) {
  return a.cuStreamBeginCapture && a.cuStreamEndCapture && a.cuGraphInstantiateWithFlags &&
         a.cuGraphLaunch && a.cuGraphDestroy && a.cuGraphExecDestroy && a.cuGraphGetNodes;
}

}  // namespace

Graph::~Graph() {
  if (!exec_ || !device_->bind_for_release()) return;
  loaded().api.cuGraphExecDestroy(exec_);
}

void Stream::begin_capture() {
  const Api &a = api();
  if (!has_graphs(a)) throw Error(Code::Unsupported, "this CUDA driver has no graph capture");
  device_->bind();
  check(a.cuStreamBeginCapture(stream_, CU_STREAM_CAPTURE_MODE_THREAD_LOCAL),
        "cuStreamBeginCapture");
}

std::shared_ptr<Graph> Stream::end_capture() {
  const Api &a = api();
  if (!has_graphs(a)) throw Error(Code::Unsupported, "this CUDA driver has no graph capture");
  device_->bind();
  CUgraph graph = nullptr;
  check(a.cuStreamEndCapture(stream_, &graph), "cuStreamEndCapture");
  if (graph == nullptr) throw Error(Code::OsError, "cuStreamEndCapture gave no graph");
  struct Drop {
    const Api &a;
    CUgraph g;
    ~Drop() { a.cuGraphDestroy(g); }
  } drop{a, graph};
  std::shared_ptr<Graph> out(new Graph());
  out->device_ = device_;
  check(a.cuGraphGetNodes(graph, nullptr, &out->nodes_), "cuGraphGetNodes");
  CUgraphExec exec = nullptr;
  check(a.cuGraphInstantiateWithFlags(&exec, graph, 0), "cuGraphInstantiateWithFlags");
  out->exec_ = exec;
  return out;
}

void Stream::launch(const Graph &graph) {
  device_->bind();
  check(loaded().api.cuGraphLaunch(graph.exec_, stream_), "cuGraphLaunch");
}

}  // namespace fl::cuda
