"""HDF5 activation store, written atomically.

write_store     datasets (site name -> [prompts, positions, d_model] array) + attributes -> one HDF5 file
read_store      the same back, exactly; a truncated or corrupt file raises StoreError naming its path
provenance      the attributes every file records (model, config hash, tokenizer hash, versions, seed)
atomic_path     context manager: a temporary name in the same directory, fsynced and renamed on success
save_checkpoint  a model and its tokenizer saved with save_pretrained into a temporary directory, then moved
StoreError
"""

import contextlib
import hashlib
import json
import os
from pathlib import Path

import h5py
import numpy as np

from hybridlens.errors import UserError

TMP_MARK = ".tmp-"


class StoreError(UserError, OSError):
    """An HDF5 store that cannot be read back."""


def sha256_json(obj) -> str:
    return hashlib.sha256(json.dumps(obj, sort_keys=True, default=str).encode()).hexdigest()[:16]


def provenance(model_source: str, config: dict, tokenizer=None, seed=None, source_dtype=None) -> dict:
    """Attributes for a store: model source, config hash, tokenizer hash, library versions, seed, and the
    model's own dtype (a bfloat16 model's activations are stored as float32 or float16)."""
    import tokenizers
    import torch
    import transformers

    import hybridlens

    attrs = {
        "model_source": str(model_source),
        "config_hash": sha256_json(config),
        "versions": json.dumps(
            {
                "hybridlens": hybridlens.__version__,
                "torch": torch.__version__,
                "transformers": transformers.__version__,
                "tokenizers": tokenizers.__version__,
                "h5py": h5py.__version__,
                "numpy": np.__version__,
            }
        ),
    }
    if tokenizer is not None:
        attrs["tokenizer_hash"] = sha256_json(sorted(tokenizer.get_vocab().items()))
    if seed is not None:
        attrs["seed"] = int(seed)
    if source_dtype is not None:
        attrs["source_dtype"] = str(source_dtype).removeprefix("torch.")
    return attrs


def _fsync_dir(directory: Path):
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


@contextlib.contextmanager
def atomic_path(path):
    """Yield a temporary path next to `path`; on success fsync and rename it into place.

    Temporaries left by a killed earlier writer of the same file are removed first; on failure the
    temporary is removed and `path` is untouched.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    for stale in path.parent.glob(f".{path.name}{TMP_MARK}*"):
        stale.unlink(missing_ok=True)
    tmp = path.parent / f".{path.name}{TMP_MARK}{os.getpid()}"
    try:
        yield tmp
        with open(tmp, "rb+") as fh:
            os.fsync(fh.fileno())
        os.replace(tmp, path)
        _fsync_dir(path.parent)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def save_checkpoint(out_dir, model, tokenizer, **save_kwargs):
    """save_pretrained into a temporary directory beside `out_dir`, then move every file into place, so an
    interrupted run leaves no half-written weights."""
    import shutil
    import tempfile

    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=TMP_MARK, dir=out_dir.parent))
    try:
        model.save_pretrained(tmp, **save_kwargs)
        tokenizer.save_pretrained(tmp)
        for f in tmp.iterdir():
            os.replace(f, out_dir / f.name)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _dataset_path(name: str) -> str:
    return name.replace(".", "/")  # layers.3.resid_pre -> layers/3/resid_pre


def write_store(path, datasets: dict, attrs: dict, dtype="float32"):
    """Write `datasets` (name -> array [prompts, ...]) chunked one prompt per chunk, plus `attrs`.

    Float arrays are stored as `dtype` (float32 or float16); integer arrays keep their type.
    """
    if dtype not in ("float32", "float16"):
        raise ValueError(f"store dtype {dtype!r}: use float32 or float16")
    with atomic_path(path) as tmp, h5py.File(tmp, "w") as f:
        for name, array in datasets.items():
            array = np.asarray(array)
            if array.dtype.kind == "f":
                array = array.astype(dtype)
            chunks = (1, *array.shape[1:]) if array.ndim >= 1 and array.shape[0] > 0 else None
            f.create_dataset(_dataset_path(name), data=array, chunks=chunks)
        f.attrs["dataset_names"] = json.dumps(list(datasets))
        for key, value in attrs.items():
            f.attrs[key] = value


def read_store(path, names=None):
    """(datasets, attrs) as written. `names` selects datasets (default: all)."""
    path = Path(path)
    if not path.exists():
        raise StoreError(f"{path}: no such store; run the rule that writes it")
    try:
        with h5py.File(path, "r") as f:
            attrs = {k: (v.decode() if isinstance(v, bytes) else v) for k, v in f.attrs.items()}
            wanted = json.loads(attrs.pop("dataset_names")) if names is None else list(names)
            data = {name: f[_dataset_path(name)][()] for name in wanted}
    except (OSError, KeyError, ValueError) as err:
        raise StoreError(f"{path}: truncated or corrupt HDF5 store ({err}); delete it and rerun its rule") from err
    return data, attrs
