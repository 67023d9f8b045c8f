// Small Windows helpers shared by the importer's Windows files.
#pragma once

#ifndef WIN32_LEAN_AND_MEAN
#define WIN32_LEAN_AND_MEAN
#endif
#include <windows.h>

#include <string>

#include "core/errors.h"

namespace fl::win32 {

// UTF-8 to UTF-16 for the W functions; throws InvalidArgument on invalid UTF-8.
inline std::wstring widen(const std::string &s) {
  if (s.empty()) return std::wstring();
  const int n = ::MultiByteToWideChar(CP_UTF8, MB_ERR_INVALID_CHARS, s.data(),
                                      static_cast<int>(s.size()), nullptr, 0);
  if (n <= 0) throw Error(Code::InvalidArgument, "a name must be valid UTF-8");
  std::wstring w(static_cast<std::size_t>(n), L'\0');
  ::MultiByteToWideChar(CP_UTF8, MB_ERR_INVALID_CHARS, s.data(), static_cast<int>(s.size()),
                        &w[0], n);
  return w;
}

// A handle closed when the guard goes out of scope, unless release() took it back.
struct HandleGuard {
  HANDLE h;
  HandleGuard(const HandleGuard &) = delete;
  HandleGuard &operator=(const HandleGuard &) = delete;
  ~HandleGuard() {
    if (h != nullptr && h != INVALID_HANDLE_VALUE) ::CloseHandle(h);
  }
  HANDLE release() {
    HANDLE r = h;
    h = nullptr;
    return r;
  }
};

inline bool iequals(const std::string &a, const std::string &b) {
  if (a.size() != b.size()) return false;
  for (std::size_t i = 0; i < a.size(); ++i) {
    char x = a[i], y = b[i];
    if (x >= 'A' && x <= 'Z') x = static_cast<char>(x - 'A' + 'a');
    if (y >= 'A' && y <= 'Z') y = static_cast<char>(y - 'A' + 'a');
    if (x != y) return false;
  }
  return true;
}

inline std::string message(DWORD err) {
  char buf[256] = {0};
  DWORD n = ::FormatMessageA(FORMAT_MESSAGE_FROM_SYSTEM | FORMAT_MESSAGE_IGNORE_INSERTS, nullptr,
                             err, 0, buf, sizeof buf, nullptr);
  while (n > 0 && (buf[n - 1] == '\n' || buf[n - 1] == '\r' || buf[n - 1] == '.')) buf[--n] = 0;
  return "Windows error " + std::to_string(err) + (n ? std::string(" (") + buf + ")" : "");
}

// Turns a failed call's GetLastError() into the importer's error classes.
[[noreturn]] inline void throw_last(const std::string &what, DWORD err) {
  const std::string text = what + ": " + message(err);
  switch (err) {
    case ERROR_FILE_NOT_FOUND:
      throw Error(Code::NotFound, text);
    case ERROR_INVALID_HANDLE:
      // Sections, events, semaphores and mutexes share one namespace per session.
      throw Error(Code::InvalidArgument,
                  what + ": the name belongs to another kind of object (not a file mapping)");
    case ERROR_ALREADY_EXISTS:
      throw Error(Code::Conflict, text);
    case ERROR_PATH_NOT_FOUND:
    case ERROR_BAD_PATHNAME:
    case ERROR_INVALID_NAME:
    case ERROR_FILENAME_EXCED_RANGE:
      throw Error(Code::InvalidArgument, what + ": not a valid object name: " + message(err));
    case ERROR_ACCESS_DENIED:
      throw Error(Code::InvalidArgument,
                  what + ": access denied (another user's object, or a read-only one mapped "
                         "read_write)");
    case ERROR_INVALID_PARAMETER:
      throw Error(Code::InvalidArgument, text);
    case ERROR_NOT_ENOUGH_MEMORY:
    case ERROR_OUTOFMEMORY:
    case ERROR_COMMITMENT_LIMIT:
    case ERROR_NO_SYSTEM_RESOURCES:
      throw Error(Code::ResourceExhausted, text);
    default:
      throw Error(Code::OsError, text);
  }
}

}  // namespace fl::win32
