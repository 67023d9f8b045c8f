// Windows host memory: file mappings (sections) by name (Local\..., Global\...) or by a handle
// duplicated into this process. A section cannot shrink while mapped, so there is nothing like
// POSIX's truncation check (or relA's SIGBUS guard) to do here.
#ifndef WIN32_LEAN_AND_MEAN
#define WIN32_LEAN_AND_MEAN
#endif
#include <windows.h>

#include <string>

#include "core/errors.h"
#include "interop/host/host_memory.h"
#include "win32_util.h"

namespace fl {

void check_shm_name(const std::string &name) {
  static const char *const prefixes[] = {"Local\\", "Global\\"};
  std::string rest;
  for (const char *p : prefixes) {
    const std::string pre(p);
    if (name.size() >= pre.size() && name.compare(0, pre.size(), pre) == 0) {
      rest = name.substr(pre.size());
      break;
    }
    // Windows matches the namespace keyword case-sensitively: "local\x" is not Local\x.
    if (name.size() >= pre.size() && win32::iequals(name.substr(0, pre.size()), pre))
      throw Error(Code::InvalidArgument,
                  "the namespace prefix of '" + name + "' must be written exactly '" + pre +
                      "' (Windows object namespaces are case-sensitive)");
  }
  if (rest.empty()) {
    if (name.size() >= 8 && win32::iequals(name.substr(0, 8), "Session\\"))
      throw Error(Code::InvalidArgument,
                  "'Session\\' names are reserved by Windows; use Local\\NAME (this session) "
                  "or Global\\NAME");
    throw Error(Code::InvalidArgument,
                "Windows section names are Local\\NAME or Global\\NAME, got '" + name + "'");
  }
  // The fence's wake object appends ".wake"; the whole must stay within MAX_PATH.
  if (rest.size() > 240)
    throw Error(Code::InvalidArgument, "section names hold at most 240 characters after the prefix");
  for (char c : rest) {
    if (c == '\\')
      throw Error(Code::InvalidArgument,
                  "a section name holds no '\\' after its Local\\ or Global\\ prefix");
    if (static_cast<unsigned char>(c) < 0x20)
      throw Error(Code::InvalidArgument, "a section name holds no control characters");
  }
}

std::shared_ptr<Mapping> Mapping::from_fd(int, std::uint64_t, std::uint64_t, bool) {
  throw Error(Code::Unsupported, "file descriptors are not shared memory on Windows");
}

std::shared_ptr<Mapping> Mapping::from_handle(NativeHandle handle, std::uint64_t offset,
                                              std::uint64_t size, bool writable) {
  win32::HandleGuard guard{reinterpret_cast<HANDLE>(handle)};
  if (guard.h == nullptr || guard.h == INVALID_HANDLE_VALUE)
    throw Error(Code::InvalidArgument, "invalid section handle");
  const DWORD access = FILE_MAP_READ | (writable ? FILE_MAP_WRITE : 0);
  // The whole section is mapped once; the import is a window into it.
  void *base = ::MapViewOfFile(guard.h, access, 0, 0, 0);
  if (base == nullptr) win32::throw_last("MapViewOfFile", ::GetLastError());
  MEMORY_BASIC_INFORMATION info{};
  if (::VirtualQuery(base, &info, sizeof info) == 0) {
    const DWORD err = ::GetLastError();
    ::UnmapViewOfFile(base);
    win32::throw_last("VirtualQuery", err);
  }
  // The view's size is the section's size rounded up to whole pages.
  const auto object_size = static_cast<std::uint64_t>(info.RegionSize);
  try {
    size = mapped_range(offset, size, object_size, "section");
  } catch (...) {
    ::UnmapViewOfFile(base);
    throw;
  }
  std::shared_ptr<Mapping> m(new Mapping());
  m->map_base_ = base;
  m->map_length_ = static_cast<std::size_t>(object_size);
  m->data_ = static_cast<std::uint8_t *>(base) + offset;
  m->size_ = static_cast<std::size_t>(size);
  m->handle_ = reinterpret_cast<NativeHandle>(guard.release());
  m->writable_ = writable;
  m->end_in_object_ = offset + size;
  m->sealed_ = true;
  return m;
}

void Mapping::check_size() const {}

Mapping::~Mapping() {
  if (map_base_) ::UnmapViewOfFile(map_base_);
  if (handle_ != -1) ::CloseHandle(reinterpret_cast<HANDLE>(handle_));
}

std::shared_ptr<HostMemory> HostMemory::open_shm(const std::string &name, std::uint64_t offset,
                                                 std::uint64_t size, bool writable) {
  check_shm_name(name);
  const DWORD access = FILE_MAP_READ | (writable ? FILE_MAP_WRITE : 0);
  HANDLE h = ::OpenFileMappingW(access, FALSE, win32::widen(name).c_str());
  if (h == nullptr) win32::throw_last("OpenFileMappingW " + name, ::GetLastError());
  auto mem = std::make_shared<HostMemory>();
  mem->mapping_ = Mapping::from_handle(reinterpret_cast<NativeHandle>(h), offset, size, writable);
  mem->name_ = name;
  return mem;
}

std::shared_ptr<HostMemory> HostMemory::from_fd(int fd, std::uint64_t offset, std::uint64_t size,
                                                bool writable) {
  auto mem = std::make_shared<HostMemory>();
  mem->mapping_ = Mapping::from_fd(fd, offset, size, writable);
  return mem;
}

std::shared_ptr<HostMemory> HostMemory::from_handle(NativeHandle handle, std::uint64_t offset,
                                                    std::uint64_t size, bool writable) {
  auto mem = std::make_shared<HostMemory>();
  mem->mapping_ = Mapping::from_handle(handle, offset, size, writable);
  return mem;
}

namespace {

HANDLE create_section(const std::string *name, std::uint64_t size) {
  if (size == 0) throw Error(Code::InvalidArgument, "size must be positive");
  const std::wstring wname = name ? win32::widen(*name) : std::wstring();
  // NULL security attributes: the default DACL of this process's token (this user only).
  HANDLE h = ::CreateFileMappingW(INVALID_HANDLE_VALUE, nullptr, PAGE_READWRITE,
                                  static_cast<DWORD>(size >> 32),
                                  static_cast<DWORD>(size & 0xffffffffu),
                                  name ? wname.c_str() : nullptr);
  const DWORD err = ::GetLastError();
  if (h == nullptr) win32::throw_last("CreateFileMappingW " + (name ? *name : std::string()), err);
  if (err == ERROR_ALREADY_EXISTS) {
    // Create-on-existing succeeds on Windows and hands back the other process's object: a
    // squatter could read or feed our frames. Refuse it.
    ::CloseHandle(h);
    throw Error(Code::Conflict, "a section named '" + *name +
                                    "' already exists (another process holds the name); pick a "
                                    "fresh name");
  }
  return h;
}

}  // namespace

std::shared_ptr<HostMemory> HostMemory::create_shm(const std::string &name, std::uint64_t size) {
  check_shm_name(name);
  HANDLE h = create_section(&name, size);
  auto mem = std::make_shared<HostMemory>();
  mem->mapping_ = Mapping::from_handle(reinterpret_cast<NativeHandle>(h), 0, size, true);
  mem->name_ = name;
  mem->origin_ = Origin::CreatedShm;
  return mem;
}

std::shared_ptr<HostMemory> HostMemory::create_memfd(const std::string &, std::uint64_t size) {
  HANDLE h = create_section(nullptr, size);
  auto mem = std::make_shared<HostMemory>();
  mem->mapping_ = Mapping::from_handle(reinterpret_cast<NativeHandle>(h), 0, size, true);
  mem->origin_ = Origin::CreatedMemfd;
  return mem;
}

// A Windows name dies with its last handle: nothing to remove, but only the creator may ask.
void HostMemory::unlink() {
  if (origin_ != Origin::CreatedShm)
    throw Error(Code::Conflict, "only the creator of a named object unlinks it");
  unlinked_ = true;
}

}  // namespace fl
