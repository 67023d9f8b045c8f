/* fenceline C client: share frame buffers and timeline fences with the fenceline service and run
 * models on them over its IPC socket (docs/c-api.md, docs/ipc.md, docs/fences.md).
 *
 * Conventions (after ONNX Runtime's C API):
 * - Everything is reached through the table FlGetApi(FL_API_VERSION) returns. A library that
 *   cannot serve the version a program was compiled against returns NULL. The table only grows
 *   by appending members, so a program built against version N runs on a library of any later
 *   version.
 * - Objects are opaque handles made by Create*, Open* or Import* and freed by the matching
 *   Release*. Every Release* accepts NULL.
 * - Functions that can fail return FlStatus*: NULL on success, else a status the caller owns
 *   and frees with ReleaseStatus. On failure, out-parameters are left untouched.
 * - Every out-parameter says who frees it. Strings a getter returns belong to the object they
 *   came from and stay valid until it is released.
 * - The library keeps no global state: any number of clients, frames and fences may coexist in a
 *   process, each independent.
 * - Structs the caller fills and that may grow (FlTensorView, FlSessionDesc, FlRunResult,
 *   FlTensorInfo) start with struct_size, which the caller sets to sizeof the struct as it was
 *   compiled ({sizeof(FlTensorView), ...}). The library reads and writes only that many bytes,
 *   so a program keeps working when later versions append fields, and it refuses a size below
 *   the struct's first version with FL_ERROR_INVALID_ARGUMENT.
 * - Each function states whether it is thread-safe. "Thread-safe" means any thread may call it at
 *   any time, also on the same object. Release* may be called from any thread, but not while
 *   another call uses the same object (the caller orders them).
 */
#ifndef FENCELINE_CLIENT_H
#define FENCELINE_CLIENT_H

#include <stddef.h>
#include <stdint.h>

#include "fenceline_wire.h" /* installed beside this header; native/common in the source tree */

#ifdef __cplusplus
extern "C" {
#endif

#if defined(_WIN32) && defined(FL_CLIENT_BUILDING_DLL)
#define FL_EXPORT __declspec(dllexport)
#elif defined(_WIN32)
#define FL_EXPORT /* a DLL import or the static library: plain declarations serve both */
#else
#define FL_EXPORT __attribute__((visibility("default")))
#endif

#define FL_API_VERSION 6u /* 2: D3D12 imports; 3: RunAsync and streaming sessions; 4: deadlines;
                            * 5: struct sizes, typed server info and model metadata;
                            * 6: ImportD3D12FenceAt */
/* The ABI major: the shared library's SONAME is libfenceline_client.so.<FL_ABI_VERSION>. It
 * changes only if a table a program was built against stops being served. */
#define FL_ABI_VERSION 1u

/* Status codes. 1..999 are the service's stable IPC codes (fenceline.errors, ipc_code); they are
 * append-only and named by what the caller should do next. 1000 and up are raised by this
 * library alone. A service newer than this header may send a code not listed here: treat it as
 * FL_ERROR_INTERNAL. */
#define FL_CLIENT_ERROR_ENUM_(name, value, code, action) FL_ERROR_##name = value,
typedef enum FlErrorCode {
  FL_OK = 0,
  /* The service's codes, with what to do about each: fenceline_wire.h (FL_WIRE_ERRORS). */
  FL_WIRE_ERRORS(FL_CLIENT_ERROR_ENUM_)
  /* This library's own, never sent by the service: */
  FL_ERROR_TRANSPORT = 1000, /* the connection failed or closed: create a new client */
  FL_ERROR_PROTOCOL = 1001   /* the service's reply does not parse: versions differ */
} FlErrorCode;
#undef FL_CLIENT_ERROR_ENUM_

typedef enum FlAccess { FL_ACCESS_READ_WRITE = 0, FL_ACCESS_READ_ONLY = 1 } FlAccess;

/* The status word of a host timeline fence (docs/fences.md). */
typedef enum FlFenceStatus {
  FL_FENCE_LIVE = 0,
  FL_FENCE_ABANDONED = 1, /* the signaller is gone; waiters stop waiting */
  FL_FENCE_ERROR = 2      /* the signaller reports that the value it reached is bad */
} FlFenceStatus;

/* Run's timeout_ms that means "the service's default" (10 s unless configured). */
#define FL_TIMEOUT_DEFAULT FL_WIRE_TIMEOUT_DEFAULT
/* WaitFence's timeout_ns that means "no deadline". */
#define FL_WAIT_FOREVER (-1)
/* The client-side deadline of every call that waits for the service (CreateClient, SetClientTimeout):
 * 30 s, and for Run and RunAsync 30 s plus the run's own timeout_ms. */
#define FL_CLIENT_TIMEOUT_DEFAULT_NS 30000000000LL
/* Object ids are this many lowercase hex digits. */
#define FL_ID_LENGTH 32

typedef struct FlStatus FlStatus;
typedef struct FlClient FlClient;             /* one connection to the service */
typedef struct FlFrame FlFrame;               /* a shared-memory buffer this process maps */
typedef struct FlFence FlFence;               /* a host timeline fence this process maps */
typedef struct FlMemoryImport FlMemoryImport; /* memory the service has imported for a client */
typedef struct FlFenceImport FlFenceImport;   /* a fence the service has imported for a client */
typedef struct FlSession FlSession;           /* a model bound to views and two fences */
typedef struct FlServerInfo FlServerInfo;     /* what the service said when the client connected */
typedef struct FlModelMetadata FlModelMetadata; /* a model's inputs and outputs */

/* Where one model input or output lives: `rank` dimensions in `shape`, `datatype` a KServe name
 * ("FP32", "FP16", "UINT8", ...), at `offset_bytes` inside `memory`. The caller owns every
 * pointer; CreateSession only reads them during the call. In an array every element has the
 * same struct_size. */
typedef struct FlTensorView {
  size_t struct_size; /* sizeof(FlTensorView) */
  const char *name;
  const FlMemoryImport *memory;
  uint64_t offset_bytes;
  const char *datatype;
  const int64_t *shape;
  size_t rank;
} FlTensorView;

/* What CreateSession binds. Every input and output of the model must be bound. The service waits
 * on wait_fence before each run and signals signal_fence after it. */
typedef struct FlSessionDesc {
  size_t struct_size; /* sizeof(FlSessionDesc) */
  const char *model;
  const FlTensorView *inputs;
  size_t input_count;
  const FlTensorView *outputs;
  size_t output_count;
  const FlFenceImport *wait_fence;
  const FlFenceImport *signal_fence;
} FlSessionDesc;

/* What the service reports for one run; times in microseconds measured in the service. The
 * caller sets struct_size; the library fills the rest. */
typedef struct FlRunResult {
  size_t struct_size;    /* sizeof(FlRunResult) */
  uint64_t signal_value; /* the value the service set on the signal fence */
  uint32_t wait_us;      /* waiting for the input fence */
  uint32_t infer_us;     /* running the model */
  uint32_t total_us;     /* from receiving RUN to signalling */
  uint32_t reserved;
} FlRunResult;

/* One input or output of a model (GetModelInput, GetModelOutput). The caller sets struct_size;
 * the strings and the shape belong to the FlModelMetadata and live until it is released. A
 * dimension the model leaves free is -1. */
typedef struct FlTensorInfo {
  size_t struct_size; /* sizeof(FlTensorInfo) */
  const char *name;
  const char *datatype; /* a KServe name, as FlTensorView's */
  const int64_t *shape;
  size_t rank;
} FlTensorInfo;

typedef struct FlApi FlApi;

struct FlApi {
  /* ---- status ------------------------------------------------------------------------------ */

  /* The code of a status; FL_OK for NULL. Thread-safe. */
  FlErrorCode (*GetErrorCode)(const FlStatus *status);
  /* Its message, owned by the status; "" for NULL. Thread-safe. */
  const char *(*GetErrorMessage)(const FlStatus *status);
  /* Frees a status. Accepts NULL. */
  void (*ReleaseStatus)(FlStatus *status);
  /* The stable name of a code ("not_found", ...), a static string; "unknown" for others.
   * Thread-safe. */
  const char *(*GetErrorCodeName)(FlErrorCode code);

  /* ---- frames: shared memory this process creates or opens ---------------------------------- */

  /* Creates a zero-filled buffer of size_bytes and maps it read-write. shm_name NULL makes an
   * anonymous memfd (sent to the service as an fd); a name ("/my-frame": '/' then letters,
   * digits, '.', '_', '-') makes a POSIX shared-memory object that must not exist yet, and
   * ReleaseFrame unlinks it. A memfd allows sealing: the service seals it against shrinking when
   * it imports it. *out is freed with ReleaseFrame. Thread-safe. */
  FlStatus *(*CreateFrame)(const char *shm_name, uint64_t size_bytes, FlFrame **out);
  /* Maps an existing named object whole (made by another process, which keeps the duty to
   * unlink it). *out is freed with ReleaseFrame, which never unlinks it. Thread-safe. */
  FlStatus *(*OpenFrame)(const char *shm_name, FlAccess access, FlFrame **out);
  /* The mapped bytes, owned by the frame, valid until ReleaseFrame. Thread-safe. */
  void *(*GetFrameData)(const FlFrame *frame);
  /* The mapped size in bytes. Thread-safe. */
  uint64_t (*GetFrameSize)(const FlFrame *frame);
  /* The frame's fd, owned by the frame (do not close it). Thread-safe. */
  int (*GetFrameFd)(const FlFrame *frame);
  /* The shared-memory name, owned by the frame; NULL for a memfd. Thread-safe. */
  const char *(*GetFrameName)(const FlFrame *frame);
  /* Unmaps and closes; unlinks the name if CreateFrame made it. Imports of the frame in the
   * service keep their own mapping until released. Accepts NULL. */
  void (*ReleaseFrame)(FlFrame *frame);

  /* ---- fences: host timeline fences, usable without the service ----------------------------- */

  /* Creates a fence at value 0, live. shm_name NULL makes a memfd fence, else a named one that
   * must not exist yet and that ReleaseFence unlinks. *out is freed with ReleaseFence.
   * Thread-safe. */
  FlStatus *(*CreateFence)(const char *shm_name, FlFence **out);
  /* Opens a fence another process created, by name. Fails with FL_ERROR_INVALID_ARGUMENT when
   * the object is not a version-1 host timeline page. *out is freed with ReleaseFence, which
   * never unlinks. Thread-safe. */
  FlStatus *(*OpenFence)(const char *shm_name, FlFence **out);
  /* Opens a fence from an fd (e.g. received over a socket). The fd stays the caller's: the
   * fence keeps a duplicate. *out is freed with ReleaseFence. Thread-safe. */
  FlStatus *(*OpenFenceFd)(int fd, FlFence **out);
  /* The current value and status word. Thread-safe, lock-free. */
  uint64_t (*GetFenceValue)(const FlFence *fence);
  FlFenceStatus (*GetFenceStatus)(const FlFence *fence);
  /* The fence's fd, owned by the fence. Thread-safe. */
  int (*GetFenceFd)(const FlFence *fence);
  /* The name, owned by the fence; NULL for a memfd fence. Thread-safe. */
  const char *(*GetFenceName)(const FlFence *fence);
  /* Sets the value and wakes every waiter in every process. Values never go backwards: a value
   * not above the current one fails with FL_ERROR_CONFLICT and changes nothing. Thread-safe,
   * lock-free (one futex wake). */
  FlStatus *(*SignalFence)(FlFence *fence, uint64_t value);
  /* Waits until the value is at least `value`: spins briefly (adaptively, at most the fence's
   * max spin), then sleeps on the futex. timeout_ns FL_WAIT_FOREVER waits without deadline.
   * Fails with FL_ERROR_TIMED_OUT when the deadline passes first, FL_ERROR_DEVICE_LOST when the
   * fence is abandoned or reports an error. Thread-safe: any number of threads may wait. */
  FlStatus *(*WaitFence)(FlFence *fence, uint64_t value, int64_t timeout_ns);
  /* Sets the status word (FL_FENCE_ABANDONED before a signaller exits, FL_FENCE_ERROR when a
   * value is bad) and wakes every waiter. Thread-safe. */
  FlStatus *(*SetFenceStatus)(FlFence *fence, FlFenceStatus status);
  /* The longest WaitFence spins before it sleeps (default 100 us; 0: always sleep at once).
   * Thread-safe. */
  void (*SetFenceMaxSpin)(FlFence *fence, int64_t max_spin_ns);
  /* Unmaps and closes; unlinks the name if CreateFence made it. Accepts NULL. */
  void (*ReleaseFence)(FlFence *fence);

  /* ---- client: one connection ---------------------------------------------------------------- */

  /* Writes the default socket path, as the service computes it: $FENCELINE_SOCKET, else
   * $XDG_RUNTIME_DIR/fenceline/fenceline.sock, else /tmp/fenceline-<uid>/fenceline/
   * fenceline.sock; on Windows $FENCELINE_SOCKET (a pipe name), else \\.\pipe\fenceline-<user SID>
   * (docs/windows.md). Fails with
   * FL_ERROR_INVALID_ARGUMENT when buf_size is too small. Thread-safe. */
  FlStatus *(*GetDefaultSocketPath)(char *buf, size_t buf_size);
  /* Connects (socket_path NULL: the default path) and says hello; client_name (NULL: "c") shows
   * in the service log. A service that refuses the connection answers with its reason
   * (FL_ERROR_PERMISSION_DENIED, FL_ERROR_UNAVAILABLE); one that is not there with
   * FL_ERROR_TRANSPORT; one that accepts but does not answer within FL_CLIENT_TIMEOUT_DEFAULT_NS
   * with FL_ERROR_TIMED_OUT. *out is freed with ReleaseClient. Thread-safe.
   * Calls on one client are serialized by its lock; for runs in parallel use one client per
   * thread. */
  FlStatus *(*CreateClient)(const char *socket_path, const char *client_name, FlClient **out);
  /* The service's hello reply as JSON (server, version, protocol, capabilities), owned by the
   * client. Thread-safe. */
  const char *(*GetServerInfo)(const FlClient *client);
  /* The longest a call spins for its reply before it sleeps in poll (default 100 us, adaptive;
   * 0: always sleep). Thread-safe. */
  void (*SetClientMaxSpin)(FlClient *client, int64_t max_spin_ns);
  /* Closes the connection: the service releases every object this client created. Handles
   * made from the client stay valid to release (releasing them then frees only local memory);
   * any other use fails with FL_ERROR_TRANSPORT. Accepts NULL. */
  void (*ReleaseClient)(FlClient *client);

  /* ---- imports: memory and fences the service maps for this client -------------------------- */

  /* Imports a frame: a memfd travels as an fd, a named frame by its name. *out is freed with
   * ReleaseMemoryImport. Thread-safe. */
  FlStatus *(*ImportFrame)(FlClient *client, const FlFrame *frame, FlAccess access,
                           FlMemoryImport **out);
  /* Imports [offset_bytes, offset_bytes + size_bytes) of a shared-memory fd (memfd, shm or a
   * file); size_bytes 0 means "to the end". The fd stays the caller's (the service receives its
   * own copy). A memfd that allows sealing is sealed against shrinking by the service. *out is
   * freed with ReleaseMemoryImport. Thread-safe. */
  FlStatus *(*ImportMemoryFd)(FlClient *client, int fd, uint64_t offset_bytes,
                              uint64_t size_bytes, FlAccess access, FlMemoryImport **out);
  /* The same for a named POSIX shared-memory object the service opens itself. Thread-safe. */
  FlStatus *(*ImportMemoryName)(FlClient *client, const char *shm_name, uint64_t offset_bytes,
                                uint64_t size_bytes, FlAccess access, FlMemoryImport **out);
  /* The service's id of the import (FL_ID_LENGTH hex digits), owned by the handle. Thread-safe. */
  const char *(*GetMemoryImportId)(const FlMemoryImport *memory);
  /* Drops this handle. The service releases the import once no session made from it is left
   * (sessions hold their imports). Accepts NULL. */
  void (*ReleaseMemoryImport)(FlMemoryImport *memory);

  /* Imports a fence: a memfd fence travels as an fd, a named one by its name. *out is freed with
   * ReleaseFenceImport. Thread-safe. */
  FlStatus *(*ImportFence)(FlClient *client, const FlFence *fence, FlFenceImport **out);
  /* Imports a fence from an fd, which stays the caller's. Thread-safe. */
  FlStatus *(*ImportFenceFd)(FlClient *client, int fd, FlFenceImport **out);
  /* Imports a named fence the service opens itself. Thread-safe. */
  FlStatus *(*ImportFenceName)(FlClient *client, const char *shm_name, FlFenceImport **out);
  /* The service's id of the import, owned by the handle. Thread-safe. */
  const char *(*GetFenceImportId)(const FlFenceImport *fence);
  /* Drops this handle; the service releases the import once no session made from it is left.
   * Accepts NULL. */
  void (*ReleaseFenceImport)(FlFenceImport *fence);

  /* ---- sessions ------------------------------------------------------------------------------ */

  /* Binds a model to views and fences. Bounds, datatypes and shapes are checked by the service
   * (an out-of-bounds view fails with FL_ERROR_INVALID_ARGUMENT). The session holds the imports
   * it uses until it is released. *out is freed with ReleaseSession. Thread-safe. */
  FlStatus *(*CreateSession)(FlClient *client, const FlSessionDesc *desc, FlSession **out);
  /* A handle for an existing session of this client by its id (e.g. from a log or another
   * thread). No message is sent: an unknown id fails at Run with FL_ERROR_NOT_FOUND. The handle
   * does not own the session: ReleaseSession on it frees only the handle. Thread-safe. */
  FlStatus *(*OpenSession)(FlClient *client, const char *session_id, FlSession **out);
  /* The session's id, owned by the handle. Thread-safe. */
  const char *(*GetSessionId)(const FlSession *session);
  /* One frame: the service waits until the wait fence reaches wait_value (at most timeout_ms;
   * FL_TIMEOUT_DEFAULT: the service's default), runs the model in place and sets the signal fence
   * to signal_value (0: wait_value). When Run returns FL_OK the outputs are written and the
   * signal fence is set. A timeout fails with FL_ERROR_TIMED_OUT having run and signalled
   * nothing. out may be NULL; else the caller's struct is filled. Thread-safe (serialized per
   * client). */
  FlStatus *(*Run)(FlSession *session, uint64_t wait_value, uint64_t signal_value,
                   uint32_t timeout_ms, FlRunResult *out);
  /* Releases the session in the service (waiting for a run in flight there) and frees the
   * handle, then drops its hold on its imports. Accepts NULL. */
  void (*ReleaseSession)(FlSession *session);

  /* ---- introspection -------------------------------------------------------------------------- */

  /* The service's description of one of this client's objects as JSON; kind is "memory",
   * "fence" or "session". *out_json is the caller's, freed with FreeString. Thread-safe. */
  FlStatus *(*Describe)(FlClient *client, const char *kind, const char *id, char **out_json);
  /* Frees a string this library allocated for the caller. Accepts NULL. */
  void (*FreeString)(char *str);
  /* The library's version ("0.1.0"), a static string. Thread-safe. */
  const char *(*GetVersionString)(void);

  /* ---- version 2: D3D12 (docs/windows.md, "D3D12") ------------------------------------------- */

  /* Imports a D3D12 heap (kind "d3d12_heap") or committed resource ("d3d12_resource") by the
   * UTF-8 name given to ID3D12Device::CreateSharedHandle. allocation_size_bytes: the heap's
   * D3D12_HEAP_DESC.SizeInBytes, or the resource's GetResourceAllocationInfo size; [offset_bytes,
   * offset_bytes + size_bytes) is mapped (size_bytes 0: to the end). adapter_luid: the
   * renderer's ID3D12Device::GetAdapterLuid() as ((uint64_t)HighPart << 32) | LowPart. Only a
   * Windows service with an NVIDIA GPU imports it; elsewhere FL_ERROR_UNSUPPORTED says why.
   * *out is freed with ReleaseMemoryImport. Thread-safe. */
  FlStatus *(*ImportD3D12Memory)(FlClient *client, const char *kind, const char *shared_name,
                                 uint64_t allocation_size_bytes, uint64_t offset_bytes,
                                 uint64_t size_bytes, uint64_t adapter_luid, FlAccess access,
                                 FlMemoryImport **out);
  /* Imports a shared ID3D12Fence (D3D12_FENCE_FLAG_SHARED) by its CreateSharedHandle name; the
   * service waits and signals it on the GPU. *out is freed with ReleaseFenceImport.
   * Thread-safe. */
  FlStatus *(*ImportD3D12Fence)(FlClient *client, const char *shared_name,
                                uint64_t adapter_luid, FlFenceImport **out);

  /* ---- version 3: asynchronous runs and streaming sessions ----------------------------------- */

  /* Run, answered early where the session has a queue: a session over GPU memory replies once
   * the wait, the model and the signal are enqueued on its stream (FL_OK then means "queued in
   * order"; the signal fence tells when they are done, and wait_us is 0). A host session runs
   * to completion exactly as Run does. Thread-safe (serialized per client). */
  FlStatus *(*RunAsync)(FlSession *session, uint64_t wait_value, uint64_t signal_value,
                        uint32_t timeout_ms, FlRunResult *out);
  /* A streaming session (docs/streaming.md): the service runs frame N by itself as soon as the
   * wait fence reaches N and then signals N, with no message per frame. policy "latest" (NULL)
   * runs the newest value and skips the ones it fell behind on, "every" runs each value;
   * spin_us < 0 takes the service's default spin; start 0 creates it paused. The two fences
   * must differ. Run and RunAsync on it fail with FL_ERROR_CONFLICT. *out is freed with
   * ReleaseSession, which stops it. Thread-safe. */
  FlStatus *(*CreateStreamingSession)(FlClient *client, const FlSessionDesc *desc,
                                      const char *policy, int64_t spin_us, int start,
                                      FlSession **out);
  /* Starts (or resumes) a streaming session; a no-op when it runs. When out_json is not NULL it
   * receives the session's description (JSON; the caller's, freed with FreeString). A
   * request-mode session fails with FL_ERROR_CONFLICT. Thread-safe. */
  FlStatus *(*StartSession)(FlSession *session, char **out_json);
  /* Pauses a streaming session: returns once the frame in flight is signalled. Values the wait
   * fence reaches meanwhile are handled by the policy at the next start. out_json as for
   * StartSession. Thread-safe. */
  FlStatus *(*PauseSession)(FlSession *session, char **out_json);
  /* Stops a streaming session and releases it in the service; out_json (as for StartSession)
   * receives its final description, with the frame counts. The handle then serves only
   * ReleaseSession, which frees local memory. Thread-safe. */
  FlStatus *(*StopSession)(FlSession *session, char **out_json);

  /* ---- version 4: client-side deadlines ------------------------------------------------------ */

  /* Sets the client-side deadline of every later call on this client that waits for the service:
   * connecting, sending and the reply must together take at most timeout_ns (Run and RunAsync:
   * timeout_ns plus the run's timeout_ms, 10 s for FL_TIMEOUT_DEFAULT, which the service may
   * legitimately spend waiting for the fence). Default FL_CLIENT_TIMEOUT_DEFAULT_NS (30 s);
   * FL_WAIT_FOREVER waits without deadline. A call whose deadline passes fails with
   * FL_ERROR_TIMED_OUT and closes the connection (the late reply would answer a request nobody
   * waits for): the service then releases the client's objects as when it disconnects, and every
   * later call fails with FL_ERROR_TRANSPORT; create a new client. So a service that hangs, rather
   * than dies, never hangs the caller. Thread-safe. */
  void (*SetClientTimeout)(FlClient *client, int64_t timeout_ns);
  /* CreateClient with the client-side deadline timeout_ns (as for SetClientTimeout) for the
   * connection and hello, kept for the client's later calls. Thread-safe. */
  FlStatus *(*CreateClientWithTimeout)(const char *socket_path, const char *client_name,
                                       int64_t timeout_ns, FlClient **out);

  /* ---- version 5: typed getters (no JSON to parse) --------------------------------------------- */
  /* Version 5 also put struct_size first in FlTensorView, FlSessionDesc and FlRunResult. A
   * program built against versions 1 to 4 keeps running: FlGetApi(4) serves the old layout. */

  /* What the service said when the client connected (GetServerInfo's JSON, parsed). *out is
   * freed with ReleaseServerInfo; it does not need the client afterwards. Thread-safe. */
  FlStatus *(*GetServerDetails)(const FlClient *client, FlServerInfo **out);
  /* The service's version ("0.1.0"), owned by the info. Thread-safe. */
  const char *(*GetServerVersion)(const FlServerInfo *info);
  /* The IPC protocol version the service speaks. Thread-safe. */
  uint32_t (*GetServerProtocol)(const FlServerInfo *info);
  /* 1 when the service imports memory of `kind` ("host_fd", "host_shm", "opaque_fd",
   * "cuda_ipc", "d3d12_heap", "d3d12_resource"), else 0: an unknown kind is a no. Thread-safe. */
  int (*CanImportMemory)(const FlServerInfo *info, const char *kind);
  /* The same for fences ("host_timeline", "vk_timeline_opaque_fd", "d3d12_fence"). */
  int (*CanImportFence)(const FlServerInfo *info, const char *kind);
  /* Why the service cannot import `kind` (memory or fence), owned by the info; NULL when it can
   * or gave no reason. Thread-safe. */
  const char *(*GetCapabilityReason)(const FlServerInfo *info, const char *kind);
  /* Accepts NULL. */
  void (*ReleaseServerInfo)(FlServerInfo *info);

  /* A model's metadata from the service: its name and, for each input and output, the name,
   * datatype and shape. version NULL: the model's only (or latest) version. Fails with
   * FL_ERROR_NOT_FOUND for an unknown model. *out is freed with ReleaseModelMetadata.
   * Thread-safe. */
  FlStatus *(*GetModelMetadata)(FlClient *client, const char *model, const char *version,
                                FlModelMetadata **out);
  /* The model's name, owned by the metadata. Thread-safe. */
  const char *(*GetModelName)(const FlModelMetadata *metadata);
  size_t (*GetModelInputCount)(const FlModelMetadata *metadata);
  size_t (*GetModelOutputCount)(const FlModelMetadata *metadata);
  /* Fills the caller's *out (struct_size set) for input or output `index`; an index past the
   * count fails with FL_ERROR_INVALID_ARGUMENT. Thread-safe. */
  FlStatus *(*GetModelInput)(const FlModelMetadata *metadata, size_t index, FlTensorInfo *out);
  FlStatus *(*GetModelOutput)(const FlModelMetadata *metadata, size_t index, FlTensorInfo *out);
  /* Accepts NULL. */
  void (*ReleaseModelMetadata)(FlModelMetadata *metadata);

  /* Bytes per element of a KServe datatype ("FP32": 4, "UINT8": 1, ...); 0 for an unknown one
   * or for "BYTES". Thread-safe. */
  size_t (*GetDatatypeSize)(const char *datatype);

  /* ---- version 6 ----------------------------------------------------------------------------- */

  /* ImportD3D12Fence with the fence's value now, current_value (ID3D12Fence::GetCompletedValue()):
   * CUDA cannot read an imported fence and its signal sets the value, so the service signals
   * only values above current_value and never moves the fence backwards (docs/windows.md).
   * ImportD3D12Fence states 0: right for a fence created at 0 and never signalled. Thread-safe. */
  FlStatus *(*ImportD3D12FenceAt)(FlClient *client, const char *shared_name,
                                  uint64_t adapter_luid, uint64_t current_value,
                                  FlFenceImport **out);
};

/* The function table for `version` (pass FL_API_VERSION), or NULL when this library cannot serve
 * it. The table is static and immutable. Thread-safe. */
FL_EXPORT const FlApi *FlGetApi(uint32_t version);

#ifdef __cplusplus
}
#endif

#endif
