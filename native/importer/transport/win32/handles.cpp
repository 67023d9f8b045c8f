// Handles a pipe client passes instead of names (docs/windows.md, "Handles"): duplicated from
// the identified peer process, then checked for the object type their role needs
// (nt_handles.h) before anything uses them.
#ifndef WIN32_LEAN_AND_MEAN
#define WIN32_LEAN_AND_MEAN
#endif
#include <windows.h>
#include <winternl.h>

#include <cstring>
#include <vector>

#include "interop/d3d12/d3d12_interop.h"
#include "core/errors.h"
#include "interop/d3d12/nt_handles.h"
#include "pipe.h"
#include "platform/win32/win32_util.h"

namespace fl::win32 {

namespace {

// NtQueryObject is ntdll's; looked up at run time so the module links against kernel32 only.
using NtQueryObjectFn = LONG(NTAPI *)(HANDLE, OBJECT_INFORMATION_CLASS, PVOID, ULONG, PULONG);

NtQueryObjectFn nt_query_object() {
  static const NtQueryObjectFn fn = [] {
    HMODULE ntdll = ::GetModuleHandleW(L"ntdll.dll");
    FARPROC p = ntdll ? ::GetProcAddress(ntdll, "NtQueryObject") : nullptr;
    NtQueryObjectFn f = nullptr;
    static_assert(sizeof f == sizeof p, "function pointers have one size");
    std::memcpy(&f, &p, sizeof f);  // FARPROC to the real signature, without a cast warning
    return f;
  }();
  return fn;
}

}  // namespace

std::string object_type_name(std::intptr_t handle) {
  NtQueryObjectFn query = nt_query_object();
  if (query == nullptr) throw Error(Code::OsError, "ntdll has no NtQueryObject");
  std::vector<unsigned char> buf(1024);
  ULONG needed = 0;
  LONG status = query(reinterpret_cast<HANDLE>(handle), ObjectTypeInformation, buf.data(),
                      static_cast<ULONG>(buf.size()), &needed);
  if (status < 0 && needed > buf.size()) {
    buf.resize(needed);
    status = query(reinterpret_cast<HANDLE>(handle), ObjectTypeInformation, buf.data(),
                   static_cast<ULONG>(buf.size()), &needed);
  }
  if (status < 0) return std::string();  // unknown: the role check names it so
  const auto *info = reinterpret_cast<const PUBLIC_OBJECT_TYPE_INFORMATION *>(buf.data());
  const UNICODE_STRING &name = info->TypeName;
  std::string out;
  for (USHORT i = 0; i < name.Length / sizeof(WCHAR); ++i) {
    const WCHAR c = name.Buffer[i];
    out.push_back(c < 0x80 ? static_cast<char>(c) : '?');  // kernel type names are ASCII
  }
  return out;
}

std::intptr_t PipeConnection::duplicate_from_peer(std::uint64_t handle,
                                                  const std::string &role) const {
  nt::expected_object_type(role);  // an unknown role is our bug: before touching the peer
  const std::uint64_t value = d3d12::nt_handle(handle);
  pinned_peer();  // the identified process keeps its id while it is held (pipe.h)
  HANDLE proc = ::OpenProcess(PROCESS_DUP_HANDLE, FALSE, peer_pid());
  if (!proc) throw_last("OpenProcess (peer, PROCESS_DUP_HANDLE)", ::GetLastError());
  HANDLE mine = nullptr;
  const BOOL ok = ::DuplicateHandle(proc, reinterpret_cast<HANDLE>(static_cast<std::uintptr_t>(value)),
                                    ::GetCurrentProcess(), &mine, 0, FALSE, DUPLICATE_SAME_ACCESS);
  const DWORD err = ::GetLastError();
  ::CloseHandle(proc);
  if (!ok) {
    if (err == ERROR_INVALID_HANDLE)
      throw Error(Code::InvalidArgument, "the renderer has no handle " + std::to_string(value) +
                                             " (" + nt::describe_role(role) +
                                             "): send a handle value of the renderer's own "
                                             "process, as CreateFileMapping or CreateSharedHandle "
                                             "returned it");
    throw_last("DuplicateHandle", err);
  }
  HandleGuard guard{mine};
  nt::check_object_type(role, object_type_name(reinterpret_cast<std::intptr_t>(mine)), value);
  return reinterpret_cast<std::intptr_t>(guard.release());
}

}  // namespace fl::win32
