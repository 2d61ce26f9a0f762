"""Datasets, transforms and the `DataLoader` (Burn's ``burn-dataset`` and data loader).

A `Dataset` has a length and ``get(index)``; sources read items from memory, CSV and SQLite
files, image folders, MNIST IDX files and the bundled digits; transforms are lazy views of
other datasets; `DataLoader` turns one into batches on a device with seeded shuffling and
worker threads. Built only on the public Tensor API."""
from .dataset import Dataset, DatasetLike, as_dataset
from .in_memory import InMemoryDataset
from .csv import CsvDataset
from .sqlite import SqliteDataset, SqliteDatasetWriter
from .image_folder import ImageFolderDataset
from .mnist import MnistDataset, read_idx, write_idx
from .digits import DigitsDataset
from .transforms import (ComposedDataset, MapDataset, PartialDataset, SamplerDataset,
                         SelectionDataset, ShuffledDataset, WindowsDataset)
from .loader import (Batcher, ClassificationBatch, ClassificationBatcher, DataLoader,
                     TensorBatcher)
from ..errors import DatasetError

__all__ = [
    "Dataset", "DatasetLike", "as_dataset", "DatasetError",
    "InMemoryDataset", "CsvDataset", "SqliteDataset", "SqliteDatasetWriter",
    "ImageFolderDataset", "MnistDataset", "read_idx", "write_idx", "DigitsDataset",
    "MapDataset", "PartialDataset", "SelectionDataset", "ShuffledDataset", "SamplerDataset",
    "WindowsDataset", "ComposedDataset",
    "Batcher", "DataLoader", "TensorBatcher", "ClassificationBatcher", "ClassificationBatch",
]
