// fenceline._native: the importer. Owns every OS handle the service maps; Python sees typed
// objects whose lifetimes are tied to the mappings (docs/ownership.md).
#include <cerrno>

#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>
#include <pybind11/typing.h>

#include "common/fenceline_wire.h"
#include "common/host_timeline.h"
#include "interop/cuda/cuda_backend.h"
#include "interop/cuda/cuda_d3d12.h"
#include "core/errors.h"
#include "platform/fault_guard.h"
#include "interop/host/host_fence.h"
#include "interop/host/host_memory.h"
#include "core/py_errors.h"
#ifndef _WIN32
#include "transport/posix/seqpacket.h"
#endif

namespace py = pybind11;

namespace fl {
void bind_cuda(py::module_ &mod);   // cuda_module.cpp
void bind_d3d12(py::module_ &mod);  // d3d12_module.cpp
void bind_run_metrics(py::module_ &mod);  // run_metrics.cpp
void bind_adaptive_spin(py::module_ &mod);  // adaptive_spin.cpp
void bind_cpu_runs(py::module_ &mod);  // cpu_runs.cpp
void bind_host_runs(py::module_ &mod);  // host_runs.cpp
void bind_trace(py::module_ &mod);  // trace.cpp
#ifndef _WIN32
void bind_acceptor(py::module_ &mod);  // acceptor.cpp
void bind_client_runs(py::module_ &mod);  // client_runs.cpp
#endif
namespace win32 {
void bind_pipe(py::module_ &mod);  // platform/win32/pipe_module.cpp
}
}  // namespace fl

// The one place where C++ errors become fenceline.errors classes: the code is a wire error code,
// and fenceline.errors keys its classes by that number.
py::object fl::python_error_type(const Error &e) {
  py::object errors = py::module_::import("fenceline.errors");
  return errors.attr("BY_IPC_CODE").attr("get")(static_cast<std::uint32_t>(e.code()),
                                                errors.attr("FencelineError"));
}

py::object fl::python_error(const Error &e) { return python_error_type(e)(e.what()); }

py::object fl::internal_failure(const char *what) {
  py::module_::import("logging")
      .attr("getLogger")("fenceline.ipc")
      .attr("error")("unexpected error in the native run path: %s", what);
  return py::module_::import("fenceline.errors")
      .attr("FencelineError")("internal error; see the service log");
}

namespace {

void translate(std::exception_ptr p) {
  try {
    if (p) std::rethrow_exception(p);
  } catch (const fl::Error &e) {
    PyErr_SetString(fl::python_error_type(e).ptr(), e.what());
  }
}

// The wire contract (fenceline_wire.h) for fenceline.protocol and fenceline.errors, so Python
// reads the numbers instead of copying them.
void bind_wire(py::module_ &mod) {
  mod.attr("WIRE_MAGIC") = FL_WIRE_MAGIC;
  mod.attr("WIRE_VERSION") = FL_WIRE_VERSION;
  mod.attr("WIRE_HEADER_SIZE") = FL_WIRE_HEADER_SIZE;
  mod.attr("WIRE_MAX_FRAME") = FL_WIRE_MAX_FRAME;
  mod.attr("WIRE_MAX_FDS") = FL_WIRE_MAX_FDS;
  mod.attr("WIRE_REPLY_BIT") = FL_WIRE_REPLY_BIT;
  mod.attr("WIRE_TIMEOUT_DEFAULT") = FL_WIRE_TIMEOUT_DEFAULT;
  mod.attr("WIRE_RUN_SIZE") = sizeof(FlWireRun);
  mod.attr("WIRE_RUN_REPLY_SIZE") = sizeof(FlWireRunReply);
  mod.attr("WIRE_REPLY_CPUS_SHARED") = FL_WIRE_REPLY_CPUS_SHARED;
  mod.attr("WIRE_FEATURE_REPLY_FLAGS") = FL_WIRE_FEATURE_REPLY_FLAGS;
  mod.def(
      "wire_offsets",
      [] {
        // Where each field of the fixed frames sits (offsetof the wire structs): the Python
        // codec's struct formats are checked against these (tests/unit/test_wire_contract.py).
        py::typing::Dict<py::str, py::typing::Dict<py::str, py::int_>> out;
        py::dict header, run, reply;
        header["magic"] = offsetof(FlWireHeader, magic);
        header["version"] = offsetof(FlWireHeader, version);
        header["kind"] = offsetof(FlWireHeader, kind);
        header["request_id"] = offsetof(FlWireHeader, request_id);
        header["body_length"] = offsetof(FlWireHeader, body_length);
        run["session_id"] = offsetof(FlWireRun, session_id);
        run["wait_value"] = offsetof(FlWireRun, wait_value);
        run["signal_value"] = offsetof(FlWireRun, signal_value);
        run["timeout_ms"] = offsetof(FlWireRun, timeout_ms);
        run["flags"] = offsetof(FlWireRun, flags);
        reply["signal_value"] = offsetof(FlWireRunReply, signal_value);
        reply["wait_us"] = offsetof(FlWireRunReply, wait_us);
        reply["infer_us"] = offsetof(FlWireRunReply, infer_us);
        reply["total_us"] = offsetof(FlWireRunReply, total_us);
        reply["flags"] = offsetof(FlWireRunReply, flags);
        out["header"] = header;
        out["run"] = run;
        out["run_reply"] = reply;
        return out;
      },
      "The offset of every field of the header, RUN and RUN reply, from fenceline_wire.h.");
  mod.def(
      "wire_kinds",
      [] {
        py::typing::Dict<py::str, py::int_> kinds;
#define FL_BIND_KIND_(name, value) kinds[#name] = value;
        FL_WIRE_KINDS(FL_BIND_KIND_)
#undef FL_BIND_KIND_
        return kinds;
      },
      "Frame kinds by name, as in fenceline_wire.h.");
  mod.def(
      "error_codes",
      [] {
        py::typing::Dict<py::str, py::int_> codes;
#define FL_BIND_ERROR_(name, value, code, action) codes[code] = value;
        FL_WIRE_ERRORS(FL_BIND_ERROR_)
#undef FL_BIND_ERROR_
        return codes;
      },
      "Wire error codes by their stable name, as in fenceline_wire.h.");
}

// Handle kinds this build can import. An unknown or unsupported kind is a plain false.
// Windows has no fd passing, memfd or Vulkan OPAQUE_FD: those kinds are a plain false there.
#ifdef _WIN32
constexpr bool kPosix = false;
#else
constexpr bool kPosix = true;
#endif
bool can_import_memory(const std::string &kind) {
  if (kind == "host_shm") return true;
  if (kind == "host_fd") return kPosix;
  if (kind == "host_handle") return !kPosix;
  if (kind == "d3d12_heap" || kind == "d3d12_resource")
    return fl::cuda::d3d12_capability().supported;
  return kPosix && (kind == "opaque_fd" || kind == "cuda_ipc") && fl::cuda::available();
}
bool can_import_fence(const std::string &kind) {
  if (kind == "host_timeline") return true;
  if (kind == "d3d12_fence") return fl::cuda::d3d12_capability().supported;
  return kPosix && kind == "vk_timeline_opaque_fd" && fl::cuda::available();
}

// A numpy array over [offset, offset + nbytes) of a mapping that holds the mapping alive.
py::array array_over(const std::shared_ptr<fl::Mapping> &m, std::uint64_t offset,
                     const py::dtype &dtype, std::vector<std::int64_t> shape) {
  const auto itemsize = static_cast<std::uint64_t>(dtype.itemsize());
  if (shape.empty()) {
    if (offset > m->size()) fl::check_range(offset, 0, m->size(), "array");
    shape.push_back(static_cast<std::int64_t>((m->size() - offset) / itemsize));
  }
  fl::check_range(offset, fl::tensor_nbytes(shape, itemsize), m->size(), "array");
  auto *hold = new std::shared_ptr<fl::Mapping>(m);
  py::capsule base(hold, [](void *p) { delete static_cast<std::shared_ptr<fl::Mapping> *>(p); });
  py::array a(dtype, shape, m->data() + offset, base);
  if (!m->writable()) a.attr("flags").attr("writeable") = false;
  return a;
}

}  // namespace

PYBIND11_MODULE(_native, mod) {
  mod.doc() = "fenceline's native importer: host memory, host timeline fences, IPC receive.";
  py::register_exception_translator(&translate);

  bind_wire(mod);
  mod.def("can_import_memory", &can_import_memory, py::arg("kind"));
  mod.def("can_import_fence", &can_import_fence, py::arg("kind"));
  mod.attr("FENCE_PAGE_SIZE") = FL_HTL_PAGE_SIZE;
  mod.attr("PLATFORM") = kPosix ? "posix" : "win32";
  mod.attr("FENCE_WAKE_SUFFIX") = FL_HTL_WAKE_SUFFIX;
  mod.attr("WAIT_REACHED") = static_cast<int>(FL_HTL_REACHED);
  mod.attr("WAIT_TIMED_OUT") = static_cast<int>(FL_HTL_TIMED_OUT);
  mod.attr("WAIT_ABANDONED") = static_cast<int>(FL_HTL_ABANDONED);
  mod.attr("WAIT_ERRORED") = static_cast<int>(FL_HTL_ERRORED);

  py::class_<fl::HostMemory, std::shared_ptr<fl::HostMemory>>(mod, "HostMemory")
      .def_static("open_shm", &fl::HostMemory::open_shm, py::arg("name"), py::arg("offset") = 0,
                  py::arg("size") = 0, py::arg("writable") = true)
      .def_static("from_fd", &fl::HostMemory::from_fd, py::arg("fd"), py::arg("offset") = 0,
                  py::arg("size") = 0, py::arg("writable") = true,
                  "Takes ownership of fd, also when it raises.")
      .def_static("from_handle", &fl::HostMemory::from_handle, py::arg("handle"),
                  py::arg("offset") = 0, py::arg("size") = 0, py::arg("writable") = true,
                  "Windows: maps a section handle duplicated into this process; takes ownership "
                  "of it, also when it raises.")
      .def_static("create_shm", &fl::HostMemory::create_shm, py::arg("name"), py::arg("size"))
      .def_static("create_memfd", &fl::HostMemory::create_memfd, py::arg("name"),
                  py::arg("size"))
      .def_property_readonly("size", [](const fl::HostMemory &h) { return h.mapping()->size(); })
      .def_property_readonly("writable",
                             [](const fl::HostMemory &h) { return h.mapping()->writable(); })
      .def_property_readonly("fd", [](const fl::HostMemory &h) { return h.mapping()->fd(); })
      .def_property_readonly("handle",
                             [](const fl::HostMemory &h) { return h.mapping()->handle(); },
                             "The OS handle: the fd on POSIX, the section HANDLE on Windows.")
      .def_property_readonly("address",
                             [](const fl::HostMemory &h) {
                               return reinterpret_cast<std::uintptr_t>(h.mapping()->data());
                             })
      .def_property_readonly("name", &fl::HostMemory::name)
      .def_property_readonly("closed", &fl::HostMemory::closed)
      .def_property_readonly("sealed",
                             [](const fl::HostMemory &h) { return h.mapping()->sealed(); },
                             "True when the object cannot shrink (memfd with F_SEAL_SHRINK).")
      .def_property_readonly(
          "lost", [](const fl::HostMemory &h) { return h.mapping()->lost(); },
          "True once an access faulted because the object shrank: the range holds zero pages "
          "now, for good.")
      .def(
          "check", [](const fl::HostMemory &h) { h.mapping()->check_size(); },
          "Raises DeviceLost when the mapping was lost or the object was truncated below it (an "
          "access would fault).")
      .def(
          "array",
          [](const fl::HostMemory &h, const py::dtype &dtype, std::vector<std::int64_t> shape,
             std::uint64_t offset) { return array_over(h.mapping(), offset, dtype, shape); },
          py::arg("dtype"), py::arg("shape") = std::vector<std::int64_t>{},
          py::arg("offset") = 0, "A numpy array over the mapping; it keeps the mapping alive.")
      .def("unlink", &fl::HostMemory::unlink)
      .def("close", &fl::HostMemory::close);

  py::class_<fl::TensorView, std::shared_ptr<fl::TensorView>>(mod, "TensorView")
      .def(py::init([](const fl::HostMemory &h, std::uint64_t offset, std::uint64_t element_size,
                       std::vector<std::int64_t> shape, bool need_write) {
             return std::make_shared<fl::TensorView>(h.mapping(), offset, element_size,
                                                     std::move(shape), need_write);
           }),
           py::arg("memory"), py::arg("offset"), py::arg("element_size"), py::arg("shape"),
           py::arg("need_write") = false)
      .def_property_readonly("address", &fl::TensorView::address)
      .def_property_readonly("offset", &fl::TensorView::offset)
      .def_property_readonly("nbytes", &fl::TensorView::nbytes)
      .def_property_readonly(
          "lost", [](const fl::TensorView &v) { return v.mapping()->lost(); },
          "True once the memory under this view shrank (see HostMemory.lost); still answers "
          "after the import was closed, since the view keeps the mapping.")
      .def_property_readonly("shape", &fl::TensorView::shape)
      .def(
          "array",
          [](const fl::TensorView &v, const py::dtype &dtype) {
            return array_over(v.mapping(), v.offset(), dtype, v.shape());
          },
          py::arg("dtype"));

  py::class_<fl::HostFence, std::shared_ptr<fl::HostFence>>(mod, "HostFence")
      .def_static("open_shm", &fl::HostFence::open_shm, py::arg("name"))
      .def_static("from_fd", &fl::HostFence::from_fd, py::arg("fd"),
                  "Takes ownership of fd, also when it raises.")
      .def_static("from_handles", &fl::HostFence::from_handles, py::arg("section"),
                  py::arg("wake"),
                  "Windows: a fence page's section and wake semaphore handles, duplicated into "
                  "this process; takes ownership of both, also when it raises.")
      .def_static("create_shm", &fl::HostFence::create_shm, py::arg("name"))
      .def_static("create_memfd", &fl::HostFence::create_memfd, py::arg("name"))
      .def_property_readonly("value", &fl::HostFence::value)
      .def_property_readonly("status", &fl::HostFence::status)
      .def_property_readonly("fd", [](fl::HostFence &f) { return f.memory().mapping()->fd(); })
      .def_property_readonly("handle",
                             [](fl::HostFence &f) { return f.memory().mapping()->handle(); },
                             "The page's OS handle: the fd on POSIX, the section on Windows.")
      .def_property_readonly("wake_handle", &fl::HostFence::wake_handle,
                             "Windows: the wake semaphore's handle; -1 on POSIX.")
      .def_property_readonly("name", [](fl::HostFence &f) { return f.memory().name(); })
      .def_property_readonly("closed", [](fl::HostFence &f) { return f.memory().closed(); })
      .def("signal", &fl::HostFence::signal, py::arg("value"))
      .def("set_status", &fl::HostFence::set_status, py::arg("status"))
      .def("wait", &fl::HostFence::wait, py::arg("value"), py::arg("timeout_ns") = -1,
           py::arg("spin_ns") = 0, py::call_guard<py::gil_scoped_release>(),
           "Waits with the GIL released. Returns one of the WAIT_* constants.")
      .def("unlink", [](fl::HostFence &f) { f.memory().unlink(); })
      .def("close", &fl::HostFence::close);

#ifndef _WIN32
  mod.def(
      "recv_message",
      [](int fd, std::size_t max_bytes, std::size_t max_fds, std::int64_t spin_ns, bool block,
         int pidfd)
          -> py::typing::Optional<py::typing::Tuple<
              py::typing::Optional<py::bytes>, py::typing::List<py::int_>, py::typing::Optional<py::str>>> {
        fl::Message m;
        // A message already there is taken with the GIL held: releasing and taking it back
        // costs more than the receive when other threads want it.
        if (!fl::try_recv_message(fd, max_bytes, max_fds, m)) {
          py::gil_scoped_release release;
          m = fl::recv_message(fd, max_bytes, max_fds, spin_ns, block, pidfd);
        }
        if (m.pending) return py::none();
        py::object problem = py::none();
        if (!m.problem.empty()) problem = py::str(m.problem);
        if (m.eof) return py::make_tuple(py::none(), py::list(), problem);
        return py::make_tuple(py::bytes(m.data), py::cast(m.fds), problem);
      },
      py::arg("fd"), py::arg("max_bytes"), py::arg("max_fds"), py::arg("spin_ns") = 0,
      py::arg("block") = true, py::arg("pidfd") = -1,
      "Receives one SOCK_SEQPACKET message: (data, fds, problem). The caller owns the fds; "
      "(None, [], None) at EOF, and once the process behind pidfd (-1: none; a PeerProcess's) "
      "has exited while the receive blocked. A message over max_bytes or max_fds has its fds "
      "closed, data holds its first bytes and problem says what was wrong. A message already "
      "there is taken at once; else, with the GIL released, it spins up to spin_ns, then "
      "blocks; without block it returns None instead of blocking.");
  mod.def(
      "send_message",
      [](int fd, const py::bytes &data, std::int64_t timeout_ms, int pidfd) {
        char *p = nullptr;
        Py_ssize_t n = 0;
        if (PyBytes_AsStringAndSize(data.ptr(), &p, &n) != 0) throw py::error_already_set();
        // A send that does not wait keeps the GIL (the common case); a full socket waits
        // without it.
        int err = fl::try_send_message(fd, p, static_cast<std::size_t>(n));
        if (err == EAGAIN) {
          py::gil_scoped_release release;
          err = fl::send_waiting(fd, p, static_cast<std::size_t>(n), pidfd,
                                 timeout_ms < 0 ? -1 : timeout_ms * 1000000);
        }
        if (err == ETIMEDOUT) {
          const py::tuple args = py::make_tuple(
              ETIMEDOUT,
              "the peer did not take the message within " + std::to_string(timeout_ms) + " ms");
          PyErr_SetObject(PyExc_TimeoutError, args.ptr());
          throw py::error_already_set();
        }
        if (err != 0) {
          errno = err;
          PyErr_SetFromErrno(PyExc_OSError);
          throw py::error_already_set();
        }
      },
      py::arg("fd"), py::arg("data"), py::arg("timeout_ms") = -1, py::arg("pidfd") = -1,
      "Sends one SOCK_SEQPACKET message. Waits with the GIL released only while the socket is "
      "full: for at most timeout_ms (-1: no limit; then TimeoutError, errno ETIMEDOUT) and only "
      "while the process behind pidfd (-1: none) lives (else OSError ESRCH). Raises OSError "
      "when the socket failed (the peer closed its end).");
  mod.def(
      "purge_messages",
      [](int fd) {
        fl::Purged p;
        {
          py::gil_scoped_release release;
          p = fl::purge_messages(fd);
        }
        return py::make_tuple(p.messages, p.fds);
      },
      py::arg("fd"),
      "Shuts a connection's socket down and drops what is queued on it, closing every fd those "
      "messages carried: (messages, fds) dropped. The socket itself stays open.");
  py::class_<fl::PeerProcess, std::shared_ptr<fl::PeerProcess>>(
      mod, "PeerProcess",
      "The process that connected to a Unix socket, watched through a pidfd (SO_PEERPIDFD, "
      "else pidfd_open of the SO_PEERCRED pid); liveness says how, or why only the socket's "
      "hangup is watched. Owns the pidfd: close() (safe twice) closes it.")
      .def(py::init<int>(), py::arg("sock"))
      .def_property_readonly("pidfd", &fl::PeerProcess::pidfd, "-1 when not watched or closed")
      .def_property_readonly("pid", &fl::PeerProcess::pid)
      .def_property_readonly("liveness", &fl::PeerProcess::liveness)
      .def("exited", &fl::PeerProcess::exited,
           "True once the process has exited (never waits).")
      .def("close", &fl::PeerProcess::close);
#endif

  mod.def(
      "mapping_stats",
      [] {
        const auto s = fl::fault_guard::stats();
        return py::make_tuple(s.ranges, s.bytes, s.faults);
      },
      "(mappings, bytes, faults): host shared-memory mappings held now, their bytes, and the "
      "SIGBUS faults absorbed since start because a mapped object shrank (POSIX).");

  fl::bind_cuda(mod);
  fl::bind_d3d12(mod);
  fl::bind_run_metrics(mod);
  fl::bind_adaptive_spin(mod);
  fl::bind_cpu_runs(mod);
  fl::bind_host_runs(mod);
  fl::bind_trace(mod);
#ifndef _WIN32
  fl::bind_acceptor(mod);
  fl::bind_client_runs(mod);
#endif
#ifdef _WIN32
  fl::win32::bind_pipe(mod);
#endif
}
