/* fencelinefilter's frames in flight: the worker sends RUN for each job in submission order, the
 * streaming thread pushes them in the same order once done (docs/gstreamer.md). */
#include "filter.h"

GST_DEBUG_CATEGORY_EXTERN(fenceline_filter_debug);
#define GST_CAT_DEFAULT fenceline_filter_debug

gpointer worker_main(gpointer data) {
  FencelineFilter *self = data;
  g_mutex_lock(&self->lock);
  for (;;) {
    while (!self->quit && g_queue_is_empty(&self->unsent)) g_cond_wait(&self->cond, &self->lock);
    if (self->quit) break;
    FlJob *job = g_queue_pop_head(&self->unsent);
    guint32 timeout = self->timeout_ms;
    g_mutex_unlock(&self->lock);
    /* The service waits for the input fence at job->value, runs the model over the buffer in
     * place and signals the output fence at job->value before it answers. */
    FlStatus *st = self->api->Run(job->session, job->value, job->value, timeout, NULL);
    g_mutex_lock(&self->lock);
    job->status = st;
    job->done = TRUE;
    g_cond_broadcast(&self->cond);
  }
  g_mutex_unlock(&self->lock);
  return NULL;
}

static void job_free(FencelineFilter *self, FlJob *job) {
  gst_clear_buffer(&job->buffer);
  self->api->ReleaseStatus(job->status);
  g_free(job);
}

/* Drops every job not yet pushed: those not sent at once, the one the service runs once it is
 * done (a run cannot be recalled; it ends within its deadline, `timeout` + `service-timeout`,
 * or at once if the service died).
 * Their buffers go back to their pools. */
void discard_jobs(FencelineFilter *self) {
  g_mutex_lock(&self->lock);
  FlJob *job;
  guint dropped = 0;
  while ((job = g_queue_pop_head(&self->unsent)) != NULL) job->done = TRUE; /* never sent */
  while ((job = g_queue_peek_head(&self->in_flight_jobs)) != NULL) {
    /* Only the job the worker runs now can still be not done. */
    while (!job->done && self->worker != NULL && !self->quit) g_cond_wait(&self->cond, &self->lock);
    g_queue_pop_head(&self->in_flight_jobs);
    job_free(self, job);
    dropped++;
  }
  g_mutex_unlock(&self->lock);
  if (dropped > 0) GST_INFO_OBJECT(self, "dropped %u frames in flight", dropped);
}

/* The oldest job's buffer once its run is done; blocks for it when `wait`, else answers NULL
 * with GST_FLOW_OK while it runs. */
GstFlowReturn pop_done(FencelineFilter *self, gboolean wait, GstBuffer **out) {
  *out = NULL;
  g_mutex_lock(&self->lock);
  FlJob *job = g_queue_peek_head(&self->in_flight_jobs);
  if (job == NULL || (!job->done && !wait)) {
    g_mutex_unlock(&self->lock);
    return GST_FLOW_OK;
  }
  while (!job->done) g_cond_wait(&self->cond, &self->lock);
  g_queue_pop_head(&self->in_flight_jobs);
  if (job->status == NULL) self->frames++;
  g_mutex_unlock(&self->lock);
  if (job->status != NULL) {
    FlStatus *st = job->status;
    job->status = NULL;
    post_status(self, st, "running the model");
    job_free(self, job);
    return GST_FLOW_ERROR;
  }
  *out = job->buffer;
  job->buffer = NULL;
  job_free(self, job);
  return GST_FLOW_OK;
}

/* Pushes every job in order (EOS, new caps): nothing the element holds outlives the stream. */
GstFlowReturn drain(FencelineFilter *self) {
  GstFlowReturn ret = GST_FLOW_OK;
  for (;;) {
    GstBuffer *buf = NULL;
    ret = pop_done(self, TRUE, &buf);
    if (ret != GST_FLOW_OK || buf == NULL) break;
    ret = gst_pad_push(GST_BASE_TRANSFORM_SRC_PAD(self), buf);
    if (ret != GST_FLOW_OK) break;
  }
  if (ret != GST_FLOW_OK) discard_jobs(self);
  return ret;
}
