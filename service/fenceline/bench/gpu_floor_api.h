/* The parts of the Vulkan and CUDA driver APIs that gpu_floor.c uses, loaded at run time
 * (libvulkan.so.1, libcuda.so.1), with their types declared from the documented ABI
 * (vulkan_core.h, cuda.h; sizes checked below), and the floor's helpers around them. Included
 * by gpu_floor.c only. */
#ifndef FENCELINE_GPU_FLOOR_API_H
#define FENCELINE_GPU_FLOOR_API_H

#include <dlfcn.h>
#include <errno.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define MAX_SLOTS 16
#define MAX_RUNS 16
#define DEADLINE_NS 10000000000ull /* no wait of either side lasts longer than 10 s */
#define SPIN_MAX_NS 2000000ull     /* a host wait spins at most this long, as fenceline's */
#define POLL_NS 50000000ull        /* then naps for this long before it blocks */
#define FILL 0.25f

static void die(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  fputs("gpu_floor: ", stderr);
  vfprintf(stderr, fmt, ap);
  fputc('\n', stderr);
  va_end(ap);
  exit(2);
}

static uint64_t now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static void nap_ns(uint64_t ns) {
  struct timespec ts = {(time_t)(ns / 1000000000ull), (long)(ns % 1000000000ull)};
  nanosleep(&ts, NULL);
}

static void *sym(void *lib, const char *name, const char *alt) {
  void *p = alt ? dlsym(lib, alt) : NULL; /* the versioned name first, as cuda.h maps it */
  if (!p) p = dlsym(lib, name);
  if (!p) die("the library lacks %s (too old a driver or loader)", name);
  return p;
}

/* ---------------------------------------------------------------- Vulkan (vulkan_core.h ABI) */
typedef int32_t VkResult;
typedef uint32_t VkFlags;
typedef uint32_t VkBool32;
typedef uint64_t VkDeviceSize;
typedef struct VkInstance_T *VkInstance;
typedef struct VkPhysicalDevice_T *VkPhysicalDevice;
typedef struct VkDevice_T *VkDevice;
typedef struct VkQueue_T *VkQueue;
typedef struct VkCommandBuffer_T *VkCommandBuffer;
typedef uint64_t VkBuffer, VkDeviceMemory, VkSemaphore, VkCommandPool, VkFence;
typedef void (*PFN_vkVoidFunction)(void);

enum {
  ST_APPLICATION_INFO = 0,
  ST_INSTANCE_CREATE_INFO = 1,
  ST_DEVICE_QUEUE_CREATE_INFO = 2,
  ST_DEVICE_CREATE_INFO = 3,
  ST_SUBMIT_INFO = 4,
  ST_MEMORY_ALLOCATE_INFO = 5,
  ST_SEMAPHORE_CREATE_INFO = 9,
  ST_BUFFER_CREATE_INFO = 12,
  ST_COMMAND_POOL_CREATE_INFO = 39,
  ST_COMMAND_BUFFER_ALLOCATE_INFO = 40,
  ST_COMMAND_BUFFER_BEGIN_INFO = 42,
  ST_PHYSICAL_DEVICE_PROPERTIES_2 = 1000059001,
  ST_PHYSICAL_DEVICE_ID_PROPERTIES = 1000071004,
  ST_EXTERNAL_MEMORY_BUFFER_CREATE_INFO = 1000072000,
  ST_EXPORT_MEMORY_ALLOCATE_INFO = 1000072002,
  ST_MEMORY_GET_FD_INFO_KHR = 1000074002,
  ST_EXPORT_SEMAPHORE_CREATE_INFO = 1000077000,
  ST_SEMAPHORE_GET_FD_INFO_KHR = 1000079001,
  ST_MEMORY_DEDICATED_ALLOCATE_INFO = 1000127001,
  ST_PHYSICAL_DEVICE_TIMELINE_SEMAPHORE_FEATURES = 1000207000,
  ST_SEMAPHORE_TYPE_CREATE_INFO = 1000207002,
  ST_TIMELINE_SEMAPHORE_SUBMIT_INFO = 1000207003,
  ST_SEMAPHORE_WAIT_INFO = 1000207004,
};
#define VK_OPAQUE_FD 0x1u
#define VK_API_1_2 ((1u << 22) | (2u << 12))
#define VK_TIMEOUT 2
#define VK_DISCRETE_GPU 2

typedef struct {
  int32_t sType;
  const void *pNext;
  const char *pApplicationName;
  uint32_t applicationVersion;
  const char *pEngineName;
  uint32_t engineVersion;
  uint32_t apiVersion;
} VkApplicationInfo;
typedef struct {
  int32_t sType;
  const void *pNext;
  VkFlags flags;
  const VkApplicationInfo *pApplicationInfo;
  uint32_t enabledLayerCount;
  const char *const *ppEnabledLayerNames;
  uint32_t enabledExtensionCount;
  const char *const *ppEnabledExtensionNames;
} VkInstanceCreateInfo;
typedef struct {
  int32_t sType;
  void *pNext;
  uint8_t deviceUUID[16];
  uint8_t driverUUID[16];
  uint8_t deviceLUID[8];
  uint32_t deviceNodeMask;
  VkBool32 deviceLUIDValid;
} VkPhysicalDeviceIDProperties;
/* VkPhysicalDeviceProperties2: only apiVersion .. deviceName of the properties are read; the
 * rest (limits, sparse properties: 824 bytes in all) is room the driver writes into. */
typedef struct {
  int32_t sType;
  void *pNext;
  union {
    struct {
      uint32_t apiVersion, driverVersion, vendorID, deviceID;
      int32_t deviceType;
      char deviceName[256];
    } head;
    uint64_t room[256];
  } properties;
} VkPhysicalDeviceProperties2;
typedef struct {
  VkFlags queueFlags;
  uint32_t queueCount;
  uint32_t timestampValidBits;
  uint32_t minImageTransferGranularity[3];
} VkQueueFamilyProperties;
typedef struct {
  uint32_t memoryTypeCount;
  struct {
    VkFlags propertyFlags;
    uint32_t heapIndex;
  } memoryTypes[32];
  uint32_t memoryHeapCount;
  struct {
    VkDeviceSize size;
    VkFlags flags;
  } memoryHeaps[16];
} VkPhysicalDeviceMemoryProperties;
typedef struct {
  int32_t sType;
  const void *pNext;
  VkFlags flags;
  uint32_t queueFamilyIndex;
  uint32_t queueCount;
  const float *pQueuePriorities;
} VkDeviceQueueCreateInfo;
typedef struct {
  int32_t sType;
  const void *pNext;
  VkFlags flags;
  uint32_t queueCreateInfoCount;
  const VkDeviceQueueCreateInfo *pQueueCreateInfos;
  uint32_t enabledLayerCount;
  const char *const *ppEnabledLayerNames;
  uint32_t enabledExtensionCount;
  const char *const *ppEnabledExtensionNames;
  const void *pEnabledFeatures;
} VkDeviceCreateInfo;
typedef struct {
  int32_t sType;
  void *pNext;
  VkBool32 timelineSemaphore;
} VkPhysicalDeviceTimelineSemaphoreFeatures;
typedef struct {
  int32_t sType;
  const void *pNext;
  VkFlags flags;
  VkDeviceSize size;
  VkFlags usage;
  int32_t sharingMode;
  uint32_t queueFamilyIndexCount;
  const uint32_t *pQueueFamilyIndices;
} VkBufferCreateInfo;
typedef struct {
  int32_t sType;
  const void *pNext;
  VkFlags handleTypes;
} VkExternalInfo; /* VkExternalMemoryBufferCreateInfo, VkExportMemoryAllocateInfo,
                     VkExportSemaphoreCreateInfo */
typedef struct {
  VkDeviceSize size;
  VkDeviceSize alignment;
  uint32_t memoryTypeBits;
} VkMemoryRequirements;
typedef struct {
  int32_t sType;
  const void *pNext;
  VkDeviceSize allocationSize;
  uint32_t memoryTypeIndex;
} VkMemoryAllocateInfo;
typedef struct {
  int32_t sType;
  const void *pNext;
  uint64_t image;
  VkBuffer buffer;
} VkMemoryDedicatedAllocateInfo;
typedef struct {
  int32_t sType;
  const void *pNext;
  uint64_t object; /* VkDeviceMemory or VkSemaphore */
  uint32_t handleType;
} VkGetFdInfo; /* VkMemoryGetFdInfoKHR, VkSemaphoreGetFdInfoKHR */
typedef struct {
  int32_t sType;
  const void *pNext;
  VkFlags flags;
} VkSemaphoreCreateInfo;
typedef struct {
  int32_t sType;
  const void *pNext;
  int32_t semaphoreType;
  uint64_t initialValue;
} VkSemaphoreTypeCreateInfo;
typedef struct {
  int32_t sType;
  const void *pNext;
  VkFlags flags;
  uint32_t queueFamilyIndex;
} VkCommandPoolCreateInfo;
typedef struct {
  int32_t sType;
  const void *pNext;
  VkCommandPool commandPool;
  int32_t level;
  uint32_t commandBufferCount;
} VkCommandBufferAllocateInfo;
typedef struct {
  int32_t sType;
  const void *pNext;
  VkFlags flags;
  const void *pInheritanceInfo;
} VkCommandBufferBeginInfo;
typedef struct {
  int32_t sType;
  const void *pNext;
  uint32_t waitSemaphoreCount;
  const VkSemaphore *pWaitSemaphores;
  const VkFlags *pWaitDstStageMask;
  uint32_t commandBufferCount;
  const VkCommandBuffer *pCommandBuffers;
  uint32_t signalSemaphoreCount;
  const VkSemaphore *pSignalSemaphores;
} VkSubmitInfo;
typedef struct {
  int32_t sType;
  const void *pNext;
  uint32_t waitSemaphoreValueCount;
  const uint64_t *pWaitSemaphoreValues;
  uint32_t signalSemaphoreValueCount;
  const uint64_t *pSignalSemaphoreValues;
} VkTimelineSemaphoreSubmitInfo;
typedef struct {
  int32_t sType;
  const void *pNext;
  VkFlags flags;
  uint32_t semaphoreCount;
  const VkSemaphore *pSemaphores;
  const uint64_t *pValues;
} VkSemaphoreWaitInfo;

_Static_assert(sizeof(VkPhysicalDeviceMemoryProperties) == 520, "vulkan_core.h ABI");
_Static_assert(sizeof(VkPhysicalDeviceIDProperties) == 64, "vulkan_core.h ABI");
_Static_assert(sizeof(VkSubmitInfo) == 72, "vulkan_core.h ABI");
_Static_assert(sizeof(VkBufferCreateInfo) == 56, "vulkan_core.h ABI");
_Static_assert(sizeof(VkDeviceCreateInfo) == 72, "vulkan_core.h ABI");
_Static_assert(sizeof(VkSemaphoreTypeCreateInfo) == 32, "vulkan_core.h ABI");

static struct {
  PFN_vkVoidFunction (*GetInstanceProcAddr)(VkInstance, const char *);
  VkResult (*CreateInstance)(const VkInstanceCreateInfo *, const void *, VkInstance *);
  VkResult (*EnumeratePhysicalDevices)(VkInstance, uint32_t *, VkPhysicalDevice *);
  void (*GetPhysicalDeviceProperties2)(VkPhysicalDevice, VkPhysicalDeviceProperties2 *);
  void (*GetPhysicalDeviceQueueFamilyProperties)(VkPhysicalDevice, uint32_t *,
                                                 VkQueueFamilyProperties *);
  void (*GetPhysicalDeviceMemoryProperties)(VkPhysicalDevice, VkPhysicalDeviceMemoryProperties *);
  VkResult (*CreateDevice)(VkPhysicalDevice, const VkDeviceCreateInfo *, const void *, VkDevice *);
  PFN_vkVoidFunction (*GetDeviceProcAddr)(VkDevice, const char *);
  void (*GetDeviceQueue)(VkDevice, uint32_t, uint32_t, VkQueue *);
  VkResult (*CreateBuffer)(VkDevice, const VkBufferCreateInfo *, const void *, VkBuffer *);
  void (*GetBufferMemoryRequirements)(VkDevice, VkBuffer, VkMemoryRequirements *);
  VkResult (*AllocateMemory)(VkDevice, const VkMemoryAllocateInfo *, const void *, VkDeviceMemory *);
  VkResult (*BindBufferMemory)(VkDevice, VkBuffer, VkDeviceMemory, VkDeviceSize);
  VkResult (*GetMemoryFdKHR)(VkDevice, const VkGetFdInfo *, int *);
  VkResult (*CreateSemaphore)(VkDevice, const VkSemaphoreCreateInfo *, const void *, VkSemaphore *);
  VkResult (*GetSemaphoreFdKHR)(VkDevice, const VkGetFdInfo *, int *);
  VkResult (*CreateCommandPool)(VkDevice, const VkCommandPoolCreateInfo *, const void *,
                                VkCommandPool *);
  VkResult (*AllocateCommandBuffers)(VkDevice, const VkCommandBufferAllocateInfo *,
                                     VkCommandBuffer *);
  VkResult (*BeginCommandBuffer)(VkCommandBuffer, const VkCommandBufferBeginInfo *);
  void (*CmdFillBuffer)(VkCommandBuffer, VkBuffer, VkDeviceSize, VkDeviceSize, uint32_t);
  VkResult (*EndCommandBuffer)(VkCommandBuffer);
  VkResult (*QueueSubmit)(VkQueue, uint32_t, const VkSubmitInfo *, VkFence);
  VkResult (*GetSemaphoreCounterValue)(VkDevice, VkSemaphore, uint64_t *);
  VkResult (*WaitSemaphores)(VkDevice, const VkSemaphoreWaitInfo *, uint64_t);
  VkResult (*DeviceWaitIdle)(VkDevice);
  void (*DestroyBuffer)(VkDevice, VkBuffer, const void *);
  void (*FreeMemory)(VkDevice, VkDeviceMemory, const void *);
  void (*DestroySemaphore)(VkDevice, VkSemaphore, const void *);
  void (*FreeCommandBuffers)(VkDevice, VkCommandPool, uint32_t, const VkCommandBuffer *);
} vk;

static void vk_check(VkResult rc, const char *what) {
  if (rc != 0) die("%s failed with VkResult %d", what, (int)rc);
}

#define VK_INSTANCE_FN(inst, f) *(void **)&vk.f = (void *)vk.GetInstanceProcAddr(inst, "vk" #f)
#define VK_DEVICE_FN(dev, f) *(void **)&vk.f = (void *)vk.GetDeviceProcAddr(dev, "vk" #f)

typedef struct {
  VkInstance instance;
  VkPhysicalDevice physical;
  VkDevice device;
  VkQueue queue;
  VkCommandPool pool;
  uint32_t family;
  uint8_t uuid[16];
  char name[256];
  VkPhysicalDeviceMemoryProperties memory;
} Vulkan;

/* The bench's VulkanDevice(): the first discrete GPU, else device 0; one queue with compute or
 * graphics; timeline semaphores and the two external fd extensions. */
static void vulkan_open(Vulkan *v) {
  void *lib = dlopen("libvulkan.so.1", RTLD_NOW | RTLD_LOCAL);
  if (!lib) die("the Vulkan loader (libvulkan.so.1) is not installed: %s", dlerror());
  *(void **)&vk.GetInstanceProcAddr = sym(lib, "vkGetInstanceProcAddr", NULL);
  VK_INSTANCE_FN(NULL, CreateInstance);
  VkApplicationInfo app = {ST_APPLICATION_INFO, NULL, "fenceline gpu_floor", 1, NULL, 0, VK_API_1_2};
  VkInstanceCreateInfo ici = {ST_INSTANCE_CREATE_INFO, NULL, 0, &app, 0, NULL, 0, NULL};
  vk_check(vk.CreateInstance(&ici, NULL, &v->instance), "vkCreateInstance");
  VK_INSTANCE_FN(v->instance, EnumeratePhysicalDevices);
  VK_INSTANCE_FN(v->instance, GetPhysicalDeviceProperties2);
  VK_INSTANCE_FN(v->instance, GetPhysicalDeviceQueueFamilyProperties);
  VK_INSTANCE_FN(v->instance, GetPhysicalDeviceMemoryProperties);
  VK_INSTANCE_FN(v->instance, CreateDevice);
  VK_INSTANCE_FN(v->instance, GetDeviceProcAddr);
  uint32_t n = 0;
  vk_check(vk.EnumeratePhysicalDevices(v->instance, &n, NULL), "vkEnumeratePhysicalDevices");
  if (n == 0) die("Vulkan sees no device");
  VkPhysicalDevice phys[16];
  if (n > 16) n = 16;
  vk_check(vk.EnumeratePhysicalDevices(v->instance, &n, phys), "vkEnumeratePhysicalDevices");
  uint32_t pick = 0;
  for (uint32_t i = n; i-- > 0;) { /* the first discrete GPU, else device 0 */
    VkPhysicalDeviceProperties2 p2 = {.sType = ST_PHYSICAL_DEVICE_PROPERTIES_2};
    vk.GetPhysicalDeviceProperties2(phys[i], &p2);
    if (p2.properties.head.deviceType == VK_DISCRETE_GPU) pick = i;
  }
  VkPhysicalDeviceIDProperties id = {.sType = ST_PHYSICAL_DEVICE_ID_PROPERTIES};
  VkPhysicalDeviceProperties2 p2 = {.sType = ST_PHYSICAL_DEVICE_PROPERTIES_2, .pNext = &id};
  vk.GetPhysicalDeviceProperties2(phys[pick], &p2);
  memcpy(v->uuid, id.deviceUUID, 16);
  snprintf(v->name, sizeof v->name, "%s", p2.properties.head.deviceName);
  v->physical = phys[pick];
  uint32_t nq = 0;
  vk.GetPhysicalDeviceQueueFamilyProperties(v->physical, &nq, NULL);
  VkQueueFamilyProperties fams[32];
  if (nq > 32) nq = 32;
  vk.GetPhysicalDeviceQueueFamilyProperties(v->physical, &nq, fams);
  v->family = UINT32_MAX;
  for (uint32_t i = 0; i < nq && v->family == UINT32_MAX; i++)
    if (fams[i].queueFlags & 0x3u) v->family = i; /* graphics or compute */
  if (v->family == UINT32_MAX) die("%s has no graphics or compute queue", v->name);
  float prio = 1.0f;
  VkDeviceQueueCreateInfo qci = {ST_DEVICE_QUEUE_CREATE_INFO, NULL, 0, v->family, 1, &prio};
  VkPhysicalDeviceTimelineSemaphoreFeatures timeline = {
      ST_PHYSICAL_DEVICE_TIMELINE_SEMAPHORE_FEATURES, NULL, 1};
  const char *exts[] = {"VK_KHR_external_memory_fd", "VK_KHR_external_semaphore_fd"};
  VkDeviceCreateInfo dci = {ST_DEVICE_CREATE_INFO, &timeline, 0, 1, &qci, 0, NULL, 2, exts, NULL};
  vk_check(vk.CreateDevice(v->physical, &dci, NULL, &v->device), "vkCreateDevice");
  VK_DEVICE_FN(v->device, GetDeviceQueue);
  VK_DEVICE_FN(v->device, CreateBuffer);
  VK_DEVICE_FN(v->device, GetBufferMemoryRequirements);
  VK_DEVICE_FN(v->device, AllocateMemory);
  VK_DEVICE_FN(v->device, BindBufferMemory);
  VK_DEVICE_FN(v->device, GetMemoryFdKHR);
  VK_DEVICE_FN(v->device, CreateSemaphore);
  VK_DEVICE_FN(v->device, GetSemaphoreFdKHR);
  VK_DEVICE_FN(v->device, CreateCommandPool);
  VK_DEVICE_FN(v->device, AllocateCommandBuffers);
  VK_DEVICE_FN(v->device, BeginCommandBuffer);
  VK_DEVICE_FN(v->device, CmdFillBuffer);
  VK_DEVICE_FN(v->device, EndCommandBuffer);
  VK_DEVICE_FN(v->device, QueueSubmit);
  VK_DEVICE_FN(v->device, GetSemaphoreCounterValue);
  VK_DEVICE_FN(v->device, WaitSemaphores);
  VK_DEVICE_FN(v->device, DeviceWaitIdle);
  VK_DEVICE_FN(v->device, DestroyBuffer);
  VK_DEVICE_FN(v->device, FreeMemory);
  VK_DEVICE_FN(v->device, DestroySemaphore);
  VK_DEVICE_FN(v->device, FreeCommandBuffers);
  void **fns = (void **)&vk;
  for (size_t i = 0; i < sizeof vk / sizeof(void *); i++)
    if (!fns[i]) die("%s lacks a Vulkan function it needs (entry %zu)", v->name, i);
  vk.GetDeviceQueue(v->device, v->family, 0, &v->queue);
  VkCommandPoolCreateInfo pci = {ST_COMMAND_POOL_CREATE_INFO, NULL, 0x2 /* RESET_COMMAND_BUFFER */,
                                 v->family};
  vk_check(vk.CreateCommandPool(v->device, &pci, NULL, &v->pool), "vkCreateCommandPool");
  vk.GetPhysicalDeviceMemoryProperties(v->physical, &v->memory);
}

typedef struct {
  VkBuffer buffer;
  VkDeviceMemory memory;
  VkDeviceSize allocation_size;
} Buffer;

/* A device-local buffer on a dedicated allocation exported as OPAQUE_FD (VkRenderer's). */
static Buffer buffer_new(Vulkan *v, VkDeviceSize size) {
  Buffer b = {0};
  VkExternalInfo ext = {ST_EXTERNAL_MEMORY_BUFFER_CREATE_INFO, NULL, VK_OPAQUE_FD};
  VkBufferCreateInfo bci = {ST_BUFFER_CREATE_INFO, &ext, 0, size, 0x1 | 0x2 | 0x20, 0, 0, NULL};
  vk_check(vk.CreateBuffer(v->device, &bci, NULL, &b.buffer), "vkCreateBuffer");
  VkMemoryRequirements req;
  vk.GetBufferMemoryRequirements(v->device, b.buffer, &req);
  uint32_t type = UINT32_MAX;
  for (uint32_t i = 0; i < v->memory.memoryTypeCount && type == UINT32_MAX; i++)
    if ((req.memoryTypeBits & (1u << i)) && (v->memory.memoryTypes[i].propertyFlags & 0x1u))
      type = i;
  if (type == UINT32_MAX) die("no device-local memory type for a buffer");
  VkMemoryDedicatedAllocateInfo dedicated = {ST_MEMORY_DEDICATED_ALLOCATE_INFO, NULL, 0, b.buffer};
  VkExternalInfo exp = {ST_EXPORT_MEMORY_ALLOCATE_INFO, &dedicated, VK_OPAQUE_FD};
  VkMemoryAllocateInfo mai = {ST_MEMORY_ALLOCATE_INFO, &exp, req.size, type};
  vk_check(vk.AllocateMemory(v->device, &mai, NULL, &b.memory), "vkAllocateMemory");
  vk_check(vk.BindBufferMemory(v->device, b.buffer, b.memory, 0), "vkBindBufferMemory");
  b.allocation_size = req.size;
  return b;
}

static VkSemaphore semaphore_new(Vulkan *v) {
  VkExternalInfo exp = {ST_EXPORT_SEMAPHORE_CREATE_INFO, NULL, VK_OPAQUE_FD};
  VkSemaphoreTypeCreateInfo type = {ST_SEMAPHORE_TYPE_CREATE_INFO, &exp, 1 /* TIMELINE */, 0};
  VkSemaphoreCreateInfo sci = {ST_SEMAPHORE_CREATE_INFO, &type, 0};
  VkSemaphore s;
  vk_check(vk.CreateSemaphore(v->device, &sci, NULL, &s), "vkCreateSemaphore");
  return s;
}

static int memory_fd(Vulkan *v, VkDeviceMemory m) {
  VkGetFdInfo info = {ST_MEMORY_GET_FD_INFO_KHR, NULL, m, VK_OPAQUE_FD};
  int fd = -1;
  vk_check(vk.GetMemoryFdKHR(v->device, &info, &fd), "vkGetMemoryFdKHR");
  return fd;
}

static int semaphore_fd(Vulkan *v, VkSemaphore s) {
  VkGetFdInfo info = {ST_SEMAPHORE_GET_FD_INFO_KHR, NULL, s, VK_OPAQUE_FD};
  int fd = -1;
  vk_check(vk.GetSemaphoreFdKHR(v->device, &info, &fd), "vkGetSemaphoreFdKHR");
  return fd;
}

/* TimelineSemaphore.wait at its best: spin on the counter for up to SPIN_MAX_NS (fenceline's
 * renderer spins for twice its recent waits, at most that), then naps growing from 20 us to 1 ms
 * for POLL_NS, then a blocking wait (the driver's sleeps there are ~10 ms coarse). */
static void semaphore_wait(Vulkan *v, VkSemaphore s, uint64_t value) {
  uint64_t t0 = now_ns(), got = 0, t = t0;
  for (;;) {
    vk.GetSemaphoreCounterValue(v->device, s, &got);
    if (got >= value) return;
    t = now_ns();
    if (t - t0 >= SPIN_MAX_NS) break;
  }
  for (uint64_t nap = 20000; t - t0 < SPIN_MAX_NS + POLL_NS; nap = nap < 500000 ? 2 * nap : 1000000) {
    nap_ns(nap);
    vk.GetSemaphoreCounterValue(v->device, s, &got);
    if (got >= value) return;
    t = now_ns();
  }
  VkSemaphoreWaitInfo wi = {ST_SEMAPHORE_WAIT_INFO, NULL, 0, 1, &s, &value};
  VkResult rc = vk.WaitSemaphores(v->device, &wi, DEADLINE_NS);
  if (rc == VK_TIMEOUT) die("the output semaphore did not reach %llu in 10 s", (unsigned long long)value);
  vk_check(rc, "vkWaitSemaphores");
}

/* ----------------------------------------------------------------- CUDA (cuda.h driver ABI) */
typedef int CUresult;
typedef unsigned long long CUdeviceptr;
typedef void *CUcontext, *CUstream, *CUevent, *CUexternalMemory, *CUexternalSemaphore, *CUmodule,
    *CUfunction;
typedef union {
  int fd;
  struct {
    void *handle;
    const void *name;
  } win32;
} CUhandle; /* the handle of both import descriptors */
typedef struct {
  int type;
  CUhandle handle;
  unsigned long long size;
  unsigned int flags;
  unsigned int reserved[16];
} CUmemDesc; /* CUDA_EXTERNAL_MEMORY_HANDLE_DESC */
typedef struct {
  unsigned long long offset, size;
  unsigned int flags;
  unsigned int reserved[16];
} CUbufferDesc; /* CUDA_EXTERNAL_MEMORY_BUFFER_DESC */
typedef struct {
  int type;
  CUhandle handle;
  unsigned int flags;
  unsigned int reserved[16];
} CUsemDesc; /* CUDA_EXTERNAL_SEMAPHORE_HANDLE_DESC */
typedef struct {
  unsigned long long fence_value;
  unsigned long long nv_sci_sync;
  unsigned char keyed_mutex_and_reserved[56];
  unsigned int flags;
  unsigned int reserved[16];
} CUsemParams; /* CUDA_EXTERNAL_SEMAPHORE_{WAIT,SIGNAL}_PARAMS: the fence value comes first */
_Static_assert(sizeof(CUmemDesc) == 104, "cuda.h ABI");
_Static_assert(sizeof(CUbufferDesc) == 88, "cuda.h ABI");
_Static_assert(sizeof(CUsemDesc) == 96, "cuda.h ABI");
_Static_assert(sizeof(CUsemParams) == 144, "cuda.h ABI");

static struct {
  CUresult (*Init)(unsigned);
  CUresult (*GetErrorName)(CUresult, const char **);
  CUresult (*DeviceGetCount)(int *);
  CUresult (*DeviceGet)(int *, int);
  CUresult (*DeviceGetUuid)(uint8_t *, int);
  CUresult (*DevicePrimaryCtxRetain)(CUcontext *, int);
  CUresult (*CtxSetCurrent)(CUcontext);
  CUresult (*ImportExternalMemory)(CUexternalMemory *, const CUmemDesc *);
  CUresult (*ExternalMemoryGetMappedBuffer)(CUdeviceptr *, CUexternalMemory, const CUbufferDesc *);
  CUresult (*ImportExternalSemaphore)(CUexternalSemaphore *, const CUsemDesc *);
  CUresult (*WaitExternalSemaphoresAsync)(const CUexternalSemaphore *, const CUsemParams *,
                                          unsigned, CUstream);
  CUresult (*SignalExternalSemaphoresAsync)(const CUexternalSemaphore *, const CUsemParams *,
                                            unsigned, CUstream);
  CUresult (*StreamCreate)(CUstream *, unsigned);
  CUresult (*StreamSynchronize)(CUstream);
  CUresult (*EventCreate)(CUevent *, unsigned);
  CUresult (*EventRecord)(CUevent, CUstream);
  CUresult (*ModuleLoadData)(CUmodule *, const void *);
  CUresult (*ModuleGetFunction)(CUfunction *, CUmodule, const char *);
  CUresult (*LaunchKernel)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                           unsigned, CUstream, void **, void **);
  CUresult (*MemcpyDtoH)(void *, CUdeviceptr, size_t);
  CUresult (*MemFree)(CUdeviceptr);
  CUresult (*DestroyExternalMemory)(CUexternalMemory);
  CUresult (*DestroyExternalSemaphore)(CUexternalSemaphore);
  CUresult (*StreamDestroy)(CUstream);
  CUresult (*EventDestroy)(CUevent);
} cu;

static void cu_check(CUresult rc, const char *what) {
  if (rc == 0) return;
  const char *name = NULL;
  if (cu.GetErrorName) cu.GetErrorName(rc, &name);
  die("%s failed: %s (%d)", what, name ? name : "CUDA error", rc);
}

#define CU_FN(lib, f, alt) *(void **)&cu.f = sym(lib, "cu" #f, alt)

static void cuda_load(void) {
  void *lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (!lib) die("the CUDA driver (libcuda.so.1) is not installed: %s", dlerror());
  CU_FN(lib, Init, NULL);
  CU_FN(lib, GetErrorName, NULL);
  CU_FN(lib, DeviceGetCount, NULL);
  CU_FN(lib, DeviceGet, NULL);
  CU_FN(lib, DeviceGetUuid, "cuDeviceGetUuid_v2");
  CU_FN(lib, DevicePrimaryCtxRetain, NULL);
  CU_FN(lib, CtxSetCurrent, NULL);
  CU_FN(lib, ImportExternalMemory, NULL);
  CU_FN(lib, ExternalMemoryGetMappedBuffer, NULL);
  CU_FN(lib, ImportExternalSemaphore, NULL);
  CU_FN(lib, WaitExternalSemaphoresAsync, NULL);
  CU_FN(lib, SignalExternalSemaphoresAsync, NULL);
  CU_FN(lib, StreamCreate, NULL);
  CU_FN(lib, StreamSynchronize, NULL);
  CU_FN(lib, EventCreate, NULL);
  CU_FN(lib, EventRecord, NULL);
  CU_FN(lib, ModuleLoadData, NULL);
  CU_FN(lib, ModuleGetFunction, NULL);
  CU_FN(lib, LaunchKernel, NULL);
  *(void **)&cu.MemcpyDtoH = sym(lib, "cuMemcpyDtoH", "cuMemcpyDtoH_v2");
  CU_FN(lib, MemFree, "cuMemFree_v2");
  CU_FN(lib, DestroyExternalMemory, NULL);
  CU_FN(lib, DestroyExternalSemaphore, NULL);
  CU_FN(lib, StreamDestroy, "cuStreamDestroy_v2");
  CU_FN(lib, EventDestroy, "cuEventDestroy_v2");
  cu_check(cu.Init(0), "cuInit");
}

/* y = x + 1 over n4 groups of four floats: one thread a group, 128-bit loads and stores. */
static const char ADD_ONE_PTX[] =
    ".version 7.0\n.target sm_52\n.address_size 64\n"
    ".visible .entry add_one(.param .u64 x, .param .u64 y, .param .u32 n4)\n{\n"
    "  .reg .pred %p;\n  .reg .b32 %r<6>;\n  .reg .f32 %f<9>;\n  .reg .b64 %rd<8>;\n"
    "  ld.param.u64 %rd1, [x];\n  ld.param.u64 %rd2, [y];\n  ld.param.u32 %r1, [n4];\n"
    "  mov.u32 %r2, %ctaid.x;\n  mov.u32 %r3, %ntid.x;\n  mov.u32 %r4, %tid.x;\n"
    "  mad.lo.s32 %r5, %r2, %r3, %r4;\n  setp.ge.u32 %p, %r5, %r1;\n  @%p bra DONE;\n"
    "  cvta.to.global.u64 %rd3, %rd1;\n  cvta.to.global.u64 %rd4, %rd2;\n"
    "  mul.wide.u32 %rd5, %r5, 16;\n  add.s64 %rd6, %rd3, %rd5;\n  add.s64 %rd7, %rd4, %rd5;\n"
    "  ld.global.v4.f32 {%f1, %f2, %f3, %f4}, [%rd6];\n"
    "  add.rn.f32 %f5, %f1, 0f3F800000;\n  add.rn.f32 %f6, %f2, 0f3F800000;\n"
    "  add.rn.f32 %f7, %f3, 0f3F800000;\n  add.rn.f32 %f8, %f4, 0f3F800000;\n"
    "  st.global.v4.f32 [%rd7], {%f5, %f6, %f7, %f8};\n"
    "DONE:\n  ret;\n}\n";


#endif /* FENCELINE_GPU_FLOOR_API_H */
