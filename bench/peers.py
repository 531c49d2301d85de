"""hybridlens beside nnsight and TransformerLens (TransformerBridge) on the same random-weight Qwen3.5-shape
models, in one process, in interleaved rounds. Prints, per workload and model, each peer's time as a multiple
of hybridlens's (median over rounds; above 1: hybridlens is faster) and its largest difference from
hybridlens's result; a workload a peer cannot express is said so. Not a test.

    pip install -e ".[bench]"    # nnsight and transformer-lens, pinned
    python bench/peers.py [--rounds 3 --pairs 100 --prompts 16 --tokens 64]

Models: the shipped toy zoo/qwen_toy and a ~100 M-parameter Qwen3.5 shape (12 layers, 3 Gated DeltaNet : 1
attention, width 768), random weights, each loaded once per tool from the same files.
Workloads, each on the same token ids for every tool, under torch.no_grad, every tool computing the logits of
the last position only (logits_to_keep=1), as hybridlens does:
  capture     every layer's residual (layer output) and mixer output, all positions, kept in memory
  capture+disk  the same, then written to one file (torch.save, the same writer for every tool)
  transplant  the Address block's (group 0's) mixer writes at the final position, donor -> host, --pairs pairs
  state       prefill, read every recurrent state, continue one token from states swapped between prompts
"""

import argparse
import statistics
import tempfile
import time
import warnings
from pathlib import Path

import torch

from hybridlens.interventions.cache import prefill
from hybridlens.interventions.engine import transplant_ids
from hybridlens.interventions.patch import run
from hybridlens.models.adapter import load_model
from hybridlens.models.toy import build_tokenizer, build_toy_model
from hybridlens.store import save_checkpoint


def big_model(directory: Path) -> Path:
    """A ~100 M-parameter Qwen3.5 shape with random weights, saved as a checkpoint."""
    model = build_toy_model("qwen3_5", 32000, 768, "LLLA" * 3, heads=12, seed=0)
    save_checkpoint(directory, model, build_tokenizer(), safe_serialization=True)
    return directory


class Tool:
    """One library's way of doing each workload on its own copy of the model."""

    def __init__(self, name, path):
        self.name, self.hm = name, load_model(path, attn_implementation="eager")
        self.mixers = [self.hm.mixer(i) for i in range(self.hm.n_layers)]
        self.names = {m: n for n, m in self.hm.model.named_modules()}


class Hybridlens(Tool):
    def capture(self, ids):
        sites = [f"layers.{i}.{s}" for i in range(self.hm.n_layers) for s in ("mixer_out", "layer_out")]
        return run(self.hm, ids, capture=sites, logits_to_keep=1).captured

    def transplant(self, donors, hosts, layers):
        at, sites = [[donors.shape[1] - 1]] * len(donors), [f"layers.{i}.mixer_out" for i in layers]
        return transplant_ids(self.hm, donors.tolist(), hosts.tolist(), sites, at, at)

    def state(self, ids, next_ids):
        _, cache = prefill(self.hm, ids)
        for i in self.hm.linear_layers():
            state = self.hm.read_cache(cache, f"layers.{i}.state")
            self.hm.write_cache(cache, f"layers.{i}.state", state.roll(1, 0).clone())
        return self.hm.model(next_ids, past_key_values=cache, use_cache=True).logits[:, -1]


class NNsight(Tool):
    def __init__(self, name, path):
        import nnsight

        super().__init__(name, path)
        self.nn, self.save = nnsight.NNsight(self.hm.model), nnsight.save

    def _module(self, module):
        envoy = self.nn
        for part in self.names[module].split("."):
            envoy = envoy[int(part)] if part.isdigit() else getattr(envoy, part)
        return envoy

    def capture(self, ids):
        mixers = [self._module(m) for m in self.mixers]
        layers = [self._module(layer) for layer in self.hm.layers]
        with self.nn.trace(ids, logits_to_keep=1):
            out = self.save({})
            for i, (mixer, layer) in enumerate(zip(mixers, layers, strict=True)):
                m = mixer.output
                out[f"layers.{i}.mixer_out"] = m[0] if isinstance(m, tuple) else m
                out[f"layers.{i}.layer_out"] = layer.output
        return out

    def transplant(self, donors, hosts, layers):
        mixers = [self._module(self.mixers[i]) for i in layers]
        with self.nn.trace(donors, logits_to_keep=1):
            writes = self.save([m.output[:, -1].clone() for m in mixers])
        with self.nn.trace(hosts, logits_to_keep=1):
            for mixer, write in zip(mixers, writes, strict=True):
                mixer.output[:, -1] = write
            logits = self.nn.output.logits[:, -1].save()
        return logits

    def state(self, ids, next_ids):
        cache = self.hm.new_cache()
        with self.nn.trace(ids, past_key_values=cache, use_cache=True, logits_to_keep=1):
            pass
        for i in self.hm.linear_layers():  # the transformers cache, edited by hand: no peer has a state API
            states = cache.layers[i].recurrent_states
            states[0] = states[0].roll(1, 0).clone()
        with self.nn.trace(next_ids, past_key_values=cache, use_cache=True):
            logits = self.nn.output.logits[:, -1].save()
        return logits


class TransformerLens(Tool):
    def __init__(self, name, path):
        from transformer_lens.model_bridge import TransformerBridge

        super().__init__(name, path)
        self.bridge = TransformerBridge.boot_transformers(
            str(path), hf_model=self.hm.model, tokenizer=self.hm.tokenizer, device="cpu"
        )
        self.kinds = self.hm.kinds

    def _mixer_hook(self, i):
        return f"blocks.{i}.{'linear_attn' if self.kinds[i] == 'linear' else 'attn'}.hook_out"

    def capture(self, ids):
        names = {self._mixer_hook(i): f"layers.{i}.mixer_out" for i in range(self.hm.n_layers)}
        names |= {f"blocks.{i}.hook_out": f"layers.{i}.layer_out" for i in range(self.hm.n_layers)}
        _, cache = self.bridge.run_with_cache(ids, names_filter=list(names), logits_to_keep=1)
        return {ours: cache[theirs] for theirs, ours in names.items()}

    def transplant(self, donors, hosts, layers):
        hooks = [self._mixer_hook(i) for i in layers]
        _, cache = self.bridge.run_with_cache(donors, names_filter=hooks, logits_to_keep=1)

        def write(name):
            def hook(value, hook):
                value[:, -1] = cache[name][:, -1]
                return value

            return hook

        logits = self.bridge.run_with_hooks(hosts, fwd_hooks=[(h, write(h)) for h in hooks], logits_to_keep=1)
        return logits[:, -1]

    def state(self, ids, next_ids):
        cache = self.hm.new_cache()
        self.bridge(ids, past_key_values=cache, use_cache=True, logits_to_keep=1)
        for i in self.hm.linear_layers():
            states = cache.layers[i].recurrent_states
            if states is None or states[0] is None:
                raise RuntimeError("its forward leaves the transformers cache it is given empty: no state to edit")
            states[0] = states[0].roll(1, 0).clone()
        return self.bridge(next_ids, past_key_values=cache, use_cache=True)[:, -1]


def largest_difference(ours, theirs) -> float:
    if isinstance(ours, dict):
        return max(largest_difference(ours[k], theirs[k]) for k in ours)
    return (ours.float() - theirs.float()).abs().max().item()


def workloads(args, hm, scratch: Path):
    g = torch.Generator().manual_seed(0)
    vocab = hm.model.config.vocab_size
    ids = torch.randint(vocab, (args.prompts, args.tokens), generator=g)
    donors, hosts = (torch.randint(vocab, (args.pairs, args.tokens), generator=g) for _ in range(2))
    next_ids = torch.randint(vocab, (args.prompts, 1), generator=g)
    layers = hm.groups[0]

    def batched(tool, fn, *tensors):
        return torch.cat([fn(*(t[i : i + args.batch] for t in tensors)) for i in range(0, len(tensors[0]), args.batch)])

    def to_disk(tool):
        captured = tool.capture(ids)
        torch.save({k: v.contiguous() for k, v in captured.items()}, scratch / f"{tool.name}.pt")
        return captured

    return {
        "capture": lambda tool: tool.capture(ids),
        "capture+disk": to_disk,
        "transplant": lambda tool: batched(tool, lambda d, h: tool.transplant(d, h, layers), donors, hosts),
        "state": lambda tool: tool.state(ids, next_ids),
    }


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--pairs", type=int, default=100)
    ap.add_argument("--prompts", type=int, default=16)
    ap.add_argument("--tokens", type=int, default=64)
    ap.add_argument("--batch", type=int, default=25, help="pairs per transplant forward")
    ap.add_argument("--models", nargs="+", default=["qwen_toy", "qwen3_5_100m"])
    args = ap.parse_args()
    torch.manual_seed(0)
    warnings.filterwarnings("ignore")
    with tempfile.TemporaryDirectory() as tmp:
        scratch = Path(tmp)
        models = {"qwen_toy": lambda: Path("zoo/qwen_toy"), "qwen3_5_100m": lambda: big_model(scratch / "qwen3_5_100m")}
        models = {name: models[name]() for name in args.models}
        print("workload       model           peer             time / hybridlens   largest |difference|")
        for model, path in models.items():
            tools = [Hybridlens("hybridlens", path), NNsight("nnsight", path), TransformerLens("transformerlens", path)]
            times = {}
            for workload, fn in workloads(args, tools[0].hm, scratch).items():
                results = {}
                for tool in tools:  # one untimed call each: first-call costs are nobody's steady state
                    try:
                        with torch.no_grad():
                            fn(tool)
                    except Exception:
                        pass
                for _ in range(args.rounds):  # interleaved: every tool once per round
                    for tool in tools:
                        start = time.perf_counter()
                        try:
                            with torch.no_grad():
                                results[tool.name] = fn(tool)
                        except Exception as err:  # a peer that cannot express the workload says why
                            results[tool.name] = err
                        times.setdefault((workload, tool.name), []).append(time.perf_counter() - start)
                ours = results["hybridlens"]
                base = statistics.median(times[(workload, "hybridlens")])
                for tool in tools[1:]:
                    got = results[tool.name]
                    if isinstance(got, Exception):
                        print(f"{workload:14} {model:15} {tool.name:16} cannot express it: {type(got).__name__}: {got}")
                        continue
                    ratio = statistics.median(times[(workload, tool.name)]) / base
                    error = largest_difference(ours, got)
                    print(f"{workload:14} {model:15} {tool.name:16} {ratio:8.2f}x          {error:.2e}")


if __name__ == "__main__":
    main()
