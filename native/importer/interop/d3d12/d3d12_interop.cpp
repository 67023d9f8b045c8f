#include "d3d12_interop.h"

#include <cstdio>

#include "core/errors.h"

namespace fl::d3d12 {

namespace {

[[noreturn]] void invalid(const std::string &message) {
  throw Error(Code::InvalidArgument, message);
}

// Strict UTF-8 to UTF-16: overlong forms, surrogates and values past U+10FFFF are refused, so a
// name reaches the driver exactly as the renderer spelled it or not at all.
std::u16string to_utf16(const std::string &in) {
  std::u16string out;
  std::size_t i = 0;
  while (i < in.size()) {
    const auto b0 = static_cast<unsigned char>(in[i]);
    std::uint32_t cp = 0;
    std::size_t len = 0;
    if (b0 < 0x80) {
      cp = b0;
      len = 1;
    } else if ((b0 & 0xE0) == 0xC0) {
      cp = b0 & 0x1F;
      len = 2;
    } else if ((b0 & 0xF0) == 0xE0) {
      cp = b0 & 0x0F;
      len = 3;
    } else if ((b0 & 0xF8) == 0xF0) {
      cp = b0 & 0x07;
      len = 4;
    } else {
      invalid("the shared name is not valid UTF-8");
    }
    if (i + len > in.size()) invalid("the shared name is not valid UTF-8");
    for (std::size_t k = 1; k < len; ++k) {
      const auto b = static_cast<unsigned char>(in[i + k]);
      if ((b & 0xC0) != 0x80) invalid("the shared name is not valid UTF-8");
      cp = (cp << 6) | (b & 0x3F);
    }
    static const std::uint32_t min_for_len[] = {0, 0, 0x80, 0x800, 0x10000};
    if (cp < min_for_len[len] || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF))
      invalid("the shared name is not valid UTF-8");
    if (cp >= 0x10000) {
      cp -= 0x10000;
      out.push_back(static_cast<char16_t>(0xD800 + (cp >> 10)));
      out.push_back(static_cast<char16_t>(0xDC00 + (cp & 0x3FF)));
    } else {
      out.push_back(static_cast<char16_t>(cp));
    }
    i += len;
  }
  return out;
}

bool starts_with(const std::u16string &s, const char *prefix) {
  std::size_t i = 0;
  for (; prefix[i]; ++i) {
    if (i >= s.size() || s[i] != static_cast<char16_t>(prefix[i])) return false;
  }
  return true;
}

std::string hex64(std::uint64_t v) {
  char buf[24];
  std::snprintf(buf, sizeof(buf), "0x%llx", static_cast<unsigned long long>(v));
  return buf;
}

// Exactly one of name and handle, as CUDA requires for every D3D12 handle type.
void check_source(const Source &source, const std::string &what) {
  if (source.name.has_value() == source.handle.has_value())
    invalid(what + " needs exactly one of name (given to ID3D12Device::CreateSharedHandle) or "
                   "handle (an NT handle sent over the pipe)" +
            (source.name ? ", not both" : ""));
}

}  // namespace

std::u16string shared_name(const std::string &utf8) {
  if (utf8.empty()) invalid("the shared name is empty");
  if (utf8.find('\0') != std::string::npos) invalid("the shared name contains a NUL character");
  std::u16string name = to_utf16(utf8);
  if (name.size() > kMaxNameUnits)
    invalid("the shared name is " + std::to_string(name.size()) +
            " UTF-16 units long; CreateSharedHandle takes at most " +
            std::to_string(kMaxNameUnits) + " (MAX_PATH with its NUL)");
  std::size_t rest = 0;
  if (starts_with(name, "Global\\"))
    rest = 7;
  else if (starts_with(name, "Local\\"))
    rest = 6;
  if (rest == name.size())
    invalid("the shared name '" + utf8 + "' has a namespace prefix but no name after it");
  for (std::size_t i = rest; i < name.size(); ++i) {
    if (name[i] == u'\\')
      invalid("the shared name '" + utf8 +
              "' contains a backslash: only a leading Global\\ or Local\\ prefix may have one");
  }
  return name;
}

std::uint64_t nt_handle(std::uint64_t value) {
  if (value == 0) invalid("the NT handle is 0 (NULL)");
  // 64-bit Windows keeps 32 significant bits in a handle and sign-extends it, which makes the
  // pseudo-handles (current process, current thread, INVALID_HANDLE_VALUE) the values past 2^63.
  if (value >= 0xFFFFFFFF80000000ULL)
    invalid("the NT handle " + hex64(value) +
            " is a pseudo-handle or INVALID_HANDLE_VALUE, not a shared object");
  if (value > 0xFFFFFFFFULL)
    invalid("the NT handle " + hex64(value) + " does not fit the 32 bits a handle has");
  return value;
}

MemoryDescriptor memory_descriptor(const MemoryRequest &request) {
  MemoryDescriptor d;
  const bool heap = request.kind == "d3d12_heap";
  if (!heap && request.kind != "d3d12_resource")
    invalid("'" + request.kind + "' is not a D3D12 memory kind (d3d12_heap or d3d12_resource)");
  check_source(request.source, request.kind + " memory");
  d.handle_type = heap ? kMemoryHandleTypeD3D12Heap : kMemoryHandleTypeD3D12Resource;
  // CUDA requires CUDA_EXTERNAL_MEMORY_DEDICATED for a committed resource; a heap is never one.
  const bool dedicated = request.dedicated.value_or(!heap);
  if (heap && dedicated)
    invalid("d3d12_heap memory cannot be dedicated: a heap is shared by placed resources (send "
            "dedicated false, or import the committed resource as d3d12_resource)");
  if (!heap && !dedicated)
    invalid("d3d12_resource memory is a committed resource, which CUDA imports only with the "
            "dedicated flag (send dedicated true or leave it out)");
  d.flags = dedicated ? kExternalMemoryDedicated : 0;
  if (request.size == 0)
    invalid(request.kind + " memory needs size_bytes: " +
            (heap ? "D3D12_HEAP_DESC.SizeInBytes of the heap"
                  : "the resource's allocation size "
                    "(ID3D12Device::GetResourceAllocationInfo(...).SizeInBytes)"));
  d.size = request.size;
  if (request.offset >= request.size)
    invalid("offset_bytes " + std::to_string(request.offset) + " is not inside the " +
            std::to_string(request.size) + "-byte " + request.kind);
  const std::uint64_t room = request.size - request.offset;
  d.offset = request.offset;
  d.mapped_size = request.mapped_size == 0 ? room : request.mapped_size;
  if (d.mapped_size > room)
    invalid("the mapped range [" + std::to_string(request.offset) + ", +" +
            std::to_string(request.mapped_size) + ") ends past the " +
            std::to_string(request.size) + "-byte " + request.kind);
  if (request.source.name)
    d.name = shared_name(*request.source.name);
  else
    d.handle = nt_handle(*request.source.handle);
  return d;
}

SemaphoreDescriptor fence_descriptor(const Source &source) {
  check_source(source, "a d3d12_fence");
  SemaphoreDescriptor d;
  d.handle_type = kSemaphoreHandleTypeD3D12Fence;
  d.flags = 0;  // reserved by CUDA, must be zero
  if (source.name)
    d.name = shared_name(*source.name);
  else
    d.handle = nt_handle(*source.handle);
  return d;
}

std::uint64_t luid_from_bytes(const std::string &raw8) {
  if (raw8.size() != 8)
    invalid("a LUID is 8 bytes, not " + std::to_string(raw8.size()));
  std::uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | static_cast<unsigned char>(raw8[i]);
  return v;
}

std::string luid_text(std::uint64_t luid) {
  char buf[24];
  std::snprintf(buf, sizeof(buf), "%08lx:%08lx", static_cast<unsigned long>(luid >> 32),
                static_cast<unsigned long>(luid & 0xFFFFFFFFULL));
  return buf;
}

int select_by_luid(const std::vector<LuidDevice> &devices, std::uint64_t luid) {
  std::string seen;
  for (const LuidDevice &d : devices) {
    if (d.luid && *d.luid == luid) return d.ordinal;
    seen += (seen.empty() ? "" : "; ") + ("cuda:" + std::to_string(d.ordinal)) + " " + d.name +
            " LUID " + (d.luid ? luid_text(*d.luid) : std::string("none (not a WDDM device)"));
  }
  invalid("no CUDA device here has the renderer's adapter LUID " + luid_text(luid) +
          " (the service imports on the GPU that made the heap and fence; " +
          (seen.empty() ? std::string("this machine has no CUDA device")
                        : "CUDA devices here: " + seen) +
          ")");
}

Capability capability(const Platform &p) {
  if (!p.windows)
    return {false, "D3D12 shared handles exist only on Windows"};
  if (!p.driver_loaded)
    return {false, p.driver_reason.empty() ? "the NVIDIA driver (nvcuda.dll) is not loaded"
                                           : p.driver_reason};
  if (!p.has_luid_query)
    return {false, "the NVIDIA driver lacks cuDeviceGetLuid (driver too old to match adapters)"};
  if (p.device_count <= 0) return {false, "the NVIDIA driver sees no CUDA device"};
  return {true, ""};
}

}  // namespace fl::d3d12
