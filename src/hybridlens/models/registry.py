"""Toy-model building and saving from a registry entry.

train_and_save   build, train and save_pretrained one toy model (+ tokenizer) atomically
"""

import os
import shutil
import tempfile
from pathlib import Path

from hybridlens.experiments.zoo import train_toy
from hybridlens.models.toy import build_tokenizer, build_toy_model


def train_and_save(family: str, toy: dict, zoo: dict, out_dir, progress=True):
    """Train a toy model from its registry spec and zoo settings; save it where `out_dir` says.

    Files are written to a temporary directory beside `out_dir` and moved into place at the end,
    so an interrupted run leaves no half-written weights. Returns the training curve rows.
    """
    tokenizer = build_tokenizer(zoo["n_languages"])
    model = build_toy_model(
        family, len(tokenizer), toy["hidden_size"], toy["layout"], toy.get("heads", 4), toy.get("seed", 0)
    )
    curve = train_toy(
        model,
        tokenizer,
        steps=toy.get("steps", zoo["steps"]),
        stages=zoo["stages"],
        batch_size=zoo["batch_size"],
        lr=toy.get("lr", zoo["lr"]),
        seed=toy.get("seed", 0),
        n_languages=zoo["n_languages"],
        extra_queries=zoo["extra_queries"],
        formats=zoo["formats"],
        advance=zoo["advance"],
        done=zoo["done"],
        progress=progress,
    )
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=".tmp-", dir=out_dir.parent))
    try:
        model.save_pretrained(tmp, safe_serialization=True)
        tokenizer.save_pretrained(tmp)
        for f in tmp.iterdir():
            os.replace(f, out_dir / f.name)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return curve
