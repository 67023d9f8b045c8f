/* The client's lock: a slim reader/writer lock on Windows (MSVC has no pthreads), a pthread
 * mutex elsewhere. Only exclusive locking is used. */
#ifndef FENCELINE_CLIENT_MUTEX_H
#define FENCELINE_CLIENT_MUTEX_H

#if defined(_WIN32)
#ifndef WIN32_LEAN_AND_MEAN
#define WIN32_LEAN_AND_MEAN
#endif
#include <windows.h>

typedef SRWLOCK fl_mutex;
static inline int fl_mutex_init(fl_mutex *m) {
  InitializeSRWLock(m);
  return 0;
}
static inline void fl_mutex_destroy(fl_mutex *m) { (void)m; } /* an SRW lock owns nothing */
static inline void fl_mutex_lock(fl_mutex *m) { AcquireSRWLockExclusive(m); }
static inline void fl_mutex_unlock(fl_mutex *m) { ReleaseSRWLockExclusive(m); }

#else
#include <pthread.h>

typedef pthread_mutex_t fl_mutex;
static inline int fl_mutex_init(fl_mutex *m) { return pthread_mutex_init(m, NULL); }
static inline void fl_mutex_destroy(fl_mutex *m) { pthread_mutex_destroy(m); }
static inline void fl_mutex_lock(fl_mutex *m) { pthread_mutex_lock(m); }
static inline void fl_mutex_unlock(fl_mutex *m) { pthread_mutex_unlock(m); }
#endif

#endif
