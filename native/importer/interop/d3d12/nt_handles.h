// Handles a renderer passes over the Windows pipe instead of names (docs/windows.md, "Handles").
//
// The renderer sends a handle value as it is in its own process; the service duplicates it
// from the identified pipe client (platform/win32/pipe.cpp) and, before using it, checks that
// the object is of the type the request's role needs: a section for memory or a fence page, a
// semaphore for a fence's wake object, the D3D12 kernel types for D3D12 objects. The rules are
// pure and portable, so Linux and Wine test them alike.
#pragma once

#include <cstdint>
#include <string>

namespace fl::nt {

// The kernel object type name (NtQueryObject's ObjectTypeInformation) an object passed in
// `role` must have: "section" -> "Section", "wake" -> "Semaphore", "d3d12_heap" and
// "d3d12_resource" -> "DxgkSharedResource", "d3d12_fence" -> "DxgkSharedSyncObject".
// InvalidArgument for an unknown role.
std::string expected_object_type(const std::string &role);

// InvalidArgument, naming the handle, what it is and what the role needs, unless `actual` is
// the expected type.
void check_object_type(const std::string &role, const std::string &actual, std::uint64_t handle);

// What a role is called in messages ("the section", "the fence's wake semaphore", ...).
std::string describe_role(const std::string &role);

}  // namespace fl::nt
