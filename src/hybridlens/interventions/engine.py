"""One engine for forwards with edits: a batch of prompts under site edits, head ablations and captures.

Circuit localization and transplants, the scale sweep and stitching all run the same kind of forward: one
batch of prompts of one token length, edited at write sites or heads, read at the final position. Its site
hooks are built by patch.site_hook, as patch.run builds them, so an edit means the same thing in both.

Runner        forwards of one batch: final-position logits, final-position attentions and captures
attention_to  final-position attentions [B, H, T] summed over per-item positions -> [B, H]
mixer_sites   the mixer_out write sites of a group's layers
"""

import torch

from hybridlens.interventions.hooks import TraceDict
from hybridlens.interventions.patch import gather, ignore_name, position_index, retained, site_hook
from hybridlens.tasks.retrieval import Prompt, token_positions
from hybridlens.tasks.vocab import language_forms


class Runner:
    """Forwards of one batch of prompts (one token length) with the circuit's interventions."""

    def __init__(self, hm, prompts: list[Prompt], n_languages: int):
        self.hm, self.prompts = hm, prompts
        self.ids, self.offsets = hm.encode([p.text for p in prompts])
        forms = language_forms(n_languages)
        self.value_ids = torch.tensor(
            [[hm.token_id(forms[p.language][v]) for _, v in p.pairs] for p in prompts], device=hm.device
        )

    def positions(self, part: str):
        return [token_positions(p, o, part) for p, o in zip(self.prompts, self.offsets, strict=True)]

    def entry_positions(self, entry: list[int]):
        """Token positions of one dictionary entry (key and value) per item; `entry` indexes pairs."""
        return [
            token_positions(p, o, f"key{e}") + token_positions(p, o, f"value{e}")
            for p, o, e in zip(self.prompts, self.offsets, entry, strict=True)
        ]

    @torch.no_grad()
    def forward(self, edits=None, heads_off=None, capture=(), capture_at=None, heads_off_final=None):
        """Final-position logits [B, V], final-position attentions {layer: [B, H, T]} and captures.

        edits: {site: fn(tensor [B, T, D]) -> tensor} on write sites; heads_off: {layer: [head, ...]} zeroed at
        every position, heads_off_final: the same at the final position only; capture: write sites recorded
        at `capture_at` (a position set or per-item lists).
        """
        hm = self.hm
        modules, options = {}, {}
        # Hooks on one module run in registration order: a capture of an edited site sees the edit.
        for site, fn in dict(edits or {}).items():
            modules[site], options[site] = site_hook(hm, site, edit=fn)
        for final, off in ((False, heads_off), (True, heads_off_final)):
            for layer, heads in (off or {}).items():
                proj, _, dim = hm.head_mixer(layer)
                modules[f"heads.{layer}.{final}"] = proj
                options[f"heads.{layer}.{final}"] = {"edit_input": ignore_name(_zero_heads(heads, dim, final))}
        for site in capture:
            modules[f"capture.{site}"], options[f"capture.{site}"] = site_hook(hm, site, capture=True)
        with TraceDict(modules, options) as traces:
            out = hm.model(self.ids, output_attentions=True, logits_to_keep=1)
        attn = {layer: a[:, :, -1].float() for layer, a in zip(hm.attention_layers(), out.attentions, strict=True)}
        captured = {}
        if capture:
            idx = position_index(capture_at, *self.ids.shape, self.ids.device)
            for site in capture:
                captured[site] = gather(retained(traces[f"capture.{site}"]), idx)
        return out.logits[:, -1].float(), attn, captured

    def value_logits(self, logits, entry):
        """Logit of one entry's value token per item."""
        return logits.gather(1, self.value_ids.gather(1, torch.as_tensor(entry, device=logits.device)[:, None]))[:, 0]


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
