// fenceline_client.hpp: a header-only C++11 wrapper of the C client (fenceline_client.h), as
// ONNX Runtime ships one beside its C API. It adds no behaviour: every object owns one C handle
// and releases it in its destructor (move-only), and every failed status becomes a
// fenceline::Error carrying the C code. Link the C library as usual (fenceline::client).
//
//   fenceline::Client client;                          // $FENCELINE_SOCKET, else the default
//   fenceline::ModelMetadata meta = client.model_metadata("add_64x64");
//   fenceline::Frame frame(2 * 3 * 64 * 64 * sizeof(float));
//   fenceline::Fence ready, done;
//   fenceline::MemoryImport memory = client.import_frame(frame);
//   ...
//   fenceline::Session session = client.create_session(desc);
//   ready.signal(1);
//   FlRunResult r = session.run(1);                     // throws fenceline::Error on failure
#ifndef FENCELINE_CLIENT_HPP
#define FENCELINE_CLIENT_HPP

#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "fenceline_client.h"

namespace fenceline {

// A failed call: the C status's code, its stable name and the message.
class Error : public std::runtime_error {
 public:
  Error(FlErrorCode code, const std::string &code_name, const std::string &message)
      : std::runtime_error("[" + code_name + "] " + message), code_(code), code_name_(code_name) {}
  FlErrorCode code() const noexcept { return code_; }
  const std::string &code_name() const noexcept { return code_name_; }

 private:
  FlErrorCode code_;
  std::string code_name_;
};

// The function table this header was compiled against. Throws when the library is older.
inline const FlApi &api() {
  static const FlApi *table = FlGetApi(FL_API_VERSION);
  if (table == nullptr)
    throw Error(FL_ERROR_UNSUPPORTED, "unsupported",
                "libfenceline_client cannot serve API version " +
                    std::to_string(FL_API_VERSION) + ": the library is older than this header");
  return *table;
}

// Throws the status as an Error (and frees it); nothing for NULL.
inline void check(FlStatus *status) {
  if (status == nullptr) return;
  const FlApi &a = api();
  FlErrorCode code = a.GetErrorCode(status);
  Error e(code, a.GetErrorCodeName(code), a.GetErrorMessage(status));
  a.ReleaseStatus(status);
  throw e;
}

namespace detail {

// Owns one C handle: released once, by the destructor or by reset(); moves, never copies.
template <typename T, void (*FlApi::*Release)(T *)>
class Handle {
 public:
  Handle() noexcept = default;
  explicit Handle(T *p) noexcept : p_(p) {}
  Handle(Handle &&o) noexcept : p_(o.p_) { o.p_ = nullptr; }
  Handle &operator=(Handle &&o) noexcept {
    if (this != &o) {
      reset();
      p_ = o.p_;
      o.p_ = nullptr;
    }
    return *this;
  }
  Handle(const Handle &) = delete;
  Handle &operator=(const Handle &) = delete;
  ~Handle() { reset(); }

  T *get() const noexcept { return p_; }
  explicit operator bool() const noexcept { return p_ != nullptr; }
  void reset() noexcept {
    if (p_ != nullptr) (api().*Release)(p_);
    p_ = nullptr;
  }

 private:
  T *p_ = nullptr;
};

}  // namespace detail

// Shared memory this process maps: a memfd (no name) or a new POSIX shared-memory object.
class Frame : public detail::Handle<FlFrame, &FlApi::ReleaseFrame> {
 public:
  Frame() = default;
  explicit Frame(uint64_t size_bytes, const char *shm_name = nullptr)
      : Handle(create(size_bytes, shm_name)) {}
  explicit Frame(FlFrame *f) noexcept : Handle(f) {}
  void *data() const { return api().GetFrameData(get()); }
  uint64_t size() const { return api().GetFrameSize(get()); }

 private:
  static FlFrame *create(uint64_t size_bytes, const char *shm_name) {
    FlFrame *f = nullptr;
    check(api().CreateFrame(shm_name, size_bytes, &f));
    return f;
  }
};

// A host timeline fence: a memfd (no name) or a new named one.
class Fence : public detail::Handle<FlFence, &FlApi::ReleaseFence> {
 public:
  explicit Fence(const char *shm_name = nullptr) : Handle(create(shm_name)) {}
  explicit Fence(FlFence *f) noexcept : Handle(f) {}
  uint64_t value() const { return api().GetFenceValue(get()); }
  void signal(uint64_t value) { check(api().SignalFence(get(), value)); }
  // Throws Error(FL_ERROR_TIMED_OUT) at the deadline; timeout_ns FL_WAIT_FOREVER waits forever.
  void wait(uint64_t value, int64_t timeout_ns = FL_WAIT_FOREVER) {
    check(api().WaitFence(get(), value, timeout_ns));
  }
  void set_status(FlFenceStatus status) { check(api().SetFenceStatus(get(), status)); }

 private:
  static FlFence *create(const char *shm_name) {
    FlFence *f = nullptr;
    check(api().CreateFence(shm_name, &f));
    return f;
  }
};

class MemoryImport : public detail::Handle<FlMemoryImport, &FlApi::ReleaseMemoryImport> {
 public:
  MemoryImport() = default;
  explicit MemoryImport(FlMemoryImport *m) noexcept : Handle(m) {}
  std::string id() const { return api().GetMemoryImportId(get()); }
};

class FenceImport : public detail::Handle<FlFenceImport, &FlApi::ReleaseFenceImport> {
 public:
  FenceImport() = default;
  explicit FenceImport(FlFenceImport *f) noexcept : Handle(f) {}
  std::string id() const { return api().GetFenceImportId(get()); }
};

// A session; it holds the imports it was made from, so they may be released first.
class Session : public detail::Handle<FlSession, &FlApi::ReleaseSession> {
 public:
  Session() = default;
  explicit Session(FlSession *s) noexcept : Handle(s) {}
  std::string id() const { return api().GetSessionId(get()); }
  FlRunResult run(uint64_t wait_value, uint64_t signal_value = 0,
                  uint32_t timeout_ms = FL_TIMEOUT_DEFAULT) {
    FlRunResult r = FlRunResult();
    r.struct_size = sizeof r;
    check(api().Run(get(), wait_value, signal_value, timeout_ms, &r));
    return r;
  }
  FlRunResult run_async(uint64_t wait_value, uint64_t signal_value = 0,
                        uint32_t timeout_ms = FL_TIMEOUT_DEFAULT) {
    FlRunResult r = FlRunResult();
    r.struct_size = sizeof r;
    check(api().RunAsync(get(), wait_value, signal_value, timeout_ms, &r));
    return r;
  }
};

// One input or output of a model, copied out of the metadata.
struct TensorInfo {
  std::string name;
  std::string datatype;
  std::vector<int64_t> shape;  // -1 for a dimension the model leaves free
  // Bytes of the tensor; 0 when a dimension is free or the datatype has no fixed size.
  uint64_t size_bytes() const {
    uint64_t n = api().GetDatatypeSize(datatype.c_str());
    for (int64_t d : shape) n = d < 0 ? 0 : n * static_cast<uint64_t>(d);
    return n;
  }
};

class ModelMetadata : public detail::Handle<FlModelMetadata, &FlApi::ReleaseModelMetadata> {
 public:
  explicit ModelMetadata(FlModelMetadata *m) noexcept : Handle(m) {}
  std::string name() const { return api().GetModelName(get()); }
  std::vector<TensorInfo> inputs() const { return tensors(false); }
  std::vector<TensorInfo> outputs() const { return tensors(true); }

 private:
  std::vector<TensorInfo> tensors(bool outputs) const {
    const FlApi &a = api();
    size_t n = outputs ? a.GetModelOutputCount(get()) : a.GetModelInputCount(get());
    std::vector<TensorInfo> out;
    for (size_t i = 0; i < n; ++i) {
      FlTensorInfo t = FlTensorInfo();
      t.struct_size = sizeof t;
      check(outputs ? a.GetModelOutput(get(), i, &t) : a.GetModelInput(get(), i, &t));
      TensorInfo info;
      info.name = t.name;
      info.datatype = t.datatype;
      info.shape.assign(t.shape, t.shape + t.rank);
      out.push_back(info);
    }
    return out;
  }
};

// What the service said when the client connected.
class ServerInfo : public detail::Handle<FlServerInfo, &FlApi::ReleaseServerInfo> {
 public:
  explicit ServerInfo(FlServerInfo *i) noexcept : Handle(i) {}
  std::string version() const { return api().GetServerVersion(get()); }
  uint32_t protocol() const { return api().GetServerProtocol(get()); }
  bool can_import_memory(const char *kind) const { return api().CanImportMemory(get(), kind); }
  bool can_import_fence(const char *kind) const { return api().CanImportFence(get(), kind); }
  // Why the service cannot import `kind`; empty when it can.
  std::string capability_reason(const char *kind) const {
    const char *why = api().GetCapabilityReason(get(), kind);
    return why != nullptr ? why : "";
  }
};

// Where one input or output goes, for Client::create_session.
struct View {
  std::string name;
  const MemoryImport *memory;
  uint64_t offset_bytes;
  std::string datatype;
  std::vector<int64_t> shape;
};

// One connection to the service. Calls on one client are serialized; use one per thread for
// runs in parallel.
class Client : public detail::Handle<FlClient, &FlApi::ReleaseClient> {
 public:
  // socket_path nullptr: $FENCELINE_SOCKET, else the service's default path.
  explicit Client(const char *socket_path = nullptr, const char *client_name = "c++")
      : Handle(connect(socket_path, client_name)) {}
  explicit Client(FlClient *c) noexcept : Handle(c) {}

  ServerInfo server_info() const {
    FlServerInfo *i = nullptr;
    check(api().GetServerDetails(get(), &i));
    return ServerInfo(i);
  }
  ModelMetadata model_metadata(const char *model, const char *version = nullptr) {
    FlModelMetadata *m = nullptr;
    check(api().GetModelMetadata(get(), model, version, &m));
    return ModelMetadata(m);
  }
  MemoryImport import_frame(const Frame &frame, FlAccess access = FL_ACCESS_READ_WRITE) {
    FlMemoryImport *m = nullptr;
    check(api().ImportFrame(get(), frame.get(), access, &m));
    return MemoryImport(m);
  }
  FenceImport import_fence(const Fence &fence) {
    FlFenceImport *f = nullptr;
    check(api().ImportFence(get(), fence.get(), &f));
    return FenceImport(f);
  }
  // A session of `model` over the views, waiting on `wait` and signalling `signal`.
  Session create_session(const std::string &model, const std::vector<View> &inputs,
                         const std::vector<View> &outputs, const FenceImport &wait,
                         const FenceImport &signal) {
    std::vector<FlTensorView> in = c_views(inputs), out = c_views(outputs);
    FlSessionDesc d = FlSessionDesc();
    d.struct_size = sizeof d;
    d.model = model.c_str();
    d.inputs = in.data();
    d.input_count = in.size();
    d.outputs = out.data();
    d.output_count = out.size();
    d.wait_fence = wait.get();
    d.signal_fence = signal.get();
    FlSession *s = nullptr;
    check(api().CreateSession(get(), &d, &s));
    return Session(s);
  }

 private:
  static FlClient *connect(const char *socket_path, const char *client_name) {
    FlClient *c = nullptr;
    check(api().CreateClient(socket_path, client_name, &c));
    return c;
  }
  // The C views point into `views`, which outlives the CreateSession call that reads them.
  static std::vector<FlTensorView> c_views(const std::vector<View> &views) {
    std::vector<FlTensorView> out;
    for (const View &v : views) {
      FlTensorView c = FlTensorView();
      c.struct_size = sizeof c;
      c.name = v.name.c_str();
      c.memory = v.memory != nullptr ? v.memory->get() : nullptr;
      c.offset_bytes = v.offset_bytes;
      c.datatype = v.datatype.c_str();
      c.shape = v.shape.data();
      c.rank = v.shape.size();
      out.push_back(c);
    }
    return out;
  }
};

}  // namespace fenceline

#endif
