"""Forward work of the circuit and the scale sweep: token-layers computed against the logical minimum, and wall
time with the engine's shortcuts (shared prefixes, early stops, sdpa where attention is not read) against the
same code with every forward run in full (engine.Runner.minimal = False, the code before the shortcuts) and
against the hand-written floor. Not a test; every ratio comes from one run.

    python bench/forward_work.py [--items 32] [--pairs 8] [--threads 2] [--toy zoo/qwen_toy] [--skip-large]

Models: the shipped qwen_toy, and a random-weight Qwen3.5-architecture model of ~100 M parameters (12
layers LLLA, hidden 768, vocabulary 32000) reading the same prompts (its localization, mostly ablations at
every position, is timed on the toy only).

Token-layers: one token through one decoder layer, counted by hooks on every decoder layer. The logical
minimum: each prompt batch once through every layer, plus, per edited forward, the tokens from its first
edited position on, through the layers from its first edited layer to the last one it reads.

The floor: what a hand-written experiment does per transplant, two full forwards with one hook each (the
donor's with a capture, the host's with a patch), times the experiment's transplants.
"""

import argparse
import time

import torch

from hybridlens.experiments import circuit, scale
from hybridlens.interventions.engine import Runner
from hybridlens.interventions.on_items import item_batches
from hybridlens.interventions.patch import run
from hybridlens.models.adapter import HybridModel, load_model, parse_site
from hybridlens.models.toy import build_tokenizer, build_toy_model
from hybridlens.tasks import triples
from hybridlens.tasks.items import turns


class Count:
    """Token-layers computed (decoder-layer hooks) and the logical minimum (from Runner's calls)."""

    def __init__(self, hm):
        self.hm, self.computed, self.minimum = hm, 0, 0
        self._hooks = [layer.register_forward_pre_hook(self._layer, with_kwargs=True) for layer in hm.layers]
        self._init, self._forward = Runner.__init__, Runner.forward
        count = self

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

        Runner.__init__, Runner.forward = init, forward

    def _layer(self, module, args, kwargs):
        hidden = args[0] if args else kwargs["hidden_states"]
        self.computed += hidden.shape[0] * hidden.shape[1]

    def reset(self):
        self.computed = self.minimum = 0

    def close(self):
        Runner.__init__, Runner.forward = self._init, self._forward
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


def measure(name, hm, args, localization=True):
    items = triples(hm, 1, args.items, args.pairs, "chat")
    # One batch of one token length, so that every forward is a full batch.
    items = max(item_batches(hm, items, lambda t: (t.host, t.donor, t.other), len(items)), key=len)
    count = Count(hm)
    found, _, reader_rows = circuit.localize(hm, [t.host for t in items])
    main = found["reader"]
    readers = scale.readers(reader_rows, main, 0.0)
    sets = scale.group_sets(hm.groups, max(hm.attention_layers()))
    control = circuit.control_group(hm, found["address"]["group"])
    experiments = {
        "circuit localization": lambda: circuit.localize(hm, [t.host for t in items]),
        "circuit transplants": lambda: circuit.transplant(hm, items, found, control),
        "scale sweep": lambda: scale.sweep(hm, items, readers, main, len(items)),
    }
    if not localization:
        del experiments["circuit localization"]
    # Transplants each experiment runs, for the floor: circuit (query: every position set of the same-
    # dictionary donor, final for the two others; state: three donors) per block; scale: every group set.
    blocks = 1 + (control is not None)
    floors = {"circuit transplants": blocks * (len(circuit.POSITION_SETS) + 2 + 3), "scale sweep": len(sets)}
    pair = floor_pair(hm, items, circuit.mixer_sites(hm.groups[found["address"]["group"] or 0]))
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
            result[minimal] = (count.computed, count.minimum, seconds)
        Runner.minimal = True
        (before, _, s_before), (after, minimum, s_after) = result[False], result[True]
        floor = pair * floors[label] if label in floors else float("nan")
        values = [f"{before / 1e6:.3f}M", f"{after / 1e6:.3f}M", f"{minimum / 1e6:.3f}M", f"{after / minimum:.2f}"]
        values += [f"{s_before:.2f}", f"{s_after:.2f}", f"{s_after / s_before:.2f}", f"{floor:.2f}"]
        values += [f"{floor / s_after:.2f}"]
        print(f"{label:22s}" + "".join(f"{v:>14s}" for v in values))
    count.close()


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
