"""Scale planning: time and peak memory per prompt of extraction and of the scale sweep's group transplants on a
random-weight model with Qwen3.5-0.8B's real dimensions, on CPU; then a memory table extrapolated to the six
Qwen3.5 sizes (weights in a dtype + measured activations scaled by width x depth + caches). Not a test.

    python bench/scale_memory.py [--prompts 8 --pairs 8 --dtype float32]

Dimensions are the public config.json values (text_config); sizes whose config is not written here are
extrapolated from the parameter count in their name only (weights), and their row says so.
"""

import argparse
import time

import torch

from hybridlens.experiments import scale
from hybridlens.experiments.circuit import Runner, triples
from hybridlens.experiments.extract import extract
from hybridlens.models.adapter import HybridModel
from hybridlens.models.toy import build_tokenizer

QWEN35_08B = dict(
    vocab_size=248320,
    hidden_size=1024,
    intermediate_size=3584,
    num_hidden_layers=24,
    num_attention_heads=8,
    num_key_value_heads=2,
    head_dim=256,
    linear_num_key_heads=16,
    linear_num_value_heads=16,
    linear_key_head_dim=128,
    linear_value_head_dim=128,
    tie_word_embeddings=True,
)
# name -> (parameters in billions, hidden, layers, kv heads, GDN value heads); None where not stored here.
SIZES = {
    "Qwen3.5-0.8B": (0.8, 1024, 24, 2, 16),
    "Qwen3.5-2B": (2.0, None, None, None, None),
    "Qwen3.5-4B": (4.0, 2560, 32, 4, 32),
    "Qwen3.5-9B": (9.0, 4096, 32, 4, 32),
    "Qwen3.5-27B": (27.0, None, None, None, None),
    "Qwen3.5-35B-A3B": (35.0, 2048, 40, 2, 32),
}
BYTES = {"float32": 4, "bfloat16": 2, "float16": 2}


def rss_mb(field="VmRSS"):
    """Current (VmRSS) or peak (VmHWM) resident memory of this process."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1]) / 1024
    raise RuntimeError(f"{field} not in /proc/self/status")


def reset_peak():
    """Linux: writing 5 to clear_refs resets VmHWM, so the next peak is this phase's own."""
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")


def cache_mb(hidden, layers, kv_heads, gdn_heads, tokens, dtype_bytes):
    """KV of the attention layers (1 in 4) for `tokens` + GDN states (fp32, 128 x 128 per value head)."""
    attention = layers // 4
    kv = 2 * attention * kv_heads * 256 * tokens * dtype_bytes
    state = (layers - attention) * gdn_heads * 128 * 128 * 4
    return (kv + state) / 2**20


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--prompts", type=int, default=8)
    ap.add_argument("--pairs", type=int, default=8)
    ap.add_argument("--dtype", default="float32", choices=list(BYTES))
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    from transformers import AutoModelForCausalLM, Qwen3_5TextConfig

    layer_types = (["linear_attention"] * 3 + ["full_attention"]) * 6
    config = Qwen3_5TextConfig(**QWEN35_08B, layer_types=layer_types, pad_token_id=0, eos_token_id=2)
    base = rss_mb()
    t = time.perf_counter()
    model = AutoModelForCausalLM.from_config(config, dtype=getattr(torch, args.dtype), attn_implementation="eager")
    hm = HybridModel(model.eval(), build_tokenizer(2), "Qwen3.5-0.8B dimensions, random weights")
    params = sum(p.numel() for p in model.parameters())
    after_load = rss_mb()
    print(
        f"built {params / 1e9:.3f} B parameters in {time.perf_counter() - t:.1f} s; "
        f"resident +{after_load - base:.0f} MB"
    )

    items = triples(hm, 1, args.prompts, args.pairs, "chat", 2)
    prompts = [t.host for t in items]
    tokens = hm.encode([prompts[0].text])[0].shape[1]
    sites = [f"layers.{i}.{s}" for i in range(hm.n_layers) for s in ("resid_pre", "mixer_out", "layer_out")]
    reset_peak()
    t = time.perf_counter()
    extract(hm, prompts, sites, "final", batch_size=args.prompts)
    extract_s = (time.perf_counter() - t) / args.prompts
    extract_mb = rss_mb("VmHWM") - after_load

    same = {}
    for x in items:
        same.setdefault(len(hm.encode([x.host.text])[0][0]), []).append(x)
    batch = max(same.values(), key=len)
    hosts = Runner(hm, [x.host for x in batch], 2)
    donors = Runner(hm, [x.donor for x in batch], 2)
    readers = [{"layer": hm.attention_layers()[0], "head": 0}]
    sets = scale.group_sets(hm.groups, max(hm.attention_layers()))
    reset_peak()
    t = time.perf_counter()
    scale.transplant_rows(hm, hosts, donors, batch, sets, readers)
    transplant_s = (time.perf_counter() - t) / len(batch) / (len(sets) + 1)
    transplant_mb = rss_mb("VmHWM") - after_load

    act_mb = max(extract_mb, transplant_mb * args.prompts / len(batch))
    per_prompt = act_mb / args.prompts
    print(
        f"prompts of {tokens} tokens ({args.pairs} pairs), batch {args.prompts}, {args.threads} threads, {args.dtype}"
    )
    print(f"extraction (3 sites x {hm.n_layers} layers, final position): {extract_s:.2f} s per prompt")
    print(f"group transplant: {transplant_s:.2f} s per prompt and group set ({len(sets)} sets + intact)")
    print(f"peak memory above the weights: extraction {extract_mb:.0f} MB for {args.prompts} prompts, ", end="")
    print(f"transplant {transplant_mb:.0f} MB for {len(batch)}; {per_prompt:.1f} MB per prompt")
    print()
    b = BYTES[args.dtype]
    print(f"| model | weights ({args.dtype}) | activations, batch 16 | caches, batch 16 x {tokens} tokens | total |")
    print("|---|---|---|---|---|")
    for name, (billions, hidden, layers, kv, gdn) in SIZES.items():
        weights = billions * 1e9 * b / 2**30
        if hidden is None:
            print(f"| {name} | {weights:.1f} GiB | (config not stored here) | | ≥ {weights:.1f} GiB |")
            continue
        act = 16 * per_prompt * (hidden * layers) / (1024 * 24) / 1024
        cache = 16 * cache_mb(hidden, layers, kv, gdn, tokens, b) / 1024
        print(f"| {name} | {weights:.1f} GiB | {act:.2f} GiB | {cache:.2f} GiB | {weights + act + cache:.1f} GiB |")


if __name__ == "__main__":
    main()
