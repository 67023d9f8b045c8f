// Loading a shared library at run time (the CUDA driver): dlopen on POSIX, LoadLibrary on Windows.
#pragma once

#include <string>

#ifdef _WIN32
#ifndef WIN32_LEAN_AND_MEAN
#define WIN32_LEAN_AND_MEAN
#endif
#include <windows.h>
#else
#include <dlfcn.h>
#endif

namespace fl::dynlib {

#ifdef _WIN32
inline constexpr const char *kCudaDriver = "nvcuda.dll";
inline void *open(const char *name) {
  return reinterpret_cast<void *>(::LoadLibraryA(name));
}
inline void *symbol(void *lib, const char *name) {
  return reinterpret_cast<void *>(::GetProcAddress(static_cast<HMODULE>(lib), name));
}
inline std::string last_error() {
  return "LoadLibrary failed with Windows error " + std::to_string(::GetLastError());
}
#else
inline constexpr const char *kCudaDriver = "libcuda.so.1";
inline void *open(const char *name) { return ::dlopen(name, RTLD_NOW | RTLD_LOCAL); }
inline void *symbol(void *lib, const char *name) { return ::dlsym(lib, name); }
inline std::string last_error() {
  const char *e = ::dlerror();
  return e ? e : "";
}
#endif

}  // namespace fl::dynlib
