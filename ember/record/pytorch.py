"""PyTorch weights into ember modules, without PyTorch.

`read_pytorch` reads a ``torch.save`` file (the zip format: ``<name>/data.pkl`` plus
``<name>/data/<key>`` storages; and the legacy pickle stream of torch < 1.6) or a safetensors
file into ``{key: ndarray}``. A pickle can run any code when loaded, so the one in a ``.pt``
file goes through a restricted unpickler: it resolves only the few globals a state dict is
made of (``collections.OrderedDict``, ``torch._utils._rebuild_tensor_v2`` and friends, the
storage classes, torch dtypes), each to ember's own harmless stand-in, and refuses every
other global with a RecordError naming it. Nothing from ``torch`` is imported.

`import_pytorch` then renames keys (``key_remap``: regex rules applied in order), converts
PyTorch's layouts to ember's (`PyTorchAdapter`: Linear weights [out, in] -> [in, out], norm
parameter names) and loads the result with the same checks as ember's own records.
"""
from __future__ import annotations

import _compat_pickle
import collections
import io
import os
import pickle
import re
import struct
import zipfile

import ml_dtypes
import numpy as np

from ..errors import RecordError
from . import safetensors_format
from .load import apply_arrays, param_owner

__all__ = ["read_pytorch", "import_pytorch", "PyTorchAdapter", "remap_keys"]

# -- stand-ins for the globals a state dict is made of --------------------------------------

_TORCH_DTYPES = {
    "float64": np.float64, "double": np.float64, "float32": np.float32, "float": np.float32,
    "float16": np.float16, "half": np.float16, "bfloat16": ml_dtypes.bfloat16,
    "int64": np.int64, "long": np.int64, "int32": np.int32, "int": np.int32,
    "int16": np.int16, "short": np.int16, "int8": np.int8, "uint8": np.uint8,
    "bool": np.bool_, "uint16": np.uint16, "uint32": np.uint32, "uint64": np.uint64,
    "complex64": np.complex64, "cfloat": np.complex64, "complex128": np.complex128,
    "cdouble": np.complex128, "float8_e4m3fn": ml_dtypes.float8_e4m3fn,
    "float8_e5m2": ml_dtypes.float8_e5m2,
}
_STORAGES = {
    "DoubleStorage": np.float64, "FloatStorage": np.float32, "HalfStorage": np.float16,
    "BFloat16Storage": ml_dtypes.bfloat16, "LongStorage": np.int64, "IntStorage": np.int32,
    "ShortStorage": np.int16, "CharStorage": np.int8, "ByteStorage": np.uint8,
    "BoolStorage": np.bool_, "ComplexFloatStorage": np.complex64,
    "ComplexDoubleStorage": np.complex128, "UntypedStorage": np.uint8,
}


class _DType:
    """A torch dtype named in the pickle (``torch.float32``)."""
    __slots__ = ("np",)

    def __init__(self, np_dtype):
        self.np = np.dtype(np_dtype)

    def __reduce__(self):
        raise TypeError("not picklable")


class _StorageType:
    """A torch storage class named in the pickle (``torch.FloatStorage``); not callable."""
    __slots__ = ("name", "np")

    def __init__(self, name, np_dtype):
        self.name, self.np = name, np.dtype(np_dtype)


class _Storage:
    """A storage's raw bytes (filled in later for the legacy format), its element dtype, and
    for legacy views an element offset and length into a root storage."""
    __slots__ = ("key", "dtype", "numel", "raw", "root", "offset")

    def __init__(self, key, dtype, numel, raw=None, root=None, offset=0):
        self.key, self.dtype, self.numel = key, dtype, numel
        self.raw, self.root, self.offset = raw, root, offset

    def data(self) -> bytes | memoryview:
        if self.root is not None:
            base = self.root.data()
            item = self.dtype.itemsize
            return memoryview(base)[self.offset * item:(self.offset + self.numel) * item]
        return self.raw


class _TensorRef:
    """A tensor found in the pickle: a strided view of a storage, made into an array once
    every storage is read. Refuses pickle's BUILD (``__setstate__``)."""
    __slots__ = ("storage", "offset", "size", "stride", "dtype")

    def __init__(self, storage, offset, size, stride, dtype):
        self.storage, self.offset, self.size, self.stride, self.dtype = \
            storage, offset, size, stride, dtype

    def __setstate__(self, state):
        raise pickle.UnpicklingError("a tensor takes no pickled state")


def _ints(x, what):
    if isinstance(x, int) and not isinstance(x, bool):
        return x
    if not isinstance(x, (tuple, list)) or not all(
            isinstance(i, int) and not isinstance(i, bool) for i in x):
        raise pickle.UnpicklingError(f"tensor {what} must be ints, got {x!r}")
    return tuple(x)


def _rebuild_tensor(storage, storage_offset, size, stride, dtype=None):
    if not isinstance(storage, _Storage):
        raise pickle.UnpicklingError(f"a tensor needs a storage, got {type(storage).__name__}")
    if dtype is None:
        dtype = storage.dtype
    elif not isinstance(dtype, _DType):
        raise pickle.UnpicklingError(f"a tensor dtype must be a torch dtype, got {dtype!r}")
    else:
        dtype = dtype.np
    size, stride = _ints(size, "sizes"), _ints(stride, "strides")
    offset = _ints(storage_offset, "offset")
    if len(size) != len(stride) or offset < 0 or any(s < 0 for s in size) or \
            any(s < 0 for s in stride):
        raise pickle.UnpicklingError(f"bad tensor geometry: offset {offset}, size {size}, "
                                     f"stride {stride}")
    return _TensorRef(storage, offset, size, stride, np.dtype(dtype))


def _rebuild_tensor_v2(storage, storage_offset, size, stride, requires_grad=False,
                       backward_hooks=None, metadata=None):
    return _rebuild_tensor(storage, storage_offset, size, stride)


def _rebuild_tensor_v3(storage, storage_offset, size, stride, requires_grad, backward_hooks,
                       dtype, metadata=None):
    return _rebuild_tensor(storage, storage_offset, size, stride, dtype)


def _rebuild_parameter(data, requires_grad=True, backward_hooks=None, state=None):
    if not isinstance(data, _TensorRef):
        raise pickle.UnpicklingError("a Parameter must hold a tensor")
    return data


def _codecs_encode(obj, encoding="utf-8", errors="strict"):
    # protocol-2 pickles spell bytes as _codecs.encode(str, "latin1")
    if not isinstance(obj, str) or encoding not in ("latin1", "latin-1", "utf-8", "ascii"):
        raise pickle.UnpicklingError("_codecs.encode: only str to latin1/utf-8/ascii")
    return obj.encode(encoding, errors)


def _ordered_dict(*args):
    if args and not all(isinstance(a, (list, tuple, dict)) for a in args):
        raise pickle.UnpicklingError("OrderedDict takes no such arguments")
    return collections.OrderedDict(*args)


_ALLOWED = {
    ("collections", "OrderedDict"): _ordered_dict,
    ("torch._utils", "_rebuild_tensor"): _rebuild_tensor,
    ("torch._utils", "_rebuild_tensor_v2"): _rebuild_tensor_v2,
    ("torch._utils", "_rebuild_tensor_v3"): _rebuild_tensor_v3,
    ("torch._utils", "_rebuild_parameter"): _rebuild_parameter,
    ("torch._utils", "_rebuild_parameter_with_state"): _rebuild_parameter,
    ("torch", "Size"): tuple,
    ("_codecs", "encode"): _codecs_encode,
}
for _name, _np in _STORAGES.items():
    _ALLOWED[("torch", _name)] = _StorageType(_name, _np)
_ALLOWED[("torch.storage", "UntypedStorage")] = _StorageType("UntypedStorage", np.uint8)
for _name, _np in _TORCH_DTYPES.items():
    _ALLOWED[("torch", _name)] = _DType(_np)


class _RestrictedUnpickler(pickle.Unpickler):
    """Resolves only the stand-ins in ``_ALLOWED``; storages come from ``storage_for``."""

    def __init__(self, file, path, storage_for):
        super().__init__(file, encoding="utf-8")
        self._path = path
        self._storage_for = storage_for

    def find_class(self, module, name):
        # protocol 0-2 pickles may spell modules the Python 2 way (__builtin__, commands)
        if (module, name) in _compat_pickle.NAME_MAPPING:
            module, name = _compat_pickle.NAME_MAPPING[(module, name)]
        elif module in _compat_pickle.IMPORT_MAPPING:
            module = _compat_pickle.IMPORT_MAPPING[module]
        obj = _ALLOWED.get((module, name))
        if obj is None:
            raise RecordError(
                f"{self._path}: refusing to load the global {module}.{name} from the pickle: "
                f"only the contents of a state dict (tensors, OrderedDict, numbers, strings) "
                f"are read, no code is run. Save the weights with "
                f"torch.save(model.state_dict(), path) or as safetensors")
        return obj

    def persistent_load(self, pid):
        if not isinstance(pid, tuple) or not pid or pid[0] not in ("storage", b"storage"):
            raise RecordError(f"{self._path}: unsupported persistent id {pid!r:.80} in the "
                              f"pickle (only tensor storages are read)")
        return self._storage_for(pid[1:])


def _storage_type(path, t):
    if not isinstance(t, _StorageType):
        raise RecordError(f"{path}: corrupt PyTorch file: storage type {t!r:.80}")
    return t.np


# -- the two torch.save layouts -------------------------------------------------------------

def _read_zip(path, zf: zipfile.ZipFile):
    names = zf.namelist()
    pkl = [n for n in names if n.endswith("data.pkl") and n.count("/") == 1]
    if not pkl:
        if any(n.endswith("constants.pkl") for n in names):
            raise RecordError(f"{path}: a TorchScript archive (torch.jit.save), not a "
                              f"torch.save file; save model.state_dict() with torch.save")
        raise RecordError(f"{path}: a zip file without <name>/data.pkl: not a torch.save file")
    prefix = pkl[0][:-len("data.pkl")]
    big = False
    if prefix + "byteorder" in names:
        big = zf.read(prefix + "byteorder").strip() == b"big"
    storages = {}

    def storage_for(args):
        if len(args) != 4:
            raise RecordError(f"{path}: corrupt PyTorch file: storage id {args!r:.80}")
        stype, key, _location, numel = args
        dtype = _storage_type(path, stype)
        key = str(key)
        if key not in storages:
            try:
                raw = zf.read(f"{prefix}data/{key}")
            except KeyError:
                raise RecordError(f"{path}: corrupt PyTorch file: storage {key!r} is missing "
                                  f"from the archive") from None
            storages[key] = _Storage(key, dtype, len(raw) // dtype.itemsize, raw)
        return storages[key]

    try:
        data = zf.read(pkl[0])
    except (zipfile.BadZipFile, OSError, EOFError) as e:
        raise RecordError(f"{path}: corrupt PyTorch file ({e})") from None
    obj = _unpickle(path, io.BytesIO(data), storage_for)
    return obj, big


_MAGIC = 0x1950A86A20F9469CFC6C
_LEGACY_PROTOCOL = 1001


def _read_legacy(path, f):
    storages = {}

    def storage_for(args):
        if len(args) != 5:
            raise RecordError(f"{path}: corrupt PyTorch file: storage id {args!r:.80}")
        stype, key, _location, numel, view = args
        dtype = _storage_type(path, stype)
        if not isinstance(numel, int) or numel < 0:
            raise RecordError(f"{path}: corrupt PyTorch file: storage size {numel!r}")
        key = str(key)
        root = storages.setdefault(key, _Storage(key, dtype, numel))
        if view is None:
            return root
        try:
            vkey, voff, vsize = view
        except (TypeError, ValueError):
            raise RecordError(f"{path}: corrupt PyTorch file: storage view {view!r:.80}"
                              ) from None
        return storages.setdefault(str(vkey), _Storage(str(vkey), dtype, vsize, root=root,
                                                       offset=voff))

    magic = _unpickle(path, f, storage_for)
    if magic != _MAGIC:
        raise RecordError(f"{path}: not a PyTorch file (no torch.save magic number)")
    proto = _unpickle(path, f, storage_for)
    if proto != _LEGACY_PROTOCOL:
        raise RecordError(f"{path}: unsupported PyTorch legacy protocol {proto!r}")
    sys_info = _unpickle(path, f, storage_for)
    little = not isinstance(sys_info, dict) or sys_info.get("little_endian", True)
    obj = _unpickle(path, f, storage_for)
    keys = _unpickle(path, f, storage_for)
    if not isinstance(keys, list):
        raise RecordError(f"{path}: corrupt PyTorch file: storage key list")
    for key in keys:
        st = storages.get(str(key))
        if st is None or st.root is not None:
            raise RecordError(f"{path}: corrupt PyTorch file: unknown storage {key!r}")
        head = f.read(8)
        if len(head) < 8:
            raise RecordError(f"{path}: truncated PyTorch file (storage {key!r})")
        (numel,) = struct.unpack("<q" if little else ">q", head)
        nbytes = numel * st.dtype.itemsize
        raw = f.read(nbytes) if numel >= 0 else b""
        if numel < 0 or len(raw) != nbytes:
            raise RecordError(f"{path}: truncated PyTorch file: storage {key!r} needs "
                              f"{nbytes} bytes, has {len(raw)}")
        st.raw, st.numel = raw, numel
    missing = [k for k, s in storages.items() if s.root is None and s.raw is None]
    if missing:
        raise RecordError(f"{path}: corrupt PyTorch file: no data for storages {missing}")
    return obj, not little


def _unpickle(path, f, storage_for):
    try:
        return _RestrictedUnpickler(f, path, storage_for).load()
    except RecordError:
        raise
    except Exception as e:    # UnpicklingError, EOFError, TypeError from bad opcodes...
        what = "truncated" if isinstance(e, EOFError) else "corrupt"
        raise RecordError(f"{path}: {what} PyTorch file: the pickle cannot be read "
                          f"({type(e).__name__}: {e})") from None


def _materialize(path, ref: _TensorRef, big: bool) -> np.ndarray:
    raw = ref.storage.data()
    if raw is None:
        raise RecordError(f"{path}: corrupt PyTorch file: a storage has no data")
    dtype = ref.dtype
    nbytes = len(raw) - len(raw) % dtype.itemsize
    if big and dtype.itemsize > 1:
        if dtype.kind in "fciu" and dtype.type.__module__ == "numpy":
            flat = np.frombuffer(raw, dtype=dtype.newbyteorder(">"), count=nbytes // dtype.itemsize)
            flat = flat.astype(dtype)
        else:   # ml_dtypes (bf16, fp8): swap the bytes of each element by hand
            u = np.dtype(f"<u{dtype.itemsize}")
            flat = np.frombuffer(raw, dtype=u, count=nbytes // dtype.itemsize).byteswap()
            flat = flat.view(dtype)
    else:
        flat = np.frombuffer(raw, dtype=dtype, count=nbytes // dtype.itemsize)
    if any(s == 0 for s in ref.size):
        return np.zeros(ref.size, dtype=dtype)
    last = ref.offset + sum((n - 1) * s for n, s in zip(ref.size, ref.stride))
    if last >= flat.size:
        raise RecordError(f"{path}: corrupt PyTorch file: a tensor of size {list(ref.size)}, "
                          f"stride {list(ref.stride)}, offset {ref.offset} reaches past its "
                          f"storage of {flat.size} elements")
    view = np.lib.stride_tricks.as_strided(
        flat[ref.offset:], shape=ref.size,
        strides=tuple(s * dtype.itemsize for s in ref.stride), writeable=False)
    return np.array(view, dtype=dtype, copy=True, order="C")


def _flatten(path, obj, big, prefix, out, skipped):
    if isinstance(obj, _TensorRef):
        out[prefix] = _materialize(path, obj, big)
    elif isinstance(obj, dict):
        for k, v in obj.items():
            _flatten(path, v, big, f"{prefix}.{k}" if prefix else str(k), out, skipped)
    elif isinstance(obj, (list, tuple)) and any(isinstance(v, (_TensorRef, dict, list, tuple))
                                                for v in obj):
        for i, v in enumerate(obj):
            _flatten(path, v, big, f"{prefix}.{i}" if prefix else str(i), out, skipped)
    else:
        skipped.append((prefix or "<top level>", f"not a tensor ({type(obj).__name__})"))


def read_pytorch(path, *, top_level_key: str | None = None, report_skipped: bool = False):
    """``{key: ndarray}`` from a PyTorch ``.pt``/``.pth`` file (``torch.save`` of a state
    dict, zip or legacy format) or a safetensors file, without torch. Nested dicts give
    dotted keys (``{"model": {"fc.weight": ...}}`` -> ``"model.fc.weight"``);
    ``top_level_key`` picks one entry first (``"state_dict"``, ``"model"``). Non-tensor
    values (epoch counters, hyper-parameters) are left out; ``report_skipped=True`` returns
    ``(arrays, [(key, why), ...])``. Globals other than a state dict's refuse to load
    (RecordError naming the global), as do corrupt or truncated files."""
    p = os.fspath(path)
    try:
        f = open(path, "rb")
    except OSError as e:
        raise RecordError(f"{p}: cannot open: {e.strerror or e}") from None
    with f:
        size = os.fstat(f.fileno()).st_size
        head = f.read(16)
        f.seek(0)
        skipped: list = []
        if safetensors_format.looks_like_safetensors(head, size) or (
                p.endswith(".safetensors") and len(head) >= 8):
            arrays, _ = safetensors_format.read_safetensors(path)
            if top_level_key is not None:
                pre = top_level_key + "."
                arrays = {k[len(pre):]: v for k, v in arrays.items() if k.startswith(pre)}
            return (arrays, skipped) if report_skipped else arrays
        if head[:4] == b"PK\x03\x04":
            try:
                zf = zipfile.ZipFile(f)
            except (zipfile.BadZipFile, OSError, EOFError) as e:
                raise RecordError(f"{p}: corrupt or truncated PyTorch file (zip: {e})"
                                  ) from None
            with zf:
                try:
                    obj, big = _read_zip(p, zf)
                except (zipfile.BadZipFile, EOFError, OSError) as e:
                    raise RecordError(f"{p}: corrupt PyTorch file ({e})") from None
        elif head[:1] == b"\x80":
            obj, big = _read_legacy(p, f)
        elif not head:
            raise RecordError(f"{p}: empty file, not a PyTorch checkpoint (truncated?)")
        else:
            raise RecordError(f"{p}: not a PyTorch checkpoint (neither a torch.save zip, a "
                              f"legacy torch.save pickle, nor safetensors)")
    if top_level_key is not None:
        if not isinstance(obj, dict) or top_level_key not in obj:
            keys = list(obj) if isinstance(obj, dict) else []
            raise RecordError(f"{p}: no top-level key {top_level_key!r}; the file's top "
                              f"level has {keys[:20]}")
        obj = obj[top_level_key]
    out: dict = {}
    _flatten(p, obj, big, "", out, skipped)
    return (out, skipped) if report_skipped else out


# -- key remapping and the layout adapter ---------------------------------------------------

def remap_keys(arrays: dict, key_remap, *, source: str = "record") -> dict:
    """Rename keys with ``[(regex, replacement), ...]``, each rule applied (``re.sub``) in
    order to every key. Two keys ending up the same raise RecordError."""
    rules = []
    for rule in key_remap or ():
        try:
            pat, repl = rule
            rules.append((re.compile(pat), repl))
        except (TypeError, ValueError, re.error) as e:
            raise RecordError(f"key_remap: each rule must be (regex, replacement); {rule!r} "
                              f"is not ({e})") from None
    out, origin = {}, {}
    for key, arr in arrays.items():
        new = key
        for pat, repl in rules:
            new = pat.sub(repl, new)
        if new in out:
            raise RecordError(f"{source}: key_remap maps both {origin[new]!r} and {key!r} to "
                              f"{new!r}")
        out[new], origin[new] = arr, key
    return out


def _class_names(obj):
    return [c.__name__ for c in type(obj).__mro__]


class PyTorchAdapter:
    """Converts PyTorch's parameter layouts and names to ember's, guided by the target
    module: for each ember param, the layer that owns it (found by walking the path) decides
    the PyTorch name it comes from and how its array changes.

    - ``transpose``: layer class names whose 2-d ``weight`` is stored [out, in] by PyTorch
      and [in, out] by ember (``Linear``).
    - ``rename``: layer class name -> {ember attribute: PyTorch attribute}, for layers whose
      parameter names differ (norm layers' ``gamma``/``beta`` vs ``weight``/``bias``).
    - ``ignore``: regexes for PyTorch keys that have no ember counterpart and are dropped
      (reported as skipped) when no param claims them (``num_batches_tracked``).

    A class name matches the layer's class or any base class, so subclasses of ember's
    layers are handled too. Subclass or pass your own tables for other layers.
    """

    DEFAULT_TRANSPOSE = ("Linear",)
    DEFAULT_RENAME: dict = {
        "LayerNorm": {"gamma": "weight", "beta": "bias"},
        "GroupNorm": {"gamma": "weight", "beta": "bias"},
        "InstanceNorm": {"gamma": "weight", "beta": "bias"},
        "BatchNorm": {"gamma": "weight", "beta": "bias"},
        "BatchNorm1d": {"gamma": "weight", "beta": "bias"},
        "BatchNorm2d": {"gamma": "weight", "beta": "bias"},
        "RmsNorm": {"gamma": "weight"},
        "RMSNorm": {"gamma": "weight"},
    }
    DEFAULT_IGNORE = (r"(^|\.)num_batches_tracked$",)

    def __init__(self, *, transpose=None, rename=None, ignore=None):
        self.transpose = tuple(self.DEFAULT_TRANSPOSE if transpose is None else transpose)
        self.rename = dict(self.DEFAULT_RENAME if rename is None else rename)
        self.ignore = [re.compile(p) for p in (self.DEFAULT_IGNORE if ignore is None
                                               else ignore)]

    def source_key(self, module, path: str) -> tuple[str, bool]:
        """``(pytorch_key, transpose)`` for the ember param at ``path``."""
        owner, attr = param_owner(module, path)
        if owner is None:
            return path, False
        names = _class_names(owner)
        torch_attr = attr
        for n in names:
            if n in self.rename and attr in self.rename[n]:
                torch_attr = self.rename[n][attr]
                break
        transpose = attr == "weight" and any(n in self.transpose for n in names)
        prefix = path[:len(path) - len(attr)]
        return prefix + torch_attr, transpose

    def adapt(self, arrays: dict, module) -> tuple[dict, list]:
        """``(ember arrays, skipped)``: ``arrays`` keyed by PyTorch names, re-keyed and
        re-laid-out for ``module``; keys no param claims are kept as they are (so a strict
        load reports them), unless an ``ignore`` pattern drops them."""
        wanted = {}
        for path, _ in module.named_parameters():
            key, transpose = self.source_key(module, path)
            wanted[key] = (path, transpose)
        out, skipped = {}, []
        for key, arr in arrays.items():
            hit = wanted.get(key)
            if hit is None:
                if any(p.search(key) for p in self.ignore):
                    skipped.append((key, "ignored by the adapter"))
                else:
                    out.setdefault(key, arr)
                continue
            path, transpose = hit
            if transpose and arr.ndim == 2:
                arr = np.ascontiguousarray(arr.T)
            out[path] = arr
        return out, skipped


def import_pytorch(path, module, *, key_remap=None, adapter: PyTorchAdapter | None = None,
                   strict: bool = True, top_level_key: str | None = None):
    """Load PyTorch weights (a ``torch.save`` state dict ``.pt``/``.pth``, or safetensors)
    into ``module``; torch is not needed. Keys are renamed by ``key_remap`` (regex rules in
    order), then ``adapter`` (default `PyTorchAdapter()`; pass ``False`` for none) converts
    layouts and names. Every key and shape is then checked as in `load_module_record`: with
    ``strict`` all problems raise one RecordError; ``strict=False`` returns
    ``(module, LoadReport)``. Values are cast to the module's dtypes; param ids are kept."""
    p = os.fspath(path)
    arrays, skipped = read_pytorch(path, top_level_key=top_level_key, report_skipped=True)
    arrays = remap_keys(arrays, key_remap, source=p)
    if adapter is None:
        adapter = PyTorchAdapter()
    if adapter is not False:
        arrays, more = adapter.adapt(arrays, module)
        skipped = skipped + more
    return apply_arrays(module, arrays, source=p, strict=strict, skipped=skipped)
