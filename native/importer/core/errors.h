// Errors raised by the importer. Each code is a wire error code (fenceline_wire.h), and
// fenceline.errors.BY_IPC_CODE turns it into its Python class in exactly one place (module.cpp).
#pragma once

#include <cstdint>
#include <stdexcept>
#include <string>

#include "common/fenceline_wire.h"

namespace fl {

enum class Code : std::uint32_t {
  InvalidArgument = FL_WIRE_ERROR_INVALID_ARGUMENT,
  NotFound = FL_WIRE_ERROR_NOT_FOUND,
  Conflict = FL_WIRE_ERROR_CONFLICT,
  Unsupported = FL_WIRE_ERROR_UNSUPPORTED,
  ResourceExhausted = FL_WIRE_ERROR_RESOURCE_EXHAUSTED,
  DeviceLost = FL_WIRE_ERROR_DEVICE_LOST,
  Model = FL_WIRE_ERROR_MODEL,
  OsError = FL_WIRE_ERROR_INTERNAL  // an OS failure nobody can act on: "internal"
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
