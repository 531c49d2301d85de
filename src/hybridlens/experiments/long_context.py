"""Long-context recall from scratch: GDN, fixed chunk mixing and HLA models of one size, one suite.

Symbols   the token ids a suite uses (specials, keys, values, filler), so the suite runs in any vocabulary
SUITE     RULER-style tasks generated here: needle in a haystack (single, multi-key, multi-value,
          multi-query), variable tracking, multi-query associative recall (MQAR)
make_item one item: token ids and the (position, token) pairs the model must predict there
build     an all-linear Qwen3.5-architecture model whose mixers are GDN, fixed mixing or HLA
          (a pretrained model is converted with models.hla.to_hla and fine-tuned with the same train)
build_from_spec, save_model, load_shipped
          the same from the hla settings a rule passes; weights to safetensors and back, a shipped
          model's manifest and training spec checked against what the config asks for
train     next-token training on answers only, plus HLA's regularizers
evaluate  teacher-forced answer accuracy per task and length
router_gates
          the gate each chunk-mixing layer opens for the chunk holding the asked pair, against the others
adapt     a pretrained Qwen3.5 model converted to HLA and fine-tuned, evaluated before and after, beside a
          control fine-tuned alike with its GDN mixers (and LongBench-V2 items when given)
"""

import copy
import json
import logging
import random
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.nn.functional as F

from hybridlens.models.hla import HLALayer, HLAMixer, to_hla
from hybridlens.models.source import SourceError, check_manifest
from hybridlens.models.toy import build_toy_model

SUITE = ("niah_single", "niah_multikey", "niah_multivalue", "niah_multiquery", "variable_tracking", "mqar")
TRAIN_TASKS = ("mqar", "niah_single", "niah_multikey")


@dataclass(frozen=True)
class Symbols:
    pad: int
    assign: int
    query: int
    keys: tuple[int, ...]
    values: tuple[int, ...]
    filler: tuple[int, ...]

    @classmethod
    def synthetic(cls, n_keys=32, n_values=32, n_filler=32):
        start = 3
        keys = tuple(range(start, start + n_keys))
        values = tuple(range(keys[-1] + 1, keys[-1] + 1 + n_values))
        filler = tuple(range(values[-1] + 1, values[-1] + 1 + n_filler))
        return cls(0, 1, 2, keys, values, filler)

    @classmethod
    def for_model(cls, hm):
        """The suite in a pretrained model's vocabulary: task words that are one token after a space."""
        from hybridlens.tasks.vocab import KEYS, NEUTRAL, VALUES

        ids = {w: hm.token_id(w) for w in hm.single_token_words([*KEYS, *VALUES, *NEUTRAL])}
        keys = tuple(ids[w] for w in KEYS if w in ids)
        values = tuple(ids[w] for w in VALUES if w in ids)
        filler = tuple(ids[w] for w in NEUTRAL if w in ids and w.isalpha())
        if min(len(keys), len(values)) < 8 or not filler or "=" not in ids or "?" not in ids:
            raise ValueError(f"tokenizer of {hm.source}: too few single-token task words for the long-context suite")
        pad = hm.tokenizer.pad_token_id if hm.tokenizer.pad_token_id is not None else hm.tokenizer.eos_token_id
        return cls(pad, ids["="], ids["?"], keys, values, filler)

    @property
    def vocab_size(self):
        return max(self.filler + self.values + self.keys) + 1


def _haystack(rng, sym, length, needles):
    """Filler of `length` tokens with the needles (token lists) at increasing random depths."""
    body = length - sum(len(n) for n in needles)
    if body < 0:
        raise ValueError(
            f"length {length} is too short for {len(needles)} needles; use longer contexts (hla.train_length >= 32)"
        )
    cuts = sorted(rng.randrange(body + 1) for _ in needles)
    out, prev = [], 0
    for cut, needle in zip(cuts, needles, strict=True):
        out += [rng.choice(sym.filler) for _ in range(cut - prev)] + list(needle)
        prev = cut
    return out + [rng.choice(sym.filler) for _ in range(body - prev)]


def make_item(task: str, rng: random.Random, length: int, sym: Symbols):
    """(ids, targets): ids of about `length` tokens; targets = [(position, token)] predicted from ids[:position]."""
    keys = rng.sample(sym.keys, 8)
    values = [rng.choice(sym.values) for _ in keys]
    question = []
    if task == "mqar":
        n = max(2, min(len(sym.keys), length // 6))
        keys = rng.sample(sym.keys, n)
        values = [rng.choice(sym.values) for _ in keys]
        context = [t for k, v in zip(keys, values, strict=True) for t in (k, sym.assign, v)]
        asked = rng.sample(range(n), min(n, max(1, (length - len(context)) // 4)))
        question = [(keys[i], [values[i]]) for i in asked]
        ids = context + [rng.choice(sym.filler) for _ in range(length - len(context) - 4 * len(question))]
    elif task.startswith("niah"):
        n = 1 if task == "niah_single" else 4
        vals = [[v] for v in values[:n]]
        if task == "niah_multivalue":
            vals = [[values[0], rng.choice([v for v in sym.values if v != values[0]])]]
            n = 1
        needles = [[keys[i], sym.assign, *vals[i]] for i in range(n)]
        asked = rng.sample(range(n), 2 if task == "niah_multiquery" else 1)
        question = [(keys[i], vals[i]) for i in asked]
        size = sum(3 + len(v) for _, v in question)
        ids = _haystack(rng, sym, length - size, needles)
    elif task == "variable_tracking":
        chain = keys[:3]  # x0 = v; x1 = x0; x2 = x1
        needles = [[chain[0], sym.assign, values[0]]] + [[chain[i], sym.assign, chain[i - 1]] for i in (1, 2)]
        question = [(chain[2], [values[0]])]
        ids = _haystack(rng, sym, length - 4, needles)
    else:
        raise ValueError(f"unknown long-context task {task!r}; use one of {SUITE}")
    targets = []
    for key, answer in question:
        ids += [sym.query, key, sym.assign]
        for token in answer:
            targets.append((len(ids), token))
            ids.append(token)
    return ids, targets


def batch(task, rng, n, length, sym, device="cpu"):
    items = [make_item(task, rng, length, sym) for _ in range(n)]
    width = max(len(ids) for ids, _ in items)
    ids = torch.full((n, width), sym.pad, dtype=torch.long)
    labels = torch.full((n, width), -100, dtype=torch.long)
    for b, (seq, targets) in enumerate(items):
        ids[b, : len(seq)] = torch.tensor(seq)
        for pos, token in targets:
            labels[b, pos] = token
    return ids.to(device), labels.to(device)


# Training keys added after models were shipped, with the value every model shipped before them was trained with.
SPEC_DEFAULTS = {"router": "hybridlens", "gate_bias": 0.0, "reg_warmup": 0.0}


def build(
    mode: str,
    sym: Symbols,
    hidden: int,
    layers: int,
    heads: int,
    seed: int,
    chunk: int,
    bucket: int,
    router: str = "paper",
    gate_bias: float = 0.0,
):
    """An all-linear Qwen3.5-architecture model; `mode` gdn keeps transformers' GDN mixers. `gate_bias` is the
    chunk-mixing gates' initial bias: 0 starts them at 0.5, a large one starts the model as GDN."""
    model = build_toy_model("qwen3_5", sym.vocab_size, hidden, "L" * layers, heads=heads, seed=seed)
    if mode != "gdn":
        to_hla(model, mode, chunk=chunk, bucket=bucket, gate_bias=gate_bias, router=router)
    return model


def build_from_spec(spec: dict, device: str = "cpu"):
    """The untrained model and symbols of one hla training spec (mode, seed and the shape keys)."""
    spec = SPEC_DEFAULTS | spec
    sym = Symbols.synthetic(spec["symbols"], spec["symbols"], 16)
    args = (spec["hidden"], spec["layers"], spec["heads"], spec["seed"], spec["chunk"], spec["bucket"])
    return build(spec["mode"], sym, *args, router=spec["router"], gate_bias=spec["gate_bias"]).to(device), sym


def save_model(model, path):
    """Weights only: the model is rebuilt from its spec, which ships beside them as training.json."""
    import safetensors.torch

    safetensors.torch.save_model(model, str(path))


def load_shipped(directory, spec: dict, device: str = "cpu"):
    """A trained from-scratch model from `directory`, refused in one line if its files do not match its
    manifest or it was trained from another spec than the config's."""
    import safetensors.torch

    directory = Path(directory)
    check_manifest(directory)
    trained = directory / "training.json"
    if trained.is_file():
        shipped = SPEC_DEFAULTS | json.loads(trained.read_text())
        differ = {k: (shipped.get(k), v) for k, v in spec.items() if shipped.get(k) != v}
        if differ:
            said = ", ".join(f"{k}={a!r} (config: {b!r})" for k, (a, b) in sorted(differ.items()))
            raise SourceError(
                f"{directory} was trained with {said}; retrain it with make zoo, or set hla.source: null "
                "to train with these settings in the run"
            )
    model, sym = build_from_spec(spec, device)
    safetensors.torch.load_model(model, str(directory / "model.safetensors"), device=device)
    return model.eval(), sym


def _loss(model, ids, labels, reg: float):
    logits = model(ids, use_cache=False).logits[:, :-1]
    loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), labels[:, 1:].reshape(-1), ignore_index=-100)
    penalties = [m.penalty() for m in model.modules() if isinstance(m, HLALayer) and m.aux]
    return loss + reg * sum(penalties) if penalties else loss, loss


def train(
    model,
    sym: Symbols,
    length: int,
    steps: int,
    batch_size: int,
    lr: float,
    seed: int,
    reg: float = 0.01,
    reg_warmup: float = 0.0,
):
    """Answer-only next-token training on a seeded mixture of TRAIN_TASKS; returns the loss curve.

    HLA's regularizers join after the first `reg_warmup` fraction of the steps, because with them from the
    first step some from-scratch seeds never leave their plateau (docs/hla.md)."""
    rng = random.Random(seed)
    device = next(model.parameters()).device
    opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.0)
    model.train()
    curve = []
    for step in range(steps):
        ids, labels = batch(TRAIN_TASKS[step % len(TRAIN_TASKS)], rng, batch_size, length, sym, device)
        total, loss = _loss(model, ids, labels, reg if step >= reg_warmup * steps else 0.0)
        opt.zero_grad()
        total.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        curve.append({"step": step, "task": TRAIN_TASKS[step % len(TRAIN_TASKS)], "loss": loss.item()})
    model.eval()
    return curve


@torch.no_grad()
def evaluate(model, sym: Symbols, lengths, n: int, seed: int, tasks=SUITE, batch_size: int = 16):
    """Rows of (task, length, n answers, correct) with teacher forcing."""
    rows = []
    device = next(model.parameters()).device
    for task in tasks:
        for length in lengths:
            rng = random.Random(seed * 1_000_003 + SUITE.index(task) * 10_007 + length)
            correct = total = 0
            for start in range(0, n, batch_size):
                ids, labels = batch(task, rng, min(batch_size, n - start), length, sym, device)
                pred = model(ids, use_cache=False).logits[:, :-1].argmax(-1)
                mask = labels[:, 1:] != -100
                correct += int((pred[mask] == labels[:, 1:][mask]).sum())
                total += int(mask.sum())
            rows.append({"task": task, "length": length, "answers": total, "correct": correct})
    return rows


@torch.no_grad()
def router_gates(model, sym: Symbols, lengths, n: int, seed: int):
    """Rows (layer, length, chunk, gate, count): the mean gate each chunk-mixing layer gives, at MQAR's answer
    positions, to the earlier chunk holding the asked pair ("asked"), to chunks holding only other pairs or
    questions ("pairs") and to filler-only chunks. A router that reads per query opens the first and shuts the
    rest; a GDN model has no gates (no rows)."""
    mixers = [m for m in model.modules() if isinstance(m, HLAMixer)]
    device = next(model.parameters()).device
    chunk = mixers[0].chunk if mixers else None
    sums = {}
    for length in lengths if mixers else ():
        rng = random.Random(seed * 1_000_003 + length)
        for _ in range(n):
            ids, targets = make_item("mqar", rng, length, sym)
            model(torch.tensor([ids], device=device), use_cache=False)
            holds_key = [any(t in sym.keys for t in ids[c : c + chunk]) for c in range(0, len(ids), chunk)]
            for pos, _ in targets:
                t = pos - 1  # the "=" after the asked key: its output predicts the answer
                asked = ids.index(ids[t - 1]) // chunk  # the key's first occurrence is its pair in the context
                for c in range(t // chunk):
                    kind = "asked" if c == asked else "pairs" if holds_key[c] else "filler"
                    for layer, mixer in enumerate(mixers):
                        key = (layer, length, kind)
                        total, count = sums.get(key, (0.0, 0))
                        sums[key] = (total + mixer.last_gates[0, :, t, c].mean().item(), count + 1)
    return [
        {"layer": layer, "length": length, "chunk": kind, "gate": total / count, "count": count}
        for (layer, length, kind), (total, count) in sorted(sums.items())
    ]


def adapt(hm, settings: dict, longbench_items=(), max_tokens: int = 32000, log=None):
    """Returns (suite rows per phase, fine-tuning curve, LongBench-V2 rows per phase, RULER rows per phase).

    Phases: before; gdn_finetuned and fixed_finetuned (the controls: GDN, and fixed chunk mixing, fine-tuned
    alike); converted (HLA before fine-tuning); after (HLA fine-tuned). `settings` is the config's hla section;
    its adapt.ruler lengths (tokens of the model's own tokenizer) add RULER's tasks to every phase.
    """
    from hybridlens.models.hla import to_hla
    from hybridlens.tasks import longbench, ruler

    log = log or logging.getLogger("hybridlens")
    a = settings["adapt"]
    asked = a.get("ruler", {})
    # RULER's prompts first: a task name or a length that cannot hold one fails before any training.
    samples = [
        s
        for task in asked.get("tasks") or sorted(ruler.TASKS)
        for length in asked.get("lengths", [])
        for s in ruler.make_samples(task, hm.tokenizer, length, asked.get("n", 16), seed=3000)
    ]
    sym = Symbols.for_model(hm)
    lengths = [a["length"] * m for m in settings["length_multipliers"]]
    rows, lb_rows, ruler_rows = [], [], []
    convert = {"chunk": settings["chunk"], "bucket": settings["bucket"], "router": settings["router"]}

    def measure(model, phase):
        rows.extend(r | {"phase": phase} for r in evaluate(model, sym, lengths, a["eval_n"], seed=2000))
        if longbench_items:
            scored = longbench.score(model, hm.tokenizer, longbench_items, max_tokens)
            lb_rows.extend(r | {"phase": phase} for r in scored)
            log.info("LongBench-V2 %s: %s", phase, longbench.summary(scored))
        if samples:
            scored = ruler.evaluate(model, hm.tokenizer, samples)
            ruler_rows.extend(r | {"phase": phase} for r in scored)
            log.info(
                "RULER %s: mean score %.3f over %d prompts",
                phase,
                sum(r["score"] for r in scored) / len(scored),
                len(scored),
            )

    def finetune(model, reg=0.0):
        return train(model, sym, a["length"], a["steps"], a["batch_size"], a["lr"], seed=0, reg=reg)

    measure(hm.model, "before")
    control = copy.deepcopy(hm.model)
    finetune(control)
    measure(control, "gdn_finetuned")
    control = to_hla(copy.deepcopy(hm.model), "fixed", gate_bias=a["gate_bias"], **convert)
    finetune(control)
    measure(control, "fixed_finetuned")
    del control
    to_hla(hm.model, "hla", gate_bias=a["gate_bias"], **convert)
    measure(hm.model, "converted")
    curve = finetune(hm.model, settings["reg"])
    measure(hm.model, "after")
    log.info("fine-tuned %d steps at length %d with the %s router", a["steps"], a["length"], settings["router"])
    return rows, curve, lb_rows, ruler_rows
