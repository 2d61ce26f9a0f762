"""NVRTC, the CUDA runtime compiler, through ctypes: finding the library and compiling.

**Finding** ``libnvrtc`` (the first that loads wins):

1. ``EMBER_NVRTC``: a path to the library;
2. the NVIDIA pip wheels: ``nvidia-cuda-nvrtc-cu12`` installs ``nvidia/cuda_nvrtc/lib``,
   the CUDA 13 wheel ``nvidia/cu13/lib``; with both, the one whose major version matches
   the CUDA runtime CuPy uses comes first (``prefer_major``), else the newest;
3. ``$CUDA_PATH`` and ``$CUDA_HOME`` (``lib64``, ``lib``, ``bin``);
4. ``/usr/local/cuda/lib64``;
5. ``ctypes.util.find_library("nvrtc")``.

**Compiling** (`Nvrtc.compile`): CUDA C to a CUBIN for ``sm_XY`` when this NVRTC can target
that architecture, else to PTX for the newest ``compute_XY`` it supports below it (the
driver finishes PTX at load time). Compile errors raise `NvrtcError` with the log.
"""
from __future__ import annotations

import ctypes
import ctypes.util
import glob
import importlib.util
import os
import sys
import threading
from dataclasses import dataclass
from pathlib import Path

from ...errors import EmberError

__all__ = ["NvrtcError", "Nvrtc", "Compiled", "find_nvrtc", "candidates", "get_nvrtc"]


class NvrtcError(EmberError, RuntimeError):
    """NVRTC rejected a kernel (for a generated kernel: a renderer bug, please report it)."""


@dataclass(frozen=True, slots=True)
class Compiled:
    """A compiled kernel: ``binary`` (CUBIN bytes, or PTX text as bytes), ``kind``
    (``"cubin"`` or ``"ptx"``), ``arch`` (the target compute capability, e.g. 90), ``log``."""
    binary: bytes
    kind: str
    arch: int
    log: str


def _lib_names() -> tuple:
    if sys.platform == "win32":
        return ("nvrtc64_*.dll",)
    if sys.platform == "darwin":
        return ("libnvrtc*.dylib",)
    return ("libnvrtc.so", "libnvrtc.so.*")


def _globs(folder: Path) -> list:
    out = []
    for pat in _lib_names():
        for p in sorted(glob.glob(str(folder / pat))):
            name = os.path.basename(p)
            if "builtins" in name or ".alt." in name:
                continue
            out.append(Path(p))
    return out


def _wheel_dirs() -> list:
    """``(cuda major, folder)`` of the NVRTC wheels importable here."""
    found = []
    try:
        spec = importlib.util.find_spec("nvidia")
    except (ImportError, ValueError):
        spec = None
    roots = list(spec.submodule_search_locations) if spec and \
        spec.submodule_search_locations else []
    for root in roots:
        root = Path(root)
        for sub, major in (("cuda_nvrtc", 12), ("cu13", 13), ("cu12", 12), ("cu14", 14)):
            for libdir in ("lib", "bin"):
                d = root / sub / libdir
                if d.is_dir():
                    found.append((major, d))
    return found


def candidates(env=None, prefer_major: int | None = None) -> list:
    """The library paths (or names) to try, in order."""
    env = os.environ if env is None else env
    out: list = []
    explicit = env.get("EMBER_NVRTC")
    if explicit:
        out.append(Path(explicit))
    wheels = _wheel_dirs()
    wheels.sort(key=lambda mw: (mw[0] != prefer_major, -mw[0]))
    for _, d in wheels:
        out += _globs(d)
    for var in ("CUDA_PATH", "CUDA_HOME"):
        base = env.get(var)
        if base:
            for sub in ("lib64", "lib", "bin", os.path.join("lib", "x64")):
                out += _globs(Path(base) / sub)
    out += _globs(Path("/usr/local/cuda/lib64"))
    name = ctypes.util.find_library("nvrtc")
    if name:
        out.append(name)
    seen, uniq = set(), []
    for p in out:
        if str(p) not in seen:
            seen.add(str(p))
            uniq.append(p)
    return uniq


def find_nvrtc(env=None, prefer_major: int | None = None) -> tuple:
    """``(Nvrtc, "")`` for the first library that loads, or ``(None, why not)``."""
    env = os.environ if env is None else env
    tried = []
    for c in candidates(env, prefer_major):
        try:
            return Nvrtc(str(c)), ""
        except OSError as e:
            tried.append(f"{c} ({e})")
        except (AttributeError, NvrtcError) as e:
            tried.append(f"{c} (not a usable NVRTC: {e})")
    if env.get("EMBER_NVRTC") and tried:
        return None, f"EMBER_NVRTC={env['EMBER_NVRTC']!r} does not load: {tried[0]}"
    if tried:
        return None, "no NVRTC library loads: " + "; ".join(tried[:4])
    return None, ("NVRTC (the CUDA runtime compiler) is not installed: pip install "
                  "nvidia-cuda-nvrtc-cu12 (or the CUDA 13 wheel, or the CUDA toolkit), or set "
                  "EMBER_NVRTC to libnvrtc's path")


_c = ctypes
_PROG = _c.c_void_p


class Nvrtc:
    """One loaded NVRTC library. ``version`` is ``(major, minor)``; ``archs`` the
    compute capabilities it can produce CUBINs for (e.g. ``(75, 80, 86, 89, 90, ...)``)."""

    def __init__(self, path: str):
        lib = _c.CDLL(path)
        self.path = path
        self._lib = lib
        for name, argtypes in (
                ("nvrtcVersion", [_c.POINTER(_c.c_int), _c.POINTER(_c.c_int)]),
                ("nvrtcCreateProgram", [_c.POINTER(_PROG), _c.c_char_p, _c.c_char_p, _c.c_int,
                                        _c.c_void_p, _c.c_void_p]),
                ("nvrtcCompileProgram", [_PROG, _c.c_int, _c.POINTER(_c.c_char_p)]),
                ("nvrtcGetProgramLogSize", [_PROG, _c.POINTER(_c.c_size_t)]),
                ("nvrtcGetProgramLog", [_PROG, _c.c_char_p]),
                ("nvrtcGetPTXSize", [_PROG, _c.POINTER(_c.c_size_t)]),
                ("nvrtcGetPTX", [_PROG, _c.c_char_p]),
                ("nvrtcDestroyProgram", [_c.POINTER(_PROG)])):
            fn = getattr(lib, name)
            fn.argtypes = argtypes
            fn.restype = _c.c_int
        lib.nvrtcGetErrorString.argtypes = [_c.c_int]
        lib.nvrtcGetErrorString.restype = _c.c_char_p
        self._cubin = hasattr(lib, "nvrtcGetCUBIN")
        if self._cubin:
            lib.nvrtcGetCUBINSize.argtypes = [_PROG, _c.POINTER(_c.c_size_t)]
            lib.nvrtcGetCUBINSize.restype = _c.c_int
            lib.nvrtcGetCUBIN.argtypes = [_PROG, _c.c_char_p]
            lib.nvrtcGetCUBIN.restype = _c.c_int
        major, minor = _c.c_int(), _c.c_int()
        self._check(lib.nvrtcVersion(_c.byref(major), _c.byref(minor)), "nvrtcVersion")
        self.version = (major.value, minor.value)
        archs: tuple = ()
        if hasattr(lib, "nvrtcGetNumSupportedArchs"):
            n = _c.c_int()
            if lib.nvrtcGetNumSupportedArchs(_c.byref(n)) == 0 and n.value > 0:
                arr = (_c.c_int * n.value)()
                if lib.nvrtcGetSupportedArchs(arr) == 0:
                    archs = tuple(int(a) for a in arr)
        self.archs = archs if self._cubin else ()

    def _check(self, rc: int, what: str):
        if rc != 0:
            msg = self._lib.nvrtcGetErrorString(rc)
            raise NvrtcError(f"{what} failed: {msg.decode() if msg else rc}")

    @property
    def version_text(self) -> str:
        return f"nvrtc {self.version[0]}.{self.version[1]}"

    def target(self, arch: int) -> tuple:
        """``(kind, arch)`` this NVRTC produces for a device of compute capability ``arch``:
        a CUBIN for it, else PTX for the newest supported capability not above it."""
        arch = int(arch)
        if arch in self.archs:
            return "cubin", arch
        lower = [a for a in self.archs if a <= arch]
        if lower:
            return "ptx", max(lower)
        if not self.archs:          # an NVRTC that cannot list (or make) CUBINs: PTX as asked
            return "ptx", arch
        raise NvrtcError(f"NVRTC {self.version[0]}.{self.version[1]} cannot target compute "
                         f"capability {arch // 10}.{arch % 10} (it supports "
                         f"{', '.join(str(a) for a in self.archs)})")

    def compile(self, source: str, arch: int, options=(), name: str = "ember.cu") -> Compiled:
        """Compile ``source`` for compute capability ``arch`` (see `target`)."""
        kind, tarch = self.target(arch)
        flag = f"--gpu-architecture={'sm' if kind == 'cubin' else 'compute'}_{tarch}"
        opts = [flag] + list(options)
        lib = self._lib
        prog = _PROG()
        self._check(lib.nvrtcCreateProgram(_c.byref(prog), source.encode(), name.encode(), 0,
                                           None, None), "nvrtcCreateProgram")
        try:
            arr = (_c.c_char_p * len(opts))(*[o.encode() for o in opts])
            rc = lib.nvrtcCompileProgram(prog, len(opts), arr)
            size = _c.c_size_t()
            lib.nvrtcGetProgramLogSize(prog, _c.byref(size))
            buf = _c.create_string_buffer(max(1, size.value))
            lib.nvrtcGetProgramLog(prog, buf)
            log = buf.value.decode(errors="replace").strip()
            if rc != 0:
                msg = lib.nvrtcGetErrorString(rc)
                raise NvrtcError(f"NVRTC {self.version[0]}.{self.version[1]} could not compile "
                                 f"a kernel ({msg.decode() if msg else rc}; options "
                                 f"{' '.join(opts)}):\n{log[-6000:]}")
            if kind == "cubin":
                self._check(lib.nvrtcGetCUBINSize(prog, _c.byref(size)), "nvrtcGetCUBINSize")
                out = _c.create_string_buffer(size.value)
                self._check(lib.nvrtcGetCUBIN(prog, out), "nvrtcGetCUBIN")
                binary = out.raw[:size.value]
            else:
                self._check(lib.nvrtcGetPTXSize(prog, _c.byref(size)), "nvrtcGetPTXSize")
                out = _c.create_string_buffer(size.value)
                self._check(lib.nvrtcGetPTX(prog, out), "nvrtcGetPTX")
                binary = out.raw[:size.value]      # NUL-terminated text, as the driver wants
            return Compiled(binary, kind, tarch, log)
        finally:
            lib.nvrtcDestroyProgram(_c.byref(prog))


_FOUND: dict = {}
_FOUND_LOCK = threading.Lock()


def get_nvrtc(prefer_major: int | None = None) -> tuple:
    """The process's ``(Nvrtc or None, reason)`` for the current ``EMBER_NVRTC`` etc."""
    k = (os.environ.get("EMBER_NVRTC"), os.environ.get("CUDA_PATH"),
         os.environ.get("CUDA_HOME"), prefer_major)
    r = _FOUND.get(k)
    if r is None:
        with _FOUND_LOCK:
            r = _FOUND.get(k)
            if r is None:
                r = _FOUND[k] = find_nvrtc(prefer_major=prefer_major)
    return r
