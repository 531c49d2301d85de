"""Cross-architecture stitching: ridge maps between two models' hidden spaces, and Address blocks swapped through them.

A *receiver* model gets a *donor* model's computation with no weight updated in either: its stream h at the
input of a block is mapped into the donor's space, the donor's own layers run on it, and the donor's change is
mapped back: h + M_out[role](B_donor(M_in h) - M_in h). The maps are closed-form ridge regressions fitted on
aligned positions of prompts whose keys come from a fit split of the key vocabulary; every number is reported
on prompts whose keys come from the disjoint test split. M_out is one map per token role (TOKEN_ROLES), because
two models can write keys, values and the final token's query in codes that one linear map over every
position does not carry at once (docs/stitch.md).

align_positions  token pairs of two tokenizations of one text, matched by the character where each token ends
fit_ridge        centred ridge map in float64, lambda from a log grid on a held-out fifth of the prompts
RidgeMap         a fitted map; apply(), shuffled() for the control, score() (R^2)
split_keys       seeded fit / test split of the keys both tokenizers keep as single tokens
split_prompts    prompts from the fit or test split's keys; run_prompts: the ones a run's seed uses
blocks           a model's Address block and Encode+Address span (first, last layer) from its circuit
collect          the residual stream at the blocks' boundaries and each token's role, as arrays for the HDF5 store
fit_maps         every map of one direction from two collected stores
map_scores       each map's R^2 on two other stores (the test split's prompts, keys the maps never saw)
query_content    what a model's Address write at the final token holds: the queried key, or already its answer
run_block        a model's own layers first..last on a given stream, with the positions and masks it builds
block_input, block_edit  a block's input in a Runner's batch; edits that replace the block's write by a
                 function of its input and output
swap_rows        per-item rows of the three transfers and their controls on test prompts
"""

import contextlib
from dataclasses import dataclass

import numpy as np
import torch

from hybridlens.interventions.engine import Edit, Runner
from hybridlens.interventions.hooks import TraceDict
from hybridlens.interventions.on_items import answer_tokens, batches_by_length
from hybridlens.stats import bootstrap
from hybridlens.tasks.items import TOKEN_ROLES, answer_index, token_positions, token_roles

TRANSFERS = ("query", "address", "encode_address")
QUERY_CONTENTS = ("key", "answer")
CONDITIONS = ("intact", "stitched", "shuffled_map", "mean_write", "ablated")


# --- alignment and maps ---------------------------------------------------------------------------------------
def align_positions(offsets_a, offsets_b, text_length: int):
    """[(i, j)]: token i of tokenization a and token j of b end at the same character of the prompt text.

    A word's information is complete at its last token, so a word-level token aligns with the last piece
    of the same word under BPE. Tokens outside the text (chat-template tokens) never align; the two final
    tokens (both predict the answer) always do.
    """

    def ends(offsets):
        out = {}
        for i, (start, end) in enumerate(offsets):
            if end > start and 0 < end <= text_length:
                out.setdefault(end, i)  # a character ending several tokens (byte pieces) aligns its first
        return out

    ea, eb = ends(offsets_a), ends(offsets_b)
    pairs = [(ea[c], eb[c]) for c in sorted(ea.keys() & eb.keys())]
    last = (len(offsets_a) - 1, len(offsets_b) - 1)
    return [p for p in pairs if p[0] != last[0] and p[1] != last[1]] + [last]


@dataclass
class RidgeMap:
    mean_in: np.ndarray  # [d_in]
    mean_out: np.ndarray  # [d_out]
    weight: np.ndarray  # [d_in, d_out]
    lam: float  # chosen lambda, relative to the mean eigenvalue of the centred inputs' Gram matrix
    r2: float  # held-out R^2 at the chosen lambda

    def apply(self, x: torch.Tensor) -> torch.Tensor:
        w, mi, mo = (
            torch.as_tensor(a, dtype=x.dtype, device=x.device) for a in (self.weight, self.mean_in, self.mean_out)
        )
        return (x - mi) @ w + mo

    def score(self, x, y) -> float:
        """R^2 of the map's predictions of y from x, on rows it may not have been fitted on."""
        return _r2(self.mean_in, self.mean_out, self.weight, np.asarray(x, np.float64), np.asarray(y, np.float64))

    def shuffled(self, seed: int) -> "RidgeMap":
        """Control: the same map with its output coordinates permuted (same norm, wrong directions)."""
        perm = np.random.default_rng(seed).permutation(self.weight.shape[1])
        return RidgeMap(self.mean_in, self.mean_out, self.weight[:, perm], self.lam, float("nan"))


def _r2(mx, my, w, xs, ys) -> float:
    pred = (xs - mx) @ w + my
    return float(1 - ((ys - pred) ** 2).sum() / ((ys - ys.mean(0)) ** 2).sum())


def fit_ridge(x, y, groups=None, lambdas=(1e-4, 1e-3, 1e-2, 1e-1, 1, 10, 100), seed: int = 0) -> RidgeMap:
    """Centred closed-form ridge y ~ x in float64; lambda (times the inputs' mean eigenvalue, so the grid is
    scale-free) minimises the error on a held-out fifth of the `groups` (prompts: rows of one prompt stay on
    one side), then the map is refitted on every row."""
    x, y = np.asarray(x, dtype=np.float64), np.asarray(y, dtype=np.float64)
    if len(x) != len(y) or len(x) < 10:
        raise ValueError(f"ridge fit needs matching rows, at least 10; got {len(x)} inputs and {len(y)} outputs")
    groups = np.arange(len(x)) if groups is None else np.asarray(groups)
    ids = np.unique(groups)
    held = np.random.default_rng(seed).permutation(ids)[: max(1, len(ids) // 5)]
    test = np.isin(groups, held)

    def solve(xs, ys, lam_rel):
        mx, my = xs.mean(0), ys.mean(0)
        xc, yc = xs - mx, ys - my
        gram = xc.T @ xc
        lam = lam_rel * np.trace(gram) / len(gram)
        return mx, my, np.linalg.solve(gram + lam * np.eye(len(gram)), xc.T @ yc)

    scores = [_r2(*solve(x[~test], y[~test], lam), x[test], y[test]) for lam in lambdas]
    best = int(np.argmax(scores))
    return RidgeMap(*solve(x, y, lambdas[best]), lam=float(lambdas[best]), r2=float(scores[best]))


# --- prompts and blocks ------------------------------------------------------------------------------------------
def blocks(circuit: dict) -> dict:
    """{"address": (first, last), "encode_address": (first, last)} layers, from a circuit.json."""
    groups = circuit["groups"]
    if circuit["address"]["group"] is None:
        raise ValueError(
            f"circuit with groups {groups} has no Address block (no linear group before its reader); "
            "stitching needs one in both models: pair another model"
        )
    address, encode = groups[circuit["address"]["group"]], groups[circuit["encode"]["group"]]
    return {
        "address": (min(address), max(address)),
        "encode_address": (min(encode + address), max(encode + address)),
    }


# --- collecting and fitting ------------------------------------------------------------------------------------------
def boundaries(spans: dict) -> list[int]:
    """Residual-stream boundaries the maps need: each block's input (before `first`) and output (after `last`)."""
    return sorted({b for first, last in spans.values() for b in (first, last + 1)})


@torch.no_grad()
def collect(hm, prompts, spans: dict, batch_size: int = 32):
    """Arrays for the HDF5 store: `resid.{b}` [tokens, d] for every boundary b (the stream entering layer b;
    b = n_layers is the last layer's output) at every position, and per token its prompt, position, the
    prompt-text character where it ends (-1 outside the text) and its role (index into TOKEN_ROLES). Per prompt,
    `embedding.key` and `embedding.answer` are the input embeddings of the queried key's last token in the
    question and of its value's last token in the dictionary, for query_content."""
    wanted = boundaries(spans)
    out = {b: [] for b in wanted}
    prompt_of, position, end_char, role = [], [], [], []
    content_ids = {c: [0] * len(prompts) for c in QUERY_CONTENTS}
    for chunk, ids, offsets in batches_by_length(hm, prompts, batch_size):
        modules = {b: hm.layers[b] if b < hm.n_layers else hm.layers[-1] for b in wanted}
        options = {b: {"retain_input": b < hm.n_layers, "retain_output": b == hm.n_layers} for b in wanted}
        with TraceDict(modules, options) as traces:
            hm.model(ids, logits_to_keep=1)
        for b in wanted:
            t = traces[b].input if b < hm.n_layers else traces[b].output
            out[b].append(t.float().reshape(-1, hm.d_model).cpu().numpy())
        for j, (i, off) in enumerate(zip(chunk, offsets, strict=True)):
            n_text = len(prompts[i].text)
            prompt_of += [i] * len(off)
            position += list(range(len(off)))
            end_char += [e if s < e and 0 < e <= n_text else -1 for s, e in off]
            role += _role_ids(prompts[i], off).tolist()
            for c, part in zip(QUERY_CONTENTS, ("query", f"value{answer_index(prompts[i])}"), strict=True):
                content_ids[c][i] = int(ids[j, token_positions(prompts[i], off, part)[-1]])
    data = {f"resid.{b}": np.concatenate(v) for b, v in out.items()}
    embed = hm.model.get_input_embeddings()
    for c, token_ids in content_ids.items():  # a device_map may place the embedding away from hm.device
        data[f"embedding.{c}"] = embed(torch.tensor(token_ids, device=embed.weight.device)).float().cpu().numpy()
    data |= {"prompt": np.array(prompt_of), "position": np.array(position), "end_char": np.array(end_char)}
    data["role"] = np.array(role, dtype=np.int8)
    return data


def _role_ids(prompt, offsets) -> np.ndarray:
    return np.array([TOKEN_ROLES.index(r) for r in token_roles(prompt, offsets)], dtype=np.int8)


def _rows_by_prompt(data) -> dict:
    """prompt -> its token rows in position order."""
    order = np.lexsort((data["position"], data["prompt"]))
    prompts, starts = np.unique(data["prompt"][order], return_index=True)
    return dict(zip(prompts.tolist(), np.split(order, starts[1:]), strict=True))


def aligned_rows(recv, donor):
    """(receiver rows, donor rows, prompt per pair, fraction of receiver positions aligned) over two stores."""
    ri, di, groups, n_recv = [], [], [], 0
    donor_rows = _rows_by_prompt(donor)
    for p, rr in _rows_by_prompt(recv).items():
        dr = donor_rows[p]
        n_text = max(recv["end_char"][rr].max(), donor["end_char"][dr].max())
        off_r = [(e - 1, e) if e > 0 else (0, 0) for e in recv["end_char"][rr]]
        off_d = [(e - 1, e) if e > 0 else (0, 0) for e in donor["end_char"][dr]]
        pairs = align_positions(off_r, off_d, int(n_text))
        ri += [rr[i] for i, _ in pairs]
        di += [dr[j] for _, j in pairs]
        groups += [p] * len(pairs)
        n_recv += len(rr)
    return np.array(ri), np.array(di), np.array(groups), len(ri) / n_recv


def final_rows(data):
    """Row of each prompt's final token, in prompt order."""
    return np.array([rows[-1] for rows in _rows_by_prompt(data).values()])


def block_writes(data, span, rows=slice(None)):
    """The block's write (stream after `last` minus before `first`) at the store's `rows`."""
    first, last = span
    return data[f"resid.{last + 1}"][rows] - data[f"resid.{first}"][rows]


def final_block_writes(data, span):
    """Each prompt's block write at its final token, in prompt order."""
    return block_writes(data, span, final_rows(data))


def _check_store(data):
    if "role" not in data or "embedding.key" not in data:
        raise ValueError(
            "activation store written by an older hybridlens (no token roles or query embeddings): "
            "rebuild the stores with: snakemake --cores all --forcerun stitch_acts"
        )


def map_rows(recv, donor, recv_spans: dict, donor_spans: dict):
    """(rows, aligned fraction): rows[name] = (x, y, prompt of each row) of every map of one direction
    (donor -> receiver), from two collected stores. {block}.in: the receiver's stream at the block's input ->
    the donor's; {block}.out.{role}: the donor's block write -> the receiver's, at aligned tokens of that role
    (the receiver's). The query vector is the Address block's write at the final token, so its map is
    address.out.final."""
    _check_store(recv)
    _check_store(donor)
    ri, di, groups, fraction = aligned_rows(recv, donor)
    rows = {}
    for block in ("address", "encode_address"):
        (rf, _), (df, _) = recv_spans[block], donor_spans[block]
        rows[f"{block}.in"] = (recv[f"resid.{rf}"][ri], donor[f"resid.{df}"][di], groups)
        x, y = block_writes(donor, donor_spans[block], di), block_writes(recv, recv_spans[block], ri)
        for i, role in enumerate(TOKEN_ROLES):
            at = recv["role"][ri] == i
            rows[f"{block}.out.{role}"] = (x[at], y[at], groups[at])
    return rows, fraction


def fit_maps(recv, donor, recv_spans: dict, donor_spans: dict, lambdas, seed: int = 0):
    """(maps, means, aligned fraction) of one direction (donor -> receiver), keyed as map_rows' rows. means
    are the receiver's mean writes per block and role, {block}.{role}, over every token of the role: the
    mean-write control."""
    rows, fraction = map_rows(recv, donor, recv_spans, donor_spans)
    for name, (x, _, _) in rows.items():
        if len(x) < 10:
            raise ValueError(
                f"map {name}: {len(x)} aligned tokens in the fit prompts, at least 10 needed; raise stitch.n_fit"
            )
    maps = {name: fit_ridge(x, y, groups, lambdas, seed) for name, (x, y, groups) in rows.items()}
    means = {}
    for block in ("address", "encode_address"):
        writes = block_writes(recv, recv_spans[block])
        for i, role in enumerate(TOKEN_ROLES):
            means[f"{block}.{role}"] = writes[recv["role"] == i].mean(0)
    return maps, means, fraction


def map_scores(maps: dict, recv, donor, recv_spans: dict, donor_spans: dict) -> dict:
    """{map name: R^2} of fitted maps on two other stores: on the test split's prompts, whose keys the maps
    never saw, this says whether the geometry the maps learned holds beyond the keys they were fitted on."""
    rows, _ = map_rows(recv, donor, recv_spans, donor_spans)
    return {name: maps[name].score(x, y) for name, (x, y, _) in rows.items()}


def query_content(fit, test, span, lambdas, seed: int = 0) -> dict:
    """{content: R^2} of ridge maps from a block's final-token write to the input embedding of the queried key
    and to that of its answer, fitted on one store's prompts and scored on another's (the test split's keys).

    A query that names the key, for attention to find, and one that already holds the answer, because the
    linear layers retrieved it themselves, are different codes; a map between two models can carry one only
    into the same kind (docs/stitch.md)."""
    _check_store(fit)
    _check_store(test)
    x, x_test = final_block_writes(fit, span), final_block_writes(test, span)
    return {
        c: fit_ridge(x, fit[f"embedding.{c}"], lambdas=lambdas, seed=seed).score(x_test, test[f"embedding.{c}"])
        for c in QUERY_CONTENTS
    }


# --- running blocks ------------------------------------------------------------------------------------------
@torch.no_grad()
def run_block(hm, first: int, last: int, resid: torch.Tensor) -> torch.Tensor:
    """hm's layers first..last applied to the stream `resid` [B, T, D]: a forward of the model resumed at layer
    `first` with `resid` (the layers before it do not run) that stops after layer `last`. Every layer gets the
    position embeddings, causal mask and (empty) cache the model builds for itself, whatever its kind;
    calling decoder layers one by one would have to rebuild them per family."""
    resid = resid.to(hm.device, hm.model.dtype)
    embeds = torch.zeros_like(resid)  # the embedding's output is not read: layer `first` reads resid
    skip = hm.resumed(first, resid) if first else contextlib.nullcontext()
    modules = {"in": hm.layers[first], "out": hm.layers[last]}
    options = {"in": {"edit_input": lambda t, _name: resid, "retain_output": False}, "out": {"stop": True}}
    with skip, TraceDict(modules, options) as traces:
        hm.model(inputs_embeds=embeds, use_cache=False, logits_to_keep=1)
    return traces["out"].output


def block_input(run, first: int):
    """The batch's unedited stream entering layer `first` [B, T, D]: a block's input, which no edit before the
    block changes."""
    site = f"layers.{first}.resid_pre"
    return run.forward(capture=[site], capture_at=None, logits=False)[2][site]


def block_edit(h_in, last: int, replace, positions=None) -> dict:
    """Edits of a Runner's batch that replace what a block ending at layer `last` writes by replace(h_in, h_out)
    at `positions` (None: every position; h_in then block_input's, else its rows at those positions), h_out the
    block's output. The forward resumes at layer `last`: the block itself need not run when its output is not
    read."""
    return {f"layers.{last}.layer_out": Edit(positions, lambda out: replace(h_in, out))}


def _by_role(roles, write):
    """[B, T, D] writes: write(role, mask) at the positions of each role; roles [B, T] indexes TOKEN_ROLES."""
    parts = {i: write(role, roles == i) for i, role in enumerate(TOKEN_ROLES) if (roles == i).any()}
    first = next(iter(parts.values()))
    out = first.new_zeros(*roles.shape, first.shape[-1])
    for i, w in parts.items():
        out[roles == i] = w
    return out


def _swap(donor, span, m_in, m_out, roles):
    """replace(h, out) = h + M_out[role](B_donor(M_in h) - M_in h); m_out: role -> map."""

    def replace(h, _out):
        mapped = m_in.apply(h.float())
        changed = run_block(donor, *span, mapped).float().to(h.device) - mapped  # the two models may sit apart
        write = _by_role(roles.to(h.device), lambda role, at: m_out[role].apply(changed[at]))
        return (h.float() + write).to(h.dtype)

    return replace


@torch.no_grad()
def swap_rows(receiver, donor, spans, maps, means, pairs, seed: int, batch_size: int = 32, donor_writes=None):
    """Per test item and condition: retrieval with the receiver's Address block (address) or Encode+Address
    span (encode_address) swapped for the donor's, and redirect under the query-vector transfer (the donor's
    prompt asks A, the receiver's asks B of the same dictionary; query). Conditions: intact, stitched, and
    the controls: shuffled maps, the receiver's mean write from the fit prompts, the block ablated.

    pairs: (donor item, host item) per test item, the host asking another key of the donor's dictionary
    (the dictionary task's donor_host).

    spans: {"receiver": {block: (first, last)}, "donor": {...}}; maps: fit_maps' maps; means: fit_maps' means.
    Each position of a swapped block gets the output map and the mean write of its token role.
    donor_writes: the donor's Address-block writes at each donor item's final token, in order, if a store
    of its streams on these prompts already holds them (final_block_writes); None = one donor forward here.
    """
    if receiver.model is donor.model:  # the donor's forward would run the receiver's swap hooks again
        raise ValueError("stitching a model with itself: load it twice, one copy as the donor")
    rows = []
    if donor_writes is None:
        span = spans["donor"]["address"]
        donors = [d for d, _ in pairs]
        donor_writes = final_block_writes(collect(donor, donors, {"address": span}, batch_size), span)
    donor_writes = torch.as_tensor(donor_writes)
    for chunk, ids, offsets in batches_by_length(receiver, [h for _, h in pairs], batch_size):
        answers = answer_tokens(receiver, [pairs[i][1] for i in chunk])
        choices = torch.tensor([[t[0] for t in row] for row in answers], device=ids.device)
        roles = torch.as_tensor(np.stack([_role_ids(pairs[i][1], off) for i, off in zip(chunk, offsets, strict=True)]))
        entries = torch.tensor(
            [[answer_index(pairs[i][1]), answer_index(pairs[i][0])] for i in chunk], device=ids.device
        )
        right, asked_by_donor = choices.gather(1, entries).T

        def record(transfer, condition, logits, chunk=chunk, right=right, asked_by_donor=asked_by_donor):
            top = logits.argmax(-1)
            for j, i in enumerate(chunk):
                rows.append(
                    {
                        "seed": seed,
                        "item": i,
                        "transfer": transfer,
                        "condition": condition,
                        "correct": int(top[j] == right[j]),
                        "redirect": int(top[j] == asked_by_donor[j]),
                    }
                )

        run, h_in = Runner(receiver, ids), {}
        intact = run.forward()[0]
        for transfer in TRANSFERS:
            record(transfer, "intact", intact)
        for block in ("address", "encode_address"):
            span, m_in = spans["donor"][block], maps[f"{block}.in"]
            m_out = {role: maps[f"{block}.out.{role}"] for role in TOKEN_ROLES}
            shuffled = {role: m.shuffled(seed + 1) for role, m in m_out.items()}
            mean = {role: torch.as_tensor(means[f"{block}.{role}"], dtype=torch.float32) for role in TOKEN_ROLES}
            mean_write = _by_role(roles, lambda role, at, mean=mean: mean[role].expand(int(at.sum()), -1))
            conditions = {
                "stitched": _swap(donor, span, m_in, m_out, roles),
                "shuffled_map": _swap(donor, span, m_in.shuffled(seed), shuffled, roles),
                "mean_write": lambda h, _out, w=mean_write: (h.float() + w.to(h.device)).to(h.dtype),
                "ablated": lambda h, _out: h,
            }
            first, last = spans["receiver"][block]
            h_in[block] = block_input(run, first)
            for condition, replace in conditions.items():
                record(block, condition, run.forward(block_edit(h_in[block], last, replace))[0])
        writes = donor_writes[chunk].to(receiver.device)
        mean = torch.as_tensor(means["address.final"], dtype=torch.float32, device=receiver.device)
        query_map = maps["address.out.final"]
        conditions = {
            "stitched": query_map.apply(writes),
            "shuffled_map": query_map.shuffled(seed).apply(writes),
            "mean_write": mean.expand(len(chunk), -1),
            "ablated": torch.zeros(len(chunk), receiver.d_model, device=receiver.device),
        }
        for condition, new in conditions.items():
            # The block's final-token write becomes `new`; its earlier positions keep theirs.
            replace = lambda h, out, new=new: (h.float() + new.to(h.device)[:, None]).to(out.dtype)  # noqa: E731
            edit = block_edit(h_in["address"][:, -1:], spans["receiver"]["address"][1], replace, positions=[-1])
            record("query", condition, run.forward(edit)[0])
    return rows


def summarize(rows, n_boot: int = 2000):
    """Per (receiver, donor, transfer, condition): the transfer's measure (retrieval accuracy for the block
    swaps, redirect rate for the query vector) with a bootstrap 95 % interval over the items of all seeds."""
    groups = {}
    for r in rows:
        groups.setdefault((r["receiver"], r["donor"], r["transfer"], r["condition"]), []).append(r)
    out = []
    for (receiver, donor, transfer, condition), items in groups.items():
        measure = "redirect" if transfer == "query" else "correct"
        values = np.array([r[measure] for r in items], dtype=float)
        lo, hi = bootstrap(values, n_boot=n_boot)
        out.append(
            {
                "receiver": receiver,
                "donor": donor,
                "transfer": transfer,
                "condition": condition,
                "measure": "redirect" if measure == "redirect" else "accuracy",
                "rate": values.mean(),
                "lo": lo,
                "hi": hi,
                "n": len(values),
            }
        )
    return out
