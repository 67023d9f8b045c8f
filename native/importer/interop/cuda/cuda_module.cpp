// Python bindings of the CUDA backend (cuda_backend.h), registered by module.cpp.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>
#include <pybind11/typing.h>

#include "cuda_backend.h"
#include "cuda_d3d12.h"
#include "core/errors.h"
#include "interop/host/host_memory.h"

namespace py = pybind11;

namespace fl {

d3d12::MemoryRequest d3d12_memory_request(const std::string &kind,
                                          std::optional<std::string> name,
                                          std::optional<std::uint64_t> handle, std::uint64_t size,
                                          std::uint64_t offset, std::uint64_t mapped_size,
                                          std::optional<bool> dedicated);  // d3d12_module.cpp

namespace {

using cuda::Device;
using cuda::ExternalMemory;
using cuda::ExternalSemaphore;
using cuda::Stream;

// Dropping the last hold on an import frees device memory (cuMemFree), which may wait for the
// device. With the GIL held, one stalled GPU would then stall every thread of the service, the
// other GPUs' sessions included; so the drop happens with the GIL released.
template <typename T>
void drop_without_gil(std::shared_ptr<T> &p) {
  if (!p) return;
#if PY_VERSION_HEX >= 0x030D0000
  const bool finalizing = Py_IsFinalizing();
#else
  const bool finalizing = _Py_IsFinalizing();
#endif
  if (PyGILState_Check() && !finalizing) {
    py::gil_scoped_release nogil;
    p.reset();
  } else {
    p.reset();
  }
}

// What Python holds for an import: close() drops this hold; views keep theirs.
class CudaMemory {
 public:
  explicit CudaMemory(std::shared_ptr<ExternalMemory> m) : memory_(std::move(m)) {}
  ~CudaMemory() { drop_without_gil(memory_); }
  CudaMemory(const CudaMemory &) = delete;
  CudaMemory &operator=(const CudaMemory &) = delete;
  const std::shared_ptr<ExternalMemory> &memory() const {
    if (!memory_) throw Error(Code::Conflict, "the CUDA memory import is closed");
    return memory_;
  }
  bool closed() const { return !memory_; }
  void close() { drop_without_gil(memory_); }

 private:
  std::shared_ptr<ExternalMemory> memory_;
};

class CudaSemaphore {
 public:
  explicit CudaSemaphore(std::shared_ptr<ExternalSemaphore> s) : sem_(std::move(s)) {}
  ~CudaSemaphore() { drop_without_gil(sem_); }
  CudaSemaphore(const CudaSemaphore &) = delete;
  CudaSemaphore &operator=(const CudaSemaphore &) = delete;
  const ExternalSemaphore &get() const {
    if (!sem_) throw Error(Code::Conflict, "the CUDA semaphore import is closed");
    return *sem_;
  }
  bool closed() const { return !sem_; }
  void close() { drop_without_gil(sem_); }

 private:
  std::shared_ptr<ExternalSemaphore> sem_;
};

// A typed window into device memory, bounds-checked like TensorView; keeps the import alive.
class CudaTensorView {
 public:
  CudaTensorView(std::shared_ptr<ExternalMemory> m, std::uint64_t offset,
                 std::uint64_t element_size, std::vector<std::int64_t> shape)
      : memory_(std::move(m)), offset_(offset), shape_(std::move(shape)) {
    nbytes_ = tensor_nbytes(shape_, element_size);
    check_range(offset_, nbytes_, memory_->size(), "view");
  }
  ~CudaTensorView() { drop_without_gil(memory_); }
  CudaTensorView(const CudaTensorView &) = delete;
  CudaTensorView &operator=(const CudaTensorView &) = delete;
  std::uint64_t address() const { return memory_->pointer() + offset_; }
  std::uint64_t offset() const { return offset_; }
  std::uint64_t nbytes() const { return nbytes_; }
  const std::vector<std::int64_t> &shape() const { return shape_; }

 private:
  std::shared_ptr<ExternalMemory> memory_;
  std::uint64_t offset_;
  std::uint64_t nbytes_ = 0;
  std::vector<std::int64_t> shape_;
};

}  // namespace

void bind_cuda(py::module_ &mod) {
  mod.def("cuda_available", &cuda::available);
  mod.def("cuda_unavailable_reason", &cuda::unavailable_reason);
  mod.def("cuda_devices", []() -> py::typing::List<py::typing::Dict<py::str, py::object>> {
    py::list out;
    for (const auto &d : cuda::devices()) {
      py::dict info;
      info["ordinal"] = d.ordinal;
      info["name"] = d.name;
      info["uuid"] = py::bytes(d.uuid);
      info["total_memory"] = d.total_memory;
      out.append(info);
    }
    return out;
  });

  py::class_<Device, std::shared_ptr<Device>>(mod, "CudaDevice")
      .def_static("by_uuid", [](const py::bytes &uuid) { return Device::by_uuid(uuid); },
                  py::arg("uuid"))
      .def_static("by_ordinal", &Device::by_ordinal, py::arg("ordinal"),
                  py::call_guard<py::gil_scoped_release>())
      .def_static("by_luid", &cuda::device_by_luid, py::arg("luid"),
                  py::call_guard<py::gil_scoped_release>(),
                  "The device whose LUID is the renderer's adapter LUID (D3D12).")
      .def_property_readonly("ordinal", &Device::ordinal)
      .def_property_readonly("name", &Device::name)
      .def_property_readonly("uuid", [](const Device &d) { return py::bytes(d.uuid()); })
      .def_property_readonly("total_memory", &Device::total_memory);

  py::class_<CudaMemory, std::shared_ptr<CudaMemory>>(mod, "CudaMemory")
      .def_static(
          "import_opaque_fd",
          [](std::shared_ptr<Device> device, int fd, std::uint64_t allocation_size,
             std::uint64_t offset, std::uint64_t size, bool dedicated) {
            return std::make_shared<CudaMemory>(ExternalMemory::import_opaque_fd(
                std::move(device), fd, allocation_size, offset, size, dedicated));
          },
          py::arg("device"), py::arg("fd"), py::arg("allocation_size"), py::arg("offset") = 0,
          py::arg("size") = 0, py::arg("dedicated") = false,
          py::call_guard<py::gil_scoped_release>(),
          "Takes ownership of fd, also when it raises (CUDA owns it once imported).")
      .def_static(
          "open_ipc",
          [](std::shared_ptr<Device> device, const py::bytes &handle, std::uint64_t size) {
            std::string raw = handle;
            py::gil_scoped_release nogil;
            return std::make_shared<CudaMemory>(
                ExternalMemory::open_ipc(std::move(device), raw, size));
          },
          py::arg("device"), py::arg("handle"), py::arg("size"))
      .def_static(
          "import_d3d12",
          [](std::shared_ptr<Device> device, const std::string &kind,
             std::optional<std::string> name, std::optional<std::uint64_t> handle,
             std::uint64_t size, std::uint64_t offset, std::uint64_t mapped_size,
             std::optional<bool> dedicated) {
            d3d12::MemoryDescriptor desc;
            try {
              desc = d3d12::memory_descriptor(d3d12_memory_request(
                  kind, std::move(name), handle, size, offset, mapped_size, dedicated));
            } catch (...) {
              if (handle) cuda::close_nt_handle(*handle);
              throw;
            }
            return std::make_shared<CudaMemory>(
                cuda::import_d3d12_memory(std::move(device), desc));
          },
          py::arg("device"), py::arg("kind"), py::arg("name") = py::none(),
          py::arg("handle") = py::none(), py::arg("size") = 0, py::arg("offset") = 0,
          py::arg("mapped_size") = 0, py::arg("dedicated") = py::none(),
          py::call_guard<py::gil_scoped_release>(),
          "A D3D12 heap or committed resource by name or NT handle (the handle is owned from "
          "here on, also when it raises).")
      .def_property_readonly("pointer",
                             [](const CudaMemory &m) { return m.memory()->pointer(); })
      .def_property_readonly("size", [](const CudaMemory &m) { return m.memory()->size(); })
      .def_property_readonly("device", [](const CudaMemory &m) { return m.memory()->device(); })
      .def_property_readonly("closed", &CudaMemory::closed)
      .def("close", &CudaMemory::close, "Drops this hold; views keep the mapping alive.");

  py::class_<CudaTensorView, std::shared_ptr<CudaTensorView>>(mod, "CudaTensorView")
      .def(py::init([](const CudaMemory &m, std::uint64_t offset, std::uint64_t element_size,
                       std::vector<std::int64_t> shape) {
             return std::make_shared<CudaTensorView>(m.memory(), offset, element_size,
                                                     std::move(shape));
           }),
           py::arg("memory"), py::arg("offset"), py::arg("element_size"), py::arg("shape"))
      .def_property_readonly("address", &CudaTensorView::address)
      .def_property_readonly("offset", &CudaTensorView::offset)
      .def_property_readonly("nbytes", &CudaTensorView::nbytes)
      .def_property_readonly("shape", &CudaTensorView::shape);

  py::class_<CudaSemaphore, std::shared_ptr<CudaSemaphore>>(mod, "CudaSemaphore")
      .def_static(
          "import_timeline_fd",
          [](std::shared_ptr<Device> device, int fd) {
            return std::make_shared<CudaSemaphore>(
                ExternalSemaphore::import_timeline_fd(std::move(device), fd));
          },
          py::arg("device"), py::arg("fd"), py::call_guard<py::gil_scoped_release>(),
          "Takes ownership of fd, also when it raises.")
      .def_static(
          "import_d3d12_fence",
          [](std::shared_ptr<Device> device, std::optional<std::string> name,
             std::optional<std::uint64_t> handle) {
            d3d12::SemaphoreDescriptor desc;
            try {
              d3d12::Source src;
              src.name = std::move(name);
              src.handle = handle;
              desc = d3d12::fence_descriptor(src);
            } catch (...) {
              if (handle) cuda::close_nt_handle(*handle);
              throw;
            }
            return std::make_shared<CudaSemaphore>(
                cuda::import_d3d12_fence(std::move(device), desc));
          },
          py::arg("device"), py::arg("name") = py::none(), py::arg("handle") = py::none(),
          py::call_guard<py::gil_scoped_release>(),
          "A shared ID3D12Fence by name or NT handle (the handle is owned from here on).")
      .def_property_readonly("closed", &CudaSemaphore::closed)
      .def("close", &CudaSemaphore::close);

  py::class_<cuda::Graph, std::shared_ptr<cuda::Graph>>(
      mod, "CudaGraph", "A CUDA graph captured from a CudaStream, ready to launch on it.")
      .def_property_readonly("nodes", &cuda::Graph::nodes);

  py::class_<Stream, std::shared_ptr<Stream>>(mod, "CudaStream")
      .def(py::init<std::shared_ptr<Device>>(), py::arg("device"))
      .def_property_readonly("handle", &Stream::handle)
      .def_property_readonly("device", &Stream::device)
      .def(
          "wait", [](Stream &s, const CudaSemaphore &sem, std::uint64_t v) { s.wait(sem.get(), v); },
          py::arg("semaphore"), py::arg("value"), py::call_guard<py::gil_scoped_release>(),
          "Enqueues a GPU-side wait for value (GIL released: a full queue may block).")
      .def(
          "signal",
          [](Stream &s, const CudaSemaphore &sem, std::uint64_t v) { s.signal(sem.get(), v); },
          py::arg("semaphore"), py::arg("value"), py::call_guard<py::gil_scoped_release>(),
          "Enqueues a GPU-side signal of value (GIL released).")
      .def("record", &Stream::record, py::call_guard<py::gil_scoped_release>())
      .def("done", &Stream::done)
      .def("synchronize", &Stream::synchronize, py::arg("timeout_ns") = -1,
           py::arg("spin_ns") = 0, py::call_guard<py::gil_scoped_release>(),
           "Waits (GIL released) for the work before the last record(); False on timeout.")
      .def("trace_completion", &Stream::trace_completion, py::arg("session"), py::arg("frame"),
           "While a trace records: records the frame's GPU completion when the stream gets "
           "here; False when nothing was enqueued.")
      .def("begin_capture", &Stream::begin_capture,
           "Captures what this thread enqueues on the stream into a graph until end_capture "
           "(thread-local: a call of this thread that cannot be captured spoils it).")
      .def("end_capture", &Stream::end_capture,
           "Ends the capture and returns the instantiated graph; raises when the capture was "
           "spoiled (the stream is usable again either way).")
      .def("launch", &Stream::launch, py::arg("graph"), py::call_guard<py::gil_scoped_release>(),
           "Enqueues the graph's work on this stream (GIL released).");
}

}  // namespace fl
