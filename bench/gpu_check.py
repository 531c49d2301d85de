"""Before a GPU-day on the paper preset: the CUDA fast paths against the plain-PyTorch ones on real-shape
layers, then the circuit transplant suite on a Qwen3.5-9B-shape model in bfloat16, timed. One script,
well inside 8 minutes on one GPU; without CUDA it says so in one line and exits.

    python bench/gpu_check.py [--layers 32] [--prompts 64]

1. flash-linear-attention's chunk_gated_delta_rule vs transformers' torch_chunk_gated_delta_rule at Qwen3.5-9B's
   GDN shape (32 value heads of 128 x 128): outputs, final states and the gradients of every input; HLA's chunk
   maps (models.hla.chunk_summaries) with and without the kernel.
2. mamba-ssm's mamba_chunk_scan_combined vs transformers' plain scan at Granite-4.0-H-tiny's Mamba-2 shape
   (48 heads of 64, state 128): outputs, final states, gradients.
3. A bfloat16 HLA adaptation step (the paper's router, C = 256, buckets of 16) on Qwen3.5-0.8B's real
   dimensions with random weights: with every gate 1 the converted model is the original within bfloat16's
   allowance; a training step with the regularizers and AdamW, and cached decoding, stay finite; time and
   peak memory.
4. The circuit (localization, query and state transplants with controls) on Qwen3.5-9B's real dimensions with
   random weights: time, forward tokens per second and the fraction of the GPU's bfloat16 peak that is.
"""

import argparse
import json
import sys
import time

import torch

from hybridlens.models.realshape import PUBLISHERS, REAL_CONFIGS, build_tokenizer, realshape_config
from hybridlens.tasks import triples

# Dense bfloat16 tensor-core peaks (vendor figures), by a substring of torch.cuda.get_device_name().
PEAK_BF16 = {"H200": 989e12, "H100": 989e12, "A100": 312e12, "L40S": 362e12, "A10": 125e12}


def relative(a, b):
    """max |a - b| / max |b|: one number per tensor, comparable across shapes and scales."""
    return ((a.float() - b.float()).abs().max() / b.float().abs().max().clamp_min(1e-12)).item()


def compare(name, fast, reference, inputs, tol):
    """Run both on fresh leaf copies of `inputs`; compare every output and every input's gradient."""
    results = []
    for fn in (fast, reference):
        leaves = [x.detach().clone().requires_grad_(x.is_floating_point()) for x in inputs]
        outs = [o for o in fn(*leaves) if o is not None]
        torch.manual_seed(1)  # the same random cotangents for both paths
        sum((o.float() * torch.randn_like(o.float())).sum() for o in outs).backward()
        results.append((outs, [x.grad for x in leaves if x.grad is not None]))
    (fo, fg), (ro, rg) = results
    errors = [relative(a, b) for a, b in zip(fo + fg, ro + rg, strict=True)]
    ok = max(errors) <= tol
    print(f"{'ok  ' if ok else 'FAIL'} {name}: max relative difference {max(errors):.2e} (tolerance {tol:.0e})")
    return ok


def check_gdn(device):
    from fla.ops.gated_delta_rule import chunk_gated_delta_rule
    from transformers.models.qwen3_5.modeling_qwen3_5 import torch_chunk_gated_delta_rule

    from hybridlens.models.hla import chunk_summaries

    reference = getattr(torch_chunk_gated_delta_rule, "__wrapped__", torch_chunk_gated_delta_rule)
    b, t, h, d = 2, 1024, 32, 128
    torch.manual_seed(0)
    q, k, v = (torch.randn(b, t, h, d, device=device) for _ in range(3))
    g = -torch.rand(b, t, h, device=device) * 0.1
    beta = torch.rand(b, t, h, device=device)

    def fast(q, k, v, g, beta):
        return chunk_gated_delta_rule(q, k, v, g=g, beta=beta, output_final_state=True, use_qk_l2norm_in_kernel=True)

    def plain(q, k, v, g, beta):
        return reference(q, k, v, g=g, beta=beta, output_final_state=True, use_qk_l2norm_in_kernel=True)

    ok = compare("GDN chunk kernel vs plain PyTorch (9B shape)", fast, plain, [q, k, v, g, beta], 2e-3)

    def maps(use_fla):
        return lambda q, k, v, g, beta: chunk_summaries(q, k, v, g, beta, chunk=64, use_fla=use_fla)

    short = [x[:, :256] for x in (q, k, v, g, beta)]
    return compare("HLA chunk maps with vs without the kernel", maps(True), maps(False), short, 2e-3) and ok


def check_mamba(device):
    from mamba_ssm.ops.triton.ssd_combined import mamba_chunk_scan_combined
    from transformers.models.granitemoehybrid.modeling_granitemoehybrid import mamba2_chunk_scan

    reference = getattr(mamba2_chunk_scan, "__wrapped__", mamba2_chunk_scan)
    b, t, h, p, n = 2, 1024, 48, 64, 128
    torch.manual_seed(0)
    x = torch.randn(b, t, h, p, device=device)
    dt = torch.randn(b, t, h, device=device) * 0.5
    a = -torch.rand(h, device=device)
    bm, cm = (torch.randn(b, t, 1, n, device=device) for _ in range(2))
    dskip = torch.randn(h, device=device)

    def fast(x, dt, a, bm, cm, dskip):
        return mamba_chunk_scan_combined(x, dt, a, bm, cm, 256, D=dskip, dt_softplus=True, return_final_states=True)

    def plain(x, dt, a, bm, cm, dskip):
        return reference(x, dt, a, bm, cm, 256, D=dskip, dt_softplus=True, return_final_states=True)

    inputs = [x, dt, a, bm, cm, dskip]
    return compare("Mamba-2 scan kernel vs plain PyTorch (Granite-tiny shape)", fast, plain, inputs, 2e-3)


def _realshape(name, layers, device):
    """A random-weight bfloat16 model of a published Qwen3.5 config's real width."""
    from transformers import AutoConfig, AutoModelForCausalLM

    published = json.loads((REAL_CONFIGS / name).read_text())
    text = published["text_config"]
    config = realshape_config(published, layers=layers, hidden=text["hidden_size"], vocab=text["vocab_size"])
    kwargs = {k: v for k, v in config.items() if k != "transformers_version"}
    cfg = AutoConfig.for_model(**kwargs, attn_implementation="eager").get_text_config()
    torch.set_default_dtype(torch.bfloat16)
    with torch.device(device):
        model = AutoModelForCausalLM.from_config(cfg, attn_implementation="eager")
    torch.set_default_dtype(torch.float32)
    return model


def check_hla_bf16(device, length=2048):
    from hybridlens.models.hla import HLALayer, to_hla

    torch.manual_seed(0)
    model = _realshape("Qwen__Qwen3.5-0.8B.config.json", 4, device).eval()
    ids = torch.randint(0, 150000, (2, length), device=device)
    with torch.no_grad():
        reference = model(ids, use_cache=False).logits
    to_hla(model, chunk=256, bucket=16, gate_bias=60.0)  # every gate 1: GDN
    with torch.no_grad():
        ones = model(ids, use_cache=False).logits
    # bfloat16 keeps 8 significant bits: both paths round each layer's output once more than they share.
    error, tol = relative(ones, reference), 2**-6
    ok = error <= tol
    print(f"{'ok  ' if ok else 'FAIL'} HLA (every gate 1) vs GDN, bf16, 0.8B shape: {error:.2e} (tolerance {tol:.0e})")
    for layer in (m for m in model.modules() if isinstance(m, HLALayer)):
        layer.mixer.gate_bias.fill_(2.2)  # the paper's constant
    model.train()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    cuda = device == "cuda"
    if cuda:
        torch.cuda.reset_peak_memory_stats()
    start = time.perf_counter()
    logits = model(ids, use_cache=False).logits
    loss = torch.nn.functional.cross_entropy(logits[:, :-1].flatten(0, 1).float(), ids[:, 1:].flatten())
    penalty = sum(m.penalty() for m in model.modules() if isinstance(m, HLALayer))
    (loss + penalty).backward()
    finite = all(torch.isfinite(p.grad.float()).all() for p in model.parameters() if p.grad is not None)
    opt.step()
    if cuda:
        torch.cuda.synchronize()
    seconds, peak = time.perf_counter() - start, torch.cuda.max_memory_allocated() / 2**30 if cuda else 0.0
    model.eval()
    with torch.no_grad():
        prompt = ids[:1, : min(300, length)]
        out = model.generate(prompt, max_new_tokens=16, do_sample=False, pad_token_id=0)
    ok = ok and finite and torch.isfinite(loss).item() and out.shape[1] == prompt.shape[1] + 16
    print(
        f"{'ok  ' if ok else 'FAIL'} HLA bf16 adaptation step (2 x {length} tokens, 4 layers): loss {loss.item():.3f}, "
        f"penalty {float(penalty.detach()):.4f}, finite gradients {finite}, {seconds:.2f} s, peak {peak:.1f} GiB; "
        "cached decoding of 16 tokens ran"
    )
    return ok


def circuit_on_9b(device, layers, prompts):
    """The circuit rule's computation on Qwen3.5-9B's real dimensions (random weights), timed on the GPU."""
    from hybridlens.experiments.circuit import localize_reference, transplant_all
    from hybridlens.models.adapter import HybridModel

    spec = PUBLISHERS["Qwen"]
    tokenizer = build_tokenizer((REAL_CONFIGS / spec["template"]).read_text(), spec["tokens"])
    model = _realshape("Qwen__Qwen3.5-9B.config.json", layers, device).eval()
    hm = HybridModel(model, tokenizer, f"Qwen3.5-9B shape, {layers} layers, random weights")
    params = sum(p.numel() for p in model.parameters())
    tokens = [0]

    def count(module, args, kwargs):
        ids = kwargs.get("input_ids", args[0] if args else None)
        tokens[0] += ids.numel()

    model.register_forward_pre_hook(count, with_kwargs=True)
    settings = {"n_pairs": 8, "format": "chat", "localize_seed": 0, "localize_n": prompts}
    torch.cuda.synchronize()
    start = time.perf_counter()
    circuit, _, _ = localize_reference(hm, settings)
    rows = []
    if circuit["address"]["group"] is not None:
        rows = transplant_all(hm, triples(hm, 1, prompts, 8, "chat"), circuit, 32)
    torch.cuda.synchronize()
    seconds = time.perf_counter() - start
    rate = tokens[0] / seconds
    name = torch.cuda.get_device_name()
    peak = next((v for k, v in PEAK_BF16.items() if k in name), None)
    achieved = 2 * params * rate  # forward FLOPs: two per parameter per token (attention and scans not counted)
    fraction = f", {achieved / peak:.1%} of the {name}'s bf16 peak" if peak else f" (no peak known for {name})"
    print(
        f"circuit on Qwen3.5-9B shape ({layers} layers, {params / 1e9:.2f} B parameters, bf16): {seconds:.1f} s, "
        f"{len(rows)} transplant rows, {tokens[0]} forward tokens, {rate:.0f} tokens/s = "
        f"{achieved / 1e12:.1f} TFLOP/s{fraction}"
    )


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--layers", type=int, default=32, help="Qwen3.5-9B has 32; fewer if memory is short")
    ap.add_argument("--prompts", type=int, default=64)
    args = ap.parse_args()
    if not torch.cuda.is_available():
        print("gpu_check: no CUDA device here; run it on a GPU node (it checks the CUDA fast paths)")
        return 0
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    ok = True
    for check in (check_gdn, check_mamba, check_hla_bf16):
        try:
            ok = check("cuda") and ok
        except ImportError as err:
            print(f"skip {check.__name__}: {err} (pip install -e '.[gpu]')")
    circuit_on_9b("cuda", args.layers, args.prompts)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
