"""Planning the paper preset: time and peak memory per prompt of extraction and of the scale sweep's group
transplants on full-size real-shape models (random weights, published dimensions) on CPU, then a planning
table for all eight preset models. Not a test.

    python bench/scale_memory.py [--prompts 8 --pairs 8 --dtype bfloat16 --threads 2 --skip-granite]

Every dimension comes from config/real-configs/ (the published config.json files); parameters are counted on a
model built from each config on the meta device, not read off its name. Activations per prompt are measured on
Qwen3.5-0.8B (for the Qwen3.5 sizes) and Granite-4.0-H-tiny (for Granite and Falcon-H1) and scaled by
width x depth; caches are computed from the config (attention KV for the prompt, recurrent and conv states).
"""

import argparse
import json
import math
import time
from pathlib import Path

import torch
import yaml

from hybridlens.experiments import scale
from hybridlens.experiments.extract import extract
from hybridlens.interventions.on_items import runner
from hybridlens.models.adapter import HybridModel
from hybridlens.models.realshape import (
    ATTENTION_TYPES,
    PUBLISHERS,
    REAL_CONFIGS,
    build_tokenizer,
    layer_pattern,
    publisher,
)
from hybridlens.tasks import triples
from hybridlens.tasks.items import turns

ROOT = Path(__file__).resolve().parents[1]
BYTES = {"float32": 4, "bfloat16": 2, "float16": 2}
GPU_GIB = 80  # one H100 / A100-80GB; the table says how many such GPUs a model needs
MEASURED = {"Qwen": "Qwen__Qwen3.5-0.8B", "other": "ibm-granite__granite-4.0-h-tiny"}


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


def preset_configs():
    """Registry name -> published config file, for the paper preset's models (hub id ORG/NAME -> ORG__NAME)."""
    models = yaml.safe_load((ROOT / "config/presets/paper.yaml").read_text())["models"]
    return {name: REAL_CONFIGS / (m["source"].replace("/", "__") + ".config.json") for name, m in models.items()}


def published_config(path):
    """The config a checkpoint of this file would load, with eager attention (readers need its weights)."""
    from transformers import AutoConfig

    published = json.loads(path.read_text())
    kwargs = {k: v for k, v in published.items() if k != "transformers_version"}
    return AutoConfig.for_model(**kwargs, attn_implementation="eager")


def text_config(path):
    return published_config(path).get_text_config()


def count_parameters(config):
    """(total, active per token) of the text model, counted on a meta-device build: routed experts count
    top-k / E towards the active parameters."""
    from transformers import AutoModelForCausalLM

    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(config)
    experts = getattr(config, "num_experts", None) or getattr(config, "num_local_experts", None) or 0
    k = getattr(config, "num_experts_per_tok", 0) or 0
    total = active = 0
    for name, p in model.named_parameters():
        total += p.numel()
        routed = experts and ".experts." in name + "." and p.shape[0] == experts
        active += p.numel() * k // experts if routed else p.numel()
    return total, active


def cache_bytes(config, tokens, dtype_bytes):
    """Attention KV for `tokens` plus recurrent and conv states (float32 states, as transformers keeps them)."""
    kinds = layer_pattern(config.to_dict())
    attention = sum(t in (*ATTENTION_TYPES, "parallel") for t in kinds)  # a parallel layer holds both
    linear = sum(t not in ATTENTION_TYPES for t in kinds)
    head_dim = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
    kv = 2 * attention * config.num_key_value_heads * head_dim * tokens * dtype_bytes
    if hasattr(config, "linear_num_value_heads"):  # Gated DeltaNet: dk x dv per value head
        state = config.linear_num_value_heads * config.linear_key_head_dim * config.linear_value_head_dim
    else:  # Mamba-2: d_head x d_state per head
        d_ssm = getattr(config, "mamba_d_ssm", None) or config.mamba_expand * config.hidden_size
        state = d_ssm * config.mamba_d_state
    return kv + linear * state * 4


def build_full(name, dtype):
    """A full-size real-shape model in memory (no vision tower re-scaling, real vocabulary), with a task BPE."""
    import transformers

    path = REAL_CONFIGS / f"{name}.config.json"
    spec = PUBLISHERS[publisher(path)]
    template = (REAL_CONFIGS / spec["template"]).read_text() if spec["template"] else None
    tokenizer = build_tokenizer(template, spec["tokens"], 4096)
    config = published_config(path)
    previous = torch.get_default_dtype()
    torch.set_default_dtype(getattr(torch, dtype))  # build in the target dtype: a 7 B model in float32 is 28 GB
    try:
        model = getattr(transformers, config.architectures[0])(config).to(getattr(torch, dtype)).eval()
    finally:
        torch.set_default_dtype(previous)
    return HybridModel(model, tokenizer, f"{name} (real shape, random weights)")


def measure(name, args):
    base = rss_mb()
    t = time.perf_counter()
    hm = build_full(name, args.dtype)
    built_s, weights_mb = time.perf_counter() - t, rss_mb() - base
    items = triples(hm, 1, args.prompts, args.pairs, "chat")
    prompts = [x.host for x in items]
    tokens = max(len(ids) for ids in hm.tokenize([turns(p) for p in prompts])[0])
    sites = [f"layers.{i}.{s}" for i in range(hm.n_layers) for s in ("resid_pre", "mixer_out", "layer_out")]
    after = rss_mb()
    reset_peak()
    t = time.perf_counter()
    extract(hm, prompts, sites, "final", batch_size=args.prompts)
    extract_s, extract_mb = (time.perf_counter() - t) / len(prompts), rss_mb("VmHWM") - after
    same = {}
    for x in items:
        same.setdefault(len(hm.encode([turns(x.host)])[0][0]), []).append(x)
    batch = max(same.values(), key=len)
    hosts, donors = runner(hm, [x.host for x in batch])[0], runner(hm, [x.donor for x in batch])[0]
    sets = scale.group_sets(hm.groups, max(hm.attention_layers()))[: args.sets]  # the time per set is the number
    reset_peak()
    t = time.perf_counter()
    scale.transplant_rows(hm, hosts, donors, batch, sets, [{"layer": hm.attention_layers()[0], "head": 0}])
    transplant_s = (time.perf_counter() - t) / len(batch) / (len(sets) + 1)
    transplant_mb = rss_mb("VmHWM") - after
    per_prompt = max(extract_mb / len(prompts), transplant_mb / len(batch))
    params = sum(p.numel() for p in hm.model.parameters())
    print(
        f"{name}: {params / 1e9:.3f} B parameters (with its vision tower, if any), built in {built_s:.0f} s, "
        f"resident +{weights_mb:.0f} MB ({args.dtype})"
    )
    print(f"  prompts of {tokens} tokens in the real chat template ({args.pairs} pairs), {args.threads} threads")
    print(f"  extraction, 3 sites x {hm.n_layers} layers, final position: {extract_s:.2f} s per prompt")
    print(f"  group transplant: {transplant_s:.2f} s per prompt and group set (timed on {len(sets)} sets + intact)")
    print(f"  peak memory above the weights: {per_prompt:.1f} MB per prompt")
    del hm
    return {"per_prompt_mb": per_prompt, "tokens": tokens}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--prompts", type=int, default=8)
    ap.add_argument("--pairs", type=int, default=8)
    ap.add_argument("--dtype", default="bfloat16", choices=list(BYTES))
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--batch", type=int, default=50, help="prompts per forward (the circuit and scale default)")
    ap.add_argument("--sets", type=int, default=4, help="group sets to time the transplant on")
    ap.add_argument("--skip-granite", action="store_true", help="measure Qwen3.5-0.8B only (the 7 B build is slow)")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    measured = {}
    for key, name in MEASURED.items():
        if key == "other" and args.skip_granite:
            measured[key] = measured["Qwen"] | {"from": MEASURED["Qwen"]}
            continue
        m = measure(name, args)
        cfg = text_config(REAL_CONFIGS / f"{name}.config.json")
        measured[key] = m | {"width_depth": cfg.hidden_size * cfg.num_hidden_layers, "from": name}
    print()
    b = BYTES[args.dtype]
    print(
        f"| model | parameters (active) | weights ({args.dtype}) | activations, batch {args.batch} | "
        f"caches, batch {args.batch} | total | GPUs of {GPU_GIB} GiB | host mem_mb |"
    )
    print("|---|---|---|---|---|---|---|---|")
    for name, path in preset_configs().items():
        cfg = text_config(path)
        total, active = count_parameters(cfg)
        m = measured["Qwen" if publisher(path) == "Qwen" else "other"]
        weights = total * b / 2**30
        act = args.batch * m["per_prompt_mb"] * cfg.hidden_size * cfg.num_hidden_layers / m["width_depth"] / 1024
        cache = args.batch * cache_bytes(cfg, m["tokens"], b) / 2**30
        need = weights + act + cache
        gpus = math.ceil(need * 1.2 / GPU_GIB)  # 20 % for the CUDA context, the allocator and fragmentation
        host = int(1024 * (weights * 1.1 + 6))  # load_model stages the weights in host memory before moving them
        print(
            f"| {name} | {total / 1e9:.2f} B ({active / 1e9:.2f} B) | {weights:.1f} GiB | {act:.2f} GiB | "
            f"{cache:.2f} GiB | {need:.1f} GiB | {gpus} | {host} |"
        )
    print(
        f"\nActivations scale the measured MB per prompt ({', '.join(sorted({m['from'] for m in measured.values()}))})"
        " by width x depth; the requests in config/presets/paper.yaml follow the last two columns."
    )


if __name__ == "__main__":
    main()
