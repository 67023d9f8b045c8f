// A D3D12 renderer that runs a model on its frames in place, through fenceline
// (docs/windows.md, "D3D12").
//
// It creates a D3D12 device on an NVIDIA adapter, a shared frame (a committed buffer, or with
// --heap a shared heap holding a placed buffer) and two shared fences, names them with
// ID3D12Device::CreateSharedHandle, and asks the service over the C client to import them by
// name on the GPU whose LUID is the adapter's. Each frame: upload the input into the frame, signal
// `ready` = n from the queue, Run(n); the service's stream waits for `ready` >= n on the GPU, runs
// the model with its input and output inside the frame, and signals `done` = n. The queue waits
// for `done` >= n, copies the output to a readback buffer, and the result is compared with a CPU
// reference (the add_* models compute y = x + 1).
//
// With --async each frame is sent with RunAsync, which answers once the service has enqueued the
// wait, the model and the signal: nothing of the renderer waits on the CPU for the service, and
// the queue's Wait(done, n) orders the readback. Either way the renderer issues Signal(ready, n)
// before it sends the run for n: CUDA requires a D3D12 fence's signal to be issued before a wait
// for it is enqueued (docs/windows.md, "The order of waits and signals").
//
//   d3d12_renderer [--heap] [--async] [--model add_64x64] [--frames 3] [--pipe PATH]
//                  [--client-dll PATH]
//
// The model must run on the CUDA execution provider (its config.json: {"execution_provider":
// "cuda"}). The C client is loaded at run time (fenceline_client.dll, FlGetApi), so this program
// links only d3d12, dxgi and kernel32.
//
// Build (mingw-w64; .ci/windows does, with -Werror):
//   x86_64-w64-mingw32-g++-posix -std=c++17 -O2 -Wall -Wextra -Inative/client/include -Inative/common
//     -o d3d12_renderer.exe examples/d3d12_renderer.cpp -static -ld3d12 -ldxgi -ldxguid
#ifndef NOMINMAX
#define NOMINMAX
#endif
#ifndef WIN32_LEAN_AND_MEAN
#define WIN32_LEAN_AND_MEAN
#endif
#include <windows.h>
#include <d3d12.h>
#include <dxgi1_4.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "fenceline/fenceline_client.h"

namespace {

constexpr UINT64 kTensorBytes = 1 * 3 * 64 * 64 * sizeof(float);  // the add_64x64 tensors
constexpr UINT64 kOutputOffset = 64 * 1024;  // the output starts on its own 64 KiB page
constexpr UINT64 kFrameBytes = 128 * 1024;
const int64_t kShape[] = {1, 3, 64, 64};

[[noreturn]] void die(const char *what, HRESULT hr) {
  std::fprintf(stderr, "d3d12_renderer: %s failed: HRESULT 0x%08lx\n", what,
               static_cast<unsigned long>(hr));
  std::exit(1);
}

void check_hr(HRESULT hr, const char *what) {
  if (FAILED(hr)) die(what, hr);
}

const FlApi *api = nullptr;

void check_fl(FlStatus *st, const char *what) {
  if (st == nullptr) return;
  std::fprintf(stderr, "d3d12_renderer: %s: [%s] %s\n", what,
               api->GetErrorCodeName(api->GetErrorCode(st)), api->GetErrorMessage(st));
  api->ReleaseStatus(st);
  std::exit(1);
}

template <typename T>
void release(T *&p) {
  if (p) p->Release();
  p = nullptr;
}

std::string utf8(const std::wstring &w) {
  const int n = ::WideCharToMultiByte(CP_UTF8, 0, w.c_str(), -1, nullptr, 0, nullptr, nullptr);
  std::string out(static_cast<size_t>(n), '\0');
  ::WideCharToMultiByte(CP_UTF8, 0, w.c_str(), -1, &out[0], n, nullptr, nullptr);
  out.resize(static_cast<size_t>(n > 0 ? n - 1 : 0));
  return out;
}

// The first hardware adapter, an NVIDIA one when there is one: CUDA can only import objects made
// on an NVIDIA GPU, and the service matches it by this adapter's LUID.
IDXGIAdapter1 *pick_adapter(IDXGIFactory4 *factory) {
  IDXGIAdapter1 *chosen = nullptr;
  IDXGIAdapter1 *adapter = nullptr;
  for (UINT i = 0; factory->EnumAdapters1(i, &adapter) != DXGI_ERROR_NOT_FOUND; ++i) {
    DXGI_ADAPTER_DESC1 desc;
    adapter->GetDesc1(&desc);
    const bool hardware = (desc.Flags & DXGI_ADAPTER_FLAG_SOFTWARE) == 0;
    if (hardware && (!chosen || desc.VendorId == 0x10DE)) {
      release(chosen);
      chosen = adapter;
      if (desc.VendorId == 0x10DE) break;
    } else {
      adapter->Release();
    }
  }
  return chosen;
}

D3D12_RESOURCE_DESC buffer_desc(UINT64 bytes) {
  D3D12_RESOURCE_DESC d = {};
  d.Dimension = D3D12_RESOURCE_DIMENSION_BUFFER;
  d.Width = bytes;
  d.Height = 1;
  d.DepthOrArraySize = 1;
  d.MipLevels = 1;
  d.SampleDesc.Count = 1;
  d.Layout = D3D12_TEXTURE_LAYOUT_ROW_MAJOR;
  return d;
}

ID3D12Resource *host_buffer(ID3D12Device *device, D3D12_HEAP_TYPE type, UINT64 bytes) {
  D3D12_HEAP_PROPERTIES hp = {};
  hp.Type = type;
  const D3D12_RESOURCE_DESC d = buffer_desc(bytes);
  const D3D12_RESOURCE_STATES state =
      type == D3D12_HEAP_TYPE_UPLOAD ? D3D12_RESOURCE_STATE_GENERIC_READ : D3D12_RESOURCE_STATE_COPY_DEST;
  ID3D12Resource *r = nullptr;
  check_hr(device->CreateCommittedResource(&hp, D3D12_HEAP_FLAG_NONE, &d, state, nullptr,
                                           IID_PPV_ARGS(&r)),
           "CreateCommittedResource (host buffer)");
  return r;
}

// The example's copies. A command allocator may be reset only once the GPU has finished every
// command list recorded with it (ID3D12CommandAllocator::Reset), and with RunAsync the copy of
// frame n's input can still be waiting on the GPU when the CPU records the next copy: each
// submission gets an allocator of a ring, tagged with the value of a local fence signalled after
// it, and an allocator is reset only once that fence has passed its tag.
struct Queue {
  static constexpr int kAllocators = 4;
  ID3D12CommandQueue *queue = nullptr;
  ID3D12CommandAllocator *allocators[kAllocators] = {};
  UINT64 done_at[kAllocators] = {};  // the local fence's value once the allocator's list ran
  int next = 0;
  ID3D12GraphicsCommandList *list = nullptr;
  ID3D12Fence *cpu_fence = nullptr;  // local, not shared: the example's own completions
  UINT64 cpu_value = 0;
  HANDLE event = nullptr;

  void init(ID3D12Device *device) {
    D3D12_COMMAND_QUEUE_DESC qd = {};
    qd.Type = D3D12_COMMAND_LIST_TYPE_DIRECT;
    check_hr(device->CreateCommandQueue(&qd, IID_PPV_ARGS(&queue)), "CreateCommandQueue");
    for (ID3D12CommandAllocator *&a : allocators)
      check_hr(device->CreateCommandAllocator(D3D12_COMMAND_LIST_TYPE_DIRECT, IID_PPV_ARGS(&a)),
               "CreateCommandAllocator");
    check_hr(device->CreateCommandList(0, D3D12_COMMAND_LIST_TYPE_DIRECT, allocators[0], nullptr,
                                       IID_PPV_ARGS(&list)),
             "CreateCommandList");
    check_hr(list->Close(), "Close");
    check_hr(device->CreateFence(0, D3D12_FENCE_FLAG_NONE, IID_PPV_ARGS(&cpu_fence)), "CreateFence");
    event = ::CreateEventW(nullptr, FALSE, FALSE, nullptr);
  }
  void wait_local(UINT64 value) {
    if (cpu_fence->GetCompletedValue() >= value) return;
    check_hr(cpu_fence->SetEventOnCompletion(value, event), "SetEventOnCompletion");
    ::WaitForSingleObject(event, INFINITE);
  }
  void copy(ID3D12Resource *dst, UINT64 dst_offset, ID3D12Resource *src, UINT64 src_offset) {
    const int k = next;
    next = (next + 1) % kAllocators;
    wait_local(done_at[k]);  // the GPU is done with every list recorded with allocators[k]
    check_hr(allocators[k]->Reset(), "CommandAllocator::Reset");
    check_hr(list->Reset(allocators[k], nullptr), "CommandList::Reset");
    list->CopyBufferRegion(dst, dst_offset, src, src_offset, kTensorBytes);
    check_hr(list->Close(), "Close");
    ID3D12CommandList *lists[] = {list};
    queue->ExecuteCommandLists(1, lists);
    check_hr(queue->Signal(cpu_fence, ++cpu_value), "Signal (local)");
    done_at[k] = cpu_value;
  }
  void finish() { wait_local(cpu_value); }
  void destroy() {
    check_hr(queue->Signal(cpu_fence, ++cpu_value), "Signal (local)");
    finish();  // nothing may still run when the objects go
    release(list);
    for (ID3D12CommandAllocator *&a : allocators) release(a);
    release(cpu_fence);
    release(queue);
    if (event) ::CloseHandle(event);
  }
};

}  // namespace

int main(int argc, char **argv) {
  bool use_heap = false;
  bool run_async = false;
  const char *model = "add_64x64";
  const char *pipe = nullptr;
  const char *client_dll = "fenceline_client.dll";
  int frames = 3;
  for (int i = 1; i < argc; ++i) {
    const bool has_value = i + 1 < argc;
    if (!std::strcmp(argv[i], "--heap")) use_heap = true;
    else if (!std::strcmp(argv[i], "--async")) run_async = true;
    else if (!std::strcmp(argv[i], "--model") && has_value) model = argv[++i];
    else if (!std::strcmp(argv[i], "--pipe") && has_value) pipe = argv[++i];
    else if (!std::strcmp(argv[i], "--client-dll") && has_value) client_dll = argv[++i];
    else if (!std::strcmp(argv[i], "--frames") && has_value) frames = std::atoi(argv[++i]);
    else {
      std::fprintf(stderr, "usage: d3d12_renderer [--heap] [--async] [--model M] [--frames N] "
                           "[--pipe P] [--client-dll PATH]\n");
      return 2;
    }
  }

  HMODULE lib = ::LoadLibraryA(client_dll);
  if (!lib) {
    std::fprintf(stderr, "d3d12_renderer: cannot load %s (error %lu)\n", client_dll, ::GetLastError());
    return 1;
  }
  using GetApi = const FlApi *(*)(uint32_t);
  auto get_api = reinterpret_cast<GetApi>(reinterpret_cast<void *>(::GetProcAddress(lib, "FlGetApi")));
  api = get_api ? get_api(FL_API_VERSION) : nullptr;
  if (!api) {
    std::fprintf(stderr, "d3d12_renderer: %s does not serve C API version %u\n", client_dll, FL_API_VERSION);
    return 1;
  }

  // The device, on the adapter the service will find by LUID.
  IDXGIFactory4 *factory = nullptr;
  check_hr(CreateDXGIFactory1(IID_PPV_ARGS(&factory)), "CreateDXGIFactory1");
  IDXGIAdapter1 *adapter = pick_adapter(factory);
  if (!adapter) die("finding a hardware adapter", E_FAIL);
  ID3D12Device *device = nullptr;
  check_hr(D3D12CreateDevice(adapter, D3D_FEATURE_LEVEL_11_0, IID_PPV_ARGS(&device)), "D3D12CreateDevice");
  // CUDA imports D3D12 objects only from a device of one node, not from linked adapters (CUDA
  // Programming Guide, Direct3D 12 interoperability, "Matching Device LUIDs").
  if (device->GetNodeCount() != 1) {
    std::fprintf(stderr, "d3d12_renderer: the device has %u nodes (linked adapters); CUDA can "
                         "import D3D12 objects only from a device with GetNodeCount() == 1\n",
                 device->GetNodeCount());
    return 1;
  }
  const LUID luid = device->GetAdapterLuid();
  const uint64_t adapter_luid =
      (static_cast<uint64_t>(static_cast<uint32_t>(luid.HighPart)) << 32) | luid.LowPart;

  // The shared frame: input at 0, output at kOutputOffset, in D3D12_RESOURCE_STATE_COMMON for
  // good (buffers decay to COMMON after every ExecuteCommandLists, which is the state CUDA needs).
  const D3D12_RESOURCE_DESC frame_desc = buffer_desc(kFrameBytes);
  ID3D12Heap *heap = nullptr;
  ID3D12Resource *frame = nullptr;
  ID3D12DeviceChild *shared_memory = nullptr;
  uint64_t allocation_size = 0;
  if (use_heap) {
    D3D12_HEAP_DESC hd = {};
    hd.SizeInBytes = kFrameBytes;
    hd.Properties.Type = D3D12_HEAP_TYPE_DEFAULT;
    hd.Alignment = D3D12_DEFAULT_RESOURCE_PLACEMENT_ALIGNMENT;
    hd.Flags = D3D12_HEAP_FLAG_SHARED | D3D12_HEAP_FLAG_ALLOW_ONLY_BUFFERS;
    check_hr(device->CreateHeap(&hd, IID_PPV_ARGS(&heap)), "CreateHeap (shared)");
    check_hr(device->CreatePlacedResource(heap, 0, &frame_desc, D3D12_RESOURCE_STATE_COMMON, nullptr,
                                          IID_PPV_ARGS(&frame)),
             "CreatePlacedResource");
    shared_memory = heap;
    allocation_size = hd.SizeInBytes;
  } else {
    D3D12_HEAP_PROPERTIES hp = {};
    hp.Type = D3D12_HEAP_TYPE_DEFAULT;
    check_hr(device->CreateCommittedResource(&hp, D3D12_HEAP_FLAG_SHARED, &frame_desc,
                                             D3D12_RESOURCE_STATE_COMMON, nullptr, IID_PPV_ARGS(&frame)),
             "CreateCommittedResource (shared)");
    shared_memory = frame;
    allocation_size = device->GetResourceAllocationInfo(0, 1, &frame_desc).SizeInBytes;
  }
  ID3D12Fence *ready = nullptr;
  ID3D12Fence *done = nullptr;
  check_hr(device->CreateFence(0, D3D12_FENCE_FLAG_SHARED, IID_PPV_ARGS(&ready)), "CreateFence (ready)");
  check_hr(device->CreateFence(0, D3D12_FENCE_FLAG_SHARED, IID_PPV_ARGS(&done)), "CreateFence (done)");

  // Names live while a handle to them is open: these handles stay open until the end.
  const std::wstring stem = L"Local\\fenceline-d3d12-" + std::to_wstring(::GetCurrentProcessId());
  const std::wstring frame_name = stem + L"-frame";
  const std::wstring ready_name = stem + L"-ready";
  const std::wstring done_name = stem + L"-done";
  HANDLE frame_handle = nullptr, ready_handle = nullptr, done_handle = nullptr;
  check_hr(device->CreateSharedHandle(shared_memory, nullptr, GENERIC_ALL, frame_name.c_str(), &frame_handle),
           "CreateSharedHandle (frame)");
  check_hr(device->CreateSharedHandle(ready, nullptr, GENERIC_ALL, ready_name.c_str(), &ready_handle),
           "CreateSharedHandle (ready)");
  check_hr(device->CreateSharedHandle(done, nullptr, GENERIC_ALL, done_name.c_str(), &done_handle),
           "CreateSharedHandle (done)");

  // The service imports them by name on the same GPU, and binds the session.
  FlClient *client = nullptr;
  check_fl(api->CreateClient(pipe, "d3d12-renderer", &client), "CreateClient");
  FlMemoryImport *memory = nullptr;
  check_fl(api->ImportD3D12Memory(client, use_heap ? "d3d12_heap" : "d3d12_resource",
                                  utf8(frame_name).c_str(), allocation_size, 0, 0, adapter_luid,
                                  FL_ACCESS_READ_WRITE, &memory),
           "ImportD3D12Memory");
  FlFenceImport *ready_import = nullptr;
  FlFenceImport *done_import = nullptr;
  // Each fence with its value now: the service signals `done` only above it, never backwards.
  check_fl(api->ImportD3D12FenceAt(client, utf8(ready_name).c_str(), adapter_luid,
                                   ready->GetCompletedValue(), &ready_import),
           "ImportD3D12FenceAt (ready)");
  check_fl(api->ImportD3D12FenceAt(client, utf8(done_name).c_str(), adapter_luid,
                                   done->GetCompletedValue(), &done_import),
           "ImportD3D12FenceAt (done)");
  const FlTensorView in = {sizeof(FlTensorView), "x", memory, 0, "FP32", kShape, 4};
  const FlTensorView out = {sizeof(FlTensorView), "y", memory, kOutputOffset, "FP32", kShape, 4};
  const FlSessionDesc sd = {sizeof(FlSessionDesc), model, &in, 1, &out, 1, ready_import,
                            done_import};
  FlSession *session = nullptr;
  check_fl(api->CreateSession(client, &sd, &session), "CreateSession");

  Queue q;
  q.init(device);
  ID3D12Resource *upload = host_buffer(device, D3D12_HEAP_TYPE_UPLOAD, kTensorBytes);
  ID3D12Resource *readback = host_buffer(device, D3D12_HEAP_TYPE_READBACK, kTensorBytes);
  const size_t count = kTensorBytes / sizeof(float);
  std::vector<float> input(count);
  int bad_frames = 0;
  for (int n = 1; n <= frames; ++n) {
    const UINT64 value = static_cast<UINT64>(n);
    for (size_t i = 0; i < count; ++i) input[i] = static_cast<float>(i % 251) * 0.01f + static_cast<float>(n);
    void *mapped = nullptr;
    const D3D12_RANGE nothing_read = {0, 0};
    check_hr(upload->Map(0, &nothing_read, &mapped), "Map (upload)");
    std::memcpy(mapped, input.data(), kTensorBytes);
    upload->Unmap(0, nullptr);

    // Renderer: the frame's input, then ready = n on the same queue (after the copy). The signal
    // is issued before the run is sent: the service's CUDA wait for n must come after it.
    q.copy(frame, 0, upload, 0);
    check_hr(q.queue->Signal(ready, value), "Signal (ready)");
    // Service: its stream waits for ready >= n, runs the model in the frame, signals done = n.
    // Run answers once the stream has passed the signal; RunAsync once it is enqueued.
    FlRunResult result{};
    result.struct_size = sizeof result;
    if (run_async)
      check_fl(api->RunAsync(session, value, value, FL_TIMEOUT_DEFAULT, &result), "RunAsync");
    else
      check_fl(api->Run(session, value, value, FL_TIMEOUT_DEFAULT, &result), "Run");
    // Renderer: nothing reads the output before done >= n, on the GPU.
    check_hr(q.queue->Wait(done, value), "Wait (done)");
    q.copy(readback, 0, frame, kOutputOffset);
    q.finish();  // the CPU reads the readback buffer next: its copy must be done

    const D3D12_RANGE all = {0, static_cast<SIZE_T>(kTensorBytes)};
    check_hr(readback->Map(0, &all, &mapped), "Map (readback)");
    const float *y = static_cast<const float *>(mapped);
    size_t wrong = 0;
    for (size_t i = 0; i < count; ++i) {
      if (std::fabs(y[i] - (input[i] + 1.0f)) > 1e-6f) ++wrong;  // the CPU reference: x + 1
    }
    const D3D12_RANGE nothing_written = {0, 0};
    readback->Unmap(0, &nothing_written);
    std::printf("frame %d: signal %llu, infer %u us, %s\n", n,
                static_cast<unsigned long long>(result.signal_value), result.infer_us,
                wrong ? "MISMATCH" : "matches the CPU reference");
    if (wrong) ++bad_frames;
  }

  q.destroy();
  api->ReleaseSession(session);
  api->ReleaseFenceImport(done_import);
  api->ReleaseFenceImport(ready_import);
  api->ReleaseMemoryImport(memory);
  api->ReleaseClient(client);
  ::CloseHandle(done_handle);
  ::CloseHandle(ready_handle);
  ::CloseHandle(frame_handle);
  release(readback);
  release(upload);
  release(done);
  release(ready);
  release(frame);
  release(heap);
  release(device);
  release(adapter);
  release(factory);
  return bad_frames ? 1 : 0;
}
