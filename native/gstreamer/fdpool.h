/* A buffer pool whose every buffer is one memfd wrapped as GstFdMemory: memory the fenceline
 * service can map by fd, so frames written into it reach the model without a copy. */
#ifndef FENCELINE_GST_FDPOOL_H
#define FENCELINE_GST_FDPOOL_H

#include <gst/gst.h>

G_BEGIN_DECLS

#define FENCELINE_TYPE_FD_POOL (fenceline_fd_pool_get_type())
G_DECLARE_FINAL_TYPE(FencelineFdPool, fenceline_fd_pool, FENCELINE, FD_POOL, GstBufferPool)

/* A new pool; configure it with gst_buffer_pool_config_set_params as any pool. */
GstBufferPool *fenceline_fd_pool_new(void);

/* The id this process gave `mem` when a FencelineFdPool allocated it, unique for the life of
 * the process (never reused, so a cache keyed by it cannot confuse two memfds); 0 for memory
 * any other allocator made. */
guint64 fenceline_fd_pool_memory_id(GstMemory *mem);

G_END_DECLS

#endif
