"""Forward work of every experiment that edits forwards (circuit localization and transplants, the scale sweep,
stitching swaps, split-prefill): token-layers computed against the logical minimum, and wall time with the
engine's shortcuts (shared prefixes, forwards resumed at their first edited layer, early stops, sdpa where
attention is not read) against the same code with every forward run in full (engine.Runner.minimal = False)
and against the hand-written floor. Not a test; every ratio comes from one run.

    python bench/forward_work.py [--items 32] [--pairs 8] [--threads 2] [--toy zoo/qwen_toy] [--skip-large]

Models: the shipped qwen_toy, and a random-weight Qwen3.5-architecture model of ~100 M parameters (12
layers LLLA, hidden 768, vocabulary 32000) reading the same prompts (its localization, mostly ablations at
every position, is timed on the toy only).

Token-layers: one token through one decoder layer, counted by hooks on every decoder layer (of both models
in stitching). The logical minimum: each prompt batch once through every layer, plus, per edited forward, the
tokens from its first edited position on, through the layers from its first edited layer to the last one it
reads; in stitching also each donor block once per swap; in split-prefill each context (A, its neutral twin,
B) prefilled once and each condition's question and generated tokens once through every layer (an edited
cache changes every layer, so nothing can be skipped there).

The floor: what a hand-written experiment does. Per transplant two full forwards with one hook each (the
donor's with a capture, the host's with a patch), times the experiment's transplants; per stitching
condition one full receiver forward with the swap hooked in, and the donor's forward up to its block for each
swap; in split-prefill the same loop with context A prefilled again for every condition.
"""

import argparse
import copy
import time

import numpy as np
import torch

from hybridlens.experiments import circuit, scale, split_prefill, stitch
from hybridlens.interventions.cache import CONDITIONS, prefill
from hybridlens.interventions.engine import Runner
from hybridlens.interventions.hooks import TraceDict
from hybridlens.interventions.on_items import batches_by_length, item_batches
from hybridlens.interventions.patch import run
from hybridlens.models.adapter import HybridModel, load_model, parse_site
from hybridlens.models.toy import build_tokenizer, build_toy_model
from hybridlens.tasks import items_of, module, triples
from hybridlens.tasks.dictionary import donor_host
from hybridlens.tasks.items import TOKEN_ROLES, token_positions, turns
from hybridlens.tasks.retrieval import make_prompts


class Count:
    """Token-layers computed (decoder-layer hooks) and the logical minimum (from Runner's calls)."""

    def __init__(self, hm, *others):
        self.hm, self.computed, self.minimum = hm, 0, 0
        layers = [layer for model in (hm, *others) for layer in model.layers]
        self._hooks = [layer.register_forward_pre_hook(self._layer, with_kwargs=True) for layer in layers]
        self._init, self._forward, self._block = Runner.__init__, Runner.forward, stitch.run_block
        count = self

        def block(model, first, last, resid):
            count.minimum += resid.shape[0] * resid.shape[1] * (last - first + 1)
            return count._block(model, first, last, resid)

        def init(runner, *args, **kwargs):
            count._init(runner, *args, **kwargs)
            count.minimum += runner.ids.numel() * hm.n_layers

        def forward(runner, edits=None, heads_off=None, heads_off_final=None, capture=(), capture_at=None,
                    attention=(), logits=True):  # fmt: skip
            batch, length = runner.ids.shape
            edited = [(parse_site(s).layer, e.positions) for s, e in (edits or {}).items()]
            edited += [(layer, None) for layer in heads_off or {}]
            edited += [(layer, [-1]) for layer in heads_off_final or {}]
            if edited:
                first_layer = min(layer for layer, _ in edited)
                first = min(0 if p is None else int(runner.index(p).min()) for _, p in edited)
                last = hm.n_layers if logits else max([parse_site(s).layer for s in capture] + list(attention)) + 1
                count.minimum += batch * (length - first) * max(last - first_layer, 0)
            return count._forward(runner, edits, heads_off, heads_off_final, capture, capture_at, attention, logits)

        Runner.__init__, Runner.forward, stitch.run_block = init, forward, block

    def _layer(self, module, args, kwargs):
        hidden = args[0] if args else kwargs["hidden_states"]
        self.computed += hidden.shape[0] * hidden.shape[1]

    def reset(self):
        self.computed = self.minimum = 0

    def close(self):
        Runner.__init__, Runner.forward, stitch.run_block = self._init, self._forward, self._block
        for hook in self._hooks:
            hook.remove()


def timed(fn):
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def floor_pair(hm, batch, sites):
    """Seconds of one hand-written transplant on a batch: donor forward with a capture, host forward with a patch."""
    donor, host = hm.encode([turns(t.donor) for t in batch])[0], hm.encode([turns(t.host) for t in batch])[0]

    def pair():
        with torch.no_grad():
            writes = run(hm, donor, capture=sites, positions=[-1], logits_to_keep=1).captured
            run(hm, host, patch={s: ([-1], writes[s]) for s in sites}, logits_to_keep=1)

    pair()
    return min(timed(pair) for _ in range(3))


def identity_stitch(hm, found):
    """A self-stitch through identity maps (a twin of the model as the donor): every swap's forwards, as a
    fitted pair runs them."""
    d, eye = hm.d_model, np.eye(hm.d_model)
    twin = HybridModel(copy.deepcopy(hm.model), hm.tokenizer, "twin")
    spans = stitch.blocks(found)
    ident = stitch.RidgeMap(np.zeros(d), np.zeros(d), eye, 0.0, 1.0)
    maps = {f"{b}.in": ident for b in spans} | {f"{b}.out.{r}": ident for b in spans for r in TOKEN_ROLES}
    maps["address.out.final"] = ident
    means = {f"{b}.{r}": np.zeros(d) for b in spans for r in TOKEN_ROLES} | {"address.final": np.zeros(d)}
    return twin, {"receiver": spans, "donor": spans}, maps, means


def split_minimum(hm, items, n_new):
    """Token-layers of split-prefill's logical minimum: each context once, each continuation once."""
    a_ids, offsets = hm.tokenize([turns(it) for it in items])
    _, b_offsets = hm.tokenize([turns(it.partners["swap"]) for it in items])
    bare, _ = hm.tokenize([turns(it.partners["bare"]) for it in items])
    tokens = 0
    for it, ids, off, b_off, z in zip(items, a_ids, offsets, b_offsets, bare, strict=True):
        split = token_positions(it, off, "question")[0]
        b_split = token_positions(it.partners["swap"], b_off, "question")[0]
        tokens += 2 * split + b_split + len(CONDITIONS) * (len(ids) - split + n_new - 1) + len(z) + n_new - 1
    return tokens * hm.n_layers


def measure(name, hm, args, localization=True):
    items = triples(hm, 1, args.items, args.pairs, "chat")
    # One batch of one token length, so that every forward is a full batch.
    items = max(item_batches(hm, items, lambda t: (t.host, t.donor, t.other), len(items)), key=len)
    found, _, reader_rows = circuit.localize(hm, [t.host for t in items])
    main = found["reader"]
    readers = scale.readers(reader_rows, main, 0.0)
    sets = scale.group_sets(hm.groups, max(hm.attention_layers()))
    control = circuit.control_group(hm, found["address"]["group"])
    twin, spans, maps, means = identity_stitch(hm, found)
    prompts = make_prompts(1, args.items, args.pairs, "chat", 2)
    prompts = [prompts[i] for i in max((c for c, _, _ in batches_by_length(hm, prompts, len(prompts))), key=len)]
    pairs = donor_host(prompts, 1)
    span = spans["donor"]["address"]
    writes = stitch.final_block_writes(stitch.collect(twin, [d for d, _ in pairs], {"address": span}), span)
    style = module("style")
    task = {"kind": "style", "seed": 1, "n": args.items, "n_pairs": args.pairs}
    split_items, _ = items_of(hm, task)
    lexicon, n_new = style.lexicon(hm, task), 3
    experiments = {
        "circuit localization": lambda: circuit.localize(hm, [t.host for t in items]),
        "circuit transplants": lambda: circuit.transplant(hm, items, found, control),
        "scale sweep": lambda: scale.sweep(hm, items, readers, main, len(items)),
        "stitching swaps": lambda: stitch.swap_rows(hm, twin, spans, maps, means, pairs, 1, len(pairs), writes),
        "split-prefill": lambda: split_prefill.run_items(hm, split_items, n_new, lexicon, 1, len(split_items)),
    }
    if not localization:
        del experiments["circuit localization"]
    # The floor, in seconds. Transplants: circuit (query: every position set of the same-dictionary donor,
    # final for the two others; state: three donors) per block; scale: every group set.
    pair = floor_pair(hm, items, circuit.mixer_sites(hm.groups[found["address"]["group"] or 0]))
    blocks = 1 + (control is not None)
    floors = {
        "circuit transplants": pair * blocks * (len(circuit.POSITION_SETS) + 2 + 3),
        "scale sweep": pair * len(sets),
        "stitching swaps": floor_stitch(hm, twin, spans, [h for _, h in pairs]),
        "split-prefill": floor_split(hm, split_items, experiments["split-prefill"]),
    }
    count = Count(hm, twin)
    params = sum(p.numel() for p in hm.model.parameters()) / 1e6
    length = hm.encode([turns(items[0].host)])[0].shape[1]
    print(f"\n{name}: {params:.0f} M parameters, {hm.n_layers} layers, {len(items)} items of {length} tokens")
    columns = ["token-layers before", "after", "minimum", "after/min", "s before", "s after", "after/before"]
    columns += ["floor s", "floor/after"]
    print(f"{'experiment':22s}" + "".join(f"{c:>14s}" for c in columns))
    for label, fn in experiments.items():
        result = {}
        for minimal in (False, True):
            Runner.minimal = minimal
            count.reset()
            seconds = timed(fn)
            minimum = split_minimum(hm, split_items, n_new) if label == "split-prefill" else count.minimum
            result[minimal] = (count.computed, minimum, seconds)
        Runner.minimal = True
        (before, _, s_before), (after, minimum, s_after) = result[False], result[True]
        floor = floors.get(label, float("nan"))
        values = [f"{before / 1e6:.3f}M", f"{after / 1e6:.3f}M", f"{minimum / 1e6:.3f}M", f"{after / minimum:.2f}"]
        values += [f"{s_before:.2f}", f"{s_after:.2f}", f"{s_after / s_before:.2f}", f"{floor:.2f}"]
        values += [f"{floor / s_after:.2f}"]
        print(f"{label:22s}" + "".join(f"{v:>14s}" for v in values))
    count.close()


def floor_stitch(hm, twin, spans, hosts):
    """Seconds of the hand-written swaps: per block four conditions and per query transfer four, each a full
    receiver forward, plus the intact one; the donor's forward up to its block for each of the block swaps'
    two donor runs (stitched, shuffled)."""
    ids = hm.encode([turns(h) for h in hosts])[0]
    full = min(timed(lambda: run(hm, ids, logits_to_keep=1)) for _ in range(3))
    donor = 0.0
    for _, last in spans["donor"].values():

        @torch.no_grad()
        def upto(last=last):
            with TraceDict({"out": twin.layers[last]}, {"out": {"stop": True}}):
                twin.model(ids, logits_to_keep=1)

        donor += 2 * min(timed(upto) for _ in range(3))
    return full * (1 + 4 * len(spans["receiver"]) + 4) + donor


def floor_split(hm, items, experiment):
    """Seconds of the hand-written split-prefill: the experiment's own loop with context A prefilled again
    for every condition after the first."""
    ids = torch.tensor(hm.tokenize([turns(items[0])])[0])
    split = token_positions(items[0], hm.tokenize([turns(items[0])])[1][0], "question")[0]
    context = ids[:, :split].expand(len(items), -1)
    again = min(timed(lambda: prefill(hm, context)) for _ in range(3))
    return timed(experiment) + (len(CONDITIONS) - 1) * again


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--items", type=int, default=32)
    ap.add_argument("--pairs", type=int, default=8)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--toy", default="zoo/qwen_toy")
    ap.add_argument("--skip-large", action="store_true")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads")
    measure(args.toy, load_model(args.toy, family="qwen3_5"), args)
    if not args.skip_large:
        torch.manual_seed(0)
        model = build_toy_model("qwen3_5", 32000, 768, "LLLA" * 3, heads=12).eval()
        measure("qwen3_5 ~100M shape", HybridModel(model, build_tokenizer(2), "bench"), args, localization=False)


if __name__ == "__main__":
    main()
