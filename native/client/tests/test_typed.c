/* Checks of API version 5 against a live service (tests/native/test_c_client_typed.py runs them):
 * struct sizes, the frozen layouts of versions 1 to 4, server info and model metadata.
 *
 *   test_typed SOCKET CHECK   runs one check, prints "ok CHECK: detail", exits 0 (1 on failure)
 *   test_typed - list         prints the names of the checks
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "checks.h"

/* add_64x64's memory and fences, imported; the session is the check's. */
static void make_setup(setup *s) { make_imports(s, "c-typed-test", NULL, NULL, NULL); }

static void expect_y_is_x_plus_one(const setup *s) {
  for (int i = 0; i < ELEMENTS; ++i)
    if (s->y[i] != s->x[i] + 1.0f) FAIL("element %d: %g, not %g", i, (double)s->y[i],
                                         (double)s->x[i] + 1.0);
}

/* ---- struct sizes ----------------------------------------------------------------------------- */

static void check_struct_size_zero_is_refused_with_the_fix(void) {
  setup s;
  make_setup(&s);
  FlTensorView in = {sizeof(FlTensorView), "x", s.memory, 0, "FP32", SHAPE, 4};
  FlTensorView out = {sizeof(FlTensorView), "y", s.memory, NBYTES, "FP32", SHAPE, 4};
  FlSessionDesc d = {0, "add_64x64", &in, 1, &out, 1, s.ready_import, s.done_import};
  FlSession *session = NULL;
  FAILS_WITH(FL_ERROR_INVALID_ARGUMENT, api->CreateSession(s.client, &d, &session));
  EXPECT(strstr(detail, "struct_size is 0") && strstr(detail, "sizeof(FlSessionDesc)"));
  d.struct_size = sizeof d;
  out.struct_size = 8;
  FAILS_WITH(FL_ERROR_INVALID_ARGUMENT, api->CreateSession(s.client, &d, &session));
  EXPECT(strstr(detail, "CreateSession: output 0: struct_size is 8"));
  out.struct_size = sizeof out;
  OK(api->CreateSession(s.client, &d, &session));
  /* A result too small is refused before anything is sent: the frame does not run. */
  FlRunResult r = {.struct_size = 4};
  OK(api->SignalFence(s.ready, 1));
  FAILS_WITH(FL_ERROR_INVALID_ARGUMENT, api->Run(session, 1, 0, FL_TIMEOUT_DEFAULT, &r));
  EXPECT(strstr(detail, "sizeof(FlRunResult)"));
  EXPECT(api->GetFenceValue(s.done) == 0);
  api->ReleaseSession(session);
  free_setup(&s);
}

/* A program of a later version passes bigger structs; this library reads what it knows. */
typedef struct bigger_view {
  FlTensorView v;
  uint64_t later_field;
} bigger_view;

static void check_bigger_structs_of_later_versions_are_read(void) {
  setup s;
  make_setup(&s);
  bigger_view views[2] = {
      {{sizeof(bigger_view), "x", s.memory, 0, "FP32", SHAPE, 4}, 7},
      {{sizeof(bigger_view), "y", s.memory, NBYTES, "FP32", SHAPE, 4}, 7},
  };
  FlSessionDesc d = {sizeof d, "add_64x64", &views[0].v, 1, &views[1].v, 1, s.ready_import,
                     s.done_import};
  FlSession *session = NULL;
  OK(api->CreateSession(s.client, &d, &session));
  struct {
    FlRunResult r;
    uint64_t later_field;
  } big = {.r = {.struct_size = sizeof big}, .later_field = 99};
  for (int i = 0; i < ELEMENTS; ++i) s.x[i] = (float)i;
  OK(api->SignalFence(s.ready, 1));
  OK(api->Run(session, 1, 0, FL_TIMEOUT_DEFAULT, &big.r));
  EXPECT(big.r.signal_value == 1 && big.r.struct_size == sizeof big && big.later_field == 99);
  expect_y_is_x_plus_one(&s);
  api->ReleaseSession(session);
  free_setup(&s);
}

/* The layouts of versions 1 to 4, as a program built then has them. */
typedef struct view_v4 {
  const char *name;
  const FlMemoryImport *memory;
  uint64_t offset_bytes;
  const char *datatype;
  const int64_t *shape;
  size_t rank;
} view_v4;

typedef struct desc_v4 {
  const char *model;
  const view_v4 *inputs;
  size_t input_count;
  const view_v4 *outputs;
  size_t output_count;
  const FlFenceImport *wait_fence;
  const FlFenceImport *signal_fence;
} desc_v4;

typedef struct result_v4 {
  uint64_t signal_value;
  uint32_t wait_us, infer_us, total_us, reserved;
} result_v4;

static void check_programs_of_version_4_still_run(void) {
  const FlApi *v4 = FlGetApi(4);
  EXPECT(v4 != NULL && v4 != api && v4->CreateFrame == api->CreateFrame &&
         v4->SetClientTimeout == api->SetClientTimeout && FlGetApi(3) == v4);
  setup s;
  make_setup(&s);
  view_v4 in = {"x", s.memory, 0, "FP32", SHAPE, 4};
  view_v4 out = {"y", s.memory, NBYTES, "FP32", SHAPE, 4};
  desc_v4 d = {"add_64x64", &in, 1, &out, 1, s.ready_import, s.done_import};
  FlSession *session = NULL;
  OK(v4->CreateSession(s.client, (const FlSessionDesc *)(const void *)&d, &session));
  result_v4 r = {0, 0, 0, 0, 12345};
  for (uint64_t n = 1; n <= 2; ++n) {
    for (int i = 0; i < ELEMENTS; ++i) s.x[i] = (float)(i + (int)n);
    OK(api->SignalFence(s.ready, n));
    OK(v4->Run(session, n, 0, FL_TIMEOUT_DEFAULT, (FlRunResult *)(void *)&r));
    EXPECT(r.signal_value == n && r.reserved == 0);
    expect_y_is_x_plus_one(&s);
  }
  v4->ReleaseSession(session);
  free_setup(&s);
  snprintf(detail, sizeof detail, "2 frames through FlGetApi(4)'s layouts");
}

/* ---- typed getters ------------------------------------------------------------------------------ */

static void check_server_details(void) {
  FlClient *client = NULL;
  FlServerInfo *info = NULL;
  OK(api->CreateClient(socket_path, "c-typed-test", &client));
  OK(api->GetServerDetails(client, &info));
  api->ReleaseClient(client); /* the info does not need the client */
  EXPECT(strcmp(api->GetServerVersion(info), api->GetVersionString()) == 0);
  EXPECT(api->GetServerProtocol(info) == 1);
  EXPECT(api->CanImportMemory(info, "host_fd") == 1 && api->CanImportMemory(info, "host_shm"));
  EXPECT(api->CanImportFence(info, "host_timeline") == 1);
  EXPECT(api->CanImportMemory(info, "no_such_kind") == 0);
  EXPECT(api->CanImportFence(info, "host_fd") == 0 && api->CanImportMemory(info, NULL) == 0);
  EXPECT(api->GetCapabilityReason(info, "host_fd") == NULL);
  const char *why = api->GetCapabilityReason(info, "d3d12_heap");
  EXPECT(api->CanImportMemory(info, "d3d12_heap") == 0 && why != NULL && why[0] != '\0');
  snprintf(detail, sizeof detail, "service %s, protocol %u; d3d12_heap: %s",
           api->GetServerVersion(info), api->GetServerProtocol(info), why);
  api->ReleaseServerInfo(info);
  api->ReleaseServerInfo(NULL);
}

static void check_model_metadata(void) {
  FlClient *client = NULL;
  FlModelMetadata *meta = NULL;
  OK(api->CreateClient(socket_path, "c-typed-test", &client));
  OK(api->GetModelMetadata(client, "add_64x64", NULL, &meta));
  EXPECT(strcmp(api->GetModelName(meta), "add_64x64") == 0);
  EXPECT(api->GetModelInputCount(meta) == 1 && api->GetModelOutputCount(meta) == 1);
  FlTensorInfo x = {.struct_size = sizeof(FlTensorInfo)}, y = {.struct_size = sizeof y};
  OK(api->GetModelInput(meta, 0, &x));
  OK(api->GetModelOutput(meta, 0, &y));
  EXPECT(strcmp(x.name, "x") == 0 && strcmp(y.name, "y") == 0);
  EXPECT(strcmp(x.datatype, "FP32") == 0 && api->GetDatatypeSize(x.datatype) == 4);
  EXPECT(x.rank == 4 && memcmp(x.shape, SHAPE, sizeof SHAPE) == 0);
  FAILS_WITH(FL_ERROR_INVALID_ARGUMENT, api->GetModelOutput(meta, 1, &y));
  EXPECT(strstr(detail, "index 1, but model add_64x64 has 1"));
  FlTensorInfo small = {.struct_size = 1};
  FAILS_WITH(FL_ERROR_INVALID_ARGUMENT, api->GetModelInput(meta, 0, &small));
  api->ReleaseModelMetadata(meta);
  meta = NULL;
  FAILS_WITH(FL_ERROR_NOT_FOUND, api->GetModelMetadata(client, "no_such_model", NULL, &meta));
  EXPECT(meta == NULL);
  api->ReleaseModelMetadata(NULL);
  api->ReleaseClient(client);
  snprintf(detail, sizeof detail, "add_64x64: x FP32 [1,3,64,64] -> y");
}

/* A session made from nothing but the model's metadata: every view from GetModelInput and
 * GetModelOutput, offsets from GetDatatypeSize. */
static void check_session_from_metadata_runs(void) {
  setup s;
  make_setup(&s);
  FlModelMetadata *meta = NULL;
  OK(api->GetModelMetadata(s.client, "add_64x64", NULL, &meta));
  FlTensorView views[2];
  uint64_t offset = 0;
  for (size_t i = 0; i < 2; ++i) {
    FlTensorInfo t = {.struct_size = sizeof t};
    OK(i == 0 ? api->GetModelInput(meta, 0, &t) : api->GetModelOutput(meta, 0, &t));
    uint64_t bytes = api->GetDatatypeSize(t.datatype);
    for (size_t d = 0; d < t.rank; ++d) bytes *= (uint64_t)t.shape[d];
    FlTensorView v = {sizeof v, t.name, s.memory, offset, t.datatype, t.shape, t.rank};
    views[i] = v;
    offset += bytes;
  }
  EXPECT(offset == 2 * NBYTES);
  FlSessionDesc d = {sizeof d, api->GetModelName(meta), &views[0], 1, &views[1], 1,
                     s.ready_import, s.done_import};
  FlSession *session = NULL;
  OK(api->CreateSession(s.client, &d, &session));
  api->ReleaseModelMetadata(meta); /* CreateSession read the views during the call */
  for (int i = 0; i < ELEMENTS; ++i) s.x[i] = (float)i * 0.25f;
  OK(api->SignalFence(s.ready, 1));
  OK(api->Run(session, 1, 0, FL_TIMEOUT_DEFAULT, NULL));
  expect_y_is_x_plus_one(&s);
  api->ReleaseSession(session);
  free_setup(&s);
}

static void check_datatype_sizes(void) {
  EXPECT(api->GetDatatypeSize("FP16") == 2 && api->GetDatatypeSize("UINT8") == 1);
  EXPECT(api->GetDatatypeSize("INT64") == 8 && api->GetDatatypeSize("BOOL") == 1);
  EXPECT(api->GetDatatypeSize("BYTES") == 0 && api->GetDatatypeSize("fp32") == 0);
  EXPECT(api->GetDatatypeSize(NULL) == 0);
}

typedef struct check_entry {
  const char *name;
  void (*fn)(void);
} check_entry;

static const check_entry CHECKS[] = {
    {"struct_size_zero_is_refused_with_the_fix", check_struct_size_zero_is_refused_with_the_fix},
    {"bigger_structs_of_later_versions_are_read",
     check_bigger_structs_of_later_versions_are_read},
    {"programs_of_version_4_still_run", check_programs_of_version_4_still_run},
    {"server_details", check_server_details},
    {"model_metadata", check_model_metadata},
    {"session_from_metadata_runs", check_session_from_metadata_runs},
    {"datatype_sizes", check_datatype_sizes},
};

#define CHECK_COUNT (sizeof CHECKS / sizeof CHECKS[0])

int main(int argc, char **argv) {
  int status = start_checks(argc, argv, "test_typed SOCKET CHECK|list");
  if (status >= 0) return status;
  for (size_t i = 0; i < CHECK_COUNT; ++i) {
    if (strcmp(argv[2], "list") == 0) {
      printf("%s\n", CHECKS[i].name);
    } else if (strcmp(argv[2], CHECKS[i].name) == 0) {
      CHECKS[i].fn();
      printf("ok %s: %s\n", CHECKS[i].name, detail);
      return 0;
    }
  }
  if (strcmp(argv[2], "list") == 0) return 0;
  fprintf(stderr, "no check named %s\n", argv[2]);
  return 2;
}
