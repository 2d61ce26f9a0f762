"""Direct kernel launches: ``cuLaunchKernel`` through CuPy's driver binding, with the
parameters packed into a buffer per thread (8 bytes a parameter) -- about half of a CuPy
kernel call's host cost, which on small tensors is most of an op's cost.

Used by the kernel runtime's programs, the Cuda backend's eager kernels and its direct
``adam_update``. Constructing a `DirectLauncher` raises ImportError where CuPy has no driver
binding (callers then launch through CuPy).
"""
from __future__ import annotations

import ctypes
import struct
import threading

__all__ = ["DirectLauncher", "MAX_PARAMS"]

#: parameters one launch may take
MAX_PARAMS = 64
#: dynamic shared memory a block may take without opting in (``cudaFuncSetAttribute``)
SMEM_DEFAULT = 48 * 1024
#: CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES
_ATTR_MAX_DYN_SMEM = 8
_pack_into = struct.pack_into


class DirectLauncher:
    def __init__(self):
        from cupy_backends.cuda.api import driver
        self._launch = driver.launchKernel
        #: ``cuLaunchKernel`` itself: ``(function, grid x, y, z, block x, y, z, shared bytes,
        #: stream, parameters, extra)``, for callers that save the wrapper's call
        self.raw_launch = driver.launchKernel
        self._set_attr = driver.funcSetAttribute
        self._tls = threading.local()
        self._caps: dict = {}
        self._smem: dict = {}          # function pointer -> dynamic shared bytes opted in

    def pack(self, fmt: str, *values) -> int:
        """Pack ``values`` (struct ``fmt``, each in its own 8-byte slot) into this thread's
        buffer; returns the address of its parameter-pointer array."""
        slots = getattr(self._tls, "slots", None)
        if slots is None:
            buf = ctypes.create_string_buffer(8 * MAX_PARAMS)
            base = ctypes.addressof(buf)
            addrs = (ctypes.c_void_p * MAX_PARAMS)(*[base + 8 * i
                                                     for i in range(MAX_PARAMS)])
            slots = self._tls.slots = (buf, ctypes.addressof(addrs), addrs)
        _pack_into(fmt, slots[0], 0, *values)
        return slots[1]

    def launch(self, fptr: int, grid: int, block: int, stream: int, params: int,
               smem: int = 0) -> None:
        """Launch function ``fptr`` (1-d grid and block, ``smem`` bytes of dynamic shared
        memory: above `SMEM_DEFAULT`, the function is opted in first) on ``stream`` with the
        parameters `pack` returned."""
        if smem > SMEM_DEFAULT:
            self.opt_in(fptr, smem)
        self._launch(fptr, grid, 1, 1, block, 1, 1, smem, stream, params, 0)

    def opt_in(self, fptr: int, smem: int) -> None:
        """Let function ``fptr`` take ``smem`` bytes of dynamic shared memory (once per
        function and size; the device's ``sharedMemPerBlockOptin`` bounds it, and the
        launch fails beyond that)."""
        if self._smem.get(fptr, 0) < smem:
            self._set_attr(fptr, _ATTR_MAX_DYN_SMEM, int(smem))
            self._smem[fptr] = smem

    def grid_cap(self, device: int, block: int) -> int:
        """Blocks of ``block`` threads that fill ``device`` once (grid-stride loops do the
        rest)."""
        cap = self._caps.get((device, block))
        if cap is None:
            from .device import device_info
            info = device_info(device)
            cap = self._caps[(device, block)] = max(
                1, info.sms * max(1, info.threads_per_sm // block))
        return cap
