"""Before a GPU-day on the paper preset: one step of every experiment in bfloat16 on real-shape checkpoints, each
held against the same step in float32 on the plain-PyTorch path, on the same inputs; on a GPU with the CUDA kernels
in place, on CPU with the kernels' dtype contracts simulated. The exit status is 0 only if every check passes, so
a CI job on CPU proves what can be proven without a GPU. Installs nothing; sized for 8 minutes on one H100-class GPU.

    python bench/gpu_check.py [--steps extract,circuit,...] [--layers 32] [--prompts 64]

--steps reruns some steps; --layers and --prompts size the GPU-only timing.

The checkpoints (models.realshape) have random weights and the published structure of Qwen3.5-0.8B and of
Falcon-H1-0.5B (Mamba-2) at their real width, 1024, with 4 layers on CPU and 8 on a GPU, and the trained BPE of the
pipeline's real-shape entries. Each is built once in float32 and loaded through load_model in float32 and in
bfloat16, so bfloat16's weights are float32's rounded. Every step calls the library's entry points with the
workflow scripts' settings, sized down:

extract   extract() at every write site, logit_lens() (both shapes)
circuit   localize_reference(), transplant_all() with the engine's own validations (Qwen3.5)
scale     scale.sweep(): removal profile, group transplants, blocking (Qwen3.5)
split     prefill() and the dtypes and values of its states(), then run_items(): every CONDITION of
          interventions.cache continued greedily, and the no-persona baseline (both shapes)
stitch    collect() on both shapes, fit_maps(), swap_rows() of Falcon-H1's blocks into Qwen3.5
hla       to_hla() with every gate 1 against the GDN model, cached decoding across a chunk's end with
          generate(), one long_context.train() step with the paper's router and regularizers (Qwen3.5)

How a step is held. The float32 run goes first; what it decides (the circuit, the readers, the ridge maps) the
bfloat16 run reuses, so both compute the same things. Every logit vector either run computes is recorded with the
tokens it read; a greedy continuation in which bfloat16 picked another token (a near tie) is compared up to and
including that token, since its inputs differ after it. Logits, activations, states, attention weights, the loss
and the gradient must agree within validation.path_ulps(bfloat16) units in the last place of bfloat16 at the
float32 run's largest magnitude: half of bfloat16's 8 significant bits, which its rounding leaves intact and a wrong
path (a state not carried or cast away, a position off by one) does not (validation.py). A gradient, whose
elements near 0 are differences of large terms, is held as one vector by its 2-norm. What an argmax decides
(redirects, retrieval, generated text) is not judged apart: logits within the allowance can swap places only where
they were within twice the allowance of each other. Checks within one run (the engine's identity transplants,
HLA with every gate 1 against GDN, the states' dtypes) use the tolerances their library code states.

Kernel paths. transformers 5.24 calls Gated DeltaNet, Mamba-2 and the short convolutions through module-level
names (torch_chunk_gated_delta_rule, mamba2_chunk_scan, causal_conv1d_fn, ... in modeling_qwen3_5 and
modeling_falcon_h1), which integrations.hub_kernels binds at import time to flash-linear-attention, mamba-ssm or
causal-conv1d where they import, else to the plain-PyTorch function (the binding's __wrapped__). The float32 run
rebinds them to the plain functions. The bfloat16 run keeps a kernel where its package is installed on a GPU;
elsewhere it runs the plain function held to the kernel's dtype contract, its output in its input's dtype and its
final recurrent state in float32 (flash-linear-attention's GDN, mamba-ssm's chunk scan), so the float32 states of a
bfloat16 forward go through cache surgery and cached decoding as on a GPU. HLA's own gated_delta_rule keeps that
contract on either path (models/hla.py).

GPU only: flash-linear-attention's chunk_gated_delta_rule and mamba-ssm's mamba_chunk_scan_combined against the
plain functions at Qwen3.5-9B's and Granite-4.0-H-tiny's layer shapes (outputs, final states, every input's
gradient) and HLA's chunk maps with and without the kernel, before the steps; after them the circuit on
Qwen3.5-9B's real dimensions, timed: forward tokens per second and the fraction of the GPU's bfloat16 peak.

The `gpu` extra on a node without network access (pins in pyproject.toml): on a machine with network, the node's
Python, CUDA version and torch (the CUDA build of the torch pin), build every wheel; mamba-ssm and causal-conv1d
import torch to build and fetch the prebuilt binary that matches it, or compile one:

    pip wheel --no-build-isolation --wheel-dir wheelhouse '.[gpu]'
    # copy wheelhouse/ to the node, then there:
    pip install --no-index --find-links wheelhouse -e '.[gpu]'
"""

import argparse
import contextlib
import functools
import importlib.util
import inspect
import itertools
import json
import math
import random
import sys
import tempfile
import time
import traceback
import weakref
from pathlib import Path
from typing import NamedTuple

import torch

from hybridlens.models.realshape import PUBLISHERS, REAL_CONFIGS, build_tokenizer, realshape_config
from hybridlens.tasks import triples
from hybridlens.validation import Check, judge

# Dense bfloat16 tensor-core peaks (vendor figures), by a substring of torch.cuda.get_device_name().
PEAK_BF16 = {"H200": 989e12, "H100": 989e12, "A100": 312e12, "L40S": 362e12, "A10": 125e12}

# The functions transformers binds to a CUDA kernel: the package that provides it, and the argument whose dtype the
# kernel's output has (a final state it returns is float32).
KERNELS = {
    "torch_chunk_gated_delta_rule": ("fla", "query"),
    "torch_recurrent_gated_delta_rule": ("fla", "query"),
    "mamba2_chunk_scan": ("mamba_ssm", "hidden_states"),
    "mamba2_selective_state_update": ("mamba_ssm", "hidden_states"),
    "causal_conv1d_fn": ("causal_conv1d", "hidden_states"),
    "causal_conv1d_update": ("causal_conv1d", "hidden_states"),
}
SHAPES = {"qwen": "Qwen__Qwen3.5-0.8B.config.json", "falcon": "tiiuae__Falcon-H1-0.5B-Instruct.config.json"}
# The smallest sizes that keep each step's structure on CPU; a GPU runs the same steps larger.
SIZES = {
    "cpu": {"layers": 4, "n": 2, "n_pairs": 2, "new_tokens": 4, "n_fit": 10, "chunk": 32, "hla_length": 80},
    "cuda": {"layers": 8, "n": 8, "n_pairs": 4, "new_tokens": 16, "n_fit": 32, "chunk": 256, "hla_length": 1024},
}
REFERENCE, FAST = "float32", "bfloat16"
ROUTER = ("query_map", "pool_key", "pool_value", "pool_out")  # the paper router's weights (models/hla.py)


# --- kernel paths -----------------------------------------------------------------------------------------------------
def has_kernel(package: str) -> bool:
    return torch.cuda.is_available() and importlib.util.find_spec(package) is not None


def kernel_contract(plain, dtype_arg: str):
    """`plain` returning what the CUDA kernel returns: its output in `dtype_arg`'s dtype, a final state in float32."""
    signature = inspect.signature(plain)

    @functools.wraps(plain)
    def kernel(*args, **kwargs):
        dtype = signature.bind(*args, **kwargs).arguments[dtype_arg].dtype
        out = plain(*args, **kwargs)
        if isinstance(out, tuple):
            return out[0].to(dtype), *(s if s is None else s.float() for s in out[1:])
        return out.to(dtype)

    return kernel


@contextlib.contextmanager
def kernel_path(models, path: str):
    """Inside: the models' linear mixers run transformers' plain functions ("plain"), or each CUDA kernel where its
    package is installed on a GPU and elsewhere the plain function held to the kernel's dtype contract ("fast")."""
    modules = {sys.modules[type(hm.model).__module__] for hm in models}
    saved = []
    try:
        for module, (name, (package, dtype_arg)) in itertools.product(modules, KERNELS.items()):
            bound = getattr(module, name, None)
            if bound is None or (path == "fast" and has_kernel(package)):
                continue
            plain = inspect.unwrap(bound)
            saved.append((module, name, bound))
            setattr(module, name, plain if path == "plain" else kernel_contract(plain, dtype_arg))
        yield
    finally:
        for module, name, bound in reversed(saved):
            setattr(module, name, bound)


# --- recording and holding two runs together --------------------------------------------------------------------------
@contextlib.contextmanager
def recording(models):
    """Every logit vector the models compute (the last position's), with the model, the token ids of the forward
    that computed it and the cache it continued (numbered in order of first use): [(model, chain, ids, logits)]."""
    from transformers import Cache

    calls, handles = [], []
    for m, hm in enumerate(models):
        context, chains, count = {}, weakref.WeakKeyDictionary(), itertools.count()

        def enter(module, args, kwargs, context=context, chains=chains, count=count):
            cache = next((v for v in kwargs.values() if isinstance(v, Cache)), None)
            if cache is not None and cache not in chains:
                chains[cache] = next(count)
            ids = kwargs.get("input_ids", args[0] if args else None)
            context["now"] = (None if ids is None else ids.detach().cpu(), None if cache is None else chains[cache])

        def leave(module, args, output, context=context):
            context.pop("now", None)

        def logits(module, args, output, m=m, context=context):
            ids, chain = context.get("now", (None, None))  # none outside a forward: the logit lens's unembedding
            last = output[:, -1] if output.ndim == 3 else output
            calls.append((m, chain, ids, last.detach().float().cpu()))

        handles.append(hm.model.register_forward_pre_hook(enter, with_kwargs=True))
        handles.append(hm.model.register_forward_hook(leave, always_call=True))
        handles.append(hm.model.get_output_embeddings().register_forward_hook(logits))
    try:
        yield calls
    finally:
        for handle in reversed(handles):
            handle.remove()


def hold_logits(fast_calls, reference_calls):
    """(Check, vectors compared, vectors computed) of two runs' logits. A batch row is compared on a cache until a
    forward feeds it other tokens than the reference's (bfloat16 took another greedy token after a near tie)."""
    if len(fast_calls) != len(reference_calls):
        raise AssertionError(f"the runs computed {len(fast_calls)} and {len(reference_calls)} logit vectors")
    check = Check("logits", FAST, REFERENCE, FAST)
    diverged, held, total = {}, 0, 0
    for (m, chain, ids, logits), (m_ref, chain_ref, ids_ref, ref) in zip(fast_calls, reference_calls, strict=True):
        if (m, chain, logits.shape) != (m_ref, chain_ref, ref.shape):
            raise AssertionError(f"the runs took different paths: {(m, chain)} against {(m_ref, chain_ref)}")
        first = (m, chain) not in diverged
        rows = diverged.setdefault((m, chain), set()) if chain is not None else set()
        if ids is not None and ids_ref is not None:
            other = set((ids != ids_ref).reshape(len(ids), -1).any(-1).nonzero().flatten().tolist())
            if other and first:  # only a continuation may read a token the runs chose differently
                raise AssertionError(f"a forward of model {m} read other tokens than the reference's (rows {other})")
            rows |= other
        keep = [r for r in range(len(logits)) if r not in rows]
        check.update(logits[keep], ref[keep])
        held, total = held + len(keep), total + len(logits)
    return check, held, total


class Vector(NamedTuple):
    """A tensor held as one vector, the norm of the difference against the norm: a gradient sums over every token,
    and its elements near 0 are differences of large terms that keep none of the dtype's digits."""

    values: torch.Tensor


def fact(name, passed, text):
    """A check within one run that is not a number, e.g. a dtype: judge()'s verdict keys that describe reads."""
    return {"name": name, "passed": passed, "text": text}


def describe(v) -> str:
    """A verdict in one phrase: the difference in ulps of its dtype at the compared magnitude, and the allowance."""
    if "text" in v:
        return f"{v['name']}: {v['text']}"
    allowed = "bit-identical" if v["allowed_ulps"] == 0 else f"allowed {v['allowed_ulps']:.3g} = {v['tolerance']:.2e}"
    return (
        f"{v['name']} ({v['a']} vs {v['b']}): {v['max_abs_diff']:.2e} = {v['ulps']:.3g} ulps of {v['dtype']} "
        f"at {v['magnitude']:.3g}, {allowed}"
    )


def share(v) -> float:
    """How much of its allowance a verdict uses (a failed fact: all of it)."""
    if "text" in v:
        return 0.0 if v["passed"] else math.inf
    if v["allowed_ulps"] == 0:
        return 0.0 if v["max_abs_diff"] == 0 else math.inf
    return v["ulps"] / v["allowed_ulps"]


def compare(fast, reference):
    """(verdicts, what was compared) of two runs: their logits, every tensor both returned (a dict of them: each on
    its own magnitude) and the checks each made within itself."""
    (fast_calls, fast_out), (reference_calls, reference_out) = fast, reference
    logits, held, total = hold_logits(fast_calls, reference_calls)
    verdicts, counts, own = [judge(logits, None)], [f"logits {held}/{total}"], 0
    for key, value in fast_out.items():
        reference = reference_out[key]
        if isinstance(value, dict) and "passed" in value:  # a check within the run, judged there
            verdicts += [value, reference]
            own += 1
        elif isinstance(value, Vector):
            a, b = value.values.double(), reference.values.double()
            norms = {"max_abs_diff": (a - b).norm().item(), "magnitude": b.norm().item(), "n": len(b)}
            verdicts.append(judge(Check(f"{key} (2-norm)", FAST, REFERENCE, FAST, **norms), None))
            counts.append(key)
        else:
            parts = value if isinstance(value, dict) else {"": value}
            checks = [
                Check(f"{key} {part}".strip(), FAST, REFERENCE, FAST).update(
                    torch.as_tensor(tensor), torch.as_tensor(reference[part] if part else reference)
                )
                for part, tensor in parts.items()
            ]
            verdicts += [judge(c, None) for c in checks if c.n]  # a step may compute none (no second reader)
            n = sum(bool(c.n) for c in checks)
            counts += [f"{key} {n}" if len(parts) > 1 else key] if n else []
    return verdicts, ", ".join(counts + [f"{own} checks within each run"] * bool(own))


def hold(name, step, pairs, given) -> bool:
    """Run `step` on the float32 plain path, then in bfloat16 on the fast path with what the first run decided
    (`given`, shared by the steps on the same checkpoints); print one line: what was compared, the largest
    difference against its allowance, the time."""
    runs, start = {}, time.perf_counter()
    label = " + ".join(p["label"] for p in pairs)
    try:
        for dtype, path in ((REFERENCE, "plain"), (FAST, "fast")):
            models = [p[dtype] for p in pairs]
            given["path"] = path
            torch.manual_seed(0)
            with kernel_path(models, path), recording(models) as calls:
                outputs = step(*models, given=given)
            runs[dtype] = (calls, outputs)
        verdicts, compared = compare(runs[FAST], runs[REFERENCE])
    except Exception as err:
        print(f"FAIL {name} [{label}]: {type(err).__name__}: {err}")
        print("     " + traceback.format_exc().rstrip().replace("\n", "\n     "))
        return False
    ok = all(v["passed"] for v in verdicts)
    worst = max(verdicts, key=share)
    seconds = time.perf_counter() - start
    print(f"{'ok  ' if ok else 'FAIL'} {name} [{label}]: {compared}; worst: {describe(worst)}; {seconds:.0f} s")
    for v in verdicts:
        if not v["passed"] and v is not worst:
            print(f"       also failed: {describe(v)}")
    return ok


def within(name, what, a, b, dtype, ulps=None):
    """A check inside one run: a against b (`what` names them), within `ulps` of `dtype` (None: path_ulps)."""
    return judge(Check(f"{name}, {dtype} run", *what, dtype).update(a, b), ulps)


def rows_tensor(rows, columns):
    """The finite numbers of some columns of a step's rows as one tensor (a state transplant reads no attention)."""
    values = [r[c] for r in rows for c in columns if c in r]
    return torch.tensor([float(v) for v in values if math.isfinite(v)], dtype=torch.float64)


# --- checkpoints ------------------------------------------------------------------------------------------------------
def checkpoints(root, layers, device):
    """{shape: {"label", float32 HybridModel, bfloat16 HybridModel}}: random-weight real-shape checkpoints, built in
    float32 and loaded in both dtypes, so that bfloat16's weights are float32's rounded."""
    from hybridlens.models.adapter import load_model
    from hybridlens.models.realshape import build_realshape

    out = {}
    for key, config in SHAPES.items():
        directory = Path(root) / key
        build_realshape(REAL_CONFIGS / config, directory, layers=layers, hidden=1024, dtype="float32")
        label = f"{config.split('__')[1].removesuffix('.config.json')} shape, {layers} layers"
        out[key] = {"label": label} | {d: load_model(directory, dtype=d, device=device) for d in (REFERENCE, FAST)}
    return out


# --- the experiments' steps -------------------------------------------------------------------------------------------
def extract_step(hm, given):
    """Activations at every write site (rule extract_activations) and the logit lens on them."""
    from hybridlens import tasks
    from hybridlens.experiments.extract import extract, logit_lens

    size = given["size"]
    task = tasks.settings("gpu_check", {"format": "chat", "n_pairs": size["n_pairs"], "n": 2 * size["n"], "seed": 1})
    prompts, _ = tasks.items_of(hm, task)
    sites = [f"layers.{layer}.{s}" for layer in range(hm.n_layers) for s in ("resid_pre", "mixer_out", "layer_out")]
    data = extract(hm, prompts, sites, "final", batch_size=4)
    logit_lens(hm, data)  # its unembeddings are recorded with the logits
    return {"write sites": {s: torch.as_tensor(data[s]) for s in sites}}


def localized(hm, given):
    """localize_reference with the circuit rule's settings, sized down; both runs go on with the float32 run's
    circuit and readers, which a near tie could change."""
    from hybridlens.experiments.circuit import localize_reference

    size = given["size"]
    settings = {"n_pairs": size["n_pairs"], "format": "chat", "localize_seed": 0, "localize_n": size["n"]}
    circuit, _, readers = localize_reference(hm, settings)
    given.setdefault("circuit", circuit)
    given.setdefault("readers", readers)
    return readers


def circuit_step(hm, given):
    """Localization, then the query and state transplants with controls, and the engine's own validations."""
    from hybridlens.experiments.circuit import VALIDATIONS, transplant_all

    size = given["size"]
    given["localized by"] = "circuit"  # the scale step reuses this localization
    readers = localized(hm, given)
    checks = {}
    items = triples(hm, 1, size["n"], size["n_pairs"], "chat")
    rows = transplant_all(hm, items, given["circuit"], batch_size=size["n"], checks=checks)
    # The identity transplants run the very computation of their reference; the shortcut reorders sums only.
    ulps = {name: 0 if key == "identity_ulps" else None for name, (_, _, key) in VALIDATIONS.items()}
    dtype = str(hm.model.dtype).removeprefix("torch.")
    own = {name: judge(check, ulps[name]) | {"name": f"engine {name}, {dtype} run"} for name, check in checks.items()}
    by_head = sorted(readers, key=lambda r: (r["layer"], r["head"]))  # ranked by value, which a near tie reorders
    return own | {
        "reader attention": rows_tensor(by_head, ["attention_to_target"]),
        "transplant attention": rows_tensor(rows, ["attn_a", "attn_b"]),
    }


def scale_step(hm, given):
    """The scale rule: localization (the circuit step's, if it ran), then the sweep (removal profile, group
    transplants, blocking)."""
    from hybridlens.experiments import scale

    size = given["size"]
    if given.setdefault("localized by", "scale") == "scale":  # unless the circuit step has localized in both runs
        localized(hm, given)
    main = given["circuit"]["reader"]
    # Random weights read nothing: a minimum of 0 makes every attention layer's best head a reader, so blocking runs.
    readers = scale.readers(given["readers"], main, 0.0)
    items = triples(hm, 1, size["n"], size["n_pairs"], "chat")
    profile, transplant, blocking = scale.sweep(hm, items, readers, main, batch_size=size["n"])
    attention = sorted({c for r in transplant for c in r if c.endswith(("_to_a", "_to_b"))})
    return {
        "profile attention": rows_tensor(profile, ["reader_attention"]),
        "transplant attention": rows_tensor(transplant, attention),
        "blocking attention": rows_tensor(blocking, ["attention_intact", "attention_blocked"]),
    }


def split_step(hm, given):
    """A prefill's states (float32 recurrent states out of any forward: the kernels' contract), then the split-prefill
    rule: every cache condition continued greedily, and the no-persona baseline."""
    from hybridlens import tasks
    from hybridlens.experiments.split_prefill import run_items
    from hybridlens.interventions.cache import prefill, states
    from hybridlens.models.adapter import parse_site
    from hybridlens.tasks.items import turns

    size = given["size"]
    spec = {"kind": "style", "n": size["n"], "n_pairs": size["n_pairs"], "seed": 1}
    spec = tasks.settings("split_prefill", spec, where="gpu_check split")
    items, _ = tasks.items_of(hm, spec)
    ids, _ = hm.tokenize([turns(items[0])])
    _, cache = prefill(hm, torch.tensor(ids, device=hm.device))
    held = states(hm, cache)
    dtype = str(hm.model.dtype).removeprefix("torch.")
    wrong = [
        f"{site} {state.dtype}"
        for site, state in held.items()
        if state.dtype != (torch.float32 if parse_site(site).name == "state" else hm.model.dtype)
    ]
    text = f"recurrent states float32, conv states {dtype}" + (f"; not so: {', '.join(wrong)}" if wrong else "")
    own = {"dtypes": fact(f"state dtypes, {dtype} run", not wrong, text)}
    run_items(hm, items, size["new_tokens"], tasks.module("style").lexicon(hm, spec), seed=1, batch_size=size["n"])
    return own | {"states": held}


def address_blocks(hm):
    """stitch.blocks of a circuit whose Address block is the last linear group before the last attention layer and
    whose Encode block is the first group: fixed, so that both runs swap the same layers."""
    from hybridlens.experiments.stitch import blocks

    last = max(hm.attention_layers())
    address = max(g for g, layers in enumerate(hm.groups) if max(layers) < last)
    return blocks({"groups": hm.groups, "address": {"group": address}, "encode": {"group": 0}})


def stitch_step(receiver, donor, given):
    """The stitch rules on one pair and direction: both models' streams collected on the fit prompts, ridge maps
    fitted, the donor's Address block, Encode+Address span and query vector swapped into the receiver on the test
    prompts, with controls. Both runs swap through the float32 run's maps (a refit amplifies rounding)."""
    from hybridlens import tasks
    from hybridlens.experiments import stitch

    size, seed = given["size"], 1
    dictionary = tasks.module("dictionary")
    settings = {"n_fit": size["n_fit"], "n_test": size["n"], "n_pairs": size["n_pairs"], "format": "chat"}
    split = dictionary.split_keys(receiver, donor, seed, 0.34, size["n_pairs"])
    spans = {"receiver": address_blocks(receiver), "donor": address_blocks(donor)}
    fit = dictionary.run_prompts(split, seed, settings, "fit")
    stores = {side: stitch.collect(hm, fit, spans[side], 4) for side, hm in (("receiver", receiver), ("donor", donor))}
    maps, means, _ = stitch.fit_maps(stores["receiver"], stores["donor"], spans["receiver"], spans["donor"], [1.0])
    given.setdefault("maps", (maps, means))
    pairs = dictionary.donor_host(dictionary.run_prompts(split, seed, settings, "test"), seed)
    stitch.swap_rows(receiver, donor, spans, *given["maps"], pairs, seed, 4)
    return {
        f"{side} streams": {k: torch.as_tensor(v) for k, v in store.items() if k.startswith("resid.")}
        for side, store in stores.items()
    }


def hla_step(hm, given):
    """The HLA adaptation: to_hla (the paper's router, buckets of 16) with every gate 1 against the GDN model it
    converts; at the paper's gate bias, cached decoding across a chunk's end, then one long_context.train step (the
    regularizers, AdamW). The step's update is not held: AdamW's first step moves every weight by the learning
    rate times the sign of its gradient, which a gradient near 0 flips."""
    from hybridlens.experiments.long_context import Symbols, batch, train
    from hybridlens.models.hla import HLAMixer, to_hla

    size, dtype = given["size"], str(hm.model.dtype).removeprefix("torch.")
    chunk, length = size["chunk"], size["hla_length"]
    sym = Symbols.for_model(hm)
    ids, _ = batch("mqar", random.Random(0), 2, length, sym, hm.device)
    model = hm.model
    with torch.no_grad():
        gdn = model(ids, use_cache=False).logits
    torch.manual_seed(0)  # the router's initial weights (float32 in either dtype), the same in both runs
    to_hla(model, "hla", chunk=chunk, bucket=16, gate_bias=60.0, router="paper", use_fla=given["path"] == "fast")
    with torch.no_grad():
        ones = model(ids, use_cache=False).logits
    own = {"gates": within("HLA's gates", ("HLA, every gate 1", "GDN"), ones, gdn, dtype)}
    mixers = [m for m in model.modules() if isinstance(m, HLAMixer)]
    for mixer in mixers:
        mixer.gate_bias.fill_(2.2)  # the paper's constant
    prompt = ids[:1, : 2 * chunk - size["new_tokens"] // 2]  # decoding finishes a chunk and opens the next
    with torch.no_grad():
        model.generate(prompt, max_new_tokens=size["new_tokens"], do_sample=False, pad_token_id=sym.pad)
    before = [getattr(m, name).detach().clone() for m in mixers for name in ROUTER]
    curve = train(model, sym, length, steps=1, batch_size=2, lr=1e-3, seed=0, reg=1.0)
    gradient = torch.cat([getattr(m, name).grad.flatten() for m in mixers for name in ROUTER])
    after = [getattr(m, name).detach() for m in mixers for name in ROUTER]
    moved = all(
        a.dtype == torch.float32 and torch.isfinite(a).all() and not torch.equal(a, b)
        for a, b in zip(after, before, strict=True)
    )
    text = "took a finite step in float32" if moved else "did not take a finite step in float32"
    own["update"] = fact(f"router weights, {dtype} run", moved, text)
    return own | {"loss": torch.tensor([curve[0]["loss"]]), "router gradient": Vector(gradient)}


# --- GPU only: the kernels against the plain functions ----------------------------------------------------------------
def relative(a, b):
    """max |a - b| / max |b|: one number per tensor, comparable across shapes and scales."""
    return ((a.float() - b.float()).abs().max() / b.float().abs().max().clamp_min(1e-12)).item()


def compare_kernels(name, fast, reference, inputs, tol):
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

    ok = compare_kernels("GDN chunk kernel vs plain PyTorch (9B shape)", fast, plain, [q, k, v, g, beta], 2e-3)

    def maps(use_fla):
        return lambda q, k, v, g, beta: chunk_summaries(q, k, v, g, beta, chunk=64, use_fla=use_fla)

    short = [x[:, :256] for x in (q, k, v, g, beta)]
    return compare_kernels("HLA chunk maps with vs without the kernel", maps(True), maps(False), short, 2e-3) and ok


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
    return compare_kernels("Mamba-2 scan kernel vs plain PyTorch (Granite-tiny shape)", fast, plain, inputs, 2e-3)


# --- GPU only: the circuit on Qwen3.5-9B's dimensions, timed ----------------------------------------------------
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


def quiet():
    """One line per check: transformers' notices (a plain-PyTorch fallback, said once per function) and the
    progress bars of saving and loading the checkpoints go."""
    from huggingface_hub.utils import disable_progress_bars
    from transformers.utils import logging

    logging.set_verbosity_error()
    logging.disable_progress_bar()
    disable_progress_bars()


STEPS = {
    "extract": (extract_step, ("qwen",), ("falcon",)),
    "circuit": (circuit_step, ("qwen",)),
    "scale": (scale_step, ("qwen",)),
    "split": (split_step, ("qwen",), ("falcon",)),
    "stitch": (stitch_step, ("qwen", "falcon")),
    "hla": (hla_step, ("qwen",)),  # last: it converts the Qwen3.5 checkpoints in place
}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--layers", type=int, default=32, help="GPU timing: Qwen3.5-9B has 32; fewer if memory is short")
    ap.add_argument("--prompts", type=int, default=64, help="GPU timing: the localization's prompts")
    ap.add_argument("--steps", default=",".join(STEPS), help=f"comma-separated, of {','.join(STEPS)}")
    args = ap.parse_args()
    asked = args.steps.split(",")
    unknown = sorted(set(asked) - set(STEPS))
    if unknown:
        ap.error(f"--steps: unknown {unknown}; choose from {','.join(STEPS)}")
    quiet()
    device = "cuda" if torch.cuda.is_available() else "cpu"
    ok = True
    if device == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False
        for check in (check_gdn, check_mamba):
            try:
                ok = check(device) and ok
            except ImportError as err:
                print(f"skip {check.__name__}: {err} (the gpu extra is missing: this file's docstring installs it)")
            except Exception as err:  # a kernel that imports and fails (Triton, a shape) fails the check
                print(f"FAIL {check.__name__}: {type(err).__name__}: {err}")
                traceback.print_exc()
                ok = False
    packages = sorted({package for package, _ in KERNELS.values()})
    paths = ", ".join(f"{p}: {'kernel' if has_kernel(p) else 'dtype contract simulated'}" for p in packages)
    where = torch.cuda.get_device_name() if device == "cuda" else "CPU (the kernel checks and the timing need CUDA)"
    print(f"gpu_check on {where}; bfloat16 paths: {paths}")
    size, given = SIZES[device], {}
    with tempfile.TemporaryDirectory() as root:
        shapes = checkpoints(root, size["layers"], device)
        for name, (step, *runs) in STEPS.items():
            for keys in runs if name in asked else ():
                shared = given.setdefault(keys, {"size": size})
                ok = hold(name, step, [shapes[k] for k in keys], shared) and ok
    if device == "cuda":
        try:
            circuit_on_9b(device, args.layers, args.prompts)
        except Exception as err:  # the timing runs the circuit step's code on a larger model: a failure is one
            print(f"FAIL circuit timing on the Qwen3.5-9B shape: {type(err).__name__}: {err}")
            traceback.print_exc()
            ok = False
    print(f"gpu_check: {'every check passed' if ok else 'FAILED'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
