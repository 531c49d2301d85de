"""One engine for forwards with edits: a batch of prompts under site edits, head ablations and captures.

Circuit localization and transplants, the scale sweep and stitching all run the same kind of forward: one
batch of token ids of one length, edited at write sites or heads, read at the final position. Its site
hooks are built by patch.site_hook, as patch.run builds them, so an edit means the same thing in both.

Each forward does only the work its edits and read-outs need. Under causal attention and recurrence an edit
at position t changes nothing before t, so a forward whose edits and captures all lie at positions >= t
continues a copy of the batch's cache after its first t tokens (t is at most the final position, where
logits and attentions are read). The batch's base pass runs its tokens once, unedited, in segments that end
where the position sets named in Runner(at=...) begin and at the final position, and leaves a prefix at
each. An edit at layer l changes nothing before l, so the layers before the first layer a forward edits or
reads do not run: they stand aside (HybridModel.resumed) for the unedited stream entering l, which the base
pass recorded; at the final position it is the stream earlier forwards from there recorded with the same
attention implementation, so that a final-position forward that resumes gives the bits of one that does
not. A forward that needs no logits stops after the last layer it reads, and attention runs eager (which
returns weights) only in the forwards that read attention, sdpa elsewhere.

Edit          a write-site edit at a position set: values written there, or a function of what is there
Runner        forwards of one batch: final-position logits, final-position attentions and captures
transplant_ids  hosts' logits with donors' writes at sites copied in at given positions (query transplant)
attention_to  final-position attentions [B, H, T] summed over per-item positions -> [B, H]
mixer_sites   the mixer_out write sites of a group's layers
"""

import contextlib
import copy
from typing import NamedTuple

import torch

from hybridlens.interventions.hooks import TraceDict, first_tensor
from hybridlens.interventions.patch import gather, ignore_name, position_index, retained, scatter_at, site_hook
from hybridlens.models.adapter import parse_site


class Edit(NamedTuple):
    """Replace a write site at `positions` (None: every position; ints shared by the batch; one list per item)
    by `values` [B, P, D], or by values(what is there [B, P, D]); with positions None, values(tensor [B, T, D])."""

    positions: object
    values: object


class Runner:
    """Forwards of one batch of token ids [B, T] (one length) with the circuit's interventions.

    choices [B, E]: token ids whose final-position logits value_logits() and correct() read (each item's
    candidate answers, tasks.items.encode gives them). minimal=False runs every forward in full (from the
    first token, to the logits, eager): the reference the shortcuts are tested against.
    bench/forward_work.py sets the class default to compare the two.
    """

    minimal = True

    def __init__(self, hm, ids, choices=None, minimal: bool | None = None, at=()):
        self.hm = hm
        if minimal is not None:
            self.minimal = minimal
        self.ids = torch.as_tensor(ids, device=hm.device)
        if self.ids.ndim != 2:
            raise ValueError(f"token ids of shape {tuple(self.ids.shape)}; give [batch, pos] of one length")
        self.choices = None if choices is None else torch.as_tensor(choices, device=hm.device)
        final = self.ids.shape[1] - 1
        # `at`: position sets the batch's forwards will edit; the base pass leaves a prefix where each begins.
        starts = {int(self.index(p).min()) for p in at if p is not None} if self.minimal else set()
        self._starts = sorted(t for t in starts if 0 < t < final)
        self._prefixes = {}  # t -> cache after the first t tokens
        self._head = None  # the unedited stream entering each layer, and leaving the last, before the final position
        self._tail = {}  # attention implementation -> the same at the final position, as deep as forwards recorded

    def index(self, positions):
        """[B, P] indices of a position set in this batch."""
        return position_index(positions, *self.ids.shape, self.ids.device)

    @torch.no_grad()
    def prefix(self, t: int):
        """The cache after the batch's first t tokens, unedited; computed once, never advanced (copy it)."""
        if t not in self._prefixes:
            final = self.ids.shape[1] - 1
            self._base() if self._head is None and t in (final, *self._starts) else self._fill_prefix(t)
        return self._prefixes[t]

    def _fill_prefix(self, t: int, capture=()):
        """Compute the prefix cache of t tokens; returns the captures of those positions {site: [B, t, D]}."""
        final = self.ids.shape[1] - 1
        if t == final:
            return self._base(capture)
        hooks = {site: site_hook(self.hm, site, capture=True) for site in capture}
        modules, options = {k: m for k, (m, _) in hooks.items()}, {k: o for k, (_, o) in hooks.items()}
        cache = self.hm.new_cache()
        with self.hm.attention_implementation("sdpa"), TraceDict(modules, options) as traces:
            self.hm.model(self.ids[:, :t], cache=cache, use_cache=True, logits_to_keep=1)
        self._keep_prefix(t, cache)
        return {site: retained(traces[site]) for site in capture}

    def _keep_prefix(self, t, cache):
        # Keep the final position's prefix (every final-position edit continues it), the declared starts' and the
        # latest other one: a large model's recurrent states make each cache as large as a forward's activations.
        keep = {self.ids.shape[1] - 1, *self._starts}
        self._prefixes = {k: v for k, v in self._prefixes.items() if k in keep} | {t: cache}

    def _base(self, capture=()):
        """The base pass: the batch unedited, in segments ending where a declared position set begins and at the
        final position, leaving a prefix at each; the final token continues a copy of the last. Records the
        stream entering every layer (and leaving the last) at every position, with sdpa. Returns the captures of
        the positions before the final one."""
        final = self.ids.shape[1] - 1
        hooks = {site: site_hook(self.hm, site, capture=True) for site in capture}
        modules, options = {k: m for k, (m, _) in hooks.items()}, {k: o for k, (_, o) in hooks.items()}
        parts = [[] for _ in range(self.hm.n_layers + 1)]
        captured = {site: [] for site in capture}
        bounds = [0, *self._starts, final, final + 1]
        cache = self.hm.new_cache()
        with self.hm.attention_implementation("sdpa"), self._recording(parts, self.hm.n_layers):
            for a, b in zip(bounds, bounds[1:], strict=False):
                kwargs = {"cache": cache, "use_cache": True, "logits_to_keep": 1}
                if a:
                    kwargs["position_ids"] = torch.arange(a, b, device=self.ids.device).expand(len(self.ids), -1)
                with TraceDict(modules if b <= final else {}, options) as traces:
                    self.hm.model(self.ids[:, a:b], **kwargs)
                for site in captured if b <= final else ():
                    captured[site].append(retained(traces[site]))
                if b == final:
                    self._keep_prefix(b, cache)
                    cache = copy.deepcopy(cache)  # the final token advances a copy
                elif b < final:
                    self._keep_prefix(b, copy.deepcopy(cache))
        self._head = [torch.cat(p[:-1], 1) for p in parts]
        self._tail["sdpa"] = [p[-1] for p in parts]
        return {site: torch.cat(v, 1) for site, v in captured.items()}

    def _resume_point(self, start: int, implementation: str, first: int):
        """(layer, the unedited stream entering it [B, T - start, D]) from which a forward from `start` whose
        first edit or read is at layer `first` resumes; (0, None) where it runs every layer. The stream is the
        base pass's before the final position, and at the final position the one earlier forwards from there
        recorded with the same attention implementation (so that a final-position forward that resumes gives
        the bits of one that does not)."""
        final = self.ids.shape[1] - 1
        tail = self._tail.get(implementation, [])
        if start < final:
            if self._head is None:
                return 0, None
            tail = tail or max(self._tail.values(), key=len, default=[])  # earlier positions differ in rounding anyway
        layer = min(first, len(tail) - 1)
        if layer <= 0:
            return 0, None
        return layer, tail[layer] if start == final else torch.cat([self._head[layer][:, start:], tail[layer]], 1)

    @contextlib.contextmanager
    def _recording(self, parts, upto: int, first: int = 0):
        """Append what enters layers first..upto (index n_layers: what leaves the last) to parts, per call.
        Registered before any edit's hooks, so it sees what enters a layer before an edit there changes it."""
        layers, handles = self.hm.layers, []

        def entering(at):
            return lambda module, args, kwargs: parts[at].append(
                (args[0] if args else kwargs["hidden_states"]).detach().clone()
            )

        try:
            for at in range(first, min(upto, len(layers) - 1) + 1):
                handles.append(layers[at].register_forward_pre_hook(entering(at), with_kwargs=True))
            if upto >= len(layers):
                leaving = lambda module, args, out: parts[-1].append(first_tensor(out).detach().clone())  # noqa: E731
                handles.append(layers[-1].register_forward_hook(leaving))
            yield
        finally:
            for handle in handles:
                handle.remove()

    def first_layer(self, edits, heads_off, heads_off_final, capture, attention):
        """The first layer any edit or read-out touches (the number of layers if none does)."""
        if not self.minimal:
            return 0
        layers = [parse_site(s).layer for s in [*edits, *capture]] + [*(heads_off or {}), *(heads_off_final or {})]
        return min(layers + list(attention), default=self.hm.n_layers)

    def first_position(self, edits, heads_off, capture_at):
        """The first position any edit or capture touches, at most the final one (where read-outs are)."""
        start = self.ids.shape[1] - 1
        if heads_off or not self.minimal:
            return 0
        for positions in [e.positions for e in edits.values()] + ([capture_at] if capture_at != () else []):
            if positions is None:
                return 0
            idx = self.index(positions)
            if idx.numel():
                start = min(start, int(idx.min()))
        return start

    @torch.no_grad()
    def forward(
        self, edits=None, heads_off=None, heads_off_final=None, capture=(), capture_at=None, attention=(), logits=True
    ):
        """Final-position logits [B, V] (None if not `logits`), attentions {layer: [B, H, T]} and captures.

        edits: {site: Edit} on write sites; heads_off: {layer: [head, ...]} zeroed at every position,
        heads_off_final: the same at the final position only; capture: write sites recorded at `capture_at`
        (a position set or per-item lists); attention: the layers whose final-position attention is read.
        Without logits the forward stops after the last layer it captures or reads.
        """
        hm = self.hm
        edits = dict(edits or {})
        for site, edit in edits.items():
            if not isinstance(edit, Edit):
                raise TypeError(f"edit of {site}: give Edit(positions, values), not {type(edit).__name__}")
        start = self.first_position(edits, heads_off, capture_at if capture else ())
        if not logits and start not in self._prefixes:
            start = 0  # it stops after the layers it reads: cheaper from the first token than a prefix of every layer
        final, origin, before = self.ids.shape[1] - 1, start, None
        unedited = not edits and not heads_off
        if unedited and start == 0 and self.minimal and logits and final > 0 and final not in self._prefixes:
            before, start = self._fill_prefix(final, capture), final  # a full pass leaves the prefix on its way
        ids = self.ids[:, start:]
        modules, options = {}, {}
        # Hooks on one module run in registration order: a capture of an edited site sees the edit.
        for site, edit in edits.items():
            modules[site], options[site] = site_hook(hm, site, edit=self._edit(edit, start))
        for final_only, off in ((False, heads_off), (True, heads_off_final)):
            for layer, heads in (off or {}).items():
                proj, _, dim = hm.head_mixer(layer)
                name, edit = f"heads.{layer}.{final_only}", _zero_heads(heads, dim, final_only)
                modules[name], options[name] = proj, {"edit_input": ignore_name(edit)}
        for site in capture:
            modules[f"capture.{site}"], options[f"capture.{site}"] = site_hook(hm, site, capture=True)
        for layer in attention:
            modules[f"attention.{layer}"] = hm.attention(layer)
            options[f"attention.{layer}"] = {"retain_output": False, "retain_weights": True}
        if not logits and not (capture or attention):
            raise ValueError("a forward without logits must capture a site or read an attention layer")
        if not logits and self.minimal:
            last = max([parse_site(s).layer for s in capture] + list(attention))
            modules["stop"], options["stop"] = hm.layers[last], {"retain_output": False, "stop": True}
        kwargs = {"logits_to_keep": 1}
        if start:
            positions = torch.arange(start, self.ids.shape[1], device=ids.device).expand(ids.shape[0], -1)
            kwargs |= {"cache": copy.deepcopy(self.prefix(start)), "use_cache": True, "position_ids": positions}
        implementation = "eager" if attention or not self.minimal else "sdpa"
        first = self.first_layer(edits, heads_off, heads_off_final, capture, attention)
        # How deep this forward's stream is unedited: to its first edited layer, or all it runs.
        unedited_upto = hm.n_layers if logits else max([parse_site(s).layer for s in capture] + list(attention))
        if edits or heads_off or heads_off_final:
            unedited_upto = first
        if self.minimal and first > 0 and start < final and self._head is None and not unedited:
            self._base()  # one pass of the batch, which every later forward resumes from
        resume, stream = self._resume_point(start, implementation, first) if self.minimal else (0, None)
        skip = hm.resumed(resume, stream) if resume else contextlib.nullcontext()
        record, tail = contextlib.nullcontext(), self._tail.setdefault(implementation, [])
        if self.minimal and start == final and unedited_upto >= len(tail):
            parts = [[] for _ in range(hm.n_layers + 1)]
            record = self._recording(parts, unedited_upto, first=len(tail))
        with hm.attention_implementation(implementation), skip, record, TraceDict(modules, options) as traces:
            out = hm.model(ids, **kwargs)
        if not isinstance(record, contextlib.nullcontext):
            tail += [p[0] for p in parts[len(tail) : unedited_upto + 1]]
        attn = {layer: traces[f"attention.{layer}"].weights[:, :, -1].float() for layer in attention}
        # A sliding-window layer continuing a cache sees only its window, the last keys: left-pad to every position
        # with the zeros a full forward has there.
        attn = {layer: torch.nn.functional.pad(w, (self.ids.shape[1] - w.shape[-1], 0)) for layer, w in attn.items()}
        captured = {}
        if capture:
            idx = self.index(capture_at) - origin
            for site in capture:
                kept = retained(traces[f"capture.{site}"])
                captured[site] = gather(kept if before is None else torch.cat([before[site], kept], 1), idx)
        return (out.logits[:, -1].float() if logits else None), attn, captured

    def _edit(self, edit: Edit, start: int):
        """edit as a function of a site's tensor, which holds positions start.. of the batch."""
        if edit.positions is None:
            return edit.values
        idx = self.index(edit.positions) - start

        def apply(t):
            values = edit.values(gather(t, idx)) if callable(edit.values) else edit.values
            return scatter_at(idx, values)(t)

        return apply

    def value_logits(self, logits, entry):
        """Logit of one choice (a dictionary entry's value) per item; `entry` indexes choices."""
        return logits.gather(1, self.choices.gather(1, torch.as_tensor(entry, device=logits.device)[:, None]))[:, 0]

    def correct(self, logits, entry):
        """Per item: is one choice's token the top prediction?"""
        ids = self.choices.gather(1, torch.as_tensor(entry, device=logits.device)[:, None])[:, 0]
        return logits.argmax(-1) == ids


@torch.no_grad()
def transplant_ids(hm, donor_ids, host_ids, sites, donor_at, host_at):
    """Final-position logits [n, vocab] of each host with its donor's writes at `sites` copied in.

    donor_ids[i], host_ids[i]: token id lists (any lengths); donor_at[i], host_at[i]: token positions of as
    many tokens, so that writes move one to one. Items are batched by (host, donor) token length; the result
    is in item order.
    """
    if not len(donor_ids) == len(host_ids) == len(donor_at) == len(host_at):
        raise ValueError(f"{len(donor_ids)} donors for {len(host_ids)} hosts; give one donor per host")
    sites = [str(s) for s in sites]
    for i, (d, h) in enumerate(zip(donor_at, host_at, strict=True)):
        if len(d) != len(h):
            raise ValueError(f"item {i}: {len(d)} donor and {len(h)} host positions; writes move one to one")
    groups = {}
    for i in range(len(host_ids)):
        groups.setdefault((len(host_ids[i]), len(donor_ids[i]), len(host_at[i])), []).append(i)
    out = [None] * len(host_ids)
    for items in groups.values():
        d_run = Runner(hm, [list(donor_ids[i]) for i in items])
        h_run = Runner(hm, [list(host_ids[i]) for i in items])
        writes = d_run.forward(capture=sites, capture_at=[donor_at[i] for i in items], logits=False)[2]
        logits = h_run.forward({s: Edit([host_at[i] for i in items], writes[s]) for s in sites})[0]
        for j, i in enumerate(items):
            out[i] = logits[j]
    return torch.stack(out)


def _zero_heads(heads, dim, final_only=False):
    at = slice(-1, None) if final_only else slice(None)

    def edit(t):
        t = t.clone()
        for h in heads:
            t[:, at, h * dim : (h + 1) * dim] = 0
        return t

    return edit


def attention_to(attn, positions):
    """attn [B, H, T] -> [B, H] summed over per-item positions."""
    mask = torch.zeros(attn.shape[0], attn.shape[-1], device=attn.device)
    for b, pos in enumerate(positions):
        mask[b, pos] = 1
    return (attn * mask[:, None]).sum(-1)


def mixer_sites(group):
    return [f"layers.{layer}.mixer_out" for layer in group]
