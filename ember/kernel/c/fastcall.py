"""Kernel launches through a small CPython extension instead of ctypes.

A ctypes call of a generated kernel costs about 3.3 µs (measured on an AMD EPYC): most of it
turns each array into a pointer (0.3 µs apiece) and packs the pointer array. On the small
tensors of a training step a launch then costs more than the kernel, so Fusion leaves such
ops to NumPy. ``launch(fn_address, arrays, packed_args, threads, chunk)`` does the same call
in C -- each array's data pointer read from the NumPy array itself -- in about 0.4 µs.

The extension is compiled once per Python, NumPy and compiler, against their headers (the
interpreter's include dir and ``numpy.get_include()``), cached on disk beside the kernels
(built under the kernels' file lock, written to a temporary file and renamed into place), and
loaded as an extension module. Where it cannot be built -- no Python headers (a Python
without its development files), a compiler that fails -- `get` returns None, `reason` says
why, and the runtime launches through ctypes as before. ``EMBER_C_FASTCALL=0`` turns it off.
"""
from __future__ import annotations

import hashlib
import importlib.machinery
import importlib.util
import os
import subprocess
import sys
import sysconfig
import tempfile
import threading
from pathlib import Path

__all__ = ["get", "reason", "SOURCE"]

MODULE = "_ember_fastcall"
MAX_ARRAYS = 256

SOURCE = r"""
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#define NPY_NO_DEPRECATED_API NPY_1_7_API_VERSION
#include <numpy/ndarraytypes.h>
#include <stdint.h>

/* the generated kernels' entry point (ember/kernel/c/render.py) */
typedef void (*ember_kernel_t)(char **, const void *, int64_t, int64_t);
static PyTypeObject *ndarray_type = NULL;

static PyObject *set_array_type(PyObject *self, PyObject *t) {
  if (!PyType_Check(t)) {
    PyErr_SetString(PyExc_TypeError, "set_array_type: expects numpy.ndarray");
    return NULL;
  }
  Py_INCREF(t);
  ndarray_type = (PyTypeObject *)t;
  Py_RETURN_NONE;
}

/* launch(fn_address, arrays: list of ndarray, packed: bytes | None, threads, chunk) */
static PyObject *launch(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
  if (nargs != 5) {
    PyErr_SetString(PyExc_TypeError, "launch(fn_address, arrays, packed, threads, chunk)");
    return NULL;
  }
  void *fp = PyLong_AsVoidPtr(args[0]);
  if (fp == NULL) {
    if (!PyErr_Occurred()) PyErr_SetString(PyExc_ValueError, "launch: a null function");
    return NULL;
  }
  PyObject *seq = args[1];
  if (!PyList_Check(seq)) {
    PyErr_SetString(PyExc_TypeError, "launch: arrays must be a list");
    return NULL;
  }
  Py_ssize_t n = PyList_GET_SIZE(seq);
  char *ptrs[MAX_ARRAYS];
  if (n > MAX_ARRAYS) {
    PyErr_SetString(PyExc_ValueError, "launch: too many arrays");
    return NULL;
  }
  for (Py_ssize_t i = 0; i < n; i++) {
    PyObject *a = PyList_GET_ITEM(seq, i);
    if (ndarray_type == NULL || !PyObject_TypeCheck(a, ndarray_type)) {
      PyErr_Format(PyExc_TypeError, "launch: buffer %zd is a %s, not a NumPy array", i,
                   Py_TYPE(a)->tp_name);
      return NULL;
    }
    ptrs[i] = (char *)PyArray_DATA((PyArrayObject *)a);
  }
  const void *packed = NULL;
  if (args[2] != Py_None) {
    if (!PyBytes_Check(args[2])) {
      PyErr_SetString(PyExc_TypeError, "launch: packed args must be bytes or None");
      return NULL;
    }
    packed = PyBytes_AS_STRING(args[2]);
  }
  int64_t threads = PyLong_AsLongLong(args[3]);
  int64_t chunk = PyLong_AsLongLong(args[4]);
  if (PyErr_Occurred()) return NULL;
  ember_kernel_t fn = (ember_kernel_t)fp;
  Py_BEGIN_ALLOW_THREADS
  fn(ptrs, packed, threads, chunk);
  Py_END_ALLOW_THREADS
  Py_RETURN_NONE;
}

static PyMethodDef methods[] = {
  {"launch", (PyCFunction)(void (*)(void))launch, METH_FASTCALL, "launch a kernel"},
  {"set_array_type", set_array_type, METH_O, "the array type launch accepts"},
  {NULL, NULL, 0, NULL}};
static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_ember_fastcall", NULL, -1,
                                    methods};
PyMODINIT_FUNC PyInit__ember_fastcall(void) { return PyModule_Create(&module); }
""".replace("MAX_ARRAYS", str(MAX_ARRAYS))

_lock = threading.Lock()
_state: dict = {}          # "launch": the function or None, "reason": why not


def reason() -> str:
    """Why launches go through ctypes ("" when the extension is in use or not tried yet)."""
    return _state.get("reason", "")


def get(compiler=None):
    """``launch(fn_address, arrays, packed, threads, chunk)``, or None (see `reason`);
    built by ``compiler`` (default: the process's) the first time."""
    try:
        return _state["launch"]
    except KeyError:
        pass
    with _lock:
        if "launch" not in _state:
            fn, why = None, ""
            if os.environ.get("EMBER_C_FASTCALL", "1") == "0":
                why = "EMBER_C_FASTCALL=0"
            else:
                try:
                    fn = _load(compiler)
                except Exception as e:  # noqa: BLE001 -- any failure: the ctypes path
                    why = f"{type(e).__name__}: {str(e)[-400:]}"
            _state["reason"] = why
            _state["launch"] = fn
    return _state["launch"]


def _load(cc=None):
    import numpy as np

    from ..cache_files import atomic_write, build_lock
    from .compiler import get_compiler
    cc = cc or get_compiler()
    if not cc.available:
        raise RuntimeError(f"no C compiler: {cc.reason}")
    py_inc = sysconfig.get_paths().get("include") or ""
    if not os.path.exists(os.path.join(py_inc, "Python.h")):
        raise RuntimeError(f"no Python.h in {py_inc!r} (the Python development headers)")
    np_inc = np.get_include()
    suffix = sysconfig.get_config_var("EXT_SUFFIX") or ".so"
    flags = ["-O2", "-fPIC", "-shared", "-I" + py_inc, "-I" + np_inc]
    h = hashlib.sha256()
    for part in (SOURCE, sys.version, np.__version__, suffix, " ".join(cc.argv),
                 cc.version, " ".join(flags)):
        h.update(str(part).encode())
        h.update(b"\0")
    key = "fastcall-" + h.hexdigest()[:32]
    root = cc.path_of(key).parent
    so = root / f"{key}{suffix}"
    if not so.exists():
        root.mkdir(parents=True, exist_ok=True)
        with build_lock(root, key):
            if not so.exists():
                src = root / f"{key}.c"
                atomic_write(src, SOURCE.encode())
                fd, tmp = tempfile.mkstemp(dir=root, prefix=f".{key}.", suffix=suffix)
                os.close(fd)
                try:
                    r = subprocess.run(cc.argv + flags + ["-o", tmp, str(src)],
                                       capture_output=True, text=True, timeout=300)
                    if r.returncode != 0:
                        raise RuntimeError(f"compiling the launch extension failed: "
                                           f"{r.stderr.strip()[-600:]}")
                    os.replace(tmp, so)
                finally:
                    if os.path.exists(tmp):
                        os.unlink(tmp)
    mod = _import(so)
    mod.set_array_type(np.ndarray)
    return mod.launch


def _import(path: Path):
    loader = importlib.machinery.ExtensionFileLoader(MODULE, str(path))
    spec = importlib.util.spec_from_file_location(MODULE, str(path), loader=loader)
    mod = importlib.util.module_from_spec(spec)
    loader.exec_module(mod)
    return mod
