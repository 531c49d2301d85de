"""Encode–Address circuit: localization, query transplant and state transplant.

Items are (donor, host, other) triples over one dictionary (tasks.items.Triple; tasks.triples_of makes them):
the donor asks key A, the host asks key B of the same dictionary, and `other` asks A in a different
dictionary (A sits at another entry with another value), so a transplant from it redirects only if what
moves is the *identity* of A, not a position.

localize       group ablation (zero / mean), reader search, Encode and Address blocks, with evidence
localization_row  one row of the localization table: what localize found in a circuit (circuit.json)
reference_task      the dictionary task of a config section's reference prompt set
localize_reference  localize on a config section's reference prompt set
transplant     query transplant (Address-block writes at a position set) and state transplant, per item
transplant_all the same over batches of one token length, with the control group chosen
task_transplant  query and state transplants on any task's items with a donor partner (a user's JSONL task)
summarize_task   its rates and mean D per condition, with bootstrap intervals
VALIDATIONS    what transplant() checks on every batch: identity transplants, shortcut against full forward
summarize      rates and means with bootstrap intervals, pooled over seeds
"""

import copy
import random

import numpy as np
import torch

from hybridlens.interventions.cache import greedy
from hybridlens.interventions.engine import Edit, Runner, attention_to, mixer_sites
from hybridlens.interventions.on_items import answer_tokens, encode, item_batches
from hybridlens.interventions.patch import gather
from hybridlens.stats import bootstrap
from hybridlens.tasks import items_of
from hybridlens.tasks import settings as task_settings
from hybridlens.tasks.items import POSITION_SETS, Triple, answer_index, choice_words
from hybridlens.validation import Check

COLLAPSE = 0.5  # "collapses": accuracy or attention falls below this fraction of the intact model's


TRIPLE = ("host", "donor", "other")


# --- localization ----------------------------------------------------------------------------------------------
def reference_task(settings: dict) -> dict:
    """The dictionary task of the reference prompt set a circuit or scale section names (localize_seed,
    localize_n, n_pairs, format, framing)."""
    reference = {k: settings[k] for k in ("n_pairs", "format")} | {"framing": settings.get("framing", "auto")}
    reference |= {"seed": settings["localize_seed"], "n": settings["localize_n"]}
    return task_settings("reference", reference)


def localize_reference(hm, settings: dict):
    """localize() on the reference prompt set a circuit or scale section names (localize_seed, localize_n);
    the circuit's "task" records the prompts' format and framing and the single-token words kept."""
    prompts, counts = items_of(hm, reference_task(settings))
    circuit, ablation, readers = localize(hm, prompts, search=settings.get("reader", "any"))
    # the words this tokenizer keeps as single tokens, and how the prompts were rendered
    circuit["task"] = {"format": settings["format"], "framing": prompts[0].framing, **counts}
    return circuit, ablation, readers


def localize(hm, prompts, distractor_seed: int = 0, search: str = "any"):
    """Group ablations, reader ranking and the Encode / Address choice, with every number behind it.

    search="last" takes the reader among the last attention layer's heads: in a chain of readers the
    ranking by attention to either table's entry can pick the first one, which does not give the answer.
    """
    if search not in ("any", "last"):
        raise ValueError(f"unknown reader search {search!r}; use 'any' or 'last'")
    batch = encode(hm, prompts)
    run = Runner(hm, batch.ids, batch.choices)
    rng = random.Random(distractor_seed)
    target = [answer_index(p) for p in prompts]
    distractor = [
        rng.choice([i for i in range(len(choice_words(p))) if i != t]) for p, t in zip(prompts, target, strict=True)
    ]
    target_pos = batch.entry_positions(target)

    def measure(logits):
        acc = run.correct(logits, target).float()
        d = run.value_logits(logits, target) - run.value_logits(logits, distractor)
        return acc, d

    # One intact forward gives the baseline and every group's writes at all positions.
    sites = [s for g in hm.groups for s in mixer_sites(g)]
    logits, attn, captured = run.forward(capture=sites, attention=hm.attention_layers())
    intact_acc, intact_d = measure(logits)
    means = {site: full.mean(dim=(0, 1)) for site, full in captured.items()}  # over prompts and positions

    ablation = []
    for gi, group in enumerate(hm.groups):
        for mode in ("zero", "mean"):
            edits = {
                s: Edit(None, torch.zeros_like if mode == "zero" else lambda t, m=means[s]: m.expand_as(t).clone())
                for s in mixer_sites(group)
            }
            acc, d = measure(run.forward(edits)[0])
            ablation.append(_ablation_row(gi, group, mode, acc, d, intact_acc))

    readers = []
    for layer in hm.attention_layers():
        to_target = attention_to(attn[layer], target_pos)  # [B, H]
        _, n_heads, _ = hm.head_mixer(layer)
        for h in range(n_heads):
            _, d = measure(run.forward(heads_off={layer: [h]})[0])
            readers.append(
                {
                    "layer": layer,
                    "head": h,
                    "attention_to_target": to_target[:, h].mean().item(),
                    "d_drop": (intact_d - d).mean().item(),
                }
            )
    readers.sort(key=lambda r: (-r["attention_to_target"], -r["d_drop"]))
    last = max(hm.attention_layers())
    reader = next(r for r in readers if search == "any" or r["layer"] == last)

    encode_block = _first_collapse(ablation, intact_acc.mean().item())
    address = _address(hm, run, reader, target_pos, attn)
    return (
        {
            "intact": {"accuracy": intact_acc.mean().item(), "d": intact_d.mean().item(), "n": len(prompts)},
            "encode": encode_block,
            "address": address,
            "reader": {"layer": reader["layer"], "head": reader["head"], "evidence": reader},
            "groups": [list(g) for g in hm.groups],
        },
        ablation,
        readers,
    )


def localization_row(circuit: dict) -> dict:
    """The intact model, the Encode and Address groups and the reader of a localized circuit, as one row
    (the Address group is empty where no group before the reader collapses its attention)."""
    address, reader = circuit["address"]["group"], circuit["reader"]
    return {
        "intact_accuracy": circuit["intact"]["accuracy"],
        "n": circuit["intact"]["n"],
        "encode_group": circuit["encode"]["group"],
        "encode_layers": circuit["encode"]["layers"],
        "address_group": "" if address is None else address,
        "address_layers": circuit["address"]["layers"] if address is not None else "",
        "reader_layer": reader["layer"],
        "reader_head": reader["head"],
        "reader_attention": reader["evidence"]["attention_to_target"],
    }


def _ablation_row(gi, group, mode, acc, d, intact_acc):
    lo, hi = bootstrap(acc.cpu().numpy())
    return {
        "group": gi,
        "layers": "-".join(map(str, group)),
        "mode": mode,
        "accuracy": acc.mean().item(),
        "accuracy_lo": lo,
        "accuracy_hi": hi,
        "d": d.mean().item(),
        "relative_accuracy": acc.mean().item() / max(intact_acc.mean().item(), 1e-9),
    }


def _first_collapse(ablation, intact):
    zero = [r for r in ablation if r["mode"] == "zero"]
    collapsed = [r for r in zero if r["accuracy"] < COLLAPSE * intact]
    chosen = collapsed[0] if collapsed else min(zero, key=lambda r: r["accuracy"])
    return {"group": chosen["group"], "layers": chosen["layers"], "collapses": bool(collapsed), "evidence": chosen}


def _address(hm, run, reader, target_pos, attn):
    """The group right before the reader whose final-position write, removed, collapses the reader's attention."""
    intact = attention_to(attn[reader["layer"]], target_pos)[:, reader["head"]].mean().item()
    evidence = []
    for gi, group in enumerate(hm.groups):
        if max(group) >= reader["layer"]:
            continue
        edits = {s: Edit([-1], torch.zeros(len(run.ids), 1, hm.d_model, device=hm.device)) for s in mixer_sites(group)}
        _, a, _ = run.forward(edits, attention=[reader["layer"]], logits=False)
        after = attention_to(a[reader["layer"]], target_pos)[:, reader["head"]].mean().item()
        evidence.append({"group": gi, "layers": "-".join(map(str, group)), "attention": after, "intact": intact})
    if not evidence:
        return {"group": None, "layers": "", "collapses": False, "evidence": []}
    collapsed = [e for e in evidence if e["attention"] < COLLAPSE * intact]
    chosen = collapsed[-1] if collapsed else min(evidence, key=lambda e: e["attention"])
    return {"group": chosen["group"], "layers": chosen["layers"], "collapses": bool(collapsed), "evidence": evidence}


# --- transplants -----------------------------------------------------------------------------------------------
@torch.no_grad()
def transplant(hm, items: list[Triple], circuit: dict, control_group: int | None, checks=None):
    """Per-item rows for the query transplant (every position set) and the state transplant, with controls.

    `checks` (a dict, filled in place) receives the validations of this batch (VALIDATIONS): each identity
    transplant (donor = host) against the intact host computed the same way, and the engine's shortcut
    forward of the intact host against its full forward.
    """
    encoded = {name: encode(hm, [getattr(t, name) for t in items], choices=name == "host") for name in TRIPLE}
    donors, others = (Runner(hm, encoded[n].ids) for n in ("donor", "other"))
    # The host's forwards edit every position set: its base pass leaves a prefix where each begins.
    sets = [encoded["host"].positions(part) for part in POSITION_SETS]
    hosts = Runner(hm, encoded["host"].ids, encoded["host"].choices, at=sets)
    reader = circuit["reader"]
    a_entry = [answer_index(t.donor) for t in items]
    b_entry = [answer_index(t.host) for t in items]
    a_pos, b_pos = encoded["host"].entry_positions(a_entry), encoded["host"].entry_positions(b_entry)
    blocks = {"address": circuit["address"]["group"]}
    if control_group is not None:
        blocks["control_group"] = control_group
    rows = []
    checks = {} if checks is None else checks
    dtype = str(hm.model.dtype).removeprefix("torch.")
    for name, (a, b, _) in VALIDATIONS.items():
        checks.setdefault(name, Check(name, a, b, dtype))

    def record(kind, block, donor, positions, logits, attn):
        la, lb = hosts.value_logits(logits, a_entry), hosts.value_logits(logits, b_entry)
        top = logits.argmax(-1)
        ra = attention_to(attn[reader["layer"]], a_pos)[:, reader["head"]] if attn else torch.full_like(la, np.nan)
        rb = attention_to(attn[reader["layer"]], b_pos)[:, reader["head"]] if attn else torch.full_like(la, np.nan)
        for i, t in enumerate(items):
            rows.append(
                {
                    "seed": t.seed,
                    "item": t.index,
                    "kind": kind,
                    "block": block,
                    "donor": donor,
                    "positions": positions,
                    "answers_a": int(top[i] == hosts.choices[i, a_entry[i]]),
                    "answers_b": int(top[i] == hosts.choices[i, b_entry[i]]),
                    "d_ab": (la[i] - lb[i]).item(),
                    "attn_a": ra[i].item(),
                    "attn_b": rb[i].item(),
                }
            )

    blocks = {name: gi for name, gi in blocks.items() if gi is not None}
    sites = [s for gi in blocks.values() for s in mixer_sites(hm.groups[gi])]
    final = hosts.ids.shape[1] - 1
    donor_runs = {"same_dict": donors, "other_dict": others, "identity": hosts}
    donor_items = {"same_dict": encoded["donor"], "other_dict": encoded["other"], "identity": encoded["host"]}
    # One pass per donor serves every block and position set and leaves the prefix every state transplant
    # continues (it runs to the logits for that).
    writes = {name: donor_runs[name].forward(capture=sites, capture_at=None)[2] for name in ("same_dict", "other_dict")}
    # The identity donor's writes come from the intact forward itself, so that patching them back runs the
    # same computation (prefix, continuation, attention implementation) and must give the same bits.
    read = [reader["layer"]]
    logits, attn, own = hosts.forward(attention=read, capture=sites, capture_at=encoded["host"].positions("final"))
    record("none", "", "", "", logits, attn)
    checks["shortcut_path"].update(logits, Runner(hm, hosts.ids, minimal=False).forward(attention=read)[0])
    state_intact = _state_transplant(hm, hosts.prefix(final), hosts.prefix(final), hosts.ids[:, -1:], ())
    for block, gi in blocks.items():
        for donor_name, donor in donor_runs.items():
            for part in POSITION_SETS if donor_name == "same_dict" else ("final",):
                host_at, donor_at = encoded["host"].positions(part), donor_items[donor_name].positions(part)
                if any(len(h) != len(d) for h, d in zip(host_at, donor_at, strict=True)):
                    continue  # a position set of another length cannot be transplanted one to one
                edits = {
                    s: Edit(host_at, own[s] if donor is hosts else gather(writes[donor_name][s], donor.index(donor_at)))
                    for s in mixer_sites(hm.groups[gi])
                }
                edited, attn, _ = hosts.forward(edits, attention=read)
                record("query", block, donor_name, part, edited, attn)
                if donor_name == "identity":
                    checks["identity_query"].update(edited, logits)
            edited = _state_transplant(hm, donor.prefix(final), hosts.prefix(final), hosts.ids[:, -1:], hm.groups[gi])
            record("state", block, donor_name, "final", edited, None)
            if donor_name == "identity":
                checks["identity_state"].update(edited, state_intact)
    return rows


# The validations transplant() measures: name -> (the computation, its reference, the config key of its
# tolerance in ulps). The identity transplants run the very computation of their reference (bit-identical);
# the shortcut differs from the full forward in the order of its sums only.
VALIDATIONS = {
    "identity_query": (
        "host with its own Address-block writes patched in at the final position",
        "intact host (same prefix continuation, eager attention)",
        "identity_ulps",
    ),
    "identity_state": (
        "host continued from its prefix with its own block states copied in",
        "host continued from its prefix",
        "identity_ulps",
    ),
    "shortcut_path": (
        "intact host, engine shortcut (shared prefix, continuation)",
        "intact host, full forward from the first token",
        "path_ulps",
    ),
}


def _state_transplant(hm, donor_cache, host_cache, final_ids, group):
    """The host's final token after the group's recurrent and conv states were copied in from the donor."""
    cache = copy.deepcopy(host_cache)
    for layer in group:
        for name in hm.state_sites:
            site = f"layers.{layer}.{name}"
            hm.write_cache(cache, site, hm.read_cache(donor_cache, site).clone())
    _, logits = greedy(hm, final_ids, 1, cache=cache)
    return logits.float()


def control_group(hm, address: int | None) -> int | None:
    """A non-Address group of the Address block's size (the nearest), else the nearest other group."""
    if address is None:
        return None
    others = [g for g in range(len(hm.groups)) if g != address]
    same = [g for g in others if len(hm.groups[g]) == len(hm.groups[address])]
    pool = same or others
    return min(pool, key=lambda g: abs(g - address)) if pool else None


# --- a task's own items ----------------------------------------------------------------------------------------
@torch.no_grad()
def task_transplant(hm, items, circuit: dict, batch_size: int = 50) -> list[dict]:
    """Per-item rows of the query and state transplants on a task's items, each with a donor partner (a JSONL
    task's `donor`): the donor's Address-block (and control group's) writes copied into the item at the final
    position and at every span both name, and the block's states copied in before the final token. Read out:
    does the item now answer the donor's answer (answers_donor), still its own (answers_host), and
    D = logit(donor's answer) - logit(its own), both first tokens where the item's answer stands."""
    missing = [getattr(it, "name", "") or str(i) for i, it in enumerate(items) if "donor" not in it.partners]
    if missing:
        raise ValueError(f"{missing[0]}: field 'donor' is missing; the circuit's transplant needs a donor per item")
    control = control_group(hm, circuit["address"]["group"])
    blocks = {"address": circuit["address"]["group"], "control_group": control}
    blocks = {name: gi for name, gi in blocks.items() if gi is not None}
    shared = [set(it.spans) & set(it.partners["donor"].spans) for it in items]
    parts = ["final", *sorted(set.intersection(*shared) if shared else set())]
    rows = []
    for batch in item_batches(hm, items, lambda it: (it, it.partners["donor"]), batch_size):
        rows += _task_batch(hm, batch, blocks, parts)
    return rows


def _task_batch(hm, items, blocks, parts):
    donor_items = [it.partners["donor"] for it in items]
    own, given = encode(hm, items, choices=False), encode(hm, donor_items, choices=False)
    answers = answer_tokens(hm, items, [[it.answer, d.answer] for it, d in zip(items, donor_items, strict=True)])
    hosts = Runner(hm, own.ids, [[row[0][0], row[1][0]] for row in answers])
    donors = Runner(hm, given.ids)
    sites = [s for gi in blocks.values() for s in mixer_sites(hm.groups[gi])]
    writes = donors.forward(capture=sites, capture_at=None)[2]  # also leaves the prefix the state transplant uses
    rows = []

    def record(kind, block, positions, logits):
        top = logits.argmax(-1)
        d = hosts.value_logits(logits, [1] * len(items)) - hosts.value_logits(logits, [0] * len(items))
        for i, it in enumerate(items):
            rows.append(
                {
                    "item": getattr(it, "name", "") or str(i),
                    "kind": kind,
                    "block": block,
                    "positions": positions,
                    "answers_donor": int(top[i] == hosts.choices[i, 1]),
                    "answers_host": int(top[i] == hosts.choices[i, 0]),
                    "d": d[i].item(),
                }
            )

    record("none", "", "", hosts.forward()[0])
    final_host, final_donor = hosts.ids.shape[1] - 1, donors.ids.shape[1] - 1
    for block, gi in blocks.items():
        for part in parts:
            host_at, donor_at = own.positions(part), given.positions(part)
            if any(len(h) != len(d) or not h for h, d in zip(host_at, donor_at, strict=True)):
                continue  # a span of other token counts cannot be transplanted one to one
            edits = {s: Edit(host_at, gather(writes[s], donors.index(donor_at))) for s in mixer_sites(hm.groups[gi])}
            record("query", block, part, hosts.forward(edits)[0])
        group = hm.groups[gi]
        states = _state_transplant(hm, donors.prefix(final_donor), hosts.prefix(final_host), hosts.ids[:, -1:], group)
        record("state", block, "final", states)
    return rows


TASK_COLUMNS = ["task", "item", "kind", "block", "positions", "answers_donor", "answers_host", "d"]
TASK_SUMMARY_COLUMNS = ["model", "task", "kind", "block", "positions", "n"]
TASK_SUMMARY_COLUMNS += [f"{m}{s}" for m in ("answers_donor", "answers_host", "d") for s in ("", "_lo", "_hi")]


def summarize_task(rows, n_boot: int = 2000):
    """Per (kind, block, positions): n, and the rates and mean D with 95 % bootstrap intervals over items."""
    groups = {}
    for r in rows:
        groups.setdefault((r["kind"], r["block"], r["positions"]), []).append(r)
    out = []
    for (kind, block, positions), rs in groups.items():
        row = {"kind": kind, "block": block, "positions": positions, "n": len(rs)}
        for name in ("answers_donor", "answers_host", "d"):
            values = np.array([r[name] for r in rs], dtype=float)
            row[name] = values.mean()
            row[f"{name}_lo"], row[f"{name}_hi"] = bootstrap(values, n_boot=n_boot)
        out.append(row)
    return out


# One row per item and condition (transplant_all), and one per condition (summarize).
ITEM_COLUMNS = ["seed", "item", "kind", "block", "donor", "positions", "answers_a", "answers_b", "d_ab"]
ITEM_COLUMNS += ["attn_a", "attn_b"]
SUMMARY_COLUMNS = ["kind", "block", "donor", "positions", "n"]
SUMMARY_COLUMNS += [f"{m}{s}" for m in ("redirect", "answers_b", "d_ab") for s in ("", "_lo", "_hi")]
SUMMARY_COLUMNS += ["redirect_per_seed", "attn_a", "attn_b"]


def transplant_all(hm, items: list[Triple], circuit: dict, batch_size: int = 50, checks=None):
    """transplant() over batches whose host and other-dictionary prompts share a token length; `checks` (a
    dict, filled in place) receives the validations measured over every batch."""
    control = control_group(hm, circuit["address"]["group"])
    rows = []
    for batch in item_batches(hm, items, lambda t: (t.host, t.donor, t.other), batch_size):
        rows += transplant(hm, batch, circuit, control, checks)
    return rows


def summarize(rows, n_boot: int = 2000):
    """Rates and means per condition with 95 % bootstrap intervals over the items of all seeds."""
    groups = {}
    for r in rows:
        groups.setdefault((r["kind"], r["block"], r["donor"], r["positions"]), []).append(r)
    out = []
    for (kind, block, donor, positions), rs in groups.items():
        row = {"kind": kind, "block": block, "donor": donor, "positions": positions, "n": len(rs)}
        for name, key in (("redirect", "answers_a"), ("answers_b", "answers_b"), ("d_ab", "d_ab")):
            values = np.array([r[key] for r in rs], dtype=float)
            row[name] = values.mean()
            row[f"{name}_lo"], row[f"{name}_hi"] = bootstrap(values, n_boot=n_boot)
        seeds = sorted({r["seed"] for r in rs})
        row["redirect_per_seed"] = ",".join(
            f"{np.mean([r['answers_a'] for r in rs if r['seed'] == s]):.3f}" for s in seeds
        )
        row["attn_a"] = float(np.nanmean([r["attn_a"] for r in rs])) if kind != "state" else float("nan")
        row["attn_b"] = float(np.nanmean([r["attn_b"] for r in rs])) if kind != "state" else float("nan")
        out.append(row)
    return out
