// Errors raised by the importer. Each code maps to one class of fenceline.errors, translated in
// exactly one place (module.cpp).
#pragma once

#include <stdexcept>
#include <string>

namespace fl {

enum class Code {
  InvalidArgument,
  NotFound,
  Conflict,
  Unsupported,
  ResourceExhausted,
  DeviceLost,
  OsError
};

class Error : public std::runtime_error {
 public:
  Error(Code code, const std::string &message) : std::runtime_error(message), code_(code) {}
  Code code() const noexcept { return code_; }

 private:
  Code code_;
};

// Formats "what: strerror(errno)" for failed system calls.
std::string errno_message(const std::string &what, int err);

}  // namespace fl
