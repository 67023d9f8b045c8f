/* Internal declarations shared by the C client's translation units. */
#ifndef FENCELINE_CLIENT_INTERNAL_H
#define FENCELINE_CLIENT_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include "fenceline/fenceline_client.h"
#include "host_timeline.h"
#include "platform/atomic.h" /* native/common: plain-field atomics for GCC, Clang and MSVC */
#include "spin_rule.h"         /* native/common: the one adaptive spin rule */

#if defined(__MINGW32__)
/* mingw-w64's own printf (__USE_MINGW_ANSI_STDIO, set by CMake): C99 formats such as %zu. */
#define FL_PRINTF_FORMAT(fmt, args) __attribute__((format(gnu_printf, fmt, args)))
#elif defined(__GNUC__)
#define FL_PRINTF_FORMAT(fmt, args) __attribute__((format(printf, fmt, args)))
#else
#define FL_PRINTF_FORMAT(fmt, args)
#endif

#define FL_CLIENT_VERSION_STRING "0.1.0"

/* ---- status (status.c) ------------------------------------------------------------------------ */

FlStatus *fl_status(FlErrorCode code, const char *fmt, ...) FL_PRINTF_FORMAT(2, 3);
/* A status for an errno from `what`, mapped like the service's importer maps OS errors. */
FlStatus *fl_status_errno(const char *what, int err);
FlErrorCode fl_status_code(const FlStatus *s);
const char *fl_status_message(const FlStatus *s);
void fl_status_release(FlStatus *s);
const char *fl_code_name(FlErrorCode code);

/* ---- adaptive spin (spin.c): the rule of native/common/spin_rule.h. Its fields are read and
 * written atomically, so several threads may wait on one fence. ----------------------------- */

typedef struct fl_spin {
  fl_spin_rule rule;
} fl_spin;

void fl_spin_set_max(fl_spin *s, int64_t max_ns);

void fl_spin_init(fl_spin *s, int64_t max_ns);
/* The next wait's spin budget; hand it back to fl_spin_observe with how long the wait took. */
int64_t fl_spin_budget(fl_spin *s);
void fl_spin_observe(fl_spin *s, int64_t waited_ns, int64_t budget_ns);

/* ---- reference counts: a plain counter changed atomically ---------------------------------- */

typedef uint32_t fl_refcount;
static inline void fl_ref_init(fl_refcount *r) { *r = 1; }
static inline void fl_ref_inc(fl_refcount *r) { fl_fetch_add_u32(r, 1u); }
/* 1 when this call dropped the last reference. */
static inline int fl_ref_dec(fl_refcount *r) { return fl_fetch_add_u32(r, (uint32_t)-1) == 1u; }

/* ---- shared memory (platform/<os>/shm.c): the OS half of frames and fences ------------------ */

/* One mapped shared-memory object: an fd (POSIX) or a section HANDLE (Windows) in `handle`. */
typedef struct fl_os_map {
  intptr_t handle;
  void *data;
  uint64_t size;
} fl_os_map;

/* NULL when `name` is a valid shared-memory name on this OS, else the reason. */
FlStatus *fl_check_shm_name(const char *name);
/* Creates an object of `size` bytes (name NULL: anonymous, a memfd on Linux) and maps it
 * read-write. A name that exists already fails with FL_ERROR_CONFLICT (never shared: it may be
 * squatted). */
FlStatus *fl_os_map_create(const char *name, uint64_t size, const char *label, fl_os_map *out);
/* Opens an existing named object and maps its first map_bytes (0: all of it; out->size is what was
 * mapped). An empty object, or one smaller than map_bytes, fails with FL_ERROR_INVALID_ARGUMENT. */
FlStatus *fl_os_map_open(const char *name, int writable, uint64_t map_bytes, fl_os_map *out);
/* Maps the first map_bytes of a caller's fd (duplicated first: the fd stays the caller's). */
FlStatus *fl_os_map_open_fd(int fd, uint64_t map_bytes, fl_os_map *out);
/* Unmaps and closes; removes the name when unlink_name is not NULL (POSIX; Windows names die with
 * their last handle). */
void fl_os_map_close(fl_os_map *m, const char *unlink_name);
/* The fd of the object, -1 where handles are not fds (Windows). */
int fl_os_map_fd(const fl_os_map *m);
/* The fence's wake object (Windows: the named semaphore "<name>.wake"; NULL on Linux). */
FlStatus *fl_os_fence_wake(const char *name, int create, fl_htl_wake **out);

/* ---- frames and fences (shared.c) ------------------------------------------------------------- */

FlStatus *fl_frame_create(const char *shm_name, uint64_t size, FlFrame **out);
FlStatus *fl_frame_open(const char *shm_name, FlAccess access, FlFrame **out);
void *fl_frame_data(const FlFrame *f);
uint64_t fl_frame_size(const FlFrame *f);
int fl_frame_fd(const FlFrame *f);
const char *fl_frame_name(const FlFrame *f);
void fl_frame_release(FlFrame *f);

FlStatus *fl_fence_create(const char *shm_name, FlFence **out);
FlStatus *fl_fence_open(const char *shm_name, FlFence **out);
FlStatus *fl_fence_open_fd(int fd, FlFence **out);
uint64_t fl_fence_value(const FlFence *f);
FlFenceStatus fl_fence_status(const FlFence *f);
int fl_fence_fd(const FlFence *f);
const char *fl_fence_name(const FlFence *f);
FlStatus *fl_fence_signal(FlFence *f, uint64_t value);
FlStatus *fl_fence_wait(FlFence *f, uint64_t value, int64_t timeout_ns);
FlStatus *fl_fence_set_status(FlFence *f, FlFenceStatus status);
void fl_fence_set_max_spin(FlFence *f, int64_t ns);
void fl_fence_release(FlFence *f);

/* ---- client (client.c) and remote objects (remote.c) ------------------------------------------ */

FlStatus *fl_default_socket_path(char *buf, size_t size);
FlStatus *fl_client_create(const char *path, const char *name, FlClient **out);
FlStatus *fl_client_create_with_timeout(const char *path, const char *name, int64_t timeout_ns,
                                        FlClient **out);
const char *fl_client_server_info(const FlClient *c);
void fl_client_set_max_spin(FlClient *c, int64_t ns);
void fl_client_set_timeout(FlClient *c, int64_t ns);
void fl_client_release(FlClient *c);
void fl_client_ref(FlClient *c);
void fl_client_unref(FlClient *c);

/* Frame kinds (FL_KIND_*), sizes and error codes: fenceline_wire.h, through the public header. */

/* Sends one JSON control request (with up to one fd, -1 for none) and receives its reply. On
 * success *reply points at the reply's JSON body inside the client's buffer, valid while the
 * caller holds the client's lock; fl_client_call takes and releases the lock itself and copies
 * the body into a fresh malloc'd, NUL-terminated string the caller frees. */
FlStatus *fl_client_call(FlClient *c, uint16_t kind, const char *body, size_t body_len, int fd,
                         char **reply, size_t *reply_len);
/* Like fl_client_call but sends a fixed binary RUN or RUN_ASYNC body (`kind`) and decodes the
 * binary reply. */
FlStatus *fl_client_run(FlClient *c, uint16_t kind, const uint8_t session_id[16],
                        uint64_t wait_value, uint64_t signal_value, uint32_t timeout_ms,
                        FlRunResult *out);

FlStatus *fl_import_frame(FlClient *c, const FlFrame *f, FlAccess access, FlMemoryImport **out);
FlStatus *fl_import_memory_fd(FlClient *c, int fd, uint64_t offset, uint64_t size,
                              FlAccess access, FlMemoryImport **out);
FlStatus *fl_import_memory_name(FlClient *c, const char *name, uint64_t offset, uint64_t size,
                                FlAccess access, FlMemoryImport **out);
const char *fl_memory_import_id(const FlMemoryImport *m);
void fl_memory_import_release(FlMemoryImport *m);
FlStatus *fl_import_fence(FlClient *c, const FlFence *f, FlFenceImport **out);
FlStatus *fl_import_fence_fd(FlClient *c, int fd, FlFenceImport **out);
FlStatus *fl_import_fence_name(FlClient *c, const char *name, FlFenceImport **out);
const char *fl_fence_import_id(const FlFenceImport *f);
void fl_fence_import_release(FlFenceImport *f);
FlStatus *fl_session_create(FlClient *c, const FlSessionDesc *desc, FlSession **out);
FlStatus *fl_session_open(FlClient *c, const char *id, FlSession **out);
const char *fl_session_id(const FlSession *s);
FlStatus *fl_session_run(FlSession *s, uint64_t wait_value, uint64_t signal_value,
                         uint32_t timeout_ms, FlRunResult *out);
FlStatus *fl_session_run_async(FlSession *s, uint64_t wait_value, uint64_t signal_value,
                               uint32_t timeout_ms, FlRunResult *out);
FlStatus *fl_streaming_session_create(FlClient *c, const FlSessionDesc *desc, const char *policy,
                                      int64_t spin_us, int start, FlSession **out);
FlStatus *fl_session_start(FlSession *s, char **out_json);
FlStatus *fl_session_pause(FlSession *s, char **out_json);
FlStatus *fl_session_stop(FlSession *s, char **out_json);
void fl_session_release(FlSession *s);
FlStatus *fl_describe(FlClient *c, const char *kind, const char *id, char **out_json);

/* ---- JSON (json.c): a writer for request bodies, a reader for the few reply fields we need -- */

typedef struct fl_json_writer {
  char *buf;
  size_t cap;
  size_t len;
  int overflow;   /* set once the body would not fit */
  int need_comma; /* a value was written at the current nesting level */
} fl_json_writer;

void fl_jw_init(fl_json_writer *w, char *buf, size_t cap);
void fl_jw_begin_object(fl_json_writer *w);
void fl_jw_end_object(fl_json_writer *w);
void fl_jw_begin_array(fl_json_writer *w);
void fl_jw_end_array(fl_json_writer *w);
void fl_jw_key(fl_json_writer *w, const char *key);
void fl_jw_string(fl_json_writer *w, const char *s);
void fl_jw_uint(fl_json_writer *w, uint64_t v);
void fl_jw_int(fl_json_writer *w, int64_t v);
void fl_jw_bool(fl_json_writer *w, int v);

/* Finds top-level key `key` of the JSON object in [json, json+len) and, when its value is a
 * string, writes it unescaped and NUL-terminated into out. Returns 0, or -1 when the key is
 * absent, not a string, does not fit, or the text before it is not a JSON object. It stops at
 * the match: validate the whole text first (fl_json_validate) where that matters. Allocates
 * nothing. */
int fl_json_get_string(const char *json, size_t len, const char *key, char *out, size_t out_size);

/* 0 when [json, json+len) is one well-formed JSON value (with surrounding whitespace) whose
 * containers nest at most 64 deep. Allocates nothing. */
int fl_json_validate(const char *json, size_t len);

/* IMPORT_MEMORY / IMPORT_FENCE with a finished body (remote.c); fd -1 sends none. */
FlStatus *fl_import_memory_body(FlClient *c, const fl_json_writer *w, int fd,
                                FlMemoryImport **out);
FlStatus *fl_import_fence_body(FlClient *c, const fl_json_writer *w, int fd,
                               FlFenceImport **out);

/* D3D12 heaps, resources and fences by shared name (d3d12.c). */
FlStatus *fl_import_d3d12_memory(FlClient *c, const char *kind, const char *shared_name,
                                 uint64_t allocation_size, uint64_t offset, uint64_t size,
                                 uint64_t adapter_luid, FlAccess access, FlMemoryImport **out);
FlStatus *fl_import_d3d12_fence(FlClient *c, const char *shared_name, uint64_t adapter_luid,
                                FlFenceImport **out);
FlStatus *fl_import_d3d12_fence_at(FlClient *c, const char *shared_name, uint64_t adapter_luid,
                                   uint64_t current_value, FlFenceImport **out);

/* ---- JSON trees (json.c, the same reader), for the typed getters ------------------------------ */

typedef enum fl_jtype {
  FL_JSON_NULL,
  FL_JSON_BOOL,
  FL_JSON_INT,
  FL_JSON_STRING,
  FL_JSON_ARRAY,
  FL_JSON_OBJECT
} fl_jtype;

/* One value; an array's or object's members are its children, in order. */
typedef struct fl_jnode {
  fl_jtype type;
  char *key; /* the member name inside an object, else NULL */
  char *str; /* FL_JSON_STRING, unescaped, NUL-terminated */
  int64_t integer;
  int boolean;
  size_t count; /* members of an array or object */
  struct fl_jnode *child, *next;
} fl_jnode;

/* The tree of one JSON value, or NULL when the text is not JSON, holds a number that is not an
 * int64_t integer (no reply the getters read has one) or nests containers more than 33 deep.
 * Freed with fl_json_free. */
fl_jnode *fl_json_parse(const char *json, size_t len);
void fl_json_free(fl_jnode *n);
const fl_jnode *fl_json_member(const fl_jnode *obj, const char *key);
const char *fl_json_member_string(const fl_jnode *obj, const char *key);

/* ---- version 5 (sized.c, info.c) ------------------------------------------------------------- */

/* The first size each sized struct had (version 5); later versions only append. */
#define FL_TENSOR_VIEW_SIZE_V5 (offsetof(FlTensorView, rank) + sizeof(size_t))
#define FL_SESSION_DESC_SIZE_V5 (offsetof(FlSessionDesc, signal_fence) + sizeof(void *))
#define FL_RUN_RESULT_SIZE_V5 (offsetof(FlRunResult, reserved) + sizeof(uint32_t))
#define FL_TENSOR_INFO_SIZE_V5 (offsetof(FlTensorInfo, rank) + sizeof(size_t))

/* Checks a caller's struct_size; NULL when it is at least `minimum`. */
FlStatus *fl_check_struct_size(const char *what, const char *type, size_t given, size_t minimum,
                               size_t current);

/* The table's entries that read or write sized structs (sized.c), and the same entries for
 * programs built against versions 1 to 4, which pass the layouts without struct_size. */
FlStatus *fl_session_create_sized(FlClient *c, const FlSessionDesc *d, FlSession **out);
FlStatus *fl_streaming_session_create_sized(FlClient *c, const FlSessionDesc *d,
                                            const char *policy, int64_t spin_us, int start,
                                            FlSession **out);
FlStatus *fl_session_run_sized(FlSession *s, uint64_t wait_value, uint64_t signal_value,
                               uint32_t timeout_ms, FlRunResult *out);
FlStatus *fl_session_run_async_sized(FlSession *s, uint64_t wait_value, uint64_t signal_value,
                                     uint32_t timeout_ms, FlRunResult *out);
FlStatus *fl_session_create_v4(FlClient *c, const FlSessionDesc *d, FlSession **out);
FlStatus *fl_streaming_session_create_v4(FlClient *c, const FlSessionDesc *d, const char *policy,
                                         int64_t spin_us, int start, FlSession **out);
FlStatus *fl_session_run_v4(FlSession *s, uint64_t wait_value, uint64_t signal_value,
                            uint32_t timeout_ms, FlRunResult *out);
FlStatus *fl_session_run_async_v4(FlSession *s, uint64_t wait_value, uint64_t signal_value,
                                  uint32_t timeout_ms, FlRunResult *out);

/* Server info, model metadata and datatypes (info.c). */
FlStatus *fl_server_details(const FlClient *c, FlServerInfo **out);
const char *fl_server_version(const FlServerInfo *info);
uint32_t fl_server_protocol(const FlServerInfo *info);
int fl_can_import_memory(const FlServerInfo *info, const char *kind);
int fl_can_import_fence(const FlServerInfo *info, const char *kind);
const char *fl_capability_reason(const FlServerInfo *info, const char *kind);
void fl_server_info_release(FlServerInfo *info);
FlStatus *fl_model_metadata(FlClient *c, const char *model, const char *version,
                            FlModelMetadata **out);
const char *fl_model_name(const FlModelMetadata *m);
size_t fl_model_input_count(const FlModelMetadata *m);
size_t fl_model_output_count(const FlModelMetadata *m);
FlStatus *fl_model_input(const FlModelMetadata *m, size_t index, FlTensorInfo *out);
FlStatus *fl_model_output(const FlModelMetadata *m, size_t index, FlTensorInfo *out);
void fl_model_metadata_release(FlModelMetadata *m);
size_t fl_datatype_size(const char *datatype);

#endif
