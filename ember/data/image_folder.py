"""Images in class folders (``root/<class>/<image>``), decoded with Pillow when read."""
from __future__ import annotations

import os
from collections.abc import Iterable, Sequence

import numpy as np

from ..errors import BackendUnavailableError, DatasetError
from .dataset import Dataset

__all__ = ["ImageFolderDataset", "IMAGE_EXTENSIONS"]

IMAGE_EXTENSIONS = (".png", ".jpg", ".jpeg", ".bmp", ".gif", ".tif", ".tiff", ".webp")


def _pil():
    try:
        from PIL import Image
    except ImportError:
        raise BackendUnavailableError(
            "ImageFolderDataset needs Pillow; install it with `pip install pillow` (or the "
            "`ember[train]` extra)") from None
    return Image


class ImageFolderDataset(Dataset):
    """A classification dataset laid out as ``root/<class name>/**/<image file>``.

    Classes are the sub-folder names in sorted order (``classes`` to choose and order them);
    item ``i`` is ``(image, label)`` with ``image`` a uint8 NumPy array of shape
    ``[height, width, channels]`` (``[height, width]`` for ``mode="L"``) and ``label`` the
    class index. Images are converted to ``mode`` ("RGB" by default; None keeps the file's
    mode) and, with ``size=(height, width)``, resized bilinearly. Files are decoded when read,
    so worker threads decode in parallel. A file Pillow cannot decode raises
    `ember.errors.DatasetError` naming the file and the item index."""

    def __init__(self, root: str | os.PathLike, *, classes: Sequence[str] | None = None,
                 mode: str | None = "RGB", size: tuple[int, int] | None = None,
                 extensions: Iterable[str] = IMAGE_EXTENSIONS):
        _pil()
        self.root = os.fspath(root)
        self.mode = mode
        self.size = None if size is None else (int(size[0]), int(size[1]))
        exts = tuple(e.lower() if e.startswith(".") else "." + e.lower() for e in extensions)
        if not os.path.isdir(self.root):
            raise DatasetError(f"ImageFolderDataset: {self.root} is not a folder")
        found = sorted(d.name for d in os.scandir(self.root) if d.is_dir()
                       and not d.name.startswith("."))
        if classes is None:
            classes = found
        else:
            classes = list(classes)
            missing = [c for c in classes if c not in found]
            if missing:
                raise DatasetError(f"ImageFolderDataset({self.root}): no folders for classes "
                                   f"{missing}; found {found}")
        if not classes:
            raise DatasetError(f"ImageFolderDataset({self.root}): no class folders; expected "
                               f"root/<class>/<image>")
        self.classes = list(classes)
        self.class_to_index = {c: i for i, c in enumerate(self.classes)}
        paths, labels = [], []
        for label, c in enumerate(self.classes):
            base = os.path.join(self.root, c)
            files = []
            for folder, dirs, names in os.walk(base):
                dirs[:] = [d for d in dirs if not d.startswith(".")]
                files.extend(os.path.join(folder, n) for n in names
                             if os.path.splitext(n)[1].lower() in exts
                             and not n.startswith("."))
            files.sort()
            paths.extend(files)
            labels.extend([label] * len(files))
        self.paths = paths
        self.labels = np.asarray(labels, dtype=np.int64)

    def __len__(self) -> int:
        return len(self.paths)

    def load_image(self, index: int) -> np.ndarray:
        Image = _pil()
        path = self.paths[index]
        try:
            with Image.open(path) as im:
                im.load()
                if self.mode is not None and im.mode != self.mode:
                    im = im.convert(self.mode)
                if self.size is not None and (im.height, im.width) != self.size:
                    im = im.resize((self.size[1], self.size[0]), Image.Resampling.BILINEAR)
                arr = np.array(im)
        except Exception as e:
            raise DatasetError(f"ImageFolderDataset: item {index}, file {path}: cannot decode "
                               f"the image ({type(e).__name__}: {e})") from None
        return arr

    def get(self, index: int):
        if not 0 <= index < len(self.paths):
            return None
        return self.load_image(index), int(self.labels[index])

    def __repr__(self) -> str:
        return (f"ImageFolderDataset({self.root!r}, len={len(self)}, "
                f"classes={self.classes}, mode={self.mode!r})")
