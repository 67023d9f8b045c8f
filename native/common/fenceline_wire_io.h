/* fenceline_wire_io.h: the one reader and writer of the fixed frames of fenceline_wire.h (the
 * header, RUN and RUN_ASYNC, their reply, an ERROR's code). Every field is read and written here
 * by its offsetof() in the wire structs, byte by byte, little-endian: no caller names an offset
 * or casts a received buffer. The service's importer (host_runs.cpp) and the C client
 * (client.c) use it; the GStreamer element reaches the wire only through the C client.
 *
 * Plain C11 and C++11, header-only (static inline), no OS calls, like fenceline_wire.h. */
#ifndef FENCELINE_WIRE_IO_H
#define FENCELINE_WIRE_IO_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "fenceline_wire.h"

#define FL_WIRE_RUN_FRAME_SIZE (FL_WIRE_HEADER_SIZE + sizeof(FlWireRun))
#define FL_WIRE_RUN_REPLY_FRAME_SIZE (FL_WIRE_HEADER_SIZE + sizeof(FlWireRunReply))

static inline void fl_wire_put_u16(uint8_t *p, uint16_t v) {
  p[0] = (uint8_t)v;
  p[1] = (uint8_t)(v >> 8);
}

static inline void fl_wire_put_u32(uint8_t *p, uint32_t v) {
  for (int i = 0; i < 4; ++i) p[i] = (uint8_t)(v >> (8 * i));
}

static inline void fl_wire_put_u64(uint8_t *p, uint64_t v) {
  for (int i = 0; i < 8; ++i) p[i] = (uint8_t)(v >> (8 * i));
}

static inline uint16_t fl_wire_get_u16(const uint8_t *p) {
  return (uint16_t)(p[0] | (p[1] << 8));
}

static inline uint32_t fl_wire_get_u32(const uint8_t *p) {
  return (uint32_t)p[0] | ((uint32_t)p[1] << 8) | ((uint32_t)p[2] << 16) | ((uint32_t)p[3] << 24);
}

static inline uint64_t fl_wire_get_u64(const uint8_t *p) {
  return (uint64_t)fl_wire_get_u32(p) | ((uint64_t)fl_wire_get_u32(p + 4) << 32);
}

/* A frame's header; p holds FL_WIRE_HEADER_SIZE bytes. */
static inline void fl_wire_put_header(uint8_t *p, uint16_t kind, uint32_t request_id,
                                      uint32_t body_length) {
  fl_wire_put_u32(p + offsetof(FlWireHeader, magic), FL_WIRE_MAGIC);
  fl_wire_put_u16(p + offsetof(FlWireHeader, version), (uint16_t)FL_WIRE_VERSION);
  fl_wire_put_u16(p + offsetof(FlWireHeader, kind), kind);
  fl_wire_put_u32(p + offsetof(FlWireHeader, request_id), request_id);
  fl_wire_put_u32(p + offsetof(FlWireHeader, body_length), body_length);
}

static inline void fl_wire_get_header(const uint8_t *p, FlWireHeader *h) {
  h->magic = fl_wire_get_u32(p + offsetof(FlWireHeader, magic));
  h->version = fl_wire_get_u16(p + offsetof(FlWireHeader, version));
  h->kind = fl_wire_get_u16(p + offsetof(FlWireHeader, kind));
  h->request_id = fl_wire_get_u32(p + offsetof(FlWireHeader, request_id));
  h->body_length = fl_wire_get_u32(p + offsetof(FlWireHeader, body_length));
}

/* Whether a frame of n bytes has this protocol's magic, version and a body_length that matches
 * what arrived; fills h when it has a whole header. */
static inline int fl_wire_header_ok(const uint8_t *p, size_t n, FlWireHeader *h) {
  if (n < FL_WIRE_HEADER_SIZE) return 0;
  fl_wire_get_header(p, h);
  return h->magic == FL_WIRE_MAGIC && h->version == FL_WIRE_VERSION &&
         h->body_length == n - FL_WIRE_HEADER_SIZE;
}

/* A RUN or RUN_ASYNC body; body holds sizeof(FlWireRun) bytes. */
static inline void fl_wire_put_run(uint8_t *body, const FlWireRun *r) {
  memcpy(body + offsetof(FlWireRun, session_id), r->session_id, FL_WIRE_SESSION_ID_BYTES);
  fl_wire_put_u64(body + offsetof(FlWireRun, wait_value), r->wait_value);
  fl_wire_put_u64(body + offsetof(FlWireRun, signal_value), r->signal_value);
  fl_wire_put_u32(body + offsetof(FlWireRun, timeout_ms), r->timeout_ms);
  fl_wire_put_u32(body + offsetof(FlWireRun, flags), r->flags);
}

static inline void fl_wire_get_run(const uint8_t *body, FlWireRun *r) {
  memcpy(r->session_id, body + offsetof(FlWireRun, session_id), FL_WIRE_SESSION_ID_BYTES);
  r->wait_value = fl_wire_get_u64(body + offsetof(FlWireRun, wait_value));
  r->signal_value = fl_wire_get_u64(body + offsetof(FlWireRun, signal_value));
  r->timeout_ms = fl_wire_get_u32(body + offsetof(FlWireRun, timeout_ms));
  r->flags = fl_wire_get_u32(body + offsetof(FlWireRun, flags));
}

/* A RUN reply's body; body holds sizeof(FlWireRunReply) bytes. */
static inline void fl_wire_put_run_reply(uint8_t *body, const FlWireRunReply *r) {
  fl_wire_put_u64(body + offsetof(FlWireRunReply, signal_value), r->signal_value);
  fl_wire_put_u32(body + offsetof(FlWireRunReply, wait_us), r->wait_us);
  fl_wire_put_u32(body + offsetof(FlWireRunReply, infer_us), r->infer_us);
  fl_wire_put_u32(body + offsetof(FlWireRunReply, total_us), r->total_us);
  fl_wire_put_u32(body + offsetof(FlWireRunReply, flags), r->flags);
}

static inline void fl_wire_get_run_reply(const uint8_t *body, FlWireRunReply *r) {
  r->signal_value = fl_wire_get_u64(body + offsetof(FlWireRunReply, signal_value));
  r->wait_us = fl_wire_get_u32(body + offsetof(FlWireRunReply, wait_us));
  r->infer_us = fl_wire_get_u32(body + offsetof(FlWireRunReply, infer_us));
  r->total_us = fl_wire_get_u32(body + offsetof(FlWireRunReply, total_us));
  r->flags = fl_wire_get_u32(body + offsetof(FlWireRunReply, flags));
}

/* A duration in ns as a reply's microseconds: whole microseconds, at most UINT32_MAX. */
static inline uint32_t fl_wire_micros(int64_t ns) {
  if (ns <= 0) return 0;
  const int64_t us = ns / 1000;
  return us > (int64_t)UINT32_MAX ? UINT32_MAX : (uint32_t)us;
}

/* An ERROR body's code; body holds sizeof(FlWireErrorBody) bytes. */
static inline uint32_t fl_wire_get_error_code(const uint8_t *body) {
  return fl_wire_get_u32(body + offsetof(FlWireErrorBody, code));
}

#endif
