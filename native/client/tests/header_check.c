/* Compiled as strict C11 (-std=c11 -pedantic -Werror): the public header is valid C. */
#include "fenceline/fenceline_client.h"

typedef char fl_check_id_length[FL_ID_LENGTH == 32 ? 1 : -1];

int fl_header_check_c(void);

int fl_header_check_c(void) {
  FlTensorView view = {0};
  FlSessionDesc desc = {0};
  FlRunResult result = {0};
  FlErrorCode code = FL_ERROR_TIMED_OUT;
  const FlApi *(*entry)(uint32_t) = FlGetApi;
  (void)entry;
  desc.inputs = &view;
  desc.input_count = 1;
  return (int)code + (int)result.reserved + (int)desc.input_count;
}
