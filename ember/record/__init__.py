"""Records: modules' params on disk, and PyTorch weights into ember modules.

- `save_module(module, path, format="safetensors"|"msgpack", precision="full"|"half")` and
  `load_module_record(module, path, strict=True)` (``Module.save`` / ``Module.load_record``):
  every param by path with its dtype, shape and id, plus metadata (ember version, record
  format version). Loading checks every key and shape and lists all problems in one
  RecordError; ``strict=False`` returns ``(module, LoadReport)``.
- `save_record` / `load_record`: named tensors with JSON metadata (optimizer state,
  checkpoints of a training loop).
- `import_pytorch(path, module, key_remap=..., adapter=PyTorchAdapter())`: ``torch.save``
  state dicts (through a restricted unpickler that never runs code from the file) and
  safetensors files, without torch; `read_pytorch` gives the raw ``{key: ndarray}``.
- `atomic_write` / `write_bytes_atomic` / `write_text_atomic`: how every file ember writes
  is written (temp file in the same directory, fsync, ``os.replace``).

Uses only the public Tensor API and the Module API; safetensors is read and written with
NumPy alone, msgpack needs the ``msgpack`` package.
"""
from .atomic import atomic_write, write_bytes_atomic, write_text_atomic
from .files import (FORMAT_VERSION, FORMATS, PRECISIONS, Record, detect_format, load_record,
                    load_module_record, save_module, save_record)
from .load import LoadReport, apply_arrays
from .pytorch import PyTorchAdapter, import_pytorch, read_pytorch, remap_keys
from .safetensors_format import read_safetensors, write_safetensors

__all__ = [
    "save_module", "load_module_record", "save_record", "load_record", "Record",
    "LoadReport", "apply_arrays", "import_pytorch", "read_pytorch", "remap_keys",
    "PyTorchAdapter", "atomic_write", "write_bytes_atomic", "write_text_atomic",
    "read_safetensors", "write_safetensors", "detect_format", "FORMAT_VERSION", "FORMATS",
    "PRECISIONS",
]
