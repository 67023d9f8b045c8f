/* fenceline_wire.h: the one source of the IPC wire contract (docs/ipc.md) and of the error
 * codes every transport reports. The service's importer (module.cpp, which hands the values to
 * Python as fenceline._native.WIRE_* and ERROR_CODES) and the C client include it; a test checks
 * that the Python protocol module and fenceline.errors agree with it.
 *
 * Plain C11 and C++11, only <stddef.h> and <stdint.h>, and no OS calls: the same header serves every platform
 * (the Windows port included). Everything here is append-only: a value, once shipped, keeps its
 * meaning; new kinds, codes and trailing struct fields are added, never renumbered.
 *
 * All fields travel little-endian. The structs below describe the layout (the static asserts
 * pin every offset); readers decode byte by byte and never cast a received buffer to them. */
#ifndef FENCELINE_WIRE_H
#define FENCELINE_WIRE_H

#include <stddef.h>
#include <stdint.h>

#define FL_WIRE_MAGIC 0x50494C46u /* "FLIP" in memory */
#define FL_WIRE_VERSION 1u
#define FL_WIRE_HEADER_SIZE 16u
#define FL_WIRE_MAX_FRAME 65536u /* one SOCK_SEQPACKET message, header included */
#define FL_WIRE_MAX_FDS 4u
#define FL_WIRE_REPLY_BIT 0x8000u       /* a successful reply's kind is the request's | this */
#define FL_WIRE_TIMEOUT_DEFAULT 0xFFFFFFFFu /* RUN timeout_ms: the service's default */
#define FL_WIRE_SESSION_ID_BYTES 16u

/* Frame kinds. Control kinds carry UTF-8 JSON bodies (the same fields as the HTTP API); RUN,
 * RUN_ASYNC and their reply are the fixed structs below; ERROR is a u32 code then JSON
 * {"error": message, "code": name}. */
#define FL_WIRE_KINDS(X)                                                                         \
  X(HELLO, 0x0001)                                                                               \
  X(IMPORT_MEMORY, 0x0002)                                                                       \
  X(RELEASE_MEMORY, 0x0003)                                                                      \
  X(IMPORT_FENCE, 0x0004)                                                                        \
  X(RELEASE_FENCE, 0x0005)                                                                       \
  X(CREATE_SESSION, 0x0006)                                                                      \
  X(RELEASE_SESSION, 0x0007)                                                                     \
  X(DESCRIBE, 0x0008)                                                                            \
  X(RUN, 0x0010)                                                                                 \
  X(RUN_ASYNC, 0x0011) /* RUN's body; a CUDA session replies once the work is enqueued */       \
  X(START_SESSION, 0x0020) /* streaming sessions: body {"id"}, reply the description */         \
  X(PAUSE_SESSION, 0x0021)                                                                       \
  X(STOP_SESSION, 0x0022)                                                                        \
  X(OPEN_RUN_PAGE, 0x0030) /* one fd: a sealed memfd, the run page (run_page.h); body {} */     \
  X(NUDGE, 0x0031) /* no body, never answered: look at the run page */                          \
  X(ERROR, 0x7FFF)

#define FL_WIRE_KIND_ENUM_(name, value) FL_KIND_##name = value,
enum FlWireKind { FL_WIRE_KINDS(FL_WIRE_KIND_ENUM_) FL_KIND_END_ };
#undef FL_WIRE_KIND_ENUM_

/* Error codes, by what the caller should do next. X(NAME, number, "stable name", "action").
 * 0 is success and never travels. The service's exception classes (fenceline.errors) carry
 * these numbers; the C client's FlErrorCode is generated from this list. */
#define FL_WIRE_ERRORS(X)                                                                        \
  X(INTERNAL, 1, "internal", "a bug or an OS failure; the message says which")                   \
  X(INVALID_ARGUMENT, 2, "invalid_argument", "fix the call: a value is out of range or malformed") \
  X(NOT_FOUND, 3, "not_found", "the model, memory, fence or session does not exist")            \
  X(CONFLICT, 4, "conflict", "the object's state forbids it (in use, value not above)")          \
  X(UNSUPPORTED, 5, "unsupported", "this build or machine cannot do it")                         \
  X(TIMED_OUT, 6, "timed_out", "the fence did not reach the value in time; the reply says whether the frame is still queued (docs/ipc.md)")         \
  X(RESOURCE_EXHAUSTED, 7, "resource_exhausted", "a limit was reached; release something or retry") \
  X(DEVICE_LOST, 8, "device_lost", "the peer behind a fence is gone (abandoned, error)")        \
  X(INVALID_REQUEST, 9, "invalid_request", "the service could not parse the request")           \
  X(MODEL, 10, "model_error", "the model failed on this input")                                  \
  X(PERMISSION_DENIED, 11, "permission_denied", "this uid is not on the service's allow-list")  \
  X(UNAUTHENTICATED, 12, "unauthenticated", "a bearer token is missing (HTTP only)")            \
  X(UNAVAILABLE, 13, "unavailable", "the service is shutting down: reconnect once it is back")

#define FL_WIRE_ERROR_ENUM_(name, value, code, action) FL_WIRE_ERROR_##name = value,
enum FlWireError { FL_WIRE_OK = 0, FL_WIRE_ERRORS(FL_WIRE_ERROR_ENUM_) FL_WIRE_ERROR_END_ };
#undef FL_WIRE_ERROR_ENUM_

/* The header of every frame. */
typedef struct FlWireHeader {
  uint32_t magic;       /* FL_WIRE_MAGIC */
  uint16_t version;     /* FL_WIRE_VERSION */
  uint16_t kind;        /* FlWireKind; | FL_WIRE_REPLY_BIT in a successful reply */
  uint32_t request_id;  /* chosen by the client, echoed in the reply; 0 answers an unreadable frame */
  uint32_t body_length; /* exactly the bytes after the header */
} FlWireHeader;

/* The body of RUN and RUN_ASYNC. */
typedef struct FlWireRun {
  uint8_t session_id[FL_WIRE_SESSION_ID_BYTES]; /* the session id's 32 hex digits as bytes */
  uint64_t wait_value;                          /* wait until the input fence reaches this */
  uint64_t signal_value;                        /* then set the output fence to this (0: wait_value) */
  uint32_t timeout_ms;                          /* FL_WIRE_TIMEOUT_DEFAULT: the service's default */
  uint32_t flags;                               /* 0; other values are refused */
} FlWireRun;

/* The body of a RUN or RUN_ASYNC reply (kind RUN | FL_WIRE_REPLY_BIT for both). */
typedef struct FlWireRunReply {
  uint64_t signal_value; /* the value the output fence was (or, async, will be) set to */
  uint32_t wait_us;
  uint32_t infer_us;
  uint32_t total_us;
  uint32_t flags; /* FL_WIRE_REPLY_* bits; a client ignores those it does not know */
} FlWireRunReply;

/* A RUN reply's flags are set only on a connection whose HELLO named FL_WIRE_FEATURE_REPLY_FLAGS
 * in its "features"; on any other the word stays 0, as it was before flags were defined
 * (docs/ipc.md, "HELLO"). */
#define FL_WIRE_FEATURE_REPLY_FLAGS "reply_flags"

/* CPUS_SHARED: the service's runs on the CPU share its cores with other
 * renderers' runs, and its onnxruntime pools then take only the cores nothing else wants
 * (runtime/ort_options.py): a client that spins or stays runnable while it waits takes a core
 * from the model's run. The Python client then neither naps nor stays runnable (docs/fences.md,
 * "Why spin first"). */
#define FL_WIRE_REPLY_CPUS_SHARED 0x1u

/* The fixed part of an ERROR body; the JSON follows. */
typedef struct FlWireErrorBody {
  uint32_t code; /* FlWireError */
} FlWireErrorBody;

#if defined(__cplusplus)
#define FL_WIRE_STATIC_ASSERT(cond, msg) static_assert(cond, msg)
#else
#define FL_WIRE_STATIC_ASSERT(cond, msg) _Static_assert(cond, msg)
#endif

FL_WIRE_STATIC_ASSERT(sizeof(FlWireHeader) == FL_WIRE_HEADER_SIZE, "header is 16 bytes");
FL_WIRE_STATIC_ASSERT(offsetof(FlWireHeader, kind) == 6, "kind at 6");
FL_WIRE_STATIC_ASSERT(offsetof(FlWireHeader, request_id) == 8, "request_id at 8");
FL_WIRE_STATIC_ASSERT(offsetof(FlWireHeader, body_length) == 12, "body_length at 12");
FL_WIRE_STATIC_ASSERT(sizeof(FlWireRun) == 40, "RUN body is 40 bytes");
FL_WIRE_STATIC_ASSERT(offsetof(FlWireRun, wait_value) == 16, "wait_value at 16");
FL_WIRE_STATIC_ASSERT(offsetof(FlWireRun, signal_value) == 24, "signal_value at 24");
FL_WIRE_STATIC_ASSERT(offsetof(FlWireRun, timeout_ms) == 32, "timeout_ms at 32");
FL_WIRE_STATIC_ASSERT(offsetof(FlWireRun, flags) == 36, "flags at 36");
FL_WIRE_STATIC_ASSERT(sizeof(FlWireRunReply) == 24, "RUN reply body is 24 bytes");
FL_WIRE_STATIC_ASSERT(offsetof(FlWireRunReply, wait_us) == 8, "wait_us at 8");
FL_WIRE_STATIC_ASSERT(offsetof(FlWireRunReply, total_us) == 16, "total_us at 16");
FL_WIRE_STATIC_ASSERT(sizeof(FlWireErrorBody) == 4, "ERROR code is 4 bytes");

#endif
