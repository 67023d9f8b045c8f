/* fencelinefilter's errors: every failure the service or the client reports becomes one
 * GStreamer error (docs/gstreamer.md, "Errors"). */
#include "filter.h"

GST_DEBUG_CATEGORY_EXTERN(fenceline_filter_debug);
#define GST_CAT_DEFAULT fenceline_filter_debug

/* TRUE the first time in a stream: one error per stream (see post_status). */
gboolean first_error(FencelineFilter *self) {
  return !g_atomic_int_exchange(&self->posted_error, TRUE);
}

/* Posts `st` as an error message carrying the service's code and message (also as structured
 * details: fenceline-code, fenceline-code-name), and frees it. */
void post_status(FencelineFilter *self, FlStatus *st, const char *what) {
  const FlApi *api = self->api;
  /* One error per stream: after failed caps the base class renegotiates on the next buffer and
   * would fail the same way; a second error during preroll can leave gst-launch-1.0 waiting. */
  if (!first_error(self)) {
    GST_DEBUG_OBJECT(self, "%s: %s (already reported an error)", what, api->GetErrorMessage(st));
    api->ReleaseStatus(st);
    return;
  }
  FlErrorCode code = api->GetErrorCode(st);
  const char *name = api->GetErrorCodeName(code);
  const char *msg = api->GetErrorMessage(st);
  switch (code) {
    case FL_ERROR_NOT_FOUND:
      GST_ELEMENT_ERROR_WITH_DETAILS(self, RESOURCE, NOT_FOUND,
                                     ("%s: fenceline error %s: %s", what, name, msg), (NULL),
                                     ("fenceline-code", G_TYPE_INT, (int)code,
                                      "fenceline-code-name", G_TYPE_STRING, name, NULL));
      break;
    case FL_ERROR_INVALID_ARGUMENT:
      GST_ELEMENT_ERROR_WITH_DETAILS(self, CORE, NEGOTIATION,
                                     ("%s: fenceline error %s: %s", what, name, msg), (NULL),
                                     ("fenceline-code", G_TYPE_INT, (int)code,
                                      "fenceline-code-name", G_TYPE_STRING, name, NULL));
      break;
    case FL_ERROR_TRANSPORT:
    case FL_ERROR_UNAVAILABLE:
    case FL_ERROR_PERMISSION_DENIED:
      GST_ELEMENT_ERROR_WITH_DETAILS(self, RESOURCE, OPEN_READ_WRITE,
                                     ("%s: fenceline error %s: %s", what, name, msg), (NULL),
                                     ("fenceline-code", G_TYPE_INT, (int)code,
                                      "fenceline-code-name", G_TYPE_STRING, name, NULL));
      break;
    default:
      GST_ELEMENT_ERROR_WITH_DETAILS(self, STREAM, FAILED,
                                     ("%s: fenceline error %s: %s", what, name, msg), (NULL),
                                     ("fenceline-code", G_TYPE_INT, (int)code,
                                      "fenceline-code-name", G_TYPE_STRING, name, NULL));
  }
  api->ReleaseStatus(st);
}
