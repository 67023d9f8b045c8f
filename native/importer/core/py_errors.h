// C++ errors as the Python classes of fenceline.errors: the one translation (module.cpp), used by
// pybind11's exception translator and by the native run path, which hands a failed run back to
// Python as a value (its reply is Python's to send). Both need the GIL.
#pragma once

#include <pybind11/pybind11.h>

#include "errors.h"

namespace fl {

// The fenceline.errors class of e's wire code (FencelineError for a code it does not know).
pybind11::object python_error_type(const Error &e);
// An instance of it, with e's message.
pybind11::object python_error(const Error &e);
// What an unexpected failure answers: "internal", the detail logged.
pybind11::object internal_failure(const char *what);

}  // namespace fl
