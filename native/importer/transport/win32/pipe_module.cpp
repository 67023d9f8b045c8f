// Python bindings of the Windows named-pipe transport (fenceline._native.Pipe*).
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include "pipe.h"

namespace py = pybind11;

namespace fl::win32 {

void bind_pipe(py::module_ &mod) {
  mod.def("current_user_sid", &current_user_sid, "This process's user SID (S-1-5-...).");
  mod.def("object_type_name", &object_type_name, py::arg("handle"),
          "The kernel object type of a handle of this process ('Section', 'Semaphore', ...).");
  mod.def("tcp_client_sid", &tcp_client_sid, py::arg("client_ip"), py::arg("client_port"),
          py::arg("server_port"),
          "The user SID of the process holding the client end of a loopback IPv4 connection to "
          "server_port, or None.");

  py::class_<PipeConnection, std::shared_ptr<PipeConnection>>(mod, "PipeConnection")
      .def_static("connect", &PipeConnection::connect, py::arg("name"),
                  py::arg("timeout_ms") = 5000, py::call_guard<py::gil_scoped_release>(),
                  "Connects to a service's named pipe (message mode).")
      .def(
          "recv",
          [](PipeConnection &c, std::size_t max_bytes) -> py::object {
            std::optional<std::string> m;
            {
              py::gil_scoped_release release;
              m = c.recv(max_bytes);
            }
            if (!m) return py::none();
            return py::bytes(*m);
          },
          py::arg("max_bytes"), "One message, or None once the peer closed.")
      .def(
          "recv_frame",
          [](PipeConnection &c, std::size_t max_bytes) -> py::object {
            std::optional<std::string> m;
            bool oversized = false;
            {
              py::gil_scoped_release release;
              m = c.recv(max_bytes, &oversized);
            }
            if (!m) return py::none();
            return py::make_tuple(py::bytes(*m), oversized);
          },
          py::arg("max_bytes"),
          "(message, oversized), or None once the peer closed: a message over max_bytes is "
          "read to its end and returned cut to its first max_bytes, with oversized True.")
      .def(
          "send",
          [](PipeConnection &c, py::bytes data) {
            std::string s = data;
            py::gil_scoped_release release;
            return c.send(s);
          },
          py::arg("data"))
      .def("shutdown", &PipeConnection::shutdown)
      .def("close", &PipeConnection::close)
      .def("peer_gone", &PipeConnection::peer_gone,
           "True once the peer closed its end or its process exited; never blocks.")
      .def_property_readonly("peer_pid", &PipeConnection::peer_pid)
      .def("peer_user_sid", &PipeConnection::peer_user_sid)
      .def("duplicate_from_peer", &PipeConnection::duplicate_from_peer, py::arg("handle"),
           py::arg("role"),
           "The peer process's handle, duplicated into this one and checked to be of the "
           "object type `role` needs (section, wake, d3d12_heap, d3d12_resource, d3d12_fence); "
           "the caller owns it.");

  py::class_<PipeListener, std::shared_ptr<PipeListener>>(mod, "PipeListener")
      .def(py::init<const std::string &, const std::string &>(), py::arg("name"),
           py::arg("sddl"))
      .def("accept", &PipeListener::accept, py::call_guard<py::gil_scoped_release>(),
           "Blocks until a client connects; None once close() ran.")
      .def("close", &PipeListener::close)
      .def_property_readonly("name", &PipeListener::name);
}

}  // namespace fl::win32
