"""The HLA authors' router and regularizers against a plain float64 transcription of their definitions
(docs/hla.md): loops over heads, tokens, chunks and buckets, nothing shared with the library but its weights."""

import math

import pytest
import torch

from hybridlens.models.families import FAMILIES
from hybridlens.models.hla import HLAMixer
from hybridlens.models.toy import build_toy_model

CHUNK, BUCKET = 8, 4
TOL = 1e-10


@pytest.fixture(scope="module")
def mixer():
    fam = FAMILIES["qwen3_5"]
    torch.manual_seed(0)
    model = build_toy_model("qwen3_5", 64, 32, "LA", heads=2, seed=0).double()
    gdn = fam.linear_mixer(fam.base_model(model).layers[0])
    hla = HLAMixer(gdn, mode="hla", chunk=CHUNK, bucket=BUCKET, router="paper", gate_bias=0.7).double()
    with torch.no_grad():  # larger maps than the initial ones: gates spread over (0, 1), not all near the bias
        for name in ("query_map", "pool_key", "pool_value", "pool_out"):
            getattr(hla, name).mul_(20)
    return hla


def raw_heads(mixer, x):
    """The authors' router input: q_proj(h), k_proj(h) before the short convolution, per value head."""
    gdn = mixer.gdn
    mixed = x @ gdn.in_proj_qkv.weight.T
    q, k = mixed[..., : gdn.key_dim], mixed[..., gdn.key_dim : 2 * gdn.key_dim]
    rep = gdn.num_v_heads // gdn.num_k_heads

    def per_head(y, h):
        return y[..., (h // rep) * gdn.head_k_dim : (h // rep + 1) * gdn.head_k_dim]

    return per_head, q, k


@torch.no_grad()
def reference_gates(mixer, x):
    """gates[b][h][t][c] for every earlier chunk c of token t, from the definitions."""
    per_head, q, k = raw_heads(mixer, x)
    d = mixer.gdn.head_k_dim
    scale = 1 / math.sqrt(d)
    batch, length = x.shape[:2]
    heads = mixer.gdn.num_v_heads
    gates = torch.zeros(batch, heads, length, length // CHUNK + 1, dtype=torch.float64)
    for b in range(batch):
        for h in range(heads):
            wq, wk, wv, wo = (getattr(mixer, n)[h] for n in ("query_map", "pool_key", "pool_value", "pool_out"))
            bias = float(mixer.gate_bias[h])
            kh, qh = per_head(k[b], h), per_head(q[b], h)
            reps = {}  # (chunk, bucket) -> representative
            for c in range(length // CHUNK):
                for m in range(CHUNK // BUCKET):
                    tokens = range(c * CHUNK + m * BUCKET, c * CHUNK + (m + 1) * BUCKET)
                    outputs = []
                    for i in tokens:
                        logits = [float(kh[i] @ (kh[j] @ wk)) * scale for j in tokens]
                        top = max(logits)
                        weights = [math.exp(a - top) for a in logits]
                        total = sum(weights)
                        outputs.append(sum((w / total) * (kh[j] @ wv) for w, j in zip(weights, tokens, strict=True)))
                    reps[c, m] = (sum(outputs) / BUCKET) @ wo
            for t in range(length):
                query = qh[t] @ wq
                for c in range(t // CHUNK):  # only finished chunks before the token's own
                    scores = [float(query @ reps[c, m]) * scale for m in range(CHUNK // BUCKET)]
                    mean_exp = sum(math.exp(s) for s in scores) / len(scores)
                    gates[b, h, t, c] = 1 / (1 + math.exp(-(math.log(mean_exp) + bias)))
    return gates


def reference_regularizers(gates, length):
    earlier = [t // CHUNK for t in range(length)]
    batch, heads = gates.shape[:2]
    budget, support, late, binary, pairs = 0.0, 0.0, 0, 0.0, 0
    for b in range(batch):
        for h in range(heads):
            for t in range(length):
                s = [float(gates[b, h, t, c]) for c in range(earlier[t])]
                budget += max(sum(s) - 3, 0) ** 2 / 9
                binary += sum(g * (1 - g) for g in s)
                pairs += len(s)
                if earlier[t] >= 3:
                    clamped = [max(g, 1e-8) for g in s]
                    es = sum(clamped) ** 2 / sum(g * g for g in clamped)
                    support += max(es - 2, 0) ** 2
                    late += 1
    return {
        "budget": budget / (batch * heads * length),
        "support": support / late if late else 0.0,
        "binary": binary / pairs if pairs else 0.0,
    }


def hidden(length):
    return torch.randn(2, length, 32, generator=torch.Generator().manual_seed(length), dtype=torch.float64)


@pytest.mark.parametrize("length", [40, 37, 20])  # a multiple of the chunk, not one, and too short for support
def test_gates_and_regularizers_equal_the_definitions(mixer, length):
    x = hidden(length)
    with torch.no_grad():
        _, _, aux = mixer(x)
    expected = reference_gates(mixer, x)
    got = mixer.last_gates
    assert got.shape[-1] == length // CHUNK
    torch.testing.assert_close(got, expected[..., : got.shape[-1]], rtol=0, atol=TOL)
    visible = got[..., torch.arange(length)[:, None] // CHUNK > torch.arange(got.shape[-1])[None]]
    assert float(visible.min()) < 0.1 and float(visible.max()) > 0.9  # the gates really vary
    for name, value in reference_regularizers(expected, length).items():
        assert float(aux[name]) == pytest.approx(value, rel=0, abs=TOL), name
    if length >= 4 * CHUNK:
        assert float(aux["budget"]) > 0 and float(aux["support"]) > 0
    else:
        assert float(aux["support"]) == 0.0


def test_decoding_token_by_token_opens_the_gates_prefill_does(mixer):
    length, prefill = 37, 5
    x = hidden(length)
    expected = reference_gates(mixer, x)
    with torch.no_grad():
        _, state, _ = mixer(x[:, :prefill])
        for t in range(prefill, length):
            _, state, _ = mixer(x[:, t : t + 1], state)
            n = t // CHUNK
            if n:
                step = mixer.last_gates[:, :, -1, :n]  # the new token's gates for every finished chunk
                torch.testing.assert_close(step, expected[:, :, t, :n], rtol=0, atol=TOL)
    assert state.reps.shape[2] == length // CHUNK
