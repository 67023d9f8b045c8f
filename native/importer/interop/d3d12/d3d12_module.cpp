// Python bindings of the D3D12 decisions (d3d12_interop.h), registered by module.cpp. They are
// pure functions of their arguments, so tests check every rule on any platform.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <map>
#include <string>
#include <utility>

#include "interop/cuda/cuda_d3d12.h"
#include "d3d12_interop.h"
#include "nt_handles.h"

namespace py = pybind11;

namespace fl {

namespace {

py::str utf16_to_str(const std::u16string &s) {
  return py::reinterpret_steal<py::str>(PyUnicode_DecodeUTF16(
      reinterpret_cast<const char *>(s.data()), static_cast<Py_ssize_t>(s.size() * 2), "strict",
      nullptr));
}

py::object name_or_none(const std::u16string &s) {
  if (s.empty()) return py::none();
  return utf16_to_str(s);
}

py::object handle_or_none(std::uint64_t h) {
  if (h == 0) return py::none();
  return py::int_(h);
}

std::pair<bool, std::string> capability_pair(const d3d12::Capability &c) {
  return {c.supported, c.reason};
}

// Typed as dict[str, Any] in the generated stub.
using Fields = std::map<std::string, py::object>;

}  // namespace

d3d12::MemoryRequest d3d12_memory_request(const std::string &kind,
                                          std::optional<std::string> name,
                                          std::optional<std::uint64_t> handle, std::uint64_t size,
                                          std::uint64_t offset, std::uint64_t mapped_size,
                                          std::optional<bool> dedicated) {
  d3d12::MemoryRequest r;
  r.kind = kind;
  r.source.name = std::move(name);
  r.source.handle = handle;
  r.size = size;
  r.offset = offset;
  r.mapped_size = mapped_size;
  r.dedicated = dedicated;
  return r;
}

void bind_d3d12(py::module_ &mod) {
  mod.def(
      "d3d12_memory_descriptor",
      [](const std::string &kind, std::optional<std::string> name,
         std::optional<std::uint64_t> handle, std::uint64_t size, std::uint64_t offset,
         std::uint64_t mapped_size, std::optional<bool> dedicated) {
        const d3d12::MemoryDescriptor d = d3d12::memory_descriptor(d3d12_memory_request(
            kind, std::move(name), handle, size, offset, mapped_size, dedicated));
        Fields out;
        out["handle_type"] = py::int_(d.handle_type);
        out["flags"] = py::int_(d.flags);
        out["size"] = py::int_(d.size);
        out["name"] = name_or_none(d.name);
        out["handle"] = handle_or_none(d.handle);
        out["offset"] = py::int_(d.offset);
        out["mapped_size"] = py::int_(d.mapped_size);
        return out;
      },
      py::arg("kind"), py::arg("name") = py::none(), py::arg("handle") = py::none(),
      py::arg("size") = 0, py::arg("offset") = 0, py::arg("mapped_size") = 0,
      py::arg("dedicated") = py::none(),
      "The CUDA external-memory descriptor a D3D12 memory request becomes (InvalidArgument "
      "when it breaks a rule). Pure: nothing is imported.");
  mod.def(
      "d3d12_fence_descriptor",
      [](std::optional<std::string> name, std::optional<std::uint64_t> handle) {
        d3d12::Source src;
        src.name = std::move(name);
        src.handle = handle;
        const d3d12::SemaphoreDescriptor d = d3d12::fence_descriptor(src);
        Fields out;
        out["handle_type"] = py::int_(d.handle_type);
        out["flags"] = py::int_(d.flags);
        out["name"] = name_or_none(d.name);
        out["handle"] = handle_or_none(d.handle);
        return out;
      },
      py::arg("name") = py::none(), py::arg("handle") = py::none(),
      "The CUDA external-semaphore descriptor a d3d12_fence request becomes. Pure.");
  mod.def("d3d12_shared_name",
          [](const std::string &name) { return utf16_to_str(d3d12::shared_name(name)); },
          py::arg("name"), "The name as the driver receives it; InvalidArgument names the rule.");
  mod.def("d3d12_luid_from_bytes",
          [](const py::bytes &raw) { return d3d12::luid_from_bytes(std::string(raw)); },
          py::arg("raw"));
  mod.def("d3d12_luid_text", &d3d12::luid_text, py::arg("luid"));
  mod.def(
      "d3d12_select_device",
      [](const std::vector<std::tuple<int, std::string, std::optional<std::uint64_t>>> &devices,
         std::uint64_t luid) {
        std::vector<d3d12::LuidDevice> listed;
        for (const auto &[ordinal, name, device_luid] : devices) {
          d3d12::LuidDevice d;
          d.ordinal = ordinal;
          d.name = name;
          d.luid = device_luid;
          listed.push_back(d);
        }
        return d3d12::select_by_luid(listed, luid);
      },
      py::arg("devices"), py::arg("luid"),
      "devices: (ordinal, name, luid or None); the ordinal whose LUID is luid. Pure.");
  mod.def(
      "d3d12_capability_for",
      [](bool windows, bool driver_loaded, const std::string &driver_reason, bool has_luid_query,
         int device_count) {
        d3d12::Platform p;
        p.windows = windows;
        p.driver_loaded = driver_loaded;
        p.driver_reason = driver_reason;
        p.has_luid_query = has_luid_query;
        p.device_count = device_count;
        return capability_pair(d3d12::capability(p));
      },
      py::arg("windows"), py::arg("driver_loaded"), py::arg("driver_reason"),
      py::arg("has_luid_query"), py::arg("device_count"),
      "(supported, reason) for the given platform facts. Pure.");
  mod.def("nt_handle_value", &d3d12::nt_handle, py::arg("value"),
          "A handle value a renderer may send (not 0, not a pseudo-handle, 32 bits); "
          "InvalidArgument names the rule. Pure.");
  mod.def("nt_object_type", &nt::expected_object_type, py::arg("role"),
          "The kernel object type a handle passed in `role` (section, wake, d3d12_heap, "
          "d3d12_resource, d3d12_fence) must have. Pure.");
  mod.def("nt_check_object_type", &nt::check_object_type, py::arg("role"), py::arg("actual"),
          py::arg("handle"),
          "InvalidArgument, naming the handle and both types, unless `actual` is the type "
          "`role` needs. Pure.");
  mod.def("d3d12_close_handle", &cuda::close_nt_handle, py::arg("handle"),
          "Closes an NT handle received for an import that did not happen (no-op off Windows).");
  mod.def("d3d12_capability", [] { return capability_pair(cuda::d3d12_capability()); },
          "(supported, reason) for this process: false with the reason except on Windows with "
          "an NVIDIA driver and a CUDA device.");
}

}  // namespace fl
