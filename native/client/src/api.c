/* The versioned entry point: one immutable table of functions per API version. */
#include <stdlib.h>

#include "internal.h"

static FlErrorCode get_error_code(const FlStatus *s) { return fl_status_code(s); }
static const char *get_error_message(const FlStatus *s) { return fl_status_message(s); }
static void free_string(char *s) { free(s); }
static const char *version_string(void) { return FL_CLIENT_VERSION_STRING; }

/* Every entry but the four that read or write sized structs. */
#define FL_COMMON_ENTRIES \
    .GetErrorCode = get_error_code, \
    .GetErrorMessage = get_error_message, \
    .ReleaseStatus = fl_status_release, \
    .GetErrorCodeName = fl_code_name, \
    .CreateFrame = fl_frame_create, \
    .OpenFrame = fl_frame_open, \
    .GetFrameData = fl_frame_data, \
    .GetFrameSize = fl_frame_size, \
    .GetFrameFd = fl_frame_fd, \
    .GetFrameName = fl_frame_name, \
    .ReleaseFrame = fl_frame_release, \
    .CreateFence = fl_fence_create, \
    .OpenFence = fl_fence_open, \
    .OpenFenceFd = fl_fence_open_fd, \
    .GetFenceValue = fl_fence_value, \
    .GetFenceStatus = fl_fence_status, \
    .GetFenceFd = fl_fence_fd, \
    .GetFenceName = fl_fence_name, \
    .SignalFence = fl_fence_signal, \
    .WaitFence = fl_fence_wait, \
    .SetFenceStatus = fl_fence_set_status, \
    .SetFenceMaxSpin = fl_fence_set_max_spin, \
    .ReleaseFence = fl_fence_release, \
    .GetDefaultSocketPath = fl_default_socket_path, \
    .CreateClient = fl_client_create, \
    .GetServerInfo = fl_client_server_info, \
    .SetClientMaxSpin = fl_client_set_max_spin, \
    .ReleaseClient = fl_client_release, \
    .ImportFrame = fl_import_frame, \
    .ImportMemoryFd = fl_import_memory_fd, \
    .ImportMemoryName = fl_import_memory_name, \
    .GetMemoryImportId = fl_memory_import_id, \
    .ReleaseMemoryImport = fl_memory_import_release, \
    .ImportFence = fl_import_fence, \
    .ImportFenceFd = fl_import_fence_fd, \
    .ImportFenceName = fl_import_fence_name, \
    .GetFenceImportId = fl_fence_import_id, \
    .ReleaseFenceImport = fl_fence_import_release, \
    .OpenSession = fl_session_open, \
    .GetSessionId = fl_session_id, \
    .ReleaseSession = fl_session_release, \
    .Describe = fl_describe, \
    .FreeString = free_string, \
    .GetVersionString = version_string, \
    .ImportD3D12Memory = fl_import_d3d12_memory, \
    .ImportD3D12Fence = fl_import_d3d12_fence, \
    .StartSession = fl_session_start, \
    .PauseSession = fl_session_pause, \
    .StopSession = fl_session_stop, \
    .SetClientTimeout = fl_client_set_timeout, \
    .CreateClientWithTimeout = fl_client_create_with_timeout, \
    .GetServerDetails = fl_server_details, \
    .GetServerVersion = fl_server_version, \
    .GetServerProtocol = fl_server_protocol, \
    .CanImportMemory = fl_can_import_memory, \
    .CanImportFence = fl_can_import_fence, \
    .GetCapabilityReason = fl_capability_reason, \
    .ReleaseServerInfo = fl_server_info_release, \
    .GetModelMetadata = fl_model_metadata, \
    .GetModelName = fl_model_name, \
    .GetModelInputCount = fl_model_input_count, \
    .GetModelOutputCount = fl_model_output_count, \
    .GetModelInput = fl_model_input, \
    .GetModelOutput = fl_model_output, \
    .ReleaseModelMetadata = fl_model_metadata_release, \
    .GetDatatypeSize = fl_datatype_size, \
    .ImportD3D12FenceAt = fl_import_d3d12_fence_at

/* Version 5 and later: sized structs. */
static const FlApi api_v5 = {
    FL_COMMON_ENTRIES,
    .CreateSession = fl_session_create_sized,
    .Run = fl_session_run_sized,
    .RunAsync = fl_session_run_async_sized,
    .CreateStreamingSession = fl_streaming_session_create_sized,
};

/* Versions 1 to 4: the same functions, the structs without struct_size; the table's later
 * members are there too, but such a program never reads them. */
static const FlApi api_v4 = {
    FL_COMMON_ENTRIES,
    .CreateSession = fl_session_create_v4,
    .Run = fl_session_run_v4,
    .RunAsync = fl_session_run_async_v4,
    .CreateStreamingSession = fl_streaming_session_create_v4,
};

FL_EXPORT const FlApi *FlGetApi(uint32_t version) {
  /* Each table is a prefix of every later one; only the struct layouts split them. */
  if (version == 0 || version > FL_API_VERSION) return NULL;
  return version < 5 ? &api_v4 : &api_v5;
}
