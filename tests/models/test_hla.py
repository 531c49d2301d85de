"""HLA against its references: GDN (all gates 1), explicit chunk maps, full forward vs prefill + decode."""

import re

import pytest
import torch

from hybridlens.models.families import FAMILIES
from hybridlens.models.hla import HLAMixer, chunk_summaries, gated_delta_rule, to_hla
from hybridlens.models.toy import build_toy_model
from hybridlens.validation import assert_paths_close

# The Gated DeltaNet kernels (transformers' and fla's) compute in float32 whatever their inputs' dtype.
KERNEL = torch.float32

HLA_FAMILIES = [name for name, fam in FAMILIES.items() if fam.hla]


@pytest.fixture(scope="module", params=HLA_FAMILIES)
def gdn(request):
    """The Gated DeltaNet of a toy of each family HLA converts."""
    torch.manual_seed(0)
    model = build_toy_model(request.param, 64, 32, "LA", heads=2, seed=0).double()
    return FAMILIES[request.param].linear_mixer(FAMILIES[request.param].base_model(model).layers[0])


def hidden(t=37, seed=1):
    return torch.randn(2, t, 32, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)


@pytest.mark.parametrize(
    "mode, bias, router",
    [
        ("gdn", 0.0, "paper"),
        ("hla", 60.0, "paper"),
        ("hla", 60.0, "hybridlens"),
        ("hla", 60.0, "cosine"),
        ("fixed", 60.0, "hybridlens"),
    ],
)
def test_all_gates_one_is_gdn(gdn, mode, bias, router):
    hla = HLAMixer(gdn, mode=mode, chunk=8, bucket=4, gate_bias=bias, router=router).double()
    x = hidden()
    with torch.no_grad():
        out, _, _ = hla(x)
        reference = gdn(x)
    assert_paths_close(out, reference, dtype=KERNEL)


def test_chunk_maps_equal_the_product_of_token_maps():
    g_ = torch.Generator().manual_seed(3)
    b, t, h, dk, dv, chunk = 1, 10, 2, 4, 3, 4
    q, k = (torch.randn(b, t, h, dk, generator=g_, dtype=torch.float64) for _ in range(2))
    v = torch.randn(b, t, h, dv, generator=g_, dtype=torch.float64)
    g = -torch.rand(b, t, h, generator=g_, dtype=torch.float64)
    beta = torch.rand(b, t, h, generator=g_, dtype=torch.float64)
    _, _, A, B = chunk_summaries(q, k, v, g, beta, chunk)
    kn = k / (k.pow(2).sum(-1, keepdim=True) + 1e-6).sqrt()  # the kernel's l2norm
    for c in range(A.shape[2]):
        for head in range(h):
            Ac, Bc = torch.eye(dk, dtype=torch.float64), torch.zeros(dk, dv, dtype=torch.float64)
            for s in range(c * chunk, min((c + 1) * chunk, t)):
                kk = kn[0, s, head][:, None]
                At = g[0, s, head].exp() * (torch.eye(dk, dtype=torch.float64) - beta[0, s, head] * kk @ kk.T)
                Ac, Bc = At @ Ac, At @ Bc + beta[0, s, head] * kk @ v[0, s, head][None]
            assert_paths_close(A[0, head, c], Ac, dtype=KERNEL)
            assert_paths_close(B[0, head, c], Bc, dtype=KERNEL)


@pytest.mark.parametrize(
    "mode, router", [("hla", "paper"), ("hla", "hybridlens"), ("hla", "cosine"), ("fixed", "hybridlens")]
)
def test_prefill_then_decode_equals_the_full_forward(gdn, mode, router):
    torch.manual_seed(2)
    hla = HLAMixer(gdn, mode=mode, chunk=8, bucket=4, gate_bias=0.0, router=router).double()
    with torch.no_grad():
        hla.distance_logit.normal_()
        for p in (hla.pool,) if router != "paper" else (hla.query_map, hla.pool_key):
            p.normal_()
        x = hidden(29)
        full, _, _ = hla(x)
        out, state, _ = hla(x[:, :13])
        pieces = [out]
        for i in range(13, 29):
            out, state, _ = hla(x[:, i : i + 1], state)
            pieces.append(out)
    assert_paths_close(torch.cat(pieces, 1), full, dtype=KERNEL)
    assert state.A.shape[2] == 29 // 8 and state.open[0].shape[1] == 29 % 8


@pytest.mark.parametrize(
    "router, learned",
    [
        ("paper", ("query_map", "pool_key", "pool_value", "pool_out")),
        ("hybridlens", ("router", "pool", "gate_bias")),
    ],
)
def test_gates_are_query_dependent_and_gradients_reach_the_router(gdn, router, learned):
    hla = HLAMixer(gdn, mode="hla", chunk=8, bucket=4, gate_bias=0.0, router=router).double()
    out, _, aux = hla(hidden(40))
    with torch.no_grad():
        assert (out - gdn(hidden(40))).abs().max() > 1e-3  # gates near 0.5 really change the output
    assert set(aux) == {"support", "budget", "binary"}
    (out.pow(2).mean() + sum(aux.values())).backward()
    router_params = {n for n, _ in hla.named_parameters() if not n.startswith("gdn.") and n != "distance_logit"}
    assert router_params == set(learned)
    for name in learned:
        grad = getattr(hla, name).grad
        assert grad is not None and grad.abs().max() > 0
    hla.zero_grad()


def test_the_paper_router_keeps_its_bias_constant(gdn):
    hla = HLAMixer(gdn, chunk=8, bucket=4).double()
    assert "gate_bias" not in dict(hla.named_parameters())
    assert hla.gate_bias.tolist() == pytest.approx([2.2] * gdn.num_v_heads)
    assert hla.reg_weights == {"budget": 0.005, "support": 0.001, "binary": 0.001}
    assert (hla.chunk, hla.bucket) == (8, 4) and (HLAMixer(gdn).chunk, HLAMixer(gdn).bucket) == (256, 16)


def test_the_cosine_router_scores_normalised_query_against_normalised_representatives(gdn):
    hla = HLAMixer(gdn, mode="hla", chunk=8, bucket=4, gate_bias=0.5, router="cosine").double()
    g_ = torch.Generator().manual_seed(5)
    with torch.no_grad():
        hla.router.copy_(torch.randn(hla.router.shape, generator=g_, dtype=torch.float64))
    h, dk = hla.router.shape[:2]
    q = torch.randn(1, 3, h, dk, generator=g_, dtype=torch.float64) * 7  # norms far from 1
    reps = torch.randn(1, h, 2, 2, dk, generator=g_, dtype=torch.float64) * 0.1
    logits = hla.gates(q, reps, torch.tensor([2, 2, 2]))
    for head in range(h):
        for t in range(3):
            for c in range(2):
                qn = q[0, t, head] / q[0, t, head].norm()
                scores = [5 * (qn @ hla.router[head]) @ (r / r.norm()) for r in reps[0, head, c]]
                expected = torch.logsumexp(torch.stack(scores), 0) - torch.log(torch.tensor(2.0)) + 0.5
                torch.testing.assert_close(logits[0, head, t, c], expected.to(torch.float64))
    with pytest.raises(ValueError, match=r"HLA router 'dot'; use one of \('paper', 'hybridlens', 'cosine'\)"):
        HLAMixer(gdn, router="dot")


@pytest.mark.skipif(not torch.cuda.is_available(), reason="flash-linear-attention needs CUDA")
def test_fla_kernel_equals_plain_pytorch():
    pytest.importorskip("fla")
    g_ = torch.Generator().manual_seed(4)
    q, k, v = (torch.randn(2, 100, 2, 16, generator=g_) for _ in range(3))
    g, beta = -torch.rand(2, 100, 2, generator=g_), torch.rand(2, 100, 2, generator=g_)
    init = torch.zeros(2, 2, 16, 16)
    plain = gated_delta_rule(q, k, v, g, beta, init, use_fla=False)
    fast = gated_delta_rule(*(x.cuda() for x in (q, k, v, g, beta, init)), use_fla=True)
    for a, b in zip(plain, fast, strict=True):
        torch.testing.assert_close(b.cpu(), a, atol=2e-3, rtol=2e-3)


@pytest.mark.parametrize("family", ["qwen3_next", "granitemoehybrid"])
def test_a_family_hla_does_not_convert_is_refused_in_one_line(family):
    """Qwen3-Next's Gated DeltaNet keeps its projections fused; HLA reads Qwen3.5's separate ones."""
    model = build_toy_model(family, 64, 16, "LA", heads=2)
    hla = re.escape(str(HLA_FAMILIES))
    with pytest.raises(ValueError, match=rf"HLA converts the Gated DeltaNet of the families {hla}, not {family}'s"):
        to_hla(model)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_the_fla_dtype_contract_runs_in_float32_and_bfloat16(monkeypatch, dtype):
    """flash-linear-attention returns its final state in float32 and its output in the input's dtype;
    simulated here on the PyTorch kernel, HLA's summaries, read-out and mix run in float32 and a float32 or
    bfloat16 model converts, trains a step and decodes. With every gate 1 it is the GDN model within the
    path allowance of its dtype (validation.assert_paths_close)."""
    from hybridlens.models import hla as module

    plain = module.gated_delta_rule

    def fla_contract(q, k, v, g, beta, initial_state, use_fla=True):
        out, state = plain(q, k, v, g, beta, initial_state, use_fla=False)
        return out.to(q.dtype), state.float()

    monkeypatch.setattr(module, "gated_delta_rule", fla_contract)
    name = HLA_FAMILIES[0]
    gdn_model = build_toy_model(name, 64, 32, "LA", heads=2, seed=0).to(dtype)
    ids = torch.randint(0, 64, (2, 29), generator=torch.Generator().manual_seed(5))
    with torch.no_grad():
        reference = gdn_model(ids, use_cache=False).logits
    model = to_hla(build_toy_model(name, 64, 32, "LA", heads=2, seed=0).to(dtype), chunk=8, bucket=4)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    layer = FAMILIES[name].linear_mixer(FAMILIES[name].base_model(model).layers[0])  # the HLALayer
    mixer = layer.mixer
    with torch.no_grad():
        mixer.gate_bias.fill_(60.0)  # every gate 1
        assert_paths_close(model(ids, use_cache=False).logits, reference, dtype=dtype)
        mixer.gate_bias.fill_(0.0)
    logits = model(ids, use_cache=False).logits
    (logits.float().logsumexp(-1).mean() + layer.penalty()).backward()
    assert mixer.query_map.grad is not None and torch.isfinite(mixer.query_map.grad.float()).all()
    before = mixer.query_map.detach().clone()
    opt.step()
    assert mixer.query_map.dtype == torch.float32 and not torch.equal(mixer.query_map, before)
    with torch.no_grad():
        x = torch.randn(2, 29, 32, dtype=dtype, generator=torch.Generator().manual_seed(6))
        out, state, _ = mixer(x[:, :13])
        assert state.A.dtype == state.Bm.dtype == torch.float32 and out.dtype == dtype
        for i in range(13, 29):
            out, state, _ = mixer(x[:, i : i + 1], state)
        assert out.dtype == dtype and torch.isfinite(out.float()).all()


@pytest.mark.parametrize("router", ["paper", "hybridlens"])
def test_a_converted_model_decodes_through_the_transformers_cache_as_its_full_forward(router):
    """Prefill 13 tokens with a cache, then 10 single tokens: every step's logits are the full forward's; and
    generate() with the cache is greedy decoding by full recomputation."""
    from transformers import DynamicCache

    model = build_toy_model(HLA_FAMILIES[0], 64, 32, "LLA", heads=2, seed=0).double().eval()
    torch.manual_seed(3)
    to_hla(model, chunk=4, bucket=2, gate_bias=0.0, router=router)  # gates near 0.5: mixing matters
    ids = torch.randint(0, 64, (2, 23), generator=torch.Generator().manual_seed(8))
    with torch.no_grad():
        full = model(ids, use_cache=False).logits
        cache = DynamicCache(config=model.config)
        steps = [model(ids[:, :13], past_key_values=cache, use_cache=True).logits]
        for t in range(13, 23):
            steps.append(model(ids[:, t : t + 1], past_key_values=cache, use_cache=True).logits)
        assert_paths_close(torch.cat(steps, 1), full, dtype=KERNEL)
        generated = model.generate(ids[:, :13], max_new_tokens=8, do_sample=False, pad_token_id=0)
        greedy = ids[:, :13]
        for _ in range(8):
            greedy = torch.cat([greedy, model(greedy, use_cache=False).logits[:, -1:].argmax(-1)], 1)
    assert torch.equal(generated, greedy)
