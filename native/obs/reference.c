/* fenceline_reference_filter: the bench's in-process comparison (docs/obs.md, "Measured"). It
 * runs the model the way in-process OBS plugins do: inside filter_video, on OBS's video thread,
 * with onnxruntime in OBS's own process. No C onnxruntime development package is reachable here
 * (Debian 12 has none; the PyPI wheel ships libonnxruntime.so but no header), so it embeds
 * Python and calls onnxruntime's Python binding over that same library, with the service's own
 * session options (fenceline.bench.obs_reference). Python adds tens of microseconds to a run;
 * the model's time is onnxruntime's either way. Not for users: the bench loads it. */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <dlfcn.h>
#include <obs-module.h>
#include <string.h>
#include <time.h>

OBS_DECLARE_MODULE()

typedef struct ref {
  PyObject *run; /* fenceline.bench.obs_reference.load(path)'s callable; under the GIL */
  long long frames, video_ns;
  char status[512];
} ref;

static int64_t now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

static const char *ref_name(void *unused) {
  (void)unused;
  return "in-process onnxruntime filter (fenceline bench)";
}

static void python_error(ref *r, const char *what) {
  PyObject *type, *value, *tb;
  PyErr_Fetch(&type, &value, &tb);
  PyObject *s = value ? PyObject_Str(value) : NULL;
  snprintf(r->status, sizeof r->status, "%s: %s", what, s ? PyUnicode_AsUTF8(s) : "?");
  blog(LOG_ERROR, "[fenceline reference] %s", r->status);
  Py_XDECREF(s);
  Py_XDECREF(type);
  Py_XDECREF(value);
  Py_XDECREF(tb);
}

static void ref_update(void *data, obs_data_t *settings) {
  ref *r = data;
  PyGILState_STATE g = PyGILState_Ensure();
  Py_CLEAR(r->run);
  const char *path = obs_data_get_string(settings, "model_path");
  PyObject *mod = PyImport_ImportModule("fenceline.bench.obs_reference");
  if (mod == NULL) {
    python_error(r, "cannot import fenceline.bench.obs_reference (PYTHONPATH?)");
  } else {
    r->run = PyObject_CallMethod(mod, "load", "si", path,
                                 (int)obs_data_get_int(settings, "intra_op_threads"));
    if (r->run == NULL)
      python_error(r, "cannot load the model");
    else
      snprintf(r->status, sizeof r->status, "running %s", path);
    Py_DECREF(mod);
  }
  PyGILState_Release(g);
}

static void proc_stats(void *data, calldata_t *cd) {
  ref *r = data;
  calldata_set_int(cd, "frames", r->frames);
  calldata_set_int(cd, "video_ns", r->video_ns);
  calldata_set_string(cd, "status", r->status);
}

static void *ref_create(obs_data_t *settings, obs_source_t *source) {
  if (!Py_IsInitialized()) {
    /* OBS opened this module with its symbols local; extension modules (numpy's, onnxruntime's)
     * resolve Python's C API from the global scope, so libpython goes there first. */
    if (dlopen(FL_LIBPYTHON, RTLD_NOW | RTLD_GLOBAL) == NULL)
      blog(LOG_WARNING, "[fenceline reference] %s: %s", FL_LIBPYTHON, dlerror());
    Py_InitializeEx(0);
    PyEval_SaveThread(); /* the GIL is taken per call, from whichever thread calls */
  }
  ref *r = bzalloc(sizeof *r);
  proc_handler_add(obs_source_get_proc_handler(source),
                   "void get_stats(out int frames, out int video_ns, out string status)",
                   proc_stats, r);
  ref_update(r, settings);
  return r;
}

static void ref_destroy(void *data) {
  ref *r = data;
  PyGILState_STATE g = PyGILState_Ensure();
  Py_CLEAR(r->run);
  PyGILState_Release(g);
  bfree(r);
}

static struct obs_source_frame *ref_video(void *data, struct obs_source_frame *frame) {
  ref *r = data;
  int64_t t0 = now_ns();
  if (r->run && (frame->format == VIDEO_FORMAT_RGBA || frame->format == VIDEO_FORMAT_BGRA) &&
      frame->linesize[0] == frame->width * 4) {
    PyGILState_STATE g = PyGILState_Ensure();
    Py_ssize_t size = (Py_ssize_t)frame->linesize[0] * frame->height;
    PyObject *view = PyMemoryView_FromMemory((char *)frame->data[0], size, PyBUF_WRITE);
    PyObject *res = view ? PyObject_CallFunction(r->run, "OII", view, frame->width,
                                                 frame->height)
                         : NULL;
    if (res == NULL)
      python_error(r, "the run failed");
    Py_XDECREF(res);
    Py_XDECREF(view);
    PyGILState_Release(g);
  }
  r->frames++;
  r->video_ns += now_ns() - t0;
  return frame;
}

static struct obs_source_info reference_filter = {
    .id = "fenceline_reference_filter",
    .type = OBS_SOURCE_TYPE_FILTER,
    .output_flags = OBS_SOURCE_VIDEO | OBS_SOURCE_ASYNC,
    .get_name = ref_name,
    .create = ref_create,
    .destroy = ref_destroy,
    .update = ref_update,
    .filter_video = ref_video,
};

bool obs_module_load(void) {
  obs_register_source(&reference_filter);
  return true;
}
