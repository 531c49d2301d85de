"""Capture overhead: forward with hooks capturing resid_pre and mixer_out at every layer, all
positions, written to HDF5, divided by a plain forward. Random-weight ~100M-parameter Qwen3.5
architecture on CPU, 16 prompts x 256 tokens. Prints the ratio; not a test.

    python bench/capture_overhead.py [--layers 12 --hidden 768 --prompts 16 --tokens 256 --repeats 3]
"""

import argparse
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

from hybridlens.interventions.patch import run
from hybridlens.models.adapter import HybridModel
from hybridlens.models.toy import build_tokenizer, build_toy_model
from hybridlens.store import write_store


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--layers", type=int, default=12)
    ap.add_argument("--hidden", type=int, default=768)
    ap.add_argument("--heads", type=int, default=12)
    ap.add_argument("--vocab", type=int, default=32000)
    ap.add_argument("--prompts", type=int, default=16)
    ap.add_argument("--tokens", type=int, default=256)
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()

    torch.manual_seed(0)
    layout = ("LLLA" * args.layers)[: args.layers]
    model = build_toy_model("qwen3_5", args.vocab, args.hidden, layout, heads=args.heads).eval()
    hm = HybridModel(model, build_tokenizer(), "bench")
    params = sum(p.numel() for p in model.parameters()) / 1e6
    ids = torch.randint(0, args.vocab, (args.prompts, args.tokens))
    batches = ids.split(args.batch)
    sites = [f"layers.{i}.{s}" for i in range(hm.n_layers) for s in ("resid_pre", "mixer_out")]

    @torch.no_grad()
    def plain():
        for b in batches:
            model(b, logits_to_keep=1)

    @torch.no_grad()
    def captured(path=None):
        out = {s: [] for s in sites}
        for b in batches:
            res = run(hm, b, capture=sites, logits_to_keep=1)
            for s in sites:
                out[s].append(res.captured[s].numpy())
        if path is not None:
            write_store(path, {s: np.concatenate(v) for s, v in out.items()}, {"bench": 1}, "activations")

    def best(fn, *a):
        times = []
        for _ in range(args.repeats):
            t = time.perf_counter()
            fn(*a)
            times.append(time.perf_counter() - t)
        return min(times)

    with tempfile.TemporaryDirectory() as d:
        plain()  # warm-up
        t_plain = best(plain)
        t_mem = best(captured)
        t_cap = best(captured, Path(d) / "acts.h5")
        size = (Path(d) / "acts.h5").stat().st_size / 2**20
    print(
        f"model: {params:.0f}M parameters, {args.layers} layers, hidden {args.hidden}, "
        f"torch threads {torch.get_num_threads()}"
    )
    print(f"workload: {args.prompts} prompts x {args.tokens} tokens, {len(sites)} sites, store {size:.0f} MiB")
    print(f"plain forward: {t_plain:.2f} s; hooked (in memory): {t_mem:.2f} s; hooked + HDF5 write: {t_cap:.2f} s")
    print(f"capture overhead ratio, in memory: {t_mem / t_plain:.3f}")
    print(f"capture overhead ratio, written to HDF5: {t_cap / t_plain:.3f}")


if __name__ == "__main__":
    main()
