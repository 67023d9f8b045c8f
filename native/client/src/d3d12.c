/* D3D12 imports (docs/windows.md, "D3D12"): a heap, committed resource or fence named by the
 * renderer with ID3D12Device::CreateSharedHandle, opened by a Windows service on the GPU whose
 * LUID is adapter_luid. Only the request is built here; the service checks every rule and
 * answers FL_ERROR_UNSUPPORTED where D3D12 cannot be imported (any non-Windows service). */
#include <string.h>

#include "internal.h"

/* Opens the request object with what memory and fences share: the kind under `type_key`, the
 * shared name and the adapter LUID. The caller adds its own fields and closes the object. */
static FlStatus *begin_request(fl_json_writer *w, char *body, size_t capacity, const char *what,
                               const char *type_key, const char *kind, const char *shared_name,
                               uint64_t adapter_luid) {
  if (shared_name == NULL || shared_name[0] == '\0')
    return fl_status(FL_ERROR_INVALID_ARGUMENT,
                     "%s: shared_name is the name given to CreateSharedHandle (UTF-8)", what);
  if (strlen(shared_name) > 1024)
    return fl_status(FL_ERROR_INVALID_ARGUMENT, "%s: shared_name is too long", what);
  fl_jw_init(w, body, capacity);
  fl_jw_begin_object(w);
  fl_jw_key(w, type_key);
  fl_jw_string(w, kind);
  fl_jw_key(w, "name");
  fl_jw_string(w, shared_name);
  fl_jw_key(w, "adapter_luid");
  fl_jw_uint(w, adapter_luid);
  return NULL;
}

FlStatus *fl_import_d3d12_memory(FlClient *c, const char *kind, const char *shared_name,
                                 uint64_t allocation_size, uint64_t offset, uint64_t size,
                                 uint64_t adapter_luid, FlAccess access, FlMemoryImport **out) {
  if (c == NULL || out == NULL || kind == NULL)
    return fl_status(FL_ERROR_INVALID_ARGUMENT,
                     "ImportD3D12Memory: client, kind and out must not be NULL");
  if (strcmp(kind, "d3d12_heap") != 0 && strcmp(kind, "d3d12_resource") != 0)
    return fl_status(FL_ERROR_INVALID_ARGUMENT,
                     "ImportD3D12Memory: kind is \"d3d12_heap\" or \"d3d12_resource\"");
  if (access != FL_ACCESS_READ_WRITE && access != FL_ACCESS_READ_ONLY)
    return fl_status(FL_ERROR_INVALID_ARGUMENT, "access is FL_ACCESS_READ_WRITE or _READ_ONLY");
  char body[2048];
  fl_json_writer w;
  FlStatus *st = begin_request(&w, body, sizeof body, "ImportD3D12Memory", "handle_type", kind,
                               shared_name, adapter_luid);
  if (st != NULL) return st;
  fl_jw_key(&w, "allocation_size_bytes");
  fl_jw_uint(&w, allocation_size);
  fl_jw_key(&w, "offset_bytes");
  fl_jw_uint(&w, offset);
  fl_jw_key(&w, "size_bytes");
  fl_jw_uint(&w, size);
  fl_jw_key(&w, "access");
  fl_jw_string(&w, access == FL_ACCESS_READ_ONLY ? "read_only" : "read_write");
  fl_jw_end_object(&w);
  return fl_import_memory_body(c, &w, -1, out);
}

FlStatus *fl_import_d3d12_fence_at(FlClient *c, const char *shared_name, uint64_t adapter_luid,
                                   uint64_t current_value, FlFenceImport **out) {
  if (c == NULL || out == NULL)
    return fl_status(FL_ERROR_INVALID_ARGUMENT,
                     "ImportD3D12Fence: client and out must not be NULL");
  char body[2048];
  fl_json_writer w;
  FlStatus *st = begin_request(&w, body, sizeof body, "ImportD3D12Fence", "fence_type",
                               "d3d12_fence", shared_name, adapter_luid);
  if (st != NULL) return st;
  fl_jw_key(&w, "current_value");
  fl_jw_uint(&w, current_value);
  fl_jw_end_object(&w);
  return fl_import_fence_body(c, &w, -1, out);
}

FlStatus *fl_import_d3d12_fence(FlClient *c, const char *shared_name, uint64_t adapter_luid,
                                FlFenceImport **out) {
  return fl_import_d3d12_fence_at(c, shared_name, adapter_luid, 0, out);
}
