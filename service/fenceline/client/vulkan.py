"""A renderer's side of GPU zero-copy (docs/gpu.md): a Vulkan device, buffers exported as
OPAQUE_FD, exportable timeline semaphores, and pre-recorded transfer submissions.

Uses the ``vulkan`` package (cffi over the system's libvulkan.so.1) only for its declarations and
loader: calls go straight to the C functions, so each per-frame call costs a few microseconds.
``pip install 'fenceline[gpu]'`` brings it. Every object has ``close()`` (safe twice); close
buffers and semaphores before their device.
"""

from __future__ import annotations

import contextlib
import os
import time
from typing import Any

import numpy as np

from fenceline.waiting import AdaptiveSpin

try:
    import vulkan as _vk
except (ImportError, OSError) as _e:  # no package, or no libvulkan.so.1
    _vk = None
    _IMPORT_ERROR = str(_e)
else:
    _IMPORT_ERROR = ""

OPAQUE_FD = 0x1  # VK_EXTERNAL_{MEMORY,SEMAPHORE}_HANDLE_TYPE_OPAQUE_FD_BIT
API_1_2 = (1 << 22) | (2 << 12)
NO_TIMEOUT = 2**64 - 1
POLL_S = 0.05  # how long a semaphore wait polls with short naps before it blocks


class VulkanError(RuntimeError):
    pass


def available() -> tuple[bool, str]:
    """Whether Vulkan can be used here, and why not."""
    if _vk is None:
        return False, f"the vulkan package or libvulkan.so.1 is missing: {_IMPORT_ERROR}"
    return True, ""


def _check(rc: int, what: str) -> None:
    if rc != 0:
        raise VulkanError(f"{what} failed with VkResult {rc}")


def _s(name: str) -> int:
    return int(getattr(_vk, "VK_STRUCTURE_TYPE_" + name))


class VulkanDevice:
    """One logical device with timeline semaphores and the external fd extensions, and one queue.

    ``prefer``: a device name substring to pick (default: the first discrete GPU, else device 0).
    ``uuid``: the deviceUUID (16 bytes) of the GPU to use, on hosts with several of one model;
    it wins over ``prefer``.
    """

    def __init__(self, prefer: str | None = None, *, uuid: bytes | None = None) -> None:
        ok, why = available()
        if not ok:
            raise VulkanError(why)
        self.ffi: Any = _vk.ffi
        self.lib: Any = _vk.lib
        ffi, lib = self.ffi, self.lib
        self._keep: list[Any] = []
        app = ffi.new("VkApplicationInfo*", {"sType": _s("APPLICATION_INFO"), "apiVersion": API_1_2})
        ici = ffi.new("VkInstanceCreateInfo*", {"sType": _s("INSTANCE_CREATE_INFO"), "pApplicationInfo": app})
        inst = ffi.new("VkInstance*")
        _check(lib.vkCreateInstance(ici, ffi.NULL, inst), "vkCreateInstance")
        self.instance = inst[0]
        self.device: Any = None
        try:
            self._open(prefer, uuid)
        except Exception:
            self.close()
            raise

    def _open(self, prefer: str | None, uuid: bytes | None) -> None:
        ffi, lib = self.ffi, self.lib
        n = ffi.new("uint32_t*")
        _check(lib.vkEnumeratePhysicalDevices(self.instance, n, ffi.NULL), "vkEnumeratePhysicalDevices")
        if n[0] == 0:
            raise VulkanError("Vulkan sees no device")
        phys = ffi.new("VkPhysicalDevice[]", n[0])
        _check(lib.vkEnumeratePhysicalDevices(self.instance, n, phys), "vkEnumeratePhysicalDevices")
        candidates = []
        for i in range(n[0]):
            idp = ffi.new("VkPhysicalDeviceIDProperties*", {"sType": _s("PHYSICAL_DEVICE_ID_PROPERTIES")})
            p2 = ffi.new(
                "VkPhysicalDeviceProperties2*",
                {"sType": _s("PHYSICAL_DEVICE_PROPERTIES_2"), "pNext": idp},
            )
            lib.vkGetPhysicalDeviceProperties2(phys[i], p2)
            name = ffi.string(p2.properties.deviceName).decode()
            discrete = p2.properties.deviceType == _vk.VK_PHYSICAL_DEVICE_TYPE_DISCRETE_GPU
            candidates.append((phys[i], name, bytes(ffi.buffer(idp.deviceUUID, 16)), discrete))
        if uuid is not None:
            pick = next((c for c in candidates if c[2] == uuid), None)
            if pick is None:
                seen = ", ".join(f"{c[1]} {c[2].hex()}" for c in candidates)
                raise VulkanError(f"no Vulkan device has deviceUUID {uuid.hex()} (devices: {seen})")
        else:
            pick = next((c for c in candidates if prefer and prefer in c[1]), None)
            pick = pick or next((c for c in candidates if c[3]), None) or candidates[0]
        self.physical, self.name, self.uuid, _ = pick

        exts = self._device_extensions()
        want = [e for e in ("VK_KHR_external_memory_fd", "VK_KHR_external_semaphore_fd") if e in exts]
        if "VK_KHR_external_memory_fd" not in want:
            raise VulkanError(f"{self.name} cannot export memory as fds (no VK_KHR_external_memory_fd)")
        self.can_export_semaphores = "VK_KHR_external_semaphore_fd" in want and self._timeline_exportable()

        nq = ffi.new("uint32_t*")
        lib.vkGetPhysicalDeviceQueueFamilyProperties(self.physical, nq, ffi.NULL)
        fams = ffi.new("VkQueueFamilyProperties[]", nq[0])
        lib.vkGetPhysicalDeviceQueueFamilyProperties(self.physical, nq, fams)
        flags = _vk.VK_QUEUE_COMPUTE_BIT | _vk.VK_QUEUE_GRAPHICS_BIT
        self.family = next(i for i in range(nq[0]) if fams[i].queueFlags & flags)
        prio = ffi.new("float[]", [1.0])
        qci = ffi.new("VkDeviceQueueCreateInfo*", {
            "sType": _s("DEVICE_QUEUE_CREATE_INFO"), "queueFamilyIndex": self.family,
            "queueCount": 1, "pQueuePriorities": prio,
        })
        timeline = ffi.new("VkPhysicalDeviceTimelineSemaphoreFeatures*", {
            "sType": _s("PHYSICAL_DEVICE_TIMELINE_SEMAPHORE_FEATURES"), "timelineSemaphore": 1,
        })
        names = [ffi.new("char[]", e.encode()) for e in want]
        name_ptrs = ffi.new("char*[]", names)
        dci = ffi.new("VkDeviceCreateInfo*", {
            "sType": _s("DEVICE_CREATE_INFO"), "pNext": timeline, "queueCreateInfoCount": 1,
            "pQueueCreateInfos": qci, "enabledExtensionCount": len(want),
            "ppEnabledExtensionNames": name_ptrs,
        })
        dev = ffi.new("VkDevice*")
        _check(lib.vkCreateDevice(self.physical, dci, ffi.NULL, dev), "vkCreateDevice")
        self.device = dev[0]
        q = ffi.new("VkQueue*")
        lib.vkGetDeviceQueue(self.device, self.family, 0, q)
        self.queue = q[0]
        self._get_memory_fd = self._proc("vkGetMemoryFdKHR")
        self._get_semaphore_fd: Any = (
            self._proc("vkGetSemaphoreFdKHR") if self.can_export_semaphores else None
        )
        pool_info = ffi.new("VkCommandPoolCreateInfo*", {
            "sType": _s("COMMAND_POOL_CREATE_INFO"), "queueFamilyIndex": self.family,
            "flags": _vk.VK_COMMAND_POOL_CREATE_RESET_COMMAND_BUFFER_BIT,
        })
        pool = ffi.new("VkCommandPool*")
        _check(lib.vkCreateCommandPool(self.device, pool_info, ffi.NULL, pool), "vkCreateCommandPool")
        self.pool = pool[0]
        self.memory_properties = ffi.new("VkPhysicalDeviceMemoryProperties*")
        lib.vkGetPhysicalDeviceMemoryProperties(self.physical, self.memory_properties)

    def _device_extensions(self) -> set[str]:
        ffi, lib = self.ffi, self.lib
        n = ffi.new("uint32_t*")
        lib.vkEnumerateDeviceExtensionProperties(self.physical, ffi.NULL, n, ffi.NULL)
        props = ffi.new("VkExtensionProperties[]", n[0])
        lib.vkEnumerateDeviceExtensionProperties(self.physical, ffi.NULL, n, props)
        return {ffi.string(props[i].extensionName).decode() for i in range(n[0])}

    def _timeline_exportable(self) -> bool:
        ffi, lib = self.ffi, self.lib
        stype = ffi.new("VkSemaphoreTypeCreateInfo*", {
            "sType": _s("SEMAPHORE_TYPE_CREATE_INFO"), "semaphoreType": _vk.VK_SEMAPHORE_TYPE_TIMELINE,
        })
        info = ffi.new("VkPhysicalDeviceExternalSemaphoreInfo*", {
            "sType": _s("PHYSICAL_DEVICE_EXTERNAL_SEMAPHORE_INFO"), "pNext": stype, "handleType": OPAQUE_FD,
        })
        props = ffi.new("VkExternalSemaphoreProperties*", {"sType": _s("EXTERNAL_SEMAPHORE_PROPERTIES")})
        lib.vkGetPhysicalDeviceExternalSemaphoreProperties(self.physical, info, props)
        return bool(props.externalSemaphoreFeatures & _vk.VK_EXTERNAL_SEMAPHORE_FEATURE_EXPORTABLE_BIT)

    def _proc(self, name: str) -> Any:
        p = self.lib.vkGetDeviceProcAddr(self.device, name.encode())
        if p == self.ffi.NULL:
            raise VulkanError(f"{self.name} lacks {name}")
        return self.ffi.cast("PFN_" + name, p)

    def memory_type(self, bits: int, flags: int) -> int:
        mp = self.memory_properties
        for i in range(mp.memoryTypeCount):
            if bits & (1 << i) and (mp.memoryTypes[i].propertyFlags & flags) == flags:
                return i
        raise VulkanError(f"no memory type with flags 0x{flags:x} in 0x{bits:x}")

    @property
    def uuid_hex(self) -> str:
        return self.uuid.hex()

    def command_buffer(self) -> Any:
        ffi = self.ffi
        info = ffi.new("VkCommandBufferAllocateInfo*", {
            "sType": _s("COMMAND_BUFFER_ALLOCATE_INFO"), "commandPool": self.pool,
            "level": _vk.VK_COMMAND_BUFFER_LEVEL_PRIMARY, "commandBufferCount": 1,
        })
        cb = ffi.new("VkCommandBuffer*")
        _check(self.lib.vkAllocateCommandBuffers(self.device, info, cb), "vkAllocateCommandBuffers")
        return cb[0]

    def record(self, commands: Any) -> Any:
        """A command buffer recorded once by ``commands(lib, cb)``, for repeated submission."""
        cb = self.command_buffer()
        begin = self.ffi.new("VkCommandBufferBeginInfo*", {"sType": _s("COMMAND_BUFFER_BEGIN_INFO")})
        _check(self.lib.vkBeginCommandBuffer(cb, begin), "vkBeginCommandBuffer")
        commands(self.lib, cb)
        _check(self.lib.vkEndCommandBuffer(cb), "vkEndCommandBuffer")
        return cb

    def wait_idle(self) -> None:
        _check(self.lib.vkQueueWaitIdle(self.queue), "vkQueueWaitIdle")

    def close(self) -> None:
        lib, ffi = self.lib, self.ffi
        if self.device is not None:
            lib.vkDeviceWaitIdle(self.device)
            lib.vkDestroyCommandPool(self.device, self.pool, ffi.NULL)
            lib.vkDestroyDevice(self.device, ffi.NULL)
            self.device = None
        if self.instance is not None:
            lib.vkDestroyInstance(self.instance, ffi.NULL)
            self.instance = None

    def __enter__(self) -> VulkanDevice:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class Buffer:
    """A buffer and its own memory. ``exported``: device-local memory exportable as OPAQUE_FD
    (dedicated allocation when ``dedicated``); else host-visible, mapped, for staging."""

    def __init__(
        self, dev: VulkanDevice, size: int, *, exported: bool = True, dedicated: bool = True
    ) -> None:
        ffi, lib = dev.ffi, dev.lib
        self.dev = dev
        self.size = size
        self.exported = exported
        self.dedicated = dedicated and exported
        self.buffer: Any = None
        self.memory: Any = None
        usage = (_vk.VK_BUFFER_USAGE_TRANSFER_SRC_BIT | _vk.VK_BUFFER_USAGE_TRANSFER_DST_BIT
                 | _vk.VK_BUFFER_USAGE_STORAGE_BUFFER_BIT)
        ext = ffi.new("VkExternalMemoryBufferCreateInfo*", {
            "sType": _s("EXTERNAL_MEMORY_BUFFER_CREATE_INFO"), "handleTypes": OPAQUE_FD,
        })
        bci = ffi.new("VkBufferCreateInfo*", {
            "sType": _s("BUFFER_CREATE_INFO"), "pNext": ext if exported else ffi.NULL, "size": size,
            "usage": usage, "sharingMode": _vk.VK_SHARING_MODE_EXCLUSIVE,
        })
        buf = ffi.new("VkBuffer*")
        _check(lib.vkCreateBuffer(dev.device, bci, ffi.NULL, buf), "vkCreateBuffer")
        self.buffer = buf[0]
        try:
            req = ffi.new("VkMemoryRequirements*")
            lib.vkGetBufferMemoryRequirements(dev.device, self.buffer, req)
            self.allocation_size = int(req.size)
            if exported:
                mtype = dev.memory_type(req.memoryTypeBits, _vk.VK_MEMORY_PROPERTY_DEVICE_LOCAL_BIT)
                dedicated_info = ffi.new("VkMemoryDedicatedAllocateInfo*", {
                    "sType": _s("MEMORY_DEDICATED_ALLOCATE_INFO"), "buffer": self.buffer,
                })
                export = ffi.new("VkExportMemoryAllocateInfo*", {
                    "sType": _s("EXPORT_MEMORY_ALLOCATE_INFO"), "handleTypes": OPAQUE_FD,
                    "pNext": dedicated_info if self.dedicated else ffi.NULL,
                })
                next_ = export
            else:
                mtype = dev.memory_type(
                    req.memoryTypeBits,
                    _vk.VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT | _vk.VK_MEMORY_PROPERTY_HOST_COHERENT_BIT,
                )
                next_ = ffi.NULL
            mai = ffi.new("VkMemoryAllocateInfo*", {
                "sType": _s("MEMORY_ALLOCATE_INFO"), "pNext": next_,
                "allocationSize": self.allocation_size, "memoryTypeIndex": mtype,
            })
            mem = ffi.new("VkDeviceMemory*")
            _check(lib.vkAllocateMemory(dev.device, mai, ffi.NULL, mem), "vkAllocateMemory")
            self.memory = mem[0]
            _check(lib.vkBindBufferMemory(dev.device, self.buffer, self.memory, 0), "vkBindBufferMemory")
            self._mapped: Any = None
            if not exported:
                pp = ffi.new("void**")
                _check(lib.vkMapMemory(dev.device, self.memory, 0, size, 0, pp), "vkMapMemory")
                self._mapped = ffi.buffer(pp[0], size)
        except Exception:
            self.close()
            raise

    def export_fd(self) -> int:
        """A new fd for the memory; the caller owns it (send it, then close it)."""
        ffi = self.dev.ffi
        info = ffi.new("VkMemoryGetFdInfoKHR*", {
            "sType": _s("MEMORY_GET_FD_INFO_KHR"), "memory": self.memory, "handleType": OPAQUE_FD,
        })
        fd = ffi.new("int*")
        _check(self.dev._get_memory_fd(self.dev.device, info, fd), "vkGetMemoryFdKHR")
        return int(fd[0])

    def array(self, dtype: Any, shape: list[int] | tuple[int, ...]) -> np.ndarray:
        """A numpy view of a host-visible buffer."""
        if self._mapped is None:
            raise VulkanError("only host-visible (staging) buffers can be viewed on the host")
        return np.frombuffer(self._mapped, dtype=dtype, count=int(np.prod(shape))).reshape(shape)

    def close(self) -> None:
        dev = self.dev
        if dev.device is None:
            return
        if self.buffer is not None:
            dev.lib.vkDestroyBuffer(dev.device, self.buffer, dev.ffi.NULL)
            self.buffer = None
        if self.memory is not None:
            dev.lib.vkFreeMemory(dev.device, self.memory, dev.ffi.NULL)
            self.memory = None


class TimelineSemaphore:
    """A timeline semaphore, exportable as OPAQUE_FD when ``exported``. ``wait`` spins on the
    counter for an adaptive budget (at most ``max_spin_ns``), polls with short naps, then blocks
    in vkWaitSemaphores: on some drivers the blocking wait sleeps in ~10 ms steps."""

    def __init__(self, dev: VulkanDevice, *, exported: bool = True, max_spin_ns: int = 2_000_000) -> None:
        ffi, lib = dev.ffi, dev.lib
        self.dev = dev
        self.handle: Any = None
        if exported and not dev.can_export_semaphores:
            raise VulkanError(f"{dev.name} cannot export timeline semaphores as OPAQUE_FD")
        export = ffi.new("VkExportSemaphoreCreateInfo*", {
            "sType": _s("EXPORT_SEMAPHORE_CREATE_INFO"), "handleTypes": OPAQUE_FD,
        })
        stype = ffi.new("VkSemaphoreTypeCreateInfo*", {
            "sType": _s("SEMAPHORE_TYPE_CREATE_INFO"), "pNext": export if exported else ffi.NULL,
            "semaphoreType": _vk.VK_SEMAPHORE_TYPE_TIMELINE, "initialValue": 0,
        })
        sci = ffi.new("VkSemaphoreCreateInfo*", {"sType": _s("SEMAPHORE_CREATE_INFO"), "pNext": stype})
        sem = ffi.new("VkSemaphore*")
        _check(lib.vkCreateSemaphore(dev.device, sci, ffi.NULL, sem), "vkCreateSemaphore")
        self.handle = sem[0]
        self._value = ffi.new("uint64_t*")
        self._sems = ffi.new("VkSemaphore[]", [self.handle])
        self._wait_values = ffi.new("uint64_t[]", 1)
        self._wait_info = ffi.new("VkSemaphoreWaitInfo*", {
            "sType": _s("SEMAPHORE_WAIT_INFO"), "semaphoreCount": 1, "pSemaphores": self._sems,
            "pValues": self._wait_values,
        })
        self._spin = AdaptiveSpin(max_spin_ns)

    def export_fd(self) -> int:
        ffi = self.dev.ffi
        info = ffi.new("VkSemaphoreGetFdInfoKHR*", {
            "sType": _s("SEMAPHORE_GET_FD_INFO_KHR"), "semaphore": self.handle, "handleType": OPAQUE_FD,
        })
        fd = ffi.new("int*")
        _check(self.dev._get_semaphore_fd(self.dev.device, info, fd), "vkGetSemaphoreFdKHR")
        return int(fd[0])

    @property
    def value(self) -> int:
        _check(self.dev.lib.vkGetSemaphoreCounterValue(self.dev.device, self.handle, self._value),
               "vkGetSemaphoreCounterValue")
        return int(self._value[0])

    def signal(self, value: int) -> None:
        """A host-side signal."""
        info = self.dev.ffi.new("VkSemaphoreSignalInfo*", {
            "sType": _s("SEMAPHORE_SIGNAL_INFO"), "semaphore": self.handle, "value": value,
        })
        _check(self.dev.lib.vkSignalSemaphore(self.dev.device, info), "vkSignalSemaphore")

    def wait(self, value: int, timeout_s: float | None = None) -> bool:
        """True once the counter reaches ``value``; False on timeout. Spins for the adaptive
        budget, then polls with naps growing from 20 us to 1 ms for up to POLL_S, and only then
        blocks in vkWaitSemaphores, whose coarse sleeps would otherwise add up to ~10 ms."""
        lib, device, handle, out = self.dev.lib, self.dev.device, self.handle, self._value
        t0 = time.perf_counter_ns()
        deadline = None if timeout_s is None else t0 + int(timeout_s * 1e9)

        def reached() -> bool:
            lib.vkGetSemaphoreCounterValue(device, handle, out)
            return bool(out[0] >= value)

        spin_until = t0 + self._spin.budget_ns()
        now = t0
        while not reached():
            now = time.perf_counter_ns()
            if now >= spin_until:
                break
        else:
            self._spin.observe(time.perf_counter_ns() - t0)
            return True
        nap, poll_until = 20e-6, now + int(POLL_S * 1e9)
        while now < poll_until:
            if deadline is not None and now >= deadline:
                return False
            time.sleep(nap)
            nap = min(2 * nap, 1e-3)
            if reached():
                self._spin.observe(time.perf_counter_ns() - t0)
                return True
            now = time.perf_counter_ns()
        self._wait_values[0] = value
        timeout = NO_TIMEOUT if deadline is None else max(0, deadline - time.perf_counter_ns())
        rc = lib.vkWaitSemaphores(device, self._wait_info, timeout)
        self._spin.observe(time.perf_counter_ns() - t0)
        if rc == _vk.VK_TIMEOUT:
            return False
        _check(rc, "vkWaitSemaphores")
        return True

    def close(self) -> None:
        if self.handle is not None and self.dev.device is not None:
            self.dev.lib.vkDestroySemaphore(self.dev.device, self.handle, self.dev.ffi.NULL)
        self.handle = None


class Submission:
    """A recorded command buffer submitted again and again, each time optionally waiting for one
    timeline value and signalling another, with its structs built once."""

    def __init__(
        self,
        dev: VulkanDevice,
        commands: Any,
        signal: TimelineSemaphore | None = None,
        wait: TimelineSemaphore | None = None,
    ) -> None:
        ffi = dev.ffi
        self.dev = dev
        self.cb = dev.record(commands)
        self._cbs = ffi.new("VkCommandBuffer[]", [self.cb])
        self._signal_values = ffi.new("uint64_t[]", 1)
        self._wait_values = ffi.new("uint64_t[]", 1)
        self._signal_sems = ffi.new("VkSemaphore[]", [signal.handle] if signal else 1)
        self._wait_sems = ffi.new("VkSemaphore[]", [wait.handle] if wait else 1)
        self._stages = ffi.new("VkPipelineStageFlags[]", [_vk.VK_PIPELINE_STAGE_ALL_COMMANDS_BIT])
        self._timeline = ffi.new("VkTimelineSemaphoreSubmitInfo*", {
            "sType": _s("TIMELINE_SEMAPHORE_SUBMIT_INFO"),
            "waitSemaphoreValueCount": 1 if wait else 0, "pWaitSemaphoreValues": self._wait_values,
            "signalSemaphoreValueCount": 1 if signal else 0, "pSignalSemaphoreValues": self._signal_values,
        })
        self._info = ffi.new("VkSubmitInfo*", {
            "sType": _s("SUBMIT_INFO"), "pNext": self._timeline,
            "waitSemaphoreCount": 1 if wait else 0, "pWaitSemaphores": self._wait_sems,
            "pWaitDstStageMask": self._stages, "commandBufferCount": 1, "pCommandBuffers": self._cbs,
            "signalSemaphoreCount": 1 if signal else 0, "pSignalSemaphores": self._signal_sems,
        })

    def submit(self, signal_value: int = 0, wait_value: int = 0) -> None:
        self._signal_values[0] = signal_value
        self._wait_values[0] = wait_value
        _check(self.dev.lib.vkQueueSubmit(self.dev.queue, 1, self._info, self.dev.ffi.NULL), "vkQueueSubmit")


def barrier(dev: VulkanDevice, cb: Any, *, to_host: bool = False) -> None:
    """Makes earlier transfer writes visible to later transfers (or to the host)."""
    mb = dev.ffi.new("VkMemoryBarrier*", {
        "sType": _s("MEMORY_BARRIER"), "srcAccessMask": _vk.VK_ACCESS_TRANSFER_WRITE_BIT,
        "dstAccessMask": _vk.VK_ACCESS_HOST_READ_BIT if to_host else
        _vk.VK_ACCESS_TRANSFER_READ_BIT | _vk.VK_ACCESS_TRANSFER_WRITE_BIT,
    })
    dst = _vk.VK_PIPELINE_STAGE_HOST_BIT if to_host else _vk.VK_PIPELINE_STAGE_TRANSFER_BIT
    dev.lib.vkCmdPipelineBarrier(
        cb, _vk.VK_PIPELINE_STAGE_TRANSFER_BIT, dst, 0, 1, mb, 0, dev.ffi.NULL, 0, dev.ffi.NULL
    )


def copy_commands(src: Buffer, dst: Buffer, size: int) -> Any:
    """A copy; into a host-visible buffer it ends with a barrier that makes it host-readable."""

    def record(lib: Any, cb: Any) -> None:
        region = src.dev.ffi.new("VkBufferCopy*", {"srcOffset": 0, "dstOffset": 0, "size": size})
        lib.vkCmdCopyBuffer(cb, src.buffer, dst.buffer, 1, region)
        if not dst.exported:
            barrier(src.dev, cb, to_host=True)

    return record


def fill_commands(dst: Buffer, word: int) -> Any:
    def record(lib: Any, cb: Any) -> None:
        lib.vkCmdFillBuffer(cb, dst.buffer, 0, dst.size & ~3, word)

    return record


def close_fd(fd: int) -> None:
    with contextlib.suppress(OSError):
        os.close(fd)
