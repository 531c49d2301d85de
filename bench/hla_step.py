"""HLA vs GDN: one training step (forward + backward of one mixer) per sequence length, as ratios.

Each (mode, T) runs in its own process so that its peak resident memory is its own. Random-weight Qwen3.5
GDN mixer (hidden 256, 4 heads of 64 by default), batch 2, chunk 64, bucket 16. On a GPU with
flash-linear-attention installed the chunk passes use fla's kernel. Prints a table; not a test.

    python bench/hla_step.py [--lengths 256 512 1024 2048 --hidden 256 --heads 4 --repeats 3]
"""

import argparse
import json
import resource
import subprocess
import sys
import time

import torch

from hybridlens.models.hla import HLAMixer
from hybridlens.models.toy import build_toy_model


def one(mode, length, hidden, heads, repeats, device):
    torch.manual_seed(0)
    model = build_toy_model("qwen3_5", 64, hidden, "LA", heads=heads, seed=0).to(device)
    gdn = model.model.layers[0].linear_attn
    layer = gdn if mode == "gdn_plain" else HLAMixer(gdn, mode=mode, chunk=64, bucket=16, gate_bias=0.0).to(device)
    x = torch.randn(2, length, hidden, device=device, requires_grad=True)
    base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    times = []
    for _ in range(repeats + 1):  # the first step warms up
        start = time.perf_counter()
        out = layer(x)
        out = out[0] if isinstance(out, tuple) else out
        out.pow(2).mean().backward()
        if device == "cuda":
            torch.cuda.synchronize()
        times.append(time.perf_counter() - start)
    peak = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - base) / 1024  # MB above the model's own
    if device == "cuda":
        peak = torch.cuda.max_memory_allocated() / 2**20
    return {"seconds": min(times[1:]), "peak_mb": peak}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--lengths", type=int, nargs="+", default=[256, 512, 1024, 2048])
    ap.add_argument("--hidden", type=int, default=256)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--one", nargs=2, help=argparse.SUPPRESS)  # internal: mode length, in a child process
    args = ap.parse_args()
    device = "cuda" if torch.cuda.is_available() else "cpu"
    if args.one:
        print(json.dumps(one(args.one[0], int(args.one[1]), args.hidden, args.heads, args.repeats, device)))
        return
    torch.set_num_threads(torch.get_num_threads())
    print(f"device {device}; hidden {args.hidden}, {args.heads} heads, batch 2, chunk 64; best of {args.repeats}")
    print("T      gdn s   hla s   fixed s  hla/gdn  fixed/gdn  gdn MB  hla MB  hla/gdn mem")
    for length in args.lengths:
        r = {}
        for mode in ("gdn_plain", "hla", "fixed"):
            cmd = [sys.executable, __file__, "--one", mode, str(length), "--hidden", str(args.hidden)]
            cmd += ["--heads", str(args.heads), "--repeats", str(args.repeats)]
            r[mode] = json.loads(subprocess.run(cmd, capture_output=True, text=True, check=True).stdout)
        g, h, f = r["gdn_plain"], r["hla"], r["fixed"]
        ratio, fixed_ratio = h["seconds"] / g["seconds"], f["seconds"] / g["seconds"]
        print(
            f"{length:<6} {g['seconds']:7.3f} {h['seconds']:7.3f} {f['seconds']:8.3f} {ratio:8.2f}"
            f" {fixed_ratio:10.2f} {g['peak_mb']:7.0f} {h['peak_mb']:7.0f} {h['peak_mb'] / max(g['peak_mb'], 1):12.2f}"
        )


if __name__ == "__main__":
    main()
