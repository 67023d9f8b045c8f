/* The raw pipelined floor of `fenceline bench --gpu` (docs/gpu.md, "The raw floor").
 *
 * What the bench's renderer and service do for each frame, with neither fenceline nor
 * onnxruntime: two processes, as in the bench. The renderer (this process) owns a Vulkan device
 * and, per slot, an input and an output buffer exported as OPAQUE_FD and two exportable timeline
 * semaphores; it sends their fds to the service (a forked child) over a Unix socket. The service
 * imports them into CUDA (the device with the same UUID, its primary context) and gives each slot
 * its own stream. Per frame the renderer posts the frame (a counter in shared memory, where the
 * bench sends RUN_ASYNC), waits for the slot's previous frame (spinning on the counter, then
 * napping, then blocking, as fenceline's renderer does), and submits the fill of the input with a
 * signal of the frame's value; the service enqueues on the slot's stream a wait for that value,
 * the element-wise work (y = x + 1 over the frame), a signal of the output semaphore and an event.
 *
 * Both APIs are loaded at run time (libvulkan.so.1, libcuda.so.1) and their types are declared
 * from the documented ABI in gpu_floor_api.h, so a C compiler is all the bench needs to build it:
 *     cc -O2 -std=c11 -pthread -o gpu_floor gpu_floor.c -ldl
 * Usage: gpu_floor --width W --height H --frames N --round-trips N --warmup N --runs N --depths 1,3,8
 * It prints one JSON object on stdout; on failure a message on stderr and exit status 2.
 */
#define _GNU_SOURCE
#include "gpu_floor_api.h"

/* -------------------------------------------------------------- the two processes' protocol */
typedef struct {
  uint64_t nbytes;        /* one frame */
  uint64_t allocation_size[2 * MAX_SLOTS];
  uint32_t depth;         /* slots */
  uint32_t frames;        /* frames to enqueue, frame i on slot i % depth with value i/depth + 1 */
  uint8_t uuid[16];       /* the Vulkan device's deviceUUID */
} Setup;                  /* with 4 * depth fds: input, output, ready, done of each slot */

typedef struct {
  int ok;
  char message[500];
} Reply;

typedef struct {
  _Atomic uint64_t posted; /* frames the renderer has posted: the bench's RUN_ASYNC */
} Shared;

typedef union {
  char buf[CMSG_SPACE(sizeof(int) * 4 * MAX_SLOTS)];
  struct cmsghdr align;
} Control;

/* A message of one buffer, with room for a setup's fds. */
static struct msghdr message(struct iovec *iov, Control *ctl) {
  struct msghdr mh = {0};
  memset(ctl, 0, sizeof *ctl);
  mh.msg_iov = iov;
  mh.msg_iovlen = 1;
  mh.msg_control = ctl->buf;
  mh.msg_controllen = sizeof ctl->buf;
  return mh;
}

static void send_msg(int sock, const void *msg, size_t len, const int *fds, int nfds) {
  struct iovec iov = {(void *)msg, len};
  Control ctl;
  struct msghdr mh = message(&iov, &ctl);
  if (nfds > 0) {
    mh.msg_controllen = CMSG_SPACE(sizeof(int) * (size_t)nfds);
    struct cmsghdr *c = CMSG_FIRSTHDR(&mh);
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = CMSG_LEN(sizeof(int) * (size_t)nfds);
    memcpy(CMSG_DATA(c), fds, sizeof(int) * (size_t)nfds);
  } else {
    mh.msg_control = NULL;
    mh.msg_controllen = 0;
  }
  if (sendmsg(sock, &mh, 0) != (ssize_t)len) die("sendmsg: %s", strerror(errno));
}

/* Returns the message's fd count, or -1 when the peer closed the socket. */
static int recv_msg(int sock, void *msg, size_t len, int *fds, int max_fds) {
  struct iovec iov = {msg, len};
  Control ctl;
  struct msghdr mh = message(&iov, &ctl);
  ssize_t got = recvmsg(sock, &mh, MSG_CMSG_CLOEXEC);
  if (got == 0) return -1;
  if (got != (ssize_t)len) die("recvmsg: %s", got < 0 ? strerror(errno) : "a short message");
  int n = 0;
  for (struct cmsghdr *c = CMSG_FIRSTHDR(&mh); c; c = CMSG_NXTHDR(&mh, c)) {
    if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_RIGHTS) {
      n = (int)((c->cmsg_len - CMSG_LEN(0)) / sizeof(int));
      if (n > max_fds) die("too many fds in a message");
      memcpy(fds, CMSG_DATA(c), sizeof(int) * (size_t)n);
    }
  }
  return n;
}

/* ----------------------------------------------------------------------------- the service */
static int service_sock = -1;

static void service_fail(const char *fmt, ...) {
  Reply r = {0};
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(r.message, sizeof r.message, fmt, ap);
  va_end(ap);
  send_msg(service_sock, &r, sizeof r, NULL, 0);
  _exit(2);
}

/* One run: import the slots, enqueue each posted frame, check every slot's last output, and
 * release what the run imported. */
static void service_run(Shared *sh, const Setup *s, const int *fds, CUfunction fn) {
  CUexternalMemory mem[2 * MAX_SLOTS];
  CUdeviceptr ptr[2 * MAX_SLOTS];
  CUexternalSemaphore sem[2 * MAX_SLOTS];
  CUstream stream[MAX_SLOTS];
  CUevent event[MAX_SLOTS];
  for (uint32_t k = 0; k < s->depth; k++) {
    for (int j = 0; j < 2; j++) {
      CUmemDesc md = {0};
      md.type = 1; /* OPAQUE_FD */
      md.handle.fd = fds[4 * k + j];
      md.size = s->allocation_size[2 * k + j];
      md.flags = 1; /* dedicated */
      cu_check(cu.ImportExternalMemory(&mem[2 * k + j], &md), "cuImportExternalMemory");
      CUbufferDesc bd = {0, s->nbytes, 0, {0}};
      cu_check(cu.ExternalMemoryGetMappedBuffer(&ptr[2 * k + j], mem[2 * k + j], &bd),
               "cuExternalMemoryGetMappedBuffer");
      CUsemDesc sd = {0};
      sd.type = 9; /* TIMELINE_SEMAPHORE_FD */
      sd.handle.fd = fds[4 * k + 2 + j];
      cu_check(cu.ImportExternalSemaphore(&sem[2 * k + j], &sd), "cuImportExternalSemaphore");
    }
    cu_check(cu.StreamCreate(&stream[k], 0x1 /* NON_BLOCKING */), "cuStreamCreate");
    cu_check(cu.EventCreate(&event[k], 0x2 /* DISABLE_TIMING */), "cuEventCreate");
  }
  Reply ready = {1, ""};
  send_msg(service_sock, &ready, sizeof ready, NULL, 0);
  unsigned n4 = (unsigned)(s->nbytes / 16), block = 256, grid = (n4 + block - 1) / block;
  for (uint32_t i = 0; i < s->frames; i++) {
    uint64_t t0 = now_ns();
    for (unsigned spins = 0; atomic_load_explicit(&sh->posted, memory_order_acquire) <= i;) {
      if (++spins % 4096 == 0 && now_ns() - t0 > DEADLINE_NS)
        service_fail("the renderer posted no frame %u in 10 s", i);
    }
    uint32_t k = i % s->depth;
    CUsemParams wait = {0}, signal = {0};
    wait.fence_value = signal.fence_value = i / s->depth + 1;
    cu_check(cu.WaitExternalSemaphoresAsync(&sem[2 * k], &wait, 1, stream[k]),
             "cuWaitExternalSemaphoresAsync");
    void *args[] = {&ptr[2 * k], &ptr[2 * k + 1], &n4};
    cu_check(cu.LaunchKernel(fn, grid, 1, 1, block, 1, 1, 0, stream[k], args, NULL),
             "cuLaunchKernel");
    cu_check(cu.SignalExternalSemaphoresAsync(&sem[2 * k + 1], &signal, 1, stream[k]),
             "cuSignalExternalSemaphoresAsync");
    cu_check(cu.EventRecord(event[k], stream[k]), "cuEventRecord");
  }
  /* Every slot's output is y = FILL + 1 exactly (read here: the check, not the timed part). */
  float *host = malloc(s->nbytes);
  if (!host) service_fail("no host memory for the check");
  Reply r = {1, ""};
  for (uint32_t k = 0; k < s->depth; k++) {
    cu_check(cu.StreamSynchronize(stream[k]), "cuStreamSynchronize");
    cu_check(cu.MemcpyDtoH(host, ptr[2 * k + 1], s->nbytes), "cuMemcpyDtoH");
    for (uint64_t e = 0; e < s->nbytes / 4 && r.ok; e++) {
      if (host[e] != FILL + 1.0f) {
        r.ok = 0;
        snprintf(r.message, sizeof r.message, "slot %u: output element %llu is %g, not %g", k,
                 (unsigned long long)e, (double)host[e], (double)(FILL + 1.0f));
      }
    }
  }
  free(host);
  for (uint32_t k = 0; k < s->depth; k++) {
    cu.EventDestroy(event[k]);
    cu.StreamDestroy(stream[k]);
    for (int j = 0; j < 2; j++) {
      cu.DestroyExternalSemaphore(sem[2 * k + j]);
      cu.MemFree(ptr[2 * k + j]);
      cu.DestroyExternalMemory(mem[2 * k + j]);
    }
  }
  send_msg(service_sock, &r, sizeof r, NULL, 0);
}

/* The service process: forked before the renderer touches the GPU; one run per setup message
 * until the renderer closes the socket. */
static void service_main(Shared *sh, int sock) {
  service_sock = sock;
  CUfunction fn = NULL;
  for (;;) {
    Setup s;
    int fds[4 * MAX_SLOTS];
    int n = recv_msg(sock, &s, sizeof s, fds, 4 * MAX_SLOTS);
    if (n < 0) _exit(0);
    if (s.depth == 0 || s.depth > MAX_SLOTS || n != (int)(4 * s.depth) || s.nbytes % 16 != 0)
      service_fail("a bad setup message");
    if (!fn) {
      cuda_load();
      int count = 0, dev = -1;
      cu_check(cu.DeviceGetCount(&count), "cuDeviceGetCount");
      for (int i = 0; i < count && dev < 0; i++) {
        int d;
        uint8_t uuid[16];
        cu_check(cu.DeviceGet(&d, i), "cuDeviceGet");
        cu_check(cu.DeviceGetUuid(uuid, d), "cuDeviceGetUuid");
        if (memcmp(uuid, s.uuid, 16) == 0) dev = d;
      }
      if (dev < 0)
        service_fail("no CUDA device has the Vulkan device's UUID (%d CUDA devices)", count);
      CUcontext ctx;
      cu_check(cu.DevicePrimaryCtxRetain(&ctx, dev), "cuDevicePrimaryCtxRetain");
      cu_check(cu.CtxSetCurrent(ctx), "cuCtxSetCurrent");
      CUmodule mod;
      cu_check(cu.ModuleLoadData(&mod, ADD_ONE_PTX), "cuModuleLoadData");
      cu_check(cu.ModuleGetFunction(&fn, mod, "add_one"), "cuModuleGetFunction");
    }
    service_run(sh, &s, fds, fn);
  }
}

/* ---------------------------------------------------------------------------- the renderer */
typedef struct {
  Buffer in, out;
  VkSemaphore ready, done;
  VkCommandBuffer fill;
  uint64_t fill_value;
  VkTimelineSemaphoreSubmitInfo timeline;
  VkSubmitInfo submit;
} Slot;

static void fill_submit(Vulkan *v, Slot *s, uint64_t value) {
  s->fill_value = value;
  vk_check(vk.QueueSubmit(v->queue, 1, &s->submit, 0), "vkQueueSubmit");
}

typedef struct {
  Vulkan *v;
  Slot slots[MAX_SLOTS];
  uint32_t depth;
  int sock;
  Shared *sh;
} Run;

static void run_start(Run *r, Vulkan *v, Shared *sh, int sock, uint32_t depth, uint32_t frames,
                      uint64_t nbytes) {
  memset(r, 0, sizeof *r);
  r->v = v;
  r->depth = depth;
  r->sh = sh;
  r->sock = sock;
  atomic_store(&sh->posted, 0);
  Setup s = {0};
  s.nbytes = nbytes;
  s.depth = depth;
  s.frames = frames;
  memcpy(s.uuid, v->uuid, 16);
  int fds[4 * MAX_SLOTS];
  for (uint32_t k = 0; k < depth; k++) {
    Slot *sl = &r->slots[k];
    sl->in = buffer_new(v, nbytes);
    sl->out = buffer_new(v, nbytes);
    sl->ready = semaphore_new(v);
    sl->done = semaphore_new(v);
    s.allocation_size[2 * k] = sl->in.allocation_size;
    s.allocation_size[2 * k + 1] = sl->out.allocation_size;
    fds[4 * k] = memory_fd(v, sl->in.memory);
    fds[4 * k + 1] = memory_fd(v, sl->out.memory);
    fds[4 * k + 2] = semaphore_fd(v, sl->ready);
    fds[4 * k + 3] = semaphore_fd(v, sl->done);
    VkCommandBufferAllocateInfo ai = {ST_COMMAND_BUFFER_ALLOCATE_INFO, NULL, v->pool, 0, 1};
    vk_check(vk.AllocateCommandBuffers(v->device, &ai, &sl->fill), "vkAllocateCommandBuffers");
    VkCommandBufferBeginInfo bi = {ST_COMMAND_BUFFER_BEGIN_INFO, NULL, 0, NULL};
    vk_check(vk.BeginCommandBuffer(sl->fill, &bi), "vkBeginCommandBuffer");
    float fill = FILL;
    uint32_t word;
    memcpy(&word, &fill, 4);
    vk.CmdFillBuffer(sl->fill, sl->in.buffer, 0, nbytes & ~3ull, word);
    vk_check(vk.EndCommandBuffer(sl->fill), "vkEndCommandBuffer");
    sl->timeline = (VkTimelineSemaphoreSubmitInfo){
        ST_TIMELINE_SEMAPHORE_SUBMIT_INFO, NULL, 0, NULL, 1, &sl->fill_value};
    sl->submit = (VkSubmitInfo){ST_SUBMIT_INFO, &sl->timeline, 0, NULL, NULL, 1, &sl->fill,
                                1, &sl->ready};
  }
  send_msg(r->sock, &s, sizeof s, fds, (int)(4 * depth));
  for (uint32_t i = 0; i < 4 * depth; i++) close(fds[i]);
  Reply ready;
  if (recv_msg(r->sock, &ready, sizeof ready, NULL, 0) < 0) die("the service process died");
  if (!ready.ok) die("%s", ready.message);
}

static void post(Run *r, uint32_t frame) {
  atomic_store_explicit(&r->sh->posted, frame + 1, memory_order_release);
}

/* The service's check of the outputs, then the run's Vulkan objects go. */
static void run_finish(Run *r) {
  Reply done;
  if (recv_msg(r->sock, &done, sizeof done, NULL, 0) < 0) die("the service process died");
  if (!done.ok) die("wrong output: %s", done.message);
  Vulkan *v = r->v;
  vk.DeviceWaitIdle(v->device);
  for (uint32_t k = 0; k < r->depth; k++) {
    Slot *s = &r->slots[k];
    vk.FreeCommandBuffers(v->device, v->pool, 1, &s->fill);
    vk.DestroySemaphore(v->device, s->ready, NULL);
    vk.DestroySemaphore(v->device, s->done, NULL);
    vk.DestroyBuffer(v->device, s->in.buffer, NULL);
    vk.DestroyBuffer(v->device, s->out.buffer, NULL);
    vk.FreeMemory(v->device, s->in.memory, NULL);
    vk.FreeMemory(v->device, s->out.memory, NULL);
  }
}

static uint64_t last_value(uint32_t frames, uint32_t depth, uint32_t slot) {
  return (frames - 1 - slot) / depth + 1;
}

/* The bench's _pipelined: frame i posted first, then the slot's previous frame awaited, then
 * the fill submitted; frames per second over the whole run. */
static double pipelined(Vulkan *v, Shared *sh, int sock, uint32_t depth, uint32_t frames,
                        uint64_t nbytes) {
  Run r;
  run_start(&r, v, sh, sock, depth, frames, nbytes);
  uint64_t t0 = now_ns();
  for (uint32_t i = 0; i < frames; i++) {
    uint32_t k = i % depth;
    uint64_t value = i / depth + 1;
    post(&r, i);
    if (value > 1) semaphore_wait(v, r.slots[k].done, value - 1);
    fill_submit(v, &r.slots[k], value);
  }
  for (uint32_t k = 0; k < depth && k < frames; k++)
    semaphore_wait(v, r.slots[k].done, last_value(frames, depth, k));
  double fps = frames / ((double)(now_ns() - t0) / 1e9);
  run_finish(&r);
  return fps;
}

/* The bench's round trip, RUN after the signal: fill + signal, post, wait for the output. */
static void round_trip(Vulkan *v, Shared *sh, int sock, uint32_t n, uint32_t warmup,
                       uint64_t nbytes, double *us) {
  Run r;
  run_start(&r, v, sh, sock, 1, n + warmup, nbytes);
  for (uint32_t i = 0; i < n + warmup; i++) {
    uint64_t t0 = now_ns();
    fill_submit(v, &r.slots[0], i + 1);
    post(&r, i);
    semaphore_wait(v, r.slots[0].done, i + 1);
    if (i >= warmup) us[i - warmup] = (double)(now_ns() - t0) / 1e3;
  }
  run_finish(&r);
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

static double percentile(double *sorted, uint32_t n, double q) {
  uint32_t i = (uint32_t)(q * (n - 1) + 0.5);
  return sorted[i < n ? i : n - 1];
}

static uint32_t arg_u32(const char *s, const char *name) {
  char *end;
  unsigned long x = strtoul(s, &end, 10);
  if (*s == '\0' || *end != '\0' || x == 0 || x > 100000000ul) die("bad %s: %s", name, s);
  return (uint32_t)x;
}

int main(int argc, char **argv) {
  uint32_t width = 1920, height = 1080, frames = 6000, n = 1000, warmup = 100, runs = 3;
  uint32_t depths[MAX_SLOTS], ndepths = 0;
  depths[ndepths++] = 1, depths[ndepths++] = 3, depths[ndepths++] = 8;
  for (int i = 1; i + 1 < argc; i += 2) {
    const char *k = argv[i], *val = argv[i + 1];
    if (!strcmp(k, "--width")) width = arg_u32(val, k);
    else if (!strcmp(k, "--height")) height = arg_u32(val, k);
    else if (!strcmp(k, "--frames")) frames = arg_u32(val, k);
    else if (!strcmp(k, "--round-trips")) n = arg_u32(val, k);
    else if (!strcmp(k, "--warmup")) warmup = arg_u32(val, k);
    else if (!strcmp(k, "--runs")) runs = arg_u32(val, k);
    else if (!strcmp(k, "--depths")) {
      ndepths = 0;
      for (char *p = (char *)val; *p && ndepths < MAX_SLOTS;) {
        char *end;
        unsigned long d = strtoul(p, &end, 10);
        if (end == p || d == 0 || d > MAX_SLOTS) die("bad --depths: %s (1..%d each)", val, MAX_SLOTS);
        depths[ndepths++] = (uint32_t)d;
        p = *end == ',' ? end + 1 : end;
        if (*end && *end != ',') die("bad --depths: %s", val);
      }
    } else die("unknown argument %s", k);
  }
  if ((argc - 1) % 2) die("every option takes a value");
  if (runs > MAX_RUNS) die("--runs is at most %d", MAX_RUNS);
  uint64_t nbytes = 3ull * width * height * 4;
  if (nbytes % 16) die("the frame's size (%llu bytes) is not a multiple of 16", (unsigned long long)nbytes);
  signal(SIGPIPE, SIG_IGN);
  Shared *sh = mmap(NULL, sizeof(Shared), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (sh == MAP_FAILED) die("mmap: %s", strerror(errno));
  int pair[2];
  if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, pair) != 0)
    die("socketpair: %s", strerror(errno));
  fflush(NULL);
  pid_t child = fork(); /* before either process touches the GPU */
  if (child < 0) die("fork: %s", strerror(errno));
  if (child == 0) {
    close(pair[0]);
    service_main(sh, pair[1]);
  }
  close(pair[1]);
  int sock = pair[0];
  Vulkan v = {0};
  vulkan_open(&v);

  double *us = malloc(sizeof(double) * n);
  if (!us) die("no memory");
  round_trip(&v, sh, sock, n, warmup, nbytes, us);
  qsort(us, n, sizeof *us, cmp_double);
  printf("{\"device\": \"%s\", \"frame_bytes\": %llu, \"round_trip_us\": {\"n\": %u, \"p50\": %.1f, "
         "\"p99\": %.1f}, \"pipelined_fps\": {",
         v.name, (unsigned long long)nbytes, n, percentile(us, n, 0.5), percentile(us, n, 0.99));
  free(us);
  for (uint32_t d = 0; d < ndepths; d++) {
    pipelined(&v, sh, sock, depths[d], 10 * depths[d], nbytes); /* warm-up, as the bench's */
    double fps[MAX_RUNS];
    for (uint32_t i = 0; i < runs; i++) fps[i] = pipelined(&v, sh, sock, depths[d], frames, nbytes);
    printf("%s\"%u\": [", d ? ", " : "", depths[d]);
    for (uint32_t i = 0; i < runs; i++) printf("%s%.1f", i ? ", " : "", fps[i]);
    printf("]");
  }
  printf("}, \"frames\": %u, \"outputs\": \"bit-exact\"}\n", frames);
  close(sock);
  int status = 0;
  waitpid(child, &status, 0);
  return 0;
}
