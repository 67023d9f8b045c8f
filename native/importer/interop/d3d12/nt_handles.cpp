#include "nt_handles.h"

#include <cstdio>

#include "core/errors.h"

namespace fl::nt {

namespace {

struct Role {
  const char *role;
  const char *type;
  const char *what;
};

// D3D12's shared NT handles name objects of the display kernel (dxgkrnl): a heap or committed
// resource is a DxgkSharedResource, a shared fence a DxgkSharedSyncObject.
constexpr Role kRoles[] = {
    {"section", "Section", "a section (file mapping)"},
    {"wake", "Semaphore", "the fence's wake semaphore"},
    {"d3d12_heap", "DxgkSharedResource", "a shared D3D12 heap"},
    {"d3d12_resource", "DxgkSharedResource", "a shared D3D12 resource"},
    {"d3d12_fence", "DxgkSharedSyncObject", "a shared D3D12 fence"},
};

const Role &find(const std::string &role) {
  for (const Role &r : kRoles)
    if (role == r.role) return r;
  throw Error(Code::InvalidArgument, "no handle role '" + role + "'");
}

std::string hex(std::uint64_t v) {
  char buf[24];
  std::snprintf(buf, sizeof buf, "0x%llx", static_cast<unsigned long long>(v));
  return buf;
}

}  // namespace

std::string expected_object_type(const std::string &role) { return find(role).type; }

std::string describe_role(const std::string &role) { return find(role).what; }

void check_object_type(const std::string &role, const std::string &actual, std::uint64_t handle) {
  const Role &r = find(role);
  if (actual == r.type) return;
  throw Error(Code::InvalidArgument, "the renderer's handle " + hex(handle) + " is a " +
                                         (actual.empty() ? std::string("object of unknown type")
                                                         : "'" + actual + "' object") +
                                         ", not " + r.what + " ('" + r.type + "')");
}

}  // namespace fl::nt
