"""Scale sweep: where the Address computation lives as models grow.

For one model: which attention heads read the target (readers), what removing each group does (removal
profile), what the donor's final-position writes of each group, and of every pair of groups, do to the host
(group transplant), whether a later reader still finds the target when an earlier reader is blocked at the
final position (blocking), and the verdict: is the Address computation concentrated in one group,
distributed over a chain of groups, or built by an attention layer instead of any group?

readers         one reader per attention layer (its best head) whose attention to the target is high enough
group_sets      the group sets transplanted: every group; pairs and runs before the last attention layer
attention_sets  the attention layers before the last one, whose final-position writes are transplanted too
profile_rows    per-item removal profile (accuracy, D, main reader's attention) for every group
transplant_rows per-item final-position transplants of every group set, with every reader's attention
blocking_rows   per-item attention of a later reader, and accuracy, with an earlier reader (its head, its layer)
                blocked at the final position
sweep           all of the above over batches of one token length
summarize_*     means with bootstrap intervals over the items of all seeds; verdict
"""

import itertools

import numpy as np
import torch

from hybridlens.interventions.engine import Edit, Runner, attention_to, mixer_sites
from hybridlens.interventions.on_items import encode, item_batches
from hybridlens.stats import bootstrap
from hybridlens.tasks.items import answer_index, donor_index


def readers(reader_rows, main: dict, minimum: float) -> list[dict]:
    """The best head of each attention layer whose mean attention to the target is >= minimum, by layer.

    The main reader (from localization) is always included.
    """
    best = {}
    for r in reader_rows:
        if r["layer"] not in best or r["attention_to_target"] > best[r["layer"]]["attention_to_target"]:
            best[r["layer"]] = r
    chosen = {
        layer: {"layer": layer, "head": r["head"], "attention_to_target": r["attention_to_target"]}
        for layer, r in best.items()
        if r["attention_to_target"] >= minimum
    }
    chosen.setdefault(main["layer"], {"layer": main["layer"], "head": main["head"], "attention_to_target": None})
    return [chosen[layer] for layer in sorted(chosen)]


def group_sets(groups, last_attention: int) -> list[tuple[int, ...]]:
    """Singles; pairs and suffix runs of the groups before the last attention layer (the chain candidates)."""
    before = [g for g, layers in enumerate(groups) if max(layers) < last_attention]
    sets = [(g,) for g in range(len(groups))]
    sets += list(itertools.combinations(before, 2))
    sets += [tuple(before[k:]) for k in range(len(before) - 2, -1, -1) if len(before) - k > 2]
    return list(dict.fromkeys(sets))


def attention_sets(kinds) -> list[int]:
    """Pure attention layers before the last attention layer: one can build the query itself (a head that copies
    the question's key to the final position), and then no group's write moves it. A parallel layer's write
    holds its linear half too, so it is a group's, not one of these."""
    last = max(i for i, k in enumerate(kinds) if k in ("attention", "parallel"))
    return [i for i, k in enumerate(kinds) if k == "attention" and i < last]


def set_name(gs) -> str:
    return "+".join(f"G{g}" for g in gs)


def _reader_attention(attn, reader_list, positions):
    """{"r{layer}.{head}": [B]} attention of every reader at the final position to per-item positions."""
    return {f"r{r['layer']}.{r['head']}": attention_to(attn[r["layer"]], positions)[:, r["head"]] for r in reader_list}


def _host_tokens(hm, items):
    """The items' hosts in tokens (their positions; the choices come with the hosts' Runner)."""
    return encode(hm, [t.host for t in items], choices=False)


@torch.no_grad()
def profile_rows(hm, hosts: Runner, items, reader_list, main, intact=None):
    """Zero each group's writes at every position; host accuracy, D(target − donor's key) and attention.

    intact: the hosts' unedited forward, if the caller has it (sweep shares one per batch).
    """
    b_entry, a_entry = [answer_index(t.host) for t in items], [donor_index(t) for t in items]
    b_pos = _host_tokens(hm, items).entry_positions(b_entry)
    rows = []

    def record(group, logits, attn):
        correct = hosts.correct(logits, b_entry)
        d = hosts.value_logits(logits, b_entry) - hosts.value_logits(logits, a_entry)
        att = attention_to(attn[main["layer"]], b_pos)[:, main["head"]]
        for i, t in enumerate(items):
            rows.append(
                {
                    "seed": t.seed,
                    "item": t.index,
                    "group": group,
                    "correct": int(correct[i]),
                    "d": d[i].item(),
                    "reader_attention": att[i].item(),
                }
            )

    read = [main["layer"]]
    logits, attn, _ = intact or hosts.forward(attention=read)
    record("none", logits, attn)
    for g, layers in enumerate(hm.groups):
        edits = {s: Edit(None, torch.zeros_like) for s in mixer_sites(layers)}
        logits, attn, _ = hosts.forward(edits, attention=read)
        record(f"G{g}", logits, attn)
    return rows


@torch.no_grad()
def transplant_rows(hm, hosts: Runner, donors: Runner, items, sets, reader_list, intact=None, attention=()):
    """Copy the donor's final-position writes of a group set into the host's final position (none: intact),
    then those of each attention layer in `attention` (rows A{layer}, n_groups 0)."""
    a_entry, b_entry = [donor_index(t) for t in items], [answer_index(t.host) for t in items]
    host_tokens = _host_tokens(hm, items)
    a_pos, b_pos = host_tokens.entry_positions(a_entry), host_tokens.entry_positions(b_entry)
    sites = [s for layers in hm.groups for s in mixer_sites(layers)] + mixer_sites(list(attention))
    _, _, writes = donors.forward(capture=sites, capture_at=[-1], logits=False)
    read = sorted({r["layer"] for r in reader_list})
    moves = [(set_name(gs), len(gs), [layer for g in gs for layer in hm.groups[g]]) for gs in sets]
    moves = [("none", 0, [])] + moves + [(f"A{layer}", 0, [layer]) for layer in attention]
    rows = []
    for name, n_groups, layers in moves:
        edits = {s: Edit([-1], writes[s]) for s in mixer_sites(layers)}
        logits, attn, _ = intact if not layers and intact else hosts.forward(edits, attention=read)
        la, lb = hosts.value_logits(logits, a_entry), hosts.value_logits(logits, b_entry)
        top = logits.argmax(-1)
        to_a = _reader_attention(attn, reader_list, a_pos)
        to_b = _reader_attention(attn, reader_list, b_pos)
        for i, t in enumerate(items):
            row = {
                "seed": t.seed,
                "item": t.index,
                "groups": name,
                "n_groups": n_groups,
                "redirect": int(top[i] == hosts.choices[i, a_entry[i]]),
                "d_ab": (la[i] - lb[i]).item(),
            }
            row.update({f"{k}_to_a": v[i].item() for k, v in to_a.items()})
            row.update({f"{k}_to_b": v[i].item() for k, v in to_b.items()})
            rows.append(row)
    return rows


@torch.no_grad()
def blocking_rows(hm, hosts: Runner, items, reader_list, intact=None):
    """For each earlier/later reader pair: the later reader's attention to the target and the retrieval accuracy,
    intact and with the earlier reader blocked.

    Blocking zeroes the earlier reader's output (the input of its o_proj) at the final position only, so the
    later reader loses whatever the earlier reader wrote there and keeps everything else. It is done twice: the
    best head alone ("r3.1") and every head of its layer ("r3.*"), because heads of one layer can read the same
    thing, and then blocking one head leaves the others' writes standing in for it.
    """
    b_entry = [answer_index(t.host) for t in items]
    b_pos = _host_tokens(hm, items).entry_positions(b_entry)
    intact_logits, intact_attn, _ = intact or hosts.forward(attention=sorted({r["layer"] for r in reader_list}))
    intact_correct = hosts.correct(intact_logits, b_entry)
    rows, blocked = [], {}
    for early, late in itertools.combinations(reader_list, 2):
        if early["layer"] == late["layer"]:
            continue
        n_heads = hm.head_mixer(early["layer"])[1]
        blocks = {f"r{early['layer']}.{early['head']}": [early["head"]]}
        if n_heads > 1:
            blocks[f"r{early['layer']}.*"] = list(range(n_heads))
        before = attention_to(intact_attn[late["layer"]], b_pos)[:, late["head"]]
        later = sorted({r["layer"] for r in reader_list if r["layer"] > early["layer"]})
        for label, heads in blocks.items():
            if label not in blocked:  # one forward per block reads every later reader
                blocked[label] = hosts.forward(heads_off_final={early["layer"]: heads}, attention=later)[:2]
            logits, attn = blocked[label]
            after = attention_to(attn[late["layer"]], b_pos)[:, late["head"]]
            correct = hosts.correct(logits, b_entry)
            for i, t in enumerate(items):
                rows.append(
                    {
                        "seed": t.seed,
                        "item": t.index,
                        "blocked": label,
                        "reader": f"r{late['layer']}.{late['head']}",
                        "attention_intact": before[i].item(),
                        "attention_blocked": after[i].item(),
                        "accuracy_intact": int(intact_correct[i]),
                        "accuracy_blocked": int(correct[i]),
                    }
                )
    return rows


def sweep(hm, items, reader_list, main, batch_size: int = 50):
    """Profile, transplant and blocking rows over batches whose host and donor share a token length."""
    sets = group_sets(hm.groups, max(hm.attention_layers()))
    attention = attention_sets(hm.kinds)
    profile, transplant, blocking = [], [], []
    for batch in item_batches(hm, items, lambda t: (t.host, t.donor), batch_size):
        host_tokens = encode(hm, [t.host for t in batch])
        hosts = Runner(hm, host_tokens.ids, host_tokens.choices)
        donors = Runner(hm, encode(hm, [t.donor for t in batch], choices=False).ids)
        read = sorted({r["layer"] for r in reader_list} | {main["layer"]})
        intact = hosts.forward(attention=read)  # one unedited forward serves all three
        profile += profile_rows(hm, hosts, batch, reader_list, main, intact)
        transplant += transplant_rows(hm, hosts, donors, batch, sets, reader_list, intact, attention)
        blocking += blocking_rows(hm, hosts, batch, reader_list, intact)
    return profile, transplant, blocking


# --- summaries ----------------------------------------------------------------------------------------------------
def _mean_ci(values, n_boot):
    values = np.asarray(values, dtype=float)
    lo, hi = bootstrap(values, n_boot=n_boot)
    return values.mean(), lo, hi


def summarize_profile(rows, n_boot: int = 2000):
    """Per group: accuracy, D and reader attention, each also relative to the intact model, with intervals."""
    intact = [r for r in rows if r["group"] == "none"]
    base = {k: np.mean([r[k] for r in intact]) for k in ("correct", "d", "reader_attention")}
    out = []
    for group in dict.fromkeys(r["group"] for r in rows):
        rs = [r for r in rows if r["group"] == group]
        row = {"group": group, "n": len(rs)}
        for name, key in (("accuracy", "correct"), ("d", "d"), ("reader_attention", "reader_attention")):
            row[name], row[f"{name}_lo"], row[f"{name}_hi"] = _mean_ci([r[key] for r in rs], n_boot)
            row[f"{name}_relative"] = row[name] / base[key] if base[key] else float("nan")
        out.append(row)
    return out


def summarize_transplant(rows, n_boot: int = 2000):
    """Per group set: redirect rate and D(A−B) with intervals, and every reader's mean attention to A and B."""
    out = []
    attn_keys = [k for k in rows[0] if k.endswith(("_to_a", "_to_b"))] if rows else []
    for gs in dict.fromkeys(r["groups"] for r in rows):
        rs = [r for r in rows if r["groups"] == gs]
        row = {"groups": gs, "n_groups": rs[0]["n_groups"], "n": len(rs)}
        row["redirect"], row["redirect_lo"], row["redirect_hi"] = _mean_ci([r["redirect"] for r in rs], n_boot)
        row["d_ab"], row["d_ab_lo"], row["d_ab_hi"] = _mean_ci([r["d_ab"] for r in rs], n_boot)
        row.update({k: float(np.mean([r[k] for r in rs])) for k in attn_keys})
        out.append(row)
    return out


BLOCKING_COLUMNS = [
    "blocked",
    "reader",
    "n",
    "attention_intact",
    "attention_intact_lo",
    "attention_intact_hi",
    "attention_blocked",
    "attention_blocked_lo",
    "attention_blocked_hi",
    "retained",
    "accuracy_intact",
    "accuracy_intact_lo",
    "accuracy_intact_hi",
    "accuracy_blocked",
    "accuracy_blocked_lo",
    "accuracy_blocked_hi",
]


def summarize_blocking(rows, n_boot: int = 2000):
    """Per (blocked, reader): attention to the target and accuracy, intact and blocked; the retained fraction."""
    out = []
    for key in dict.fromkeys((r["blocked"], r["reader"]) for r in rows):
        rs = [r for r in rows if (r["blocked"], r["reader"]) == key]
        row = {"blocked": key[0], "reader": key[1], "n": len(rs)}
        for name in ("attention_intact", "attention_blocked", "accuracy_intact", "accuracy_blocked"):
            row[name], row[f"{name}_lo"], row[f"{name}_hi"] = _mean_ci([r[name] for r in rs], n_boot)
        row["retained"] = row["attention_blocked"] / row["attention_intact"] if row["attention_intact"] else np.nan
        out.append(row)
    return out


def verdict(transplant_summary, reader_list, threshold: float) -> dict:
    """Concentrated (one group redirects >= threshold), distributed (a set of several does), built by attention
    (no group set does, the write of an earlier attention layer that is no reader does: a reader's write
    carries the value it read, not a query) or not redirected."""
    hits = [r for r in transplant_summary if r["n_groups"] > 0 and r["redirect"] >= threshold]
    singles = [r for r in transplant_summary if r["n_groups"] == 1]
    best_single = max(singles, key=lambda r: r["redirect"])
    reading = {f"A{r['layer']}" for r in reader_list}
    movers = [
        r
        for r in transplant_summary
        if r["groups"].startswith("A") and r["groups"] not in reading and r["redirect"] >= threshold
    ]
    if not hits and movers:
        needed, kind, best = None, "built by attention", max(movers, key=lambda r: r["redirect"])
    elif not hits:
        needed, kind, best = None, "not redirected", best_single
    else:
        best = min(hits, key=lambda r: (r["n_groups"], -r["redirect"]))
        needed = best["n_groups"]
        kind = "concentrated" if needed == 1 else "distributed"
    return {
        "verdict": kind,
        "groups_needed": needed,
        "threshold": threshold,
        "best_set": best["groups"],
        "best_set_redirect": best["redirect"],
        "best_single": best_single["groups"],
        "best_single_redirect": best_single["redirect"],
        "n_readers": len(reader_list),
        "readers": [f"r{r['layer']}.{r['head']}" for r in reader_list],
    }
