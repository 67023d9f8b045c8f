#include "fdpool.h"

#include <errno.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include <gst/allocators/gstfdmemory.h>

GST_DEBUG_CATEGORY_EXTERN(fenceline_filter_debug);
#define GST_CAT_DEFAULT fenceline_filter_debug

struct _FencelineFdPool {
  GstBufferPool parent;
  GstAllocator *allocator;
  guint size;
};

G_DEFINE_TYPE(FencelineFdPool, fenceline_fd_pool, GST_TYPE_BUFFER_POOL)

G_DEFINE_QUARK(fenceline-memory-id, memory_id)

guint64 fenceline_fd_pool_memory_id(GstMemory *mem) {
  gpointer id = gst_mini_object_get_qdata(GST_MINI_OBJECT(mem), memory_id_quark());
  return (guint64)GPOINTER_TO_SIZE(id);
}

static gboolean pool_set_config(GstBufferPool *bp, GstStructure *config) {
  FencelineFdPool *self = FENCELINE_FD_POOL(bp);
  GstCaps *caps = NULL;
  guint size = 0, min = 0, max = 0;
  if (!gst_buffer_pool_config_get_params(config, &caps, &size, &min, &max) || size == 0) {
    GST_WARNING_OBJECT(self, "a pool of memfds needs a buffer size");
    return FALSE;
  }
  self->size = size;
  return GST_BUFFER_POOL_CLASS(fenceline_fd_pool_parent_class)->set_config(bp, config);
}

static GstFlowReturn pool_alloc_buffer(GstBufferPool *bp, GstBuffer **out,
                                       GstBufferPoolAcquireParams *params) {
  (void)params;
  FencelineFdPool *self = FENCELINE_FD_POOL(bp);
  static guint64 last_id; /* atomically incremented: pools in several pipelines share it */

  /* Sealing stays allowed: the service seals the memfd against shrinking when it imports it,
   * so a mapping it holds can never lose its pages. */
  int fd = memfd_create("fenceline-gst", MFD_CLOEXEC | MFD_ALLOW_SEALING);
  if (fd < 0) {
    GST_ERROR_OBJECT(self, "memfd_create failed: %s", g_strerror(errno));
    return GST_FLOW_ERROR;
  }
  if (ftruncate(fd, self->size) != 0) {
    GST_ERROR_OBJECT(self, "sizing a memfd to %u bytes failed: %s", self->size, g_strerror(errno));
    close(fd);
    return GST_FLOW_ERROR;
  }
  /* KEEP_MAPPED: one mmap for the buffer's life instead of one per gst_buffer_map. */
  GstMemory *mem = gst_fd_allocator_alloc(self->allocator, fd, self->size,
                                          GST_FD_MEMORY_FLAG_KEEP_MAPPED);
  if (mem == NULL) {
    close(fd);
    return GST_FLOW_ERROR;
  }
  guint64 id = __atomic_add_fetch(&last_id, 1, __ATOMIC_RELAXED);
  gst_mini_object_set_qdata(GST_MINI_OBJECT(mem), memory_id_quark(), GSIZE_TO_POINTER(id), NULL);
  GstBuffer *buf = gst_buffer_new();
  gst_buffer_append_memory(buf, mem);
  *out = buf;
  return GST_FLOW_OK;
}

static void pool_finalize(GObject *obj) {
  FencelineFdPool *self = FENCELINE_FD_POOL(obj);
  gst_clear_object(&self->allocator);
  G_OBJECT_CLASS(fenceline_fd_pool_parent_class)->finalize(obj);
}

static void fenceline_fd_pool_class_init(FencelineFdPoolClass *klass) {
  G_OBJECT_CLASS(klass)->finalize = pool_finalize;
  GstBufferPoolClass *pool_class = GST_BUFFER_POOL_CLASS(klass);
  pool_class->set_config = pool_set_config;
  pool_class->alloc_buffer = pool_alloc_buffer;
}

static void fenceline_fd_pool_init(FencelineFdPool *self) {
  self->allocator = gst_fd_allocator_new();
}

GstBufferPool *fenceline_fd_pool_new(void) {
  return GST_BUFFER_POOL(g_object_new(FENCELINE_TYPE_FD_POOL, NULL));
}
