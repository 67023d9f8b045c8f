// The public header also compiles as C++ (engines and plugins are mostly C++).
#include "fenceline/fenceline_client.h"

int fl_header_check_cxx() {
  FlRunResult result = {};
  const FlApi *api = FlGetApi(FL_API_VERSION);
  return api == nullptr ? 1 : static_cast<int>(result.reserved);
}
