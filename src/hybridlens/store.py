"""HDF5 stores that know where they came from, written atomically.

write_store     datasets (site name -> [prompts, positions, d_model] array) + attributes -> one HDF5 file, with
                its kind, a format version and a checksum of every dataset and of the attributes
read_store      the same back, exactly; refuses (StoreError, one line) a truncated, corrupt or altered file and
                one written for something else than the reader expects
provenance      the attributes every file records (model, config hash, tokenizer hash, versions, seed)
expected        the attributes a reader checks: kind, model source, config hash, seed
atomic_path     context manager: a temporary name in the same directory, fsynced and renamed on success
save_checkpoint  a model and its tokenizer saved with save_pretrained into a temporary directory, then moved
ship_directory  copy a directory's files into place beside a manifest of their sha256 (written last)
versions, machine, git_commit  what a shipped artifact records about how it was made
sweep_temporaries  remove what killed writers left behind under a directory
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
FORMAT_VERSION = 2  # kind, checksums and provenance checked on read


class StoreError(UserError, OSError):
    """An HDF5 store that cannot be read back, or was written for something else."""


def sha256_json(obj) -> str:
    return hashlib.sha256(json.dumps(obj, sort_keys=True, default=str).encode()).hexdigest()[:16]


def versions() -> dict:
    """The library versions an artifact was made with."""
    import tokenizers
    import torch
    import transformers

    import hybridlens

    return {
        "hybridlens": hybridlens.__version__,
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "tokenizers": tokenizers.__version__,
        "h5py": h5py.__version__,
        "numpy": np.__version__,
    }


def machine() -> dict:
    """What decides a CPU run's float rounding: the CPU, the kernels torch picked for it, the thread count."""
    import platform

    import torch

    cpu = platform.processor()
    with contextlib.suppress(OSError):
        names = [s for s in Path("/proc/cpuinfo").read_text().splitlines() if s.startswith("model name")]
        cpu = names[0].split(":", 1)[1].strip() if names else cpu
    return {
        "cpu": cpu,
        "torch_cpu_capability": torch.backends.cpu.get_cpu_capability(),
        "threads": torch.get_num_threads(),
        "platform": platform.platform(),
    }


def git_commit(directory=".", outputs=("zoo",)) -> str:
    """HEAD of the checkout `directory` is in, "+dirty" with uncommitted changes outside `outputs` (what the
    run itself is writing); "unknown" outside git."""
    import subprocess

    def git(*args):
        return subprocess.run(["git", *args], cwd=directory, capture_output=True, text=True, check=True).stdout

    try:
        changed = git("status", "--porcelain", "--", ".", *(f":(exclude){o}" for o in outputs)).strip()
        return git("rev-parse", "HEAD").strip() + ("+dirty" if changed else "")
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def provenance(model_source: str, config: dict, tokenizer=None, seed=None, source_dtype=None) -> dict:
    """Attributes for a store: model source, config hash, tokenizer hash, library versions, seed, and the
    model's own dtype (a bfloat16 model's activations are stored as float32 or float16)."""
    attrs = {
        "model_source": str(model_source),
        "config_hash": sha256_json(config),
        "versions": json.dumps(versions()),
    }
    if tokenizer is not None:
        attrs["tokenizer_hash"] = tokenizer_hash(tokenizer)
    if seed is not None:
        attrs["seed"] = int(seed)
    if source_dtype is not None:
        attrs["source_dtype"] = str(source_dtype).removeprefix("torch.")
    return attrs


def tokenizer_hash(tokenizer) -> str:
    return sha256_json(sorted(tokenizer.get_vocab().items()))


def expected(kind: str, model_source, config: dict, seed=None) -> dict:
    """What a reader checks of a store that `provenance(model_source, config, seed=seed)` described."""
    want = {"kind": kind, "model_source": str(model_source), "config_hash": sha256_json(config)}
    return want | ({} if seed is None else {"seed": int(seed)})


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


def sweep_temporaries(root) -> list[Path]:
    """Remove every temporary file or directory a killed writer left under `root` (call it only while no
    writer runs, e.g. when a workflow starts)."""
    import shutil

    removed = []
    for path in sorted(p for p in Path(root).rglob(".*") if TMP_MARK in p.name):
        if path.is_dir():
            shutil.rmtree(path, ignore_errors=True)
        else:
            path.unlink(missing_ok=True)
        removed.append(path)
    return removed


def ship_directory(files, out_dir, record: dict) -> dict:
    """Copy `files` into `out_dir` and write manifest.json last: each file's sha256 and `record` (what it was
    made from and on). A copy killed midway leaves files that disagree with the manifest, which the
    loader's check refuses; files of an earlier copy that this one lacks are removed."""
    import shutil
    import tempfile

    from hybridlens.models.source import MANIFEST, file_sha256

    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=TMP_MARK, dir=out_dir.parent))
    try:
        for f in files:
            shutil.copy2(f, tmp / Path(f).name)
        manifest = {"files": {f.name: file_sha256(f) for f in sorted(tmp.iterdir())}, **record}
        for f in out_dir.iterdir():
            if f.name not in manifest["files"]:
                f.unlink()
        for f in tmp.iterdir():
            os.replace(f, out_dir / f.name)
        with atomic_path(out_dir / MANIFEST) as path:
            path.write_text(json.dumps(manifest, indent=1, sort_keys=True) + "\n")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return manifest


def _dataset_path(name: str) -> str:
    return name.replace(".", "/")  # layers.3.resid_pre -> layers/3/resid_pre


def _array_sha256(array: np.ndarray) -> str:
    h = hashlib.sha256(f"{array.dtype.str}{array.shape}".encode())
    h.update(np.ascontiguousarray(array).tobytes())
    return h.hexdigest()


def _attrs_sha256(attrs: dict) -> str:
    return hashlib.sha256(json.dumps({k: str(v) for k, v in attrs.items()}, sort_keys=True).encode()).hexdigest()


def _plain(value):
    """An attribute as Python wrote it: str, not bytes; int, not numpy.int64 (so messages read plainly)."""
    if isinstance(value, bytes):
        return value.decode()
    return value.item() if isinstance(value, np.generic) else value


def write_store(path, datasets: dict, attrs: dict, kind: str, dtype="float32"):
    """Write `datasets` (name -> array [prompts, ...]) chunked one prompt per chunk, plus `attrs`.

    `kind` names what the store holds (e.g. "activations", "stitch_acts"), so a reader given another kind
    refuses it. Float arrays are stored as `dtype` (float32 or float16); integer arrays keep their type.
    """
    if dtype not in ("float32", "float16"):
        raise ValueError(f"store dtype {dtype!r}: use float32 or float16")
    attrs = {**attrs, "kind": kind, "format_version": FORMAT_VERSION, "dataset_names": json.dumps(list(datasets))}
    with atomic_path(path) as tmp, h5py.File(tmp, "w") as f:
        for name, array in datasets.items():
            array = np.asarray(array)
            if array.dtype.kind == "f":
                array = array.astype(dtype)
            chunks = (1, *array.shape[1:]) if array.ndim >= 1 and array.shape[0] > 0 else None
            f.create_dataset(_dataset_path(name), data=array, chunks=chunks).attrs["sha256"] = _array_sha256(array)
        for key, value in attrs.items():
            f.attrs[key] = value
        f.attrs["attrs_sha256"] = _attrs_sha256(attrs)


def read_store(path, names=None, expect: dict | None = None):
    """(datasets, attrs) as written. `names` selects datasets (default: all).

    `expect` maps attribute names to the values the reader needs (kind, model_source, config_hash, seed, ...);
    any difference is refused with what the file was written for and the command that rebuilds it.
    """
    path = Path(path)
    rebuild = f"rebuild it with: snakemake --cores all --force {path}"
    if not path.exists():
        raise StoreError(f"{path}: no such store; {rebuild}")
    try:
        with h5py.File(path, "r") as f:
            attrs = {k: _plain(v) for k, v in f.attrs.items()}
            stored_sum = attrs.pop("attrs_sha256", None)
            if attrs.get("format_version") != FORMAT_VERSION:
                raise StoreError(
                    f"{path}: store format {attrs.get('format_version', 1)}, this hybridlens reads format "
                    f"{FORMAT_VERSION}; {rebuild}"
                )
            if stored_sum != _attrs_sha256(attrs):
                raise StoreError(f"{path}: its attributes do not match their checksum (altered in place); {rebuild}")
            for key, want in (expect or {}).items():
                if str(attrs.get(key)) != str(want):
                    raise StoreError(
                        f"{path}: written for {key}={attrs.get(key)!r}, but this job expects {key}={want!r}; {rebuild}"
                    )
            stored = json.loads(attrs.pop("dataset_names"))
            absent = sorted(set(names or ()) - set(stored))
            if absent:
                raise StoreError(f"{path}: no dataset {absent[0]} (it holds {len(stored)}, e.g. {stored[:3]})")
            data = {}
            for name in stored if names is None else names:
                ds = f[_dataset_path(name)]
                data[name] = ds[()]
                if ds.attrs.get("sha256") != _array_sha256(data[name]):
                    raise StoreError(f"{path}: dataset {name} does not match its checksum (corrupt); {rebuild}")
    except StoreError:
        raise
    except (OSError, KeyError, ValueError) as err:
        raise StoreError(f"{path}: truncated or corrupt HDF5 store ({err}); {rebuild}") from err
    return data, attrs
