// The D3D12 path's decisions, checked as inputs and outputs without a GPU: the same rules
// tests/test_d3d12.py checks through _native, built natively (Linux) and with mingw-w64 (run
// under Wine by .ci/d3d12). Then the live capability answer of this process, and, on Windows,
// that an NT handle given to a refused import is closed.
//
//   d3d12_check [--expect-unsupported SUBSTRING]
//
// Exit status 0 when every check passed and the capability answer is false with a reason that
// contains SUBSTRING.
#ifdef _WIN32
#ifndef NOMINMAX
#define NOMINMAX
#endif
#define WIN32_LEAN_AND_MEAN
#include <windows.h>
#endif

#include <cstdio>
#include <cstring>
#include <functional>
#include <string>

#include "../cuda_d3d12.h"
#include "../d3d12_interop.h"
#include "../errors.h"

using namespace fl;

namespace {

int failures = 0;

void check(bool ok, const std::string &what) {
  std::printf("%s %s\n", ok ? "ok  " : "FAIL", what.c_str());
  if (!ok) ++failures;
}

// Passes when f throws fl::Error with `code` and a message containing `needle`.
void refuses(const std::string &what, Code code, const char *needle, const std::function<void()> &f) {
  try {
    f();
  } catch (const Error &e) {
    const bool ok = e.code() == code && std::strstr(e.what(), needle) != nullptr;
    check(ok, what + (ok ? "" : std::string(" (got: ") + e.what() + ")"));
    return;
  }
  check(false, what + " (nothing thrown)");
}

d3d12::MemoryRequest heap(std::uint64_t size = 1 << 20) {
  d3d12::MemoryRequest r;
  r.kind = "d3d12_heap";
  r.source.name = "Local\\frame";
  r.size = size;
  return r;
}

void descriptors() {
  d3d12::MemoryDescriptor d = d3d12::memory_descriptor(heap());
  check(d.handle_type == 4 && d.flags == 0 && d.size == (1u << 20) && d.by_name() &&
            d.name == u"Local\\frame" && d.mapped_size == (1u << 20),
        "a named heap: D3D12_HEAP, no flags, the size, the UTF-16 name");
  d3d12::MemoryRequest r = heap();
  r.kind = "d3d12_resource";
  d = d3d12::memory_descriptor(r);
  check(d.handle_type == 5 && d.flags == 1, "a committed resource: D3D12_RESOURCE, DEDICATED");
  r.source.name.reset();
  r.source.handle = 0x1A4;
  d = d3d12::memory_descriptor(r);
  check(!d.by_name() && d.handle == 0x1A4 && d.name.empty(), "by handle: the handle, no name");
  d3d12::Source fs;
  fs.name = "Global\\fence";
  d3d12::SemaphoreDescriptor f = d3d12::fence_descriptor(fs);
  check(f.handle_type == 4 && f.flags == 0 && f.name == u"Global\\fence",
        "a fence: D3D12_FENCE, flags 0");

  refuses("both name and handle", Code::InvalidArgument, "not both", [] {
    d3d12::MemoryRequest q = heap();
    q.source.handle = 4;
    d3d12::memory_descriptor(q);
  });
  refuses("neither name nor handle", Code::InvalidArgument, "exactly one", [] {
    d3d12::fence_descriptor(d3d12::Source{});
  });
  refuses("a resource without the dedicated flag", Code::InvalidArgument, "dedicated flag", [] {
    d3d12::MemoryRequest q = heap();
    q.kind = "d3d12_resource";
    q.dedicated = false;
    d3d12::memory_descriptor(q);
  });
  refuses("a dedicated heap", Code::InvalidArgument, "cannot be dedicated", [] {
    d3d12::MemoryRequest q = heap();
    q.dedicated = true;
    d3d12::memory_descriptor(q);
  });
  refuses("no size", Code::InvalidArgument, "SizeInBytes", [] { d3d12::memory_descriptor(heap(0)); });
  refuses("a mapped range past the end", Code::InvalidArgument, "ends past", [] {
    d3d12::MemoryRequest q = heap();
    q.offset = 1;
    q.mapped_size = ~0ULL;
    d3d12::memory_descriptor(q);
  });
}

void names_and_handles() {
  check(d3d12::shared_name("a\xc3\xa4\xf0\x9f\x8e\xae") == u"a\u00e4\U0001F3AE",
        "UTF-8 names become UTF-16, surrogate pairs included");
  check(d3d12::shared_name(std::string(259, 'a')).size() == 259, "259 units is the longest name");
  refuses("260 units", Code::InvalidArgument, "at most 259",
          [] { d3d12::shared_name(std::string(260, 'a')); });
  refuses("a backslash past the prefix", Code::InvalidArgument, "backslash",
          [] { d3d12::shared_name("Local\\a\\b"); });
  refuses("a prefix alone", Code::InvalidArgument, "no name after",
          [] { d3d12::shared_name("Global\\"); });
  refuses("invalid UTF-8", Code::InvalidArgument, "UTF-8", [] { d3d12::shared_name("\xc0\xaf"); });
  refuses("handle 0", Code::InvalidArgument, "NULL", [] { d3d12::nt_handle(0); });
  refuses("INVALID_HANDLE_VALUE", Code::InvalidArgument, "pseudo-handle",
          [] { d3d12::nt_handle(~0ULL); });
  refuses("a 33-bit handle", Code::InvalidArgument, "32 bits", [] { d3d12::nt_handle(1ULL << 32); });
}

void luids() {
  check(d3d12::luid_from_bytes(std::string("\x01\x02\x03\x04\x05\x06\x07\x08", 8)) ==
            0x0807060504030201ULL,
        "a LUID is its 8 bytes, little-endian");
  check(d3d12::luid_text(0x0807060504030201ULL) == "08070605:04030201", "LUID text High:Low");
  std::vector<d3d12::LuidDevice> devs(2);
  devs[0] = {0, "A", 0xC3A1};
  devs[1] = {1, "B", std::nullopt};
  check(d3d12::select_by_luid(devs, 0xC3A1) == 0, "the device with the adapter's LUID");
  refuses("no device with the LUID lists them", Code::InvalidArgument,
          "cuda:0 A LUID 00000000:0000c3a1; cuda:1 B LUID none",
          [&] { d3d12::select_by_luid(devs, 7); });
}

void capabilities() {
  d3d12::Platform p;
  check(!d3d12::capability(p).supported && d3d12::capability(p).reason.find("only on Windows") !=
                                                 std::string::npos,
        "not Windows: false");
  p.windows = true;
  p.driver_reason = "the NVIDIA driver (nvcuda.dll) is not installed";
  check(d3d12::capability(p).reason == p.driver_reason, "no driver: the loader's reason");
  p.driver_loaded = true;
  check(d3d12::capability(p).reason.find("cuDeviceGetLuid") != std::string::npos,
        "no cuDeviceGetLuid: false");
  p.has_luid_query = true;
  check(d3d12::capability(p).reason.find("no CUDA device") != std::string::npos, "no device");
  p.device_count = 1;
  check(d3d12::capability(p).supported && d3d12::capability(p).reason.empty(), "all there: true");
}

// An import the capability refuses still owns (and closes) the handle it was given.
void refused_imports_close_their_handle() {
#ifdef _WIN32
  HANDLE ev = ::CreateEventW(nullptr, FALSE, FALSE, nullptr);
  d3d12::Source src;
  src.handle = reinterpret_cast<std::uintptr_t>(ev);
  const d3d12::SemaphoreDescriptor desc = d3d12::fence_descriptor(src);
  refuses("import_d3d12_fence is refused with the capability's reason", Code::Unsupported,
          "not available here", [&] { cuda::import_d3d12_fence(nullptr, desc); });
  DWORD flags = 0;
  check(!::GetHandleInformation(ev, &flags), "the refused import closed its NT handle");
#endif
  refuses("device_by_luid is refused with the capability's reason", Code::Unsupported,
          "not available here", [] { cuda::device_by_luid(1); });
}

}  // namespace

int main(int argc, char **argv) {
  std::setvbuf(stdout, nullptr, _IONBF, 0);
  const char *expect = nullptr;
  for (int i = 1; i + 1 < argc; ++i) {
    if (std::strcmp(argv[i], "--expect-unsupported") == 0) expect = argv[i + 1];
  }
  descriptors();
  names_and_handles();
  luids();
  capabilities();
  const d3d12::Capability live = cuda::d3d12_capability();
  std::printf("info capability: %s%s%s\n", live.supported ? "true" : "false",
              live.supported ? "" : ", ", live.reason.c_str());
  if (!live.supported) refused_imports_close_their_handle();
  if (expect)
    check(!live.supported && live.reason.find(expect) != std::string::npos,
          std::string("capability is false because: ") + expect);
  std::printf("%d failed\n", failures);
  return failures ? 1 : 0;
}
