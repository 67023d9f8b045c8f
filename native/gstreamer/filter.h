/* fencelinefilter: runs each video frame through a model in the fenceline service, sharing the
 * pipeline's own buffers with it (docs/gstreamer.md). */
#ifndef FENCELINE_GST_FILTER_H
#define FENCELINE_GST_FILTER_H

#include <gst/base/gstbasetransform.h>
#include <gst/video/video.h>

#include <fenceline/fenceline_client.h>

G_BEGIN_DECLS

#define FENCELINE_TYPE_FILTER (fenceline_filter_get_type())
G_DECLARE_FINAL_TYPE(FencelineFilter, fenceline_filter, FENCELINE, FILTER, GstBaseTransform)

/* One frame between submit and push: the buffer the service runs in place, and how it ended. */
typedef struct FlJob {
  GstBuffer *buffer;
  FlSession *session;
  guint64 value; /* the fence value that orders it: input ready at value, output at value */
  gboolean done;
  FlStatus *status; /* NULL when the run succeeded; else owned by the job */
} FlJob;

/* One buffer the service has imported: imported and bound once, run every time it comes back. */
typedef struct FlSlot {
  FlMemoryImport *memory;
  FlSession *session;
} FlSlot;

struct _FencelineFilter {
  GstBaseTransform parent;

  /* Properties, under the object lock. */
  gchar *model;
  gchar *socket;
  gchar *input_name;
  gchar *output_name;
  guint timeout_ms;
  guint service_timeout_ms; /* the client-side deadline of each call to the service */
  guint in_flight;

  /* The connection and what is bound on it; used by the streaming thread, and by the worker
   * only through the sessions of queued jobs (the client serializes calls). */
  const FlApi *api;
  FlClient *client;
  FlFence *ready, *done;
  FlFenceImport *ready_import, *done_import;
  GHashTable *slots; /* memory id (fdpool.h) -> FlSlot* */
  GstVideoInfo info;   /* the negotiated caps */
  gsize frame_bytes;   /* width * height * pixel stride: the tensor */
  gboolean zero_copy_layout; /* upstream's default layout is the packed tensor */
  gint64 shape[4];
  GstBufferPool *proposed; /* offered upstream in the allocation query */
  GstBufferPool *fallback; /* frames from anywhere else are copied into these buffers */
  guint64 last_value;
  guint depth; /* frames in flight, fixed at negotiation */

  /* The worker thread sends RUN for each job in order; the streaming thread pushes them in the
   * same order once done. */
  GThread *worker;
  GMutex lock;
  GCond cond;
  GQueue unsent;    /* jobs the worker has not taken yet */
  GQueue in_flight_jobs; /* every job not yet pushed or dropped, oldest first */
  gboolean quit;

  /* Counters (under lock), reported by the "stats" property and logged at stop. */
  guint64 frames, zero_copy_frames, copied_frames, imports;
  gboolean said_zero_copy, said_copy;
  gint posted_error; /* atomic: an error went to the bus this stream */
};

/* errors.c: every failure the service or the client reports becomes one GStreamer error. */

/* TRUE the first time in a stream: one error per stream (see post_status). */
gboolean first_error(FencelineFilter *self);
/* Posts `st` as an error message with the service's code and message, and frees it. */
void post_status(FencelineFilter *self, FlStatus *st, const char *what);

/* runs.c: the frames between submit and push. The worker thread sends RUN for each job in
 * submission order; the streaming thread pushes them in the same order once done. */

gpointer worker_main(gpointer data);
/* Drops every job not yet pushed, once the one the service runs now is done. */
void discard_jobs(FencelineFilter *self);
/* The oldest job's buffer once its run is done (blocks for it when `wait`); an error posted and
 * GST_FLOW_ERROR when its run failed. */
GstFlowReturn pop_done(FencelineFilter *self, gboolean wait, GstBuffer **out);
/* Pushes every job downstream in order (EOS, new caps). */
GstFlowReturn drain(FencelineFilter *self);

G_END_DECLS

#endif
