"""Capture and patch write sites at chosen positions in one forward.

position_index   positions (None = all, ints shared by the batch, or one list per item) -> [batch, P]
gather           [batch, pos, d] at position indices [batch, P] -> [batch, P, d]
scatter_at       an edit that writes values [batch, P, d] at position indices
ignore_name      a one-argument edit as TraceDict's (tensor, name) edit
site_hook        (module, Trace options) that capture and/or edit one write site; run and engine.Runner use it
retained         the tensor a capturing site_hook's trace kept
run              forward with captures and patches at sites; hooks always come off
"""

from dataclasses import dataclass, field

import torch

from hybridlens.interventions.hooks import TraceDict


def position_index(positions, batch: int, seq_len: int, device=None) -> torch.Tensor:
    """LongTensor [batch, P] of non-negative positions; negative ints count from the end."""
    if positions is None:
        idx = torch.arange(seq_len).expand(batch, seq_len)
    elif len(positions) and isinstance(positions[0], (list, tuple)):
        if len(positions) != batch:
            raise ValueError(f"{len(positions)} position lists for a batch of {batch}")
        idx = torch.tensor([list(p) for p in positions])
    else:
        idx = torch.tensor(list(positions)).expand(batch, len(positions))
    idx = torch.where(idx < 0, idx + seq_len, idx)
    if idx.numel() and (idx.min() < 0 or idx.max() >= seq_len):
        raise IndexError(f"positions {idx.tolist()} outside a sequence of {seq_len} tokens")
    return idx.to(device)


def gather(t, idx):  # t [B, T, D], idx [B, P] -> [B, P, D]
    return t.gather(1, idx.unsqueeze(-1).expand(-1, -1, t.shape[-1]))


def _scatter(t, idx, values):
    out = t.clone()
    out.scatter_(1, idx.unsqueeze(-1).expand(-1, -1, t.shape[-1]), values.to(out.device, out.dtype))
    return out


@dataclass
class RunResult:
    logits: torch.Tensor  # [batch, pos, vocab]
    captured: dict = field(default_factory=dict)  # site -> [batch, P, d_model]
    cache: object = None


def run(hm, input_ids, capture=(), positions=None, patch=None, cache=None, logits_to_keep=0, attention_mask=None):
    """One forward of `hm` with captures and patches.

    Args:
        input_ids: [batch, pos].
        capture: write sites to record, e.g. ["layers.3.mixer_out"]; taken at `positions`.
        positions: None (all), [int, ...] shared by the batch, or one list per item.
        patch: {site: (positions, values [batch, P, d_model])} or {site: fn(tensor [batch, pos, d]) -> tensor}.
        cache: a transformers cache to continue from / fill.
        logits_to_keep: 0 keeps all positions, k the last k (saves the unembedding on long prompts).
        attention_mask: [batch, pos], 0 at left padding (HybridModel.pad); None: no padding.
    """
    capture = [str(s) for s in capture]
    patch = {str(s): edit for s, edit in (patch or {}).items()}
    batch, seq_len = input_ids.shape
    cap_idx = position_index(positions, batch, seq_len, input_ids.device)
    modules, options = {}, {}
    for site in dict.fromkeys(capture + list(patch)):
        edit = patch.get(site)
        if site in patch and not callable(edit):
            pos, values = edit
            edit = scatter_at(position_index(pos, batch, seq_len, input_ids.device), values)
        modules[site], options[site] = site_hook(hm, site, capture=site in capture, edit=edit)
    with TraceDict(modules, options) as traces:
        out = hm.model(
            input_ids,
            attention_mask=attention_mask,
            cache=cache,
            use_cache=cache is not None,
            logits_to_keep=logits_to_keep,
        )
    captured = {}
    for site in capture:
        full = retained(traces[site])
        captured[site] = full if positions is None else gather(full, cap_idx)
    return RunResult(out.logits, captured, cache)


def site_hook(hm, site, capture=False, edit=None):
    """(module, Trace options) for one write site: retained if `capture`, replaced by edit(tensor) if given."""
    module, where = hm.module_for(site)
    options = {"retain_input": where == "input" and capture, "retain_output": where == "output" and capture}
    if edit is not None:
        options["edit_input" if where == "input" else "edit_output"] = ignore_name(edit)
    return module, options


def retained(trace):
    """The tensor a site_hook(capture=True) trace kept: the module's input or its output."""
    return trace.input if trace.retain_input else trace.output


def scatter_at(idx, values):
    return lambda t: _scatter(t, idx, values)


def ignore_name(fn):
    return lambda t, _name: fn(t)
