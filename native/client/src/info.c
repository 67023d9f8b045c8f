/* Typed getters over the service's JSON (API version 5): the hello reply's version and
 * capabilities, and a model's KServe metadata, so no engine parses JSON by hand. */
#include <stdlib.h>
#include <string.h>

#include "internal.h"

/* ---- server info ---------------------------------------------------------------------------- */

struct FlServerInfo {
  fl_jnode *root;
};

FlStatus *fl_server_details(const FlClient *c, FlServerInfo **out) {
  if (c == NULL || out == NULL)
    return fl_status(FL_ERROR_INVALID_ARGUMENT, "GetServerDetails: client and out must be set");
  const char *json = fl_client_server_info(c);
  fl_jnode *root = fl_json_parse(json, strlen(json));
  if (root == NULL || root->type != FL_JSON_OBJECT) {
    fl_json_free(root);
    return fl_status(FL_ERROR_PROTOCOL, "the service's hello reply is not a JSON object");
  }
  FlServerInfo *info = malloc(sizeof *info);
  if (info == NULL) {
    fl_json_free(root);
    return fl_status(FL_ERROR_RESOURCE_EXHAUSTED, "out of memory");
  }
  info->root = root;
  *out = info;
  return NULL;
}

const char *fl_server_version(const FlServerInfo *info) {
  const char *v = info != NULL ? fl_json_member_string(info->root, "version") : NULL;
  return v != NULL ? v : "";
}

uint32_t fl_server_protocol(const FlServerInfo *info) {
  const fl_jnode *p = info != NULL ? fl_json_member(info->root, "protocol") : NULL;
  return p != NULL && p->type == FL_JSON_INT && p->integer >= 0 && p->integer <= UINT32_MAX
             ? (uint32_t)p->integer
             : 0;
}

static int capable(const FlServerInfo *info, const char *group, const char *kind) {
  if (info == NULL || kind == NULL) return 0;
  const fl_jnode *caps = fl_json_member(info->root, "capabilities");
  const fl_jnode *yes = fl_json_member(fl_json_member(caps, group), kind);
  return yes != NULL && yes->type == FL_JSON_BOOL && yes->boolean;
}

int fl_can_import_memory(const FlServerInfo *info, const char *kind) {
  return capable(info, "memory", kind);
}

int fl_can_import_fence(const FlServerInfo *info, const char *kind) {
  return capable(info, "fences", kind);
}

const char *fl_capability_reason(const FlServerInfo *info, const char *kind) {
  if (info == NULL || kind == NULL) return NULL;
  const fl_jnode *caps = fl_json_member(info->root, "capabilities");
  return fl_json_member_string(fl_json_member(caps, "reasons"), kind);
}

void fl_server_info_release(FlServerInfo *info) {
  if (info == NULL) return;
  fl_json_free(info->root);
  free(info);
}

/* ---- model metadata -------------------------------------------------------------------------- */

typedef struct tensor {
  const char *name;
  const char *datatype;
  int64_t *shape;
  size_t rank;
} tensor;

struct FlModelMetadata {
  fl_jnode *root; /* owns the strings the tensors point at */
  const char *name;
  tensor *tensors; /* inputs, then outputs */
  size_t inputs, outputs;
};

void fl_model_metadata_release(FlModelMetadata *m) {
  if (m == NULL) return;
  for (size_t i = 0; m->tensors != NULL && i < m->inputs + m->outputs; ++i)
    free(m->tensors[i].shape);
  free(m->tensors);
  fl_json_free(m->root);
  free(m);
}

/* One {"name", "datatype", "shape"} entry; -1 when the service sent something else. */
static int read_tensor(const fl_jnode *n, tensor *t) {
  t->name = fl_json_member_string(n, "name");
  t->datatype = fl_json_member_string(n, "datatype");
  const fl_jnode *shape = fl_json_member(n, "shape");
  if (t->name == NULL || t->datatype == NULL || shape == NULL || shape->type != FL_JSON_ARRAY)
    return -1;
  t->rank = shape->count;
  t->shape = malloc((t->rank > 0 ? t->rank : 1) * sizeof *t->shape);
  if (t->shape == NULL) return -1;
  size_t i = 0;
  for (const fl_jnode *d = shape->child; d != NULL; d = d->next) {
    if (d->type != FL_JSON_INT) return -1;
    t->shape[i++] = d->integer;
  }
  return 0;
}

static FlStatus *read_metadata(FlModelMetadata *m) {
  const fl_jnode *ins = fl_json_member(m->root, "inputs");
  const fl_jnode *outs = fl_json_member(m->root, "outputs");
  m->name = fl_json_member_string(m->root, "name");
  if (m->name == NULL || ins == NULL || ins->type != FL_JSON_ARRAY || outs == NULL ||
      outs->type != FL_JSON_ARRAY)
    return fl_status(FL_ERROR_PROTOCOL, "the service's model metadata lacks name, inputs or "
                                        "outputs");
  m->tensors = calloc(ins->count + outs->count + 1, sizeof *m->tensors);
  if (m->tensors == NULL) return fl_status(FL_ERROR_RESOURCE_EXHAUSTED, "out of memory");
  size_t k = 0;
  for (const fl_jnode *group = ins; group != NULL; group = group == ins ? outs : NULL) {
    for (const fl_jnode *t = group->child; t != NULL; t = t->next) {
      /* Counted as read before reading, so release frees a shape read halfway. */
      if (group == ins)
        ++m->inputs;
      else
        ++m->outputs;
      if (read_tensor(t, &m->tensors[k++]) != 0)
        return fl_status(FL_ERROR_PROTOCOL,
                         "the service's model metadata has a malformed input or output");
    }
  }
  return NULL;
}

FlStatus *fl_model_metadata(FlClient *c, const char *model, const char *version,
                            FlModelMetadata **out) {
  if (c == NULL || model == NULL || out == NULL)
    return fl_status(FL_ERROR_INVALID_ARGUMENT,
                     "GetModelMetadata: client, model and out must be set");
  char body[1024];
  fl_json_writer w;
  fl_jw_init(&w, body, sizeof body);
  fl_jw_begin_object(&w);
  fl_jw_key(&w, "kind");
  fl_jw_string(&w, "model");
  fl_jw_key(&w, "id");
  fl_jw_string(&w, model);
  if (version != NULL) {
    fl_jw_key(&w, "version");
    fl_jw_string(&w, version);
  }
  fl_jw_end_object(&w);
  if (w.overflow)
    return fl_status(FL_ERROR_INVALID_ARGUMENT, "GetModelMetadata: the model name is too long");
  char *reply = NULL;
  size_t len = 0;
  FlStatus *st = fl_client_call(c, FL_KIND_DESCRIBE, body, w.len, -1, &reply, &len);
  if (st != NULL) return st;
  FlModelMetadata *m = calloc(1, sizeof *m);
  if (m == NULL) {
    free(reply);
    return fl_status(FL_ERROR_RESOURCE_EXHAUSTED, "out of memory");
  }
  m->root = fl_json_parse(reply, len);
  free(reply);
  st = m->root == NULL ? fl_status(FL_ERROR_PROTOCOL, "the service's model metadata is not JSON")
                       : read_metadata(m);
  if (st != NULL) {
    fl_model_metadata_release(m);
    return st;
  }
  *out = m;
  return NULL;
}

const char *fl_model_name(const FlModelMetadata *m) { return m != NULL ? m->name : ""; }
size_t fl_model_input_count(const FlModelMetadata *m) { return m != NULL ? m->inputs : 0; }
size_t fl_model_output_count(const FlModelMetadata *m) { return m != NULL ? m->outputs : 0; }

static FlStatus *tensor_info(const char *what, const FlModelMetadata *m, size_t first,
                             size_t count, size_t index, FlTensorInfo *out) {
  if (m == NULL || out == NULL)
    return fl_status(FL_ERROR_INVALID_ARGUMENT, "%s: metadata and out must be set", what);
  FlStatus *st = fl_check_struct_size(what, "FlTensorInfo", out->struct_size,
                                      FL_TENSOR_INFO_SIZE_V5, sizeof(FlTensorInfo));
  if (st != NULL) return st;
  if (index >= count)
    return fl_status(FL_ERROR_INVALID_ARGUMENT, "%s: index %zu, but model %s has %zu", what,
                     index, m->name, count);
  const tensor *t = &m->tensors[first + index];
  FlTensorInfo info = {sizeof info, t->name, t->datatype, t->shape, t->rank};
  size_t n = out->struct_size < sizeof info ? out->struct_size : sizeof info;
  memcpy((char *)out + sizeof info.struct_size, (const char *)&info + sizeof info.struct_size,
         n - sizeof info.struct_size);
  return NULL;
}

FlStatus *fl_model_input(const FlModelMetadata *m, size_t index, FlTensorInfo *out) {
  return tensor_info("GetModelInput", m, 0, m != NULL ? m->inputs : 0, index, out);
}

FlStatus *fl_model_output(const FlModelMetadata *m, size_t index, FlTensorInfo *out) {
  return tensor_info("GetModelOutput", m, m != NULL ? m->inputs : 0, m != NULL ? m->outputs : 0,
                     index, out);
}

/* ---- datatypes --------------------------------------------------------------------------------- */

size_t fl_datatype_size(const char *datatype) {
  static const struct {
    const char *name;
    size_t size;
  } sizes[] = {{"BOOL", 1}, {"UINT8", 1}, {"INT8", 1},   {"UINT16", 2}, {"INT16", 2},
               {"FP16", 2}, {"BF16", 2},  {"UINT32", 4}, {"INT32", 4},  {"FP32", 4},
               {"UINT64", 8}, {"INT64", 8}, {"FP64", 8}};
  if (datatype == NULL) return 0;
  for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; ++i)
    if (strcmp(datatype, sizes[i].name) == 0) return sizes[i].size;
  return 0;
}
