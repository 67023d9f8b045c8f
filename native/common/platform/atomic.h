/* Atomics on plain fields of a shared page, for C11 and C++17 on GCC, Clang and MSVC.
 *
 * The fence page is a documented plain layout shared across processes, so it cannot use
 * _Atomic or std::atomic members. GCC and Clang have __atomic builtins for plain fields; MSVC has
 * the Interlocked family, which are full barriers (stronger than the orders asked for here). On
 * x86-64 and ARM64 MSVC, aligned 32/64-bit loads and stores do not tear, and a volatile access
 * with /volatile:ms (the default on x86-64) orders like acquire/release; the explicit barrier
 * below keeps ARM64 correct too.
 */
#ifndef FENCELINE_PLATFORM_ATOMIC_H
#define FENCELINE_PLATFORM_ATOMIC_H

#include <stdint.h>

#if defined(_MSC_VER) && !defined(__clang__)
#include <intrin.h>

static __inline uint32_t fl_load_u32(const uint32_t *p) {
  uint32_t v = *(const volatile uint32_t *)p;
  _ReadWriteBarrier();
  __faststorefence();
  return v;
}
static __inline uint64_t fl_load_u64(const uint64_t *p) {
  uint64_t v = *(const volatile uint64_t *)p;
  _ReadWriteBarrier();
  __faststorefence();
  return v;
}
static __inline void fl_store_u32(uint32_t *p, uint32_t v) {
  _InterlockedExchange((volatile long *)p, (long)v);
}
static __inline void fl_store_u64(uint64_t *p, uint64_t v) {
  _InterlockedExchange64((volatile __int64 *)p, (__int64)v);
}
static __inline uint32_t fl_fetch_add_u32(uint32_t *p, uint32_t v) {
  return (uint32_t)_InterlockedExchangeAdd((volatile long *)p, (long)v);
}
/* 1 when *p held *expected and now holds desired; else 0 with *expected updated. */
static __inline int fl_cas_u64(uint64_t *p, uint64_t *expected, uint64_t desired) {
  __int64 seen = _InterlockedCompareExchange64((volatile __int64 *)p, (__int64)desired,
                                               (__int64)*expected);
  if ((uint64_t)seen == *expected) return 1;
  *expected = (uint64_t)seen;
  return 0;
}
static __inline void fl_fence_seq_cst(void) { __faststorefence(); }
static __inline void fl_cpu_pause(void) { _mm_pause(); }

#else

#define fl_load_u32(p) __atomic_load_n((p), __ATOMIC_ACQUIRE)
#define fl_load_u64(p) __atomic_load_n((p), __ATOMIC_ACQUIRE)
#define fl_store_u32(p, v) __atomic_store_n((p), (v), __ATOMIC_RELEASE)
#define fl_store_u64(p, v) __atomic_store_n((p), (v), __ATOMIC_RELEASE)
#define fl_fetch_add_u32(p, v) __atomic_fetch_add((p), (v), __ATOMIC_SEQ_CST)
#define fl_cas_u64(p, expected, desired)                                                  \
  __atomic_compare_exchange_n((p), (expected), (desired), 1, __ATOMIC_SEQ_CST, \
                              __ATOMIC_ACQUIRE)
#define fl_fence_seq_cst() __atomic_thread_fence(__ATOMIC_SEQ_CST)
#if defined(__x86_64__) || defined(__i386__)
#define fl_cpu_pause() __builtin_ia32_pause()
#elif defined(__aarch64__)
#define fl_cpu_pause() __asm__ __volatile__("yield")
#else
#define fl_cpu_pause() ((void)0)
#endif

#endif

#endif
