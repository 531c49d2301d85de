"""A registry model's `source`, checked before any job runs: everything that can be known without loading it.

check_source     a local directory or a hub id -> notes to show (e.g. "hub not reachable"); SourceError otherwise
safetensors_header  a safetensors file's header, refusing a file shorter than the header says
check_manifest   a shipped directory's files against the sha256 its manifest.json lists
convert_bin      rewrite a pytorch_model.bin checkpoint as safetensors in place (the loader reads only those)
SourceError

Torch-free except `convert_bin`, so the workflow can run the checks when it parses.
"""

import hashlib
import json
import os
import re
import struct
import sys
from pathlib import Path

from hybridlens.errors import UserError
from hybridlens.models.families import check_family

HUB_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,95}/[A-Za-z0-9][A-Za-z0-9_.-]{0,95}$")
INDEX = "model.safetensors.index.json"
MANIFEST = "manifest.json"
TOKENIZER_FILES = ("tokenizer.json", "tokenizer.model", "vocab.json", "tokenizer_config.json")
MAX_HEADER = 100 * 2**20  # the format's own limit on the header's size


class SourceError(UserError):
    """A model source that cannot be loaded: missing, not a checkpoint, incomplete or corrupt."""


def check_source(source: str, family: str | None, where: str, hub_timeout: float = 5.0) -> list[str]:
    """Raise SourceError naming `where` (e.g. "config models.qwen.source") and the fix; return notes for
    what could not be checked (a hub id while the hub is unreachable)."""
    path = Path(source).expanduser()
    if path.is_dir():
        check_directory(path, family, where)
        return []
    if path.exists():
        raise SourceError(f"{where}: {source} is a file; give the directory that holds config.json and the weights")
    looks_like_path = source.startswith(("/", ".", "~")) or not HUB_ID.match(source) or Path(path.parts[0]).is_dir()
    if looks_like_path or "--" in source or ".." in source:
        raise SourceError(
            f"{where}: {source!r} is neither a local directory nor a hub id of the form org/name; "
            "fix the path (relative paths start from the directory snakemake runs in)"
        )
    return check_hub(source, family, where, hub_timeout)


def check_directory(directory: Path, family: str | None, where: str) -> None:
    check_manifest(directory, where)
    config = read_config(directory / "config.json", where)
    check_family(config.get("model_type"), family, f"{where} ({directory})")
    shards = weight_files(directory, where)
    for shard, names in shards.items():
        header = safetensors_header(shard, where)
        missing = sorted(set(names) - set(header))
        if missing:
            raise SourceError(
                f"{where}: {shard} lacks {len(missing)} tensors the index assigns to it (e.g. {missing[0]}); "
                "the shard and the index come from different checkpoints: copy both again"
            )
    if not any((directory / f).is_file() for f in TOKENIZER_FILES):
        raise SourceError(f"{where}: {directory} has no tokenizer ({', '.join(TOKENIZER_FILES)}); copy it too")


def file_sha256(path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def check_manifest(directory, where: str = "") -> None:
    """A directory without manifest.json has nothing to check; with one, every file it lists must be there
    with its sha256 and nothing else may be (a shipped toy edited, half copied, damaged or added to is
    refused before it is used: transformers reads files it finds, a chat_template.jinja among them)."""
    directory = Path(directory)
    path = directory / MANIFEST
    if not path.is_file():
        return
    prefix = f"{where}: " if where else ""
    try:
        files = json.loads(path.read_text())["files"]
    except (json.JSONDecodeError, UnicodeDecodeError, KeyError, TypeError) as err:
        raise SourceError(
            f"{prefix}{path} is not a manifest ({err!r}); restore it (git checkout -- {directory})"
        ) from err
    for name, digest in files.items():
        f = directory / name
        if not f.is_file() or file_sha256(f) != digest:
            state = "is missing" if not f.is_file() else "differs from the sha256 in its manifest"
            raise SourceError(
                f"{prefix}{f} {state}: changed since it was made; restore it (git checkout -- {directory}) "
                "or make it again (make zoo)"
            )
    unlisted = sorted(p.name for p in directory.iterdir() if p.name not in files and p.name != MANIFEST)
    if unlisted:
        more = f" (and {len(unlisted) - 1} more)" if len(unlisted) > 1 else ""
        raise SourceError(
            f"{prefix}{directory / unlisted[0]}{more} is not in its manifest: a file added to a shipped directory "
            f"can change what loads from it; remove it (git clean -n -- {directory} lists what git does not know)"
        )


def has_chat_template(directory) -> bool:
    """Whether a checkpoint directory's tokenizer brings a chat template (in tokenizer_config.json or in
    the files transformers reads beside it)."""
    directory = Path(directory)
    if (directory / "chat_template.jinja").is_file() or (directory / "chat_template.json").is_file():
        return True
    path = directory / "tokenizer_config.json"
    try:
        return bool(path.is_file() and json.loads(path.read_text()).get("chat_template"))
    except (json.JSONDecodeError, UnicodeDecodeError, AttributeError):
        return False


def read_config(path: Path, where: str) -> dict:
    if not path.is_file():
        raise SourceError(f"{where}: {path.parent} has no config.json, so it is not a transformers checkpoint")
    try:
        config = json.loads(path.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        raise SourceError(f"{where}: {path} is not valid JSON ({err}); copy it again") from err
    if not isinstance(config, dict):
        raise SourceError(f"{where}: {path} is not a JSON object; copy it again")
    return config


def weight_files(directory: Path, where: str) -> dict[Path, list[str]]:
    """Shard path -> the tensor names the index assigns to it ([] for an unsharded file)."""
    index = directory / INDEX
    if index.is_file():
        try:
            weight_map = json.loads(index.read_text())["weight_map"]
        except (json.JSONDecodeError, UnicodeDecodeError, KeyError, TypeError) as err:
            raise SourceError(f"{where}: {index} is not a safetensors index ({err!r}); copy it again") from err
        shards: dict[Path, list[str]] = {}
        for name, shard in weight_map.items():
            shards.setdefault(directory / shard, []).append(name)
        absent = [p.name for p in shards if not p.is_file()]
        if absent:
            raise SourceError(
                f"{where}: {len(absent)} of the {len(shards)} shards that {index.name} lists are missing "
                f"from {directory}: {', '.join(absent)}; copy them from where the checkpoint came from"
            )
        return shards
    single = directory / "model.safetensors"
    if single.is_file():
        return {single: []}
    if list(directory.glob("pytorch_model*.bin")) or (directory / "pytorch_model.bin.index.json").is_file():
        raise SourceError(
            f"{where}: {directory} holds only pytorch_model*.bin weights; hybridlens loads safetensors, "
            f"convert them once with: python -m hybridlens.models.source --convert {directory}"
        )
    raise SourceError(f"{where}: {directory} has no model.safetensors or {INDEX}")


def safetensors_header(path: Path, where: str = "") -> dict:
    """Tensor name -> {dtype, shape, data_offsets}; the file must be exactly as long as the header says."""
    prefix = f"{where}: " if where else ""
    size = path.stat().st_size
    with open(path, "rb") as f:
        head = f.read(8)
        n = struct.unpack("<Q", head)[0] if len(head) == 8 else -1
        if not 0 < n <= min(MAX_HEADER, size - 8):
            raise SourceError(f"{prefix}{path} is not a safetensors file (or is truncated); copy it again")
        try:
            header = json.loads(f.read(n))
        except (json.JSONDecodeError, UnicodeDecodeError) as err:
            raise SourceError(f"{prefix}{path}: unreadable safetensors header ({err}); copy it again") from err
    header.pop("__metadata__", None)
    end = max((t["data_offsets"][1] for t in header.values()), default=0)
    if 8 + n + end != size:
        raise SourceError(
            f"{prefix}{path} is {size} bytes but its header describes {8 + n + end}: truncated or corrupt; "
            "copy it again"
        )
    return header


def check_hub(repo_id: str, family: str | None, where: str, timeout: float) -> list[str]:
    """The hub's answer where it can be reached; offline, a note and the run goes on."""
    if os.environ.get("HF_HUB_OFFLINE", "0").lower() in ("1", "true", "yes"):
        return [f"{where}: {repo_id} is not a local directory; taken for a hub id, not checked (HF_HUB_OFFLINE is set)"]
    import huggingface_hub as hub
    from huggingface_hub.errors import GatedRepoError, RepositoryNotFoundError

    try:
        info = hub.HfApi().model_info(repo_id, timeout=timeout)
    except GatedRepoError as err:
        raise SourceError(
            f"{where}: {repo_id} is gated; accept its terms on its hub page and log in (hf auth login)"
        ) from err
    except RepositoryNotFoundError as err:
        raise SourceError(
            f"{where}: {repo_id} is neither a local directory nor a model on the hub (if it is private, log in "
            "with hf auth login); check the spelling"
        ) from err
    except Exception as err:  # no network, proxy, timeout: the load will say more if it still fails
        return [
            f"{where}: {repo_id} is not a local directory; taken for a hub id, not checked: the hub could not be "
            f"reached ({type(err).__name__})"
        ]
    files = {s.rfilename for s in info.siblings or []}
    if "config.json" not in files:
        raise SourceError(f"{where}: {repo_id} has no config.json, so it is not a transformers checkpoint")
    if not any(f.endswith(".safetensors") for f in files):
        raise SourceError(f"{where}: {repo_id} has no safetensors weights; hybridlens loads only safetensors")
    model_type = (info.config or {}).get("model_type")
    if model_type is not None:
        check_family(model_type, family, f"{where} ({repo_id})")
    return []


def convert_bin(directory) -> None:
    """Load pytorch_model*.bin with the checkpoint's own class and save safetensors beside it."""
    import transformers

    directory = Path(directory)
    config = transformers.AutoConfig.from_pretrained(directory)
    cls = getattr(transformers, (config.architectures or [""])[0], transformers.AutoModelForCausalLM)
    model = cls.from_pretrained(directory, use_safetensors=False, dtype="auto")
    model.save_pretrained(directory)


def main(argv=None):
    import argparse

    parser = argparse.ArgumentParser(prog="python -m hybridlens.models.source", description=__doc__.splitlines()[0])
    parser.add_argument("directory", help="a local checkpoint directory")
    parser.add_argument("--family", help="the family the registry names (default: any known)")
    parser.add_argument("--convert", action="store_true", help="rewrite pytorch_model*.bin as safetensors first")
    args = parser.parse_args(argv)
    try:
        if args.convert:
            convert_bin(args.directory)
        notes = check_source(args.directory, args.family, args.directory)
    except UserError as err:
        parser.exit(1, f"{err}\n")
    print("\n".join(notes) or f"{args.directory}: ok", file=sys.stdout)


if __name__ == "__main__":
    main()
