"""HLA (Hybrid Linear Attention) for Gated DeltaNet, and the fixed chunk-mixing baseline.

Every finished chunk c of the sequence is an exact affine map of the GDN state, S -> A_c S + B_c. One GDN pass
over the chunk with values padded to [v | 0] and initial state [0 | I] gives both: the final state is
[B_c | A_c], and the output at token t is [o_t | A_{<=t}^T q_t] (the chunk's own output from a zero state, and
the query carried back through the chunk so far). A query-dependent gate s_i(q) in (0, 1) per earlier chunk
then mixes each chunk's map with the identity:

    S~_i = ((1 - s_i) I + s_i A_i) S~_{i-1} + s_i B_i,      o_t = o_t(chunk) + S~_{j-1}(q_t)^T A_{<=t}^T q_t

for a token t in chunk j; the current chunk always has gate 1, and all gates 1 is exactly GDN.

gated_delta_rule   GDN over [B, T, H, d]: flash-linear-attention's kernel on CUDA when it imports, else
                   transformers' plain PyTorch reference
chunk_summaries    (A_c, B_c) per chunk and the per-token pieces, from the padded pass
HLAMixer           drop-in replacement for a Qwen3.5 GatedDeltaNet mixer that shares its weights; `mode` is
                   "hla" (router gates), "fixed" (learned gate per chunk distance) or "gdn" (gates 1);
                   `router` is "paper" (the HLA authors' router and regularisers, docs/hla.md) or one of
                   ours: "hybridlens" (post-convolution query against softmax-pooled keys) and "cosine"
                   (the same vectors l2-normalised, as the delta rule compares them)
HLAState           the decode cache: conv tail, finished chunks' summaries, the unfinished chunk's tokens
"""

import math
import weakref
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from hybridlens.models.families import FAMILIES, family_of

MODES = ("hla", "fixed", "gdn")
ROUTERS = ("paper", "hybridlens", "cosine")
# The authors' weights of their three regularizers; ours weigh each 1 (and the config's `reg` scales both).
REG_WEIGHTS = {"paper": {"budget": 0.005, "support": 0.001, "binary": 0.001}}
PAPER_BUDGET = 3.0  # the paper's budget: earlier gates summing past 3 chunks are penalised
PAPER_SUPPORT_FROM = 3  # effective support is penalised for tokens with at least this many earlier chunks
# With its map at the identity (as initialised) a cosine router's scores span [-5, 5] before the bias, so a match
# can open a gate that a mismatch shuts; raw scores instead follow the vectors' norms, mostly positive after SiLU.
COSINE_SCALE = 5.0
GDN_SLOT = FAMILIES["qwen3_5"].linear  # where a Qwen3.5 decoder layer keeps its GatedDeltaNet (the adapter knows)


def _fla_kernel():
    if not torch.cuda.is_available():
        return None
    try:
        from fla.ops.gated_delta_rule import chunk_gated_delta_rule
    except ImportError:
        return None
    return chunk_gated_delta_rule


def mix_dtype(dtype: torch.dtype) -> torch.dtype:
    """The dtype HLA's chunk summaries, read-out and mix run in: float32, or the model's if it is wider."""
    return torch.promote_types(dtype, torch.float32)


def gated_delta_rule(q, k, v, g, beta, initial_state, use_fla=True):
    """Outputs [B, T, H, dv] in v's dtype and final state [B, H, dk, dv] in mix_dtype: flash-linear-attention's
    contract (its state is float32 from a bfloat16 forward), which the PyTorch path keeps too; q and k are
    l2-normalised inside, q scaled."""
    kernel = _fla_kernel() if use_fla and q.is_cuda else None
    if kernel is not None:
        out, state = kernel(
            q, k, v, g=g, beta=beta, initial_state=initial_state, output_final_state=True, use_qk_l2norm_in_kernel=True
        )
        return out, state
    from transformers.models.qwen3_5.modeling_qwen3_5 import torch_chunk_gated_delta_rule

    # One reference chunk per sequence when it is short (HLA's chunks): padding to 64 tokens did 4x the work.
    out, state = torch_chunk_gated_delta_rule(
        q,
        k,
        v,
        g=g,
        beta=beta,
        chunk_size=min(64, q.shape[1]),
        initial_state=initial_state,
        output_final_state=True,
        use_qk_l2norm_in_kernel=True,
    )
    return out.to(v.dtype), state.to(mix_dtype(v.dtype))


def chunk_summaries(q, k, v, g, beta, chunk: int, use_fla=True):
    """Per chunk of `chunk` tokens (the last one padded with identity tokens: beta = 0, g = 0):

    returns out [B, T, H, dv] (each chunk's own output from a zero state), qc [B, T, H, dk] (A_{<=t}^T q_t, the
    normalised, scaled query carried back through its chunk), A [B, H, n, dk, dk] and Bm [B, H, n, dk, dv];
    A and Bm in mix_dtype, out and qc in v's dtype, whichever kernel ran.
    """
    b, t, h, dk = k.shape
    dv = v.shape[-1]
    pad = (-t) % chunk
    if pad:
        q, k, v = (F.pad(x, (0, 0, 0, 0, 0, pad)) for x in (q, k, v))
        g, beta = (F.pad(x, (0, 0, 0, pad)) for x in (g, beta))
    n = (t + pad) // chunk

    def per_chunk(x):  # [B, n*C, ...] -> [B*n, C, ...]
        return x.reshape(b * n, chunk, *x.shape[2:])

    v_pad = torch.cat([v, v.new_zeros(*v.shape[:-1], dk)], -1)
    mix = mix_dtype(v.dtype)
    init = torch.cat([v.new_zeros(dk, dv, dtype=mix), torch.eye(dk, dtype=mix, device=v.device)], -1)
    init = init.expand(b * n, h, dk, dv + dk).contiguous()
    out, final = gated_delta_rule(
        per_chunk(q), per_chunk(k), per_chunk(v_pad), per_chunk(g), per_chunk(beta), init, use_fla
    )
    out = out.reshape(b, n * chunk, h, dv + dk)[:, :t]
    final = final.reshape(b, n, h, dk, dv + dk).transpose(1, 2).to(mix)
    return out[..., :dv], out[..., dv:], final[..., dv:], final[..., :dv]


@dataclass
class HLAState:
    """What decoding needs: the conv tail, finished chunks' (A, B, representatives) and the open chunk."""

    conv: torch.Tensor  # [B, conv_dim, kernel - 1] pre-conv inputs
    A: torch.Tensor  # [B, H, n, dk, dk]
    Bm: torch.Tensor  # [B, H, n, dk, dv]
    reps: torch.Tensor  # [B, H, n, buckets, dk] bucket representatives of the router's keys
    open: tuple  # (q, k, v, g, beta, router q, router k) of the unfinished chunk, [B, L, ...] with L < chunk


class HLAMixer(nn.Module):
    """A Qwen3.5 GatedDeltaNet mixer with HLA (or fixed) chunk mixing; projections, conv, decay, norm and output
    are the wrapped GDN's own modules (shared, not copied).

    forward(hidden [B, T, D], state=None) -> (output [B, T, D], new state, aux losses)
    """

    def __init__(
        self,
        gdn,
        mode: str = "hla",
        chunk: int = 256,
        bucket: int = 16,
        gate_bias: float = 2.2,
        max_distance: int = 64,
        budget: float = 0.5,
        use_fla: bool = True,
        router: str = "paper",
    ):
        super().__init__()
        if mode not in MODES:
            raise ValueError(f"HLA mode {mode!r}; use one of {MODES}")
        if router not in ROUTERS:
            raise ValueError(f"HLA router {router!r}; use one of {ROUTERS}")
        if chunk % bucket:
            raise ValueError(f"HLA chunk size {chunk} is not a multiple of the bucket size {bucket}")
        self.gdn, self.mode, self.chunk, self.bucket, self.budget, self.use_fla, self.router_kind = (
            gdn,
            mode,
            chunk,
            bucket,
            budget,
            use_fla,
            router,
        )
        h, dk = gdn.num_v_heads, gdn.head_k_dim
        self.reg_weights = REG_WEIGHTS.get(router, dict.fromkeys(("support", "budget", "binary"), 1.0))
        # New weights live beside the GDN's, in float32 (or wider) so that small updates survive a bf16 model.
        like = {"device": gdn.A_log.device, "dtype": mix_dtype(gdn.in_proj_qkv.weight.dtype)}
        if router == "paper":
            # The authors' router: per-head d x d maps, initialised as torch.nn.Linear initialises (no bias), of
            # the query and of a one-head self-attention inside each bucket (key, value, output); a constant bias.
            for name in ("query_map", "pool_key", "pool_value", "pool_out"):
                weight = torch.empty(h, dk, dk, **like).uniform_(-(dk**-0.5), dk**-0.5)
                self.register_parameter(name, nn.Parameter(weight))
            self.register_buffer("gate_bias", torch.full((h,), float(gate_bias), **like))
        else:
            # Ours: a per-head map of the query against bucket representatives (keys pooled by a softmax over
            # one learned vector). Identity map and a large bias: gates start near 1 (= GDN).
            self.router = nn.Parameter(torch.eye(dk, **like).repeat(h, 1, 1))
            self.pool = nn.Parameter(torch.zeros(h, dk, **like))
            self.gate_bias = nn.Parameter(torch.full((h,), float(gate_bias), **like))
        # Fixed mixing: one content-independent gate logit per head and chunk distance (1 = the previous chunk).
        self.distance_logit = nn.Parameter(torch.zeros(h, max_distance, **like))
        self.last_gates = None  # [B, H, T, n] gates of the last forward (0 where a chunk is not earlier), to inspect

    # --- the GDN parts ----------------------------------------------------------------------------------
    def _project(self, hidden, conv_tail):
        gdn = self.gdn
        b, t, _ = hidden.shape
        mixed = gdn.in_proj_qkv(hidden).transpose(1, 2)  # [B, conv_dim, T]
        if conv_tail is None:
            conv_tail = mixed.new_zeros(b, mixed.shape[1], gdn.conv_kernel_size - 1)
        ext = torch.cat([conv_tail, mixed], -1)
        conv = F.conv1d(ext, gdn.conv1d.weight, gdn.conv1d.bias, groups=gdn.conv_dim)
        conv = F.silu(conv).transpose(1, 2)
        q, k, v = torch.split(conv, [gdn.key_dim, gdn.key_dim, gdn.value_dim], -1)
        q, k = self._heads(q, b, t), self._heads(k, b, t)
        v = v.reshape(b, t, -1, gdn.head_v_dim)
        if self.router_kind == "paper":  # the authors' "raw" q and k: the projections, before conv and SiLU
            qr, kr, _ = torch.split(mixed.transpose(1, 2), [gdn.key_dim, gdn.key_dim, gdn.value_dim], -1)
            qr, kr = self._heads(qr, b, t), self._heads(kr, b, t)
        else:
            qr, kr = q, k
        beta = gdn.in_proj_b(hidden).sigmoid()
        g = -gdn.A_log.float().exp() * F.softplus(gdn.in_proj_a(hidden).float() + gdn.dt_bias)
        z = gdn.in_proj_z(hidden).reshape(b, t, -1, gdn.head_v_dim)
        return q, k, v, g.to(v.dtype), beta, qr, kr, z, ext[..., -(gdn.conv_kernel_size - 1) :]

    def _heads(self, x, b, t):
        """[B, T, key_dim] -> [B, T, H, dk], grouped value heads sharing their query/key head."""
        gdn = self.gdn
        x = x.reshape(b, t, -1, gdn.head_k_dim)
        return x.repeat_interleave(gdn.num_v_heads // gdn.num_k_heads, 2)

    def _output(self, core, z):
        b, t = core.shape[:2]
        out = self.gdn.norm(core.reshape(-1, self.gdn.head_v_dim), z.reshape(-1, self.gdn.head_v_dim))
        return self.gdn.out_proj(out.reshape(b, t, -1))

    # --- gates ------------------------------------------------------------------------------------------
    def representatives(self, k):
        """The router's keys [B, n*C, H, dk] of finished chunks -> one representative per bucket,
        [B, H, n, buckets, dk]."""
        b, t, h, dk = k.shape
        kb = k.reshape(b, t // self.bucket, self.bucket, h, dk)
        if self.router_kind == "paper":  # one-head self-attention inside the bucket, then the mean of its outputs
            keys = torch.einsum("bnchd,hde->bnche", kb, self.pool_key.to(k.dtype))
            values = torch.einsum("bnchd,hde->bnche", kb, self.pool_value.to(k.dtype))
            att = torch.softmax(torch.einsum("bnihd,bnjhd->bnhij", kb, keys) / dk**0.5, dim=-1)
            mean = torch.einsum("bnhij,bnjhd->bnhd", att, values) / self.bucket
            reps = torch.einsum("bnhd,hde->bnhe", mean, self.pool_out.to(k.dtype))
        else:
            w = torch.softmax(torch.einsum("bnchd,hd->bnch", kb, self.pool.to(k.dtype)), dim=2)
            reps = torch.einsum("bnch,bnchd->bnhd", w, kb)  # [B, buckets total, H, dk]
        return reps.reshape(b, t // self.chunk, self.chunk // self.bucket, h, dk).permute(0, 3, 1, 2, 4)

    def gates(self, q_raw, reps, chunk_of):
        """Gate logits [B, H, T, n] of every token for every finished chunk (masking is the caller's)."""
        if self.mode == "hla":
            cosine = self.router_kind == "cosine"
            if cosine:
                q_raw, reps = F.normalize(q_raw, dim=-1), F.normalize(reps, dim=-1)
            qmap = self.query_map if self.router_kind == "paper" else self.router
            mapped = torch.einsum("bthd,hde->bhte", q_raw, qmap.to(q_raw.dtype))
            scores = torch.einsum("bhte,bhnme->bhtnm", mapped, reps)
            scores = scores * COSINE_SCALE if cosine else scores / q_raw.shape[-1] ** 0.5
            nb = reps.shape[-2]
            logit = torch.logsumexp(scores, -1) - math.log(nb)  # the mean over buckets, in log space
            return logit + self.gate_bias.to(q_raw.dtype)[None, :, None, None]
        n = reps.shape[2]
        dist = (chunk_of[:, None] - torch.arange(n, device=chunk_of.device)[None]).clamp(
            1, self.distance_logit.shape[1]
        )
        logit = self.distance_logit[:, dist - 1] + self.gate_bias[:, None, None]  # [H, T, n]
        return logit[None].to(q_raw.dtype).expand(q_raw.shape[0], -1, -1, -1)

    # --- forward ----------------------------------------------------------------------------------------
    def forward(self, hidden, state: HLAState | None = None):
        q, k, v, g, beta, qr, kr, z, conv_tail = self._project(hidden, None if state is None else state.conv)
        t_new = q.shape[1]
        tokens = (q, k, v, g, beta, qr, kr)
        if state is not None and state.open[0].shape[1]:  # the open chunk is recomputed with the new tokens
            tokens = tuple(torch.cat([o, x], 1) for o, x in zip(state.open, tokens, strict=True))
        q, k, v, g, beta, qr, kr = tokens
        n_prev = 0 if state is None else state.A.shape[2]
        out, qc, A, Bm = chunk_summaries(q, k, v, g, beta, self.chunk, self.use_fla)
        t = q.shape[1]
        n_full = t // self.chunk
        A, Bm = A[:, :, :n_full], Bm[:, :, :n_full]
        if n_full:
            reps = self.representatives(kr[:, : n_full * self.chunk])
        else:
            reps = q.new_zeros(*A.shape[:3], self.chunk // self.bucket, k.shape[-1])
        if state is not None:
            A, Bm = torch.cat([state.A, A], 2), torch.cat([state.Bm, Bm], 2)
            reps = torch.cat([state.reps, reps], 2)
        n = A.shape[2]
        chunk_of = n_prev + torch.arange(t, device=q.device) // self.chunk  # global chunk index per token
        aux, mix = {}, mix_dtype(v.dtype)
        out = out.to(mix)  # the read-out and the mix in float32 (or wider), whatever the model's dtype
        if n:
            visible = (torch.arange(n, device=q.device)[None] < chunk_of[:, None]).to(q.dtype)  # [T, n]
            if self.mode == "gdn":
                s = visible.expand(q.shape[0], q.shape[2], -1, -1)
            else:
                s = torch.sigmoid(self.gates(qr, reps, chunk_of)) * visible
                aux = self.regularizers(s, visible)
                self.last_gates = s.detach()
            out = out + self.compose(A, Bm, s.to(mix), qc.to(mix))
        out = out[:, t - t_new :].to(v.dtype)
        keep = n_full * self.chunk
        new_state = HLAState(
            conv_tail,
            A,
            Bm,
            reps,
            tuple(x[:, keep:] for x in tokens),
        )
        return self._output(out, z), new_state, aux

    @staticmethod
    def compose(A, Bm, s, qc):
        """Per token, S~(q_t)^T qc_t with S~ composed over the earlier chunks under the token's gates.

        S~_{j-1} = sum_i (M_{j-1} ... M_{i+1}) s_i B_i with M_i = (1 - s_i) I + s_i A_i, so the query is carried
        backwards through the chunks instead of composing a d_k x d_v state per token: O(d_k^2) per chunk and
        token, not O(d_k^2 d_v). Gates of chunks at or after the token's own are 0 (M = I, no term).
        """
        u = qc.transpose(1, 2)  # [B, H, T, dk]
        out = Bm.new_zeros(*u.shape[:3], Bm.shape[-1])
        for i in reversed(range(Bm.shape[2])):
            si = s[:, :, :, i, None]
            out = out + si * torch.einsum("bhtk,bhkv->bhtv", u, Bm[:, :, i])
            u = u + si * (torch.einsum("bhtk,bhkl->bhtl", u, A[:, :, i]) - u)
        return out.transpose(1, 2)

    def regularizers(self, s, visible):
        """The three regularizers of the gates s [B, H, T, n] (0 where a chunk is not earlier, visible [T, n]),
        unweighted (`reg_weights` weighs them); the paper's for its router, ours for the others."""
        if self.router_kind == "paper":
            return paper_regularizers(s, visible)
        count = visible.sum(-1)  # [T] earlier chunks per token
        has = count > 0
        total = s.sum(-1).clamp_min(1e-9)
        p = s / total[..., None]
        es = 1 / (p * p).sum(-1).clamp_min(1e-9)
        mean_gate = s.sum(-1) / count.clamp_min(1)
        binary = (s * (1 - s) * visible).sum(-1) / count.clamp_min(1)
        return {
            "support": (F.relu(es - 2) ** 2)[..., has].mean(),
            "budget": (F.relu(mean_gate - self.budget) ** 2)[..., has].mean(),
            "binary": binary[..., has].mean(),
        }


def paper_regularizers(s, visible):
    """The HLA authors' regularizers of gates s [B, H, T, n] over the earlier chunks (visible [T, n]):

    budget   (relu(sum of a token's gates - 3) / 3)^2, mean over tokens
    support  relu(ES - 2)^2 with ES = (sum s)^2 / sum s^2 (gates clamped at 1e-8), mean over the tokens with
             at least 3 earlier chunks (0 when there are none)
    binary   s (1 - s), mean over every (token, earlier chunk)
    """
    count = visible.sum(-1)  # [T]
    budget = (F.relu(s.sum(-1) - PAPER_BUDGET) / PAPER_BUDGET).pow(2).mean()
    late = count >= PAPER_SUPPORT_FROM
    if late.any():
        sc = s[..., late, :].clamp_min(1e-8) * visible[late]
        es = sc.sum(-1).pow(2) / sc.pow(2).sum(-1)
        support = F.relu(es - 2).pow(2).mean()
    else:
        support = s.new_zeros(())
    pairs = visible.sum() * s.shape[0] * s.shape[1]
    binary = (s * (1 - s) * visible).sum() / pairs.clamp_min(1)
    return {"support": support, "budget": budget, "binary": binary}


class HLALayer(nn.Module):
    """An HLAMixer in a decoder layer's mixer slot, with the decoder's call signature; the regularizers of the
    last forward stay in `aux`. Given a transformers cache, the layer keeps its HLAState beside it (keyed by the
    cache object), so `model.generate` decodes token by token; a cache is only ever extended, never cropped."""

    def __init__(self, mixer: HLAMixer):
        super().__init__()
        self.mixer, self.aux = mixer, {}
        self._states = weakref.WeakKeyDictionary()

    def forward(self, hidden_states, cache=None, attention_mask=None, **kwargs):
        from transformers.models.qwen3_5.modeling_qwen3_5 import apply_mask_to_padding_states

        hidden_states = apply_mask_to_padding_states(hidden_states, attention_mask)  # as the GDN does
        state = self._states.get(cache) if cache is not None else None
        out, new_state, self.aux = self.mixer(hidden_states, state)
        if cache is not None:
            self._states[cache] = new_state
        return out

    def penalty(self):
        """The regularizers of the last forward, weighted as the mixer's router prescribes."""
        return sum(self.mixer.reg_weights[name] * value for name, value in self.aux.items())


def to_hla(model, mode: str = "hla", **kwargs):
    """Replace every GDN mixer of a Qwen3.5 model, in place, by HLA (or fixed) mixing that shares its weights.

    With the default gate bias the gates start near 1, so the converted model starts as the original.
    """
    family = family_of(model.config.model_type)
    if not family.hla:
        hla = [f for f in FAMILIES if FAMILIES[f].hla]
        raise ValueError(
            f"to_hla: HLA converts the Gated DeltaNet of the families {hla}, not {family.name}'s {family.mixer}"
        )
    layers = family.base_model(model).layers
    converted = 0
    for layer in layers:
        gdn = getattr(layer, GDN_SLOT, None)
        if gdn is not None and not isinstance(gdn, HLALayer):
            setattr(layer, GDN_SLOT, HLALayer(HLAMixer(gdn, mode=mode, **kwargs)))
            converted += 1
    if not converted:
        raise ValueError(f"to_hla: the model has no Gated DeltaNet mixers (layers[i].{GDN_SLOT}) to convert")
    return model
