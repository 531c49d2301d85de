"""Cross-architecture stitching: alignment across tokenizers, ridge maps, donor blocks run on foreign streams."""

import copy

import numpy as np
import pytest
import torch

from hybridlens.experiments.stitch import (
    CONDITIONS,
    TRANSFERS,
    RidgeMap,
    _swap,
    align_positions,
    block_edit,
    block_input,
    blocks,
    collect,
    final_block_writes,
    fit_maps,
    fit_ridge,
    map_scores,
    query_content,
    run_block,
    swap_rows,
)
from hybridlens.interventions.engine import Runner
from hybridlens.interventions.hooks import Trace, TraceDict
from hybridlens.models.adapter import HybridModel, load_model
from hybridlens.models.toy import build_toy_model
from hybridlens.tasks.dictionary import donor_host, split_keys, split_prompts
from hybridlens.tasks.items import TOKEN_ROLES, token_roles
from hybridlens.tasks.retrieval import make_prompts
from hybridlens.tasks.vocab import language_forms
from hybridlens.validation import assert_paths_close


def test_alignment_word_level_against_bpe(tokenizer, bpe):
    word = HybridModel(build_toy_model("qwen3_5", len(tokenizer), 32, "LLA", heads=2), tokenizer)
    pieces = HybridModel(build_toy_model("qwen3_5", len(bpe), 32, "LLA", heads=2), bpe)
    for p in make_prompts(5, 20, 8, "chat"):
        (ids_w,), (off_w,) = word.tokenize([p.text])
        (ids_b,), (off_b,) = pieces.tokenize([p.text])
        pairs = align_positions(off_w, off_b, len(p.text))
        # Every word-level token is a whole word whose last BPE piece ends where it does.
        assert [i for i, _ in pairs] == list(range(len(ids_w)))
        assert all(off_w[i][1] == off_b[j][1] for i, j in pairs)
        assert len(ids_b) > len(ids_w)  # this BPE splits some words, whose earlier pieces stay unaligned
        assert len({j for _, j in pairs}) == len(pairs) < len(ids_b)


def test_alignment_skips_template_tokens_and_keeps_the_final_pair():
    # b: two template tokens before the text (negative offsets) and one after it.
    off_a = [(0, 3), (4, 7), (8, 9)]
    off_b = [(-5, -2), (-2, 0), (0, 3), (4, 5), (5, 7), (8, 9), (9, 12)]
    assert align_positions(off_a, off_b, 9) == [(0, 2), (1, 4), (2, 6)]


def test_ridge_recovers_a_linear_map_and_shrinks_noise():
    rng = np.random.default_rng(0)
    x = rng.normal(size=(600, 6)) * 3 + 1
    a, b = rng.normal(size=(6, 4)), rng.normal(size=4)
    m = fit_ridge(x, x @ a + b + 1e-3 * rng.normal(size=(600, 4)), groups=np.arange(600) // 6)
    assert m.lam == 1e-4 and m.r2 > 0.999
    np.testing.assert_allclose(m.weight, a, atol=1e-3)
    out = m.apply(torch.tensor(x[:5], dtype=torch.float32)).double().numpy()
    np.testing.assert_allclose(out, x[:5] @ a + b, atol=1e-2)
    # Scored on new rows: the same map predicts them; rows from another map are predicted as badly as
    # 1 - |residual|^2 / |variance|, computed here by hand.
    x_new = rng.normal(size=(200, 6))
    assert m.score(x_new, x_new @ a + b) > 0.999
    y_other = x_new @ rng.normal(size=(6, 4))
    pred = (x_new - m.mean_in) @ m.weight + m.mean_out
    out_of = ((y_other - y_other.mean(0)) ** 2).sum()
    assert m.score(x_new, y_other) == pytest.approx(1 - ((y_other - pred) ** 2).sum() / out_of)
    noise = fit_ridge(x, rng.normal(size=(600, 4)))
    assert noise.lam >= 10 and noise.r2 < 0.01  # nothing to predict: strong shrinkage wins
    with pytest.raises(ValueError, match="matching rows"):
        fit_ridge(x, x[:-1])


def test_shuffled_map_keeps_the_norm_and_loses_the_directions():
    rng = np.random.default_rng(1)
    m = RidgeMap(np.zeros(5), np.zeros(5), rng.normal(size=(5, 5)), 1.0, 0.9)
    s = m.shuffled(0)
    assert np.isclose(np.linalg.norm(s.weight), np.linalg.norm(m.weight))
    assert not np.allclose(s.weight, m.weight)


def test_run_block_equals_the_models_own_layers(hm):
    """The donor block run on a given stream reproduces the model's own forward, for blocks with attention
    (rotary positions, causal mask) and without; position information comes from the model itself, and the
    layers before the block do not run."""
    ids = torch.randint(3, 60, (3, 17))
    n = hm.n_layers
    attention = hm.attention_layers()[-1]
    for first, last in [(0, n - 1), (attention, attention), (1, min(n - 1, attention + 1)), (0, 0)]:
        modules = {"in": hm.layers[first], "out": hm.layers[last]}
        with TraceDict(modules, {"in": {"retain_input": True}}) as t:
            hm.model(ids)
        with Trace(hm.layers[max(first - 1, 0)]) as before:
            got = run_block(hm, first, last, t["in"].input)
        assert (before.output is None) == (first > 0)  # the layers before the block do not run
        assert_paths_close(got, t["out"].output)
        if (first, last) == (0, n - 1):
            whole, stream = got, t["in"].input
    # The given stream is the block's only input: the token ids behind the zero embeddings play no part.
    other = run_block(hm, 0, n - 1, stream + 0.1 * torch.randn_like(stream))
    assert not torch.allclose(other, whole, atol=1e-3)


def identity_maps(d):
    eye = RidgeMap(np.zeros(d), np.zeros(d), np.eye(d), 0.0, 1.0)
    blocks = ("address", "encode_address")
    return {f"{b}.in": eye for b in blocks} | {f"{b}.out.{role}": eye for b in blocks for role in TOKEN_ROLES}


def zero_means(d):
    return {f"{b}.{role}": np.zeros(d) for b in ("address", "encode_address") for role in TOKEN_ROLES}


def test_self_stitch_with_identity_maps_changes_nothing(hm):
    spans = {"address": (0, 1), "encode_address": (0, hm.n_layers - 1)}
    prompts = make_prompts(3, 12, 4, "chat", 2)
    means = zero_means(hm.d_model)
    twin = HybridModel(copy.deepcopy(hm.model), hm.tokenizer)  # the donor's forward runs inside the receiver's
    maps = identity_maps(hm.d_model)
    rows = swap_rows(hm, twin, {"receiver": spans, "donor": spans}, maps, means, donor_host(prompts, 3), 3)
    got = {(r["transfer"], r["condition"], r["item"]): r for r in rows}
    assert len(rows) == len(TRANSFERS) * len(CONDITIONS) * len(prompts)
    for block in ("address", "encode_address"):
        for i in range(len(prompts)):
            assert got[(block, "stitched", i)]["correct"] == got[(block, "intact", i)]["correct"]
    with pytest.raises(ValueError, match="load it twice"):
        swap_rows(hm, hm, {"receiver": spans, "donor": spans}, maps, means, donor_host(prompts, 3), 3)


def test_the_swap_maps_each_position_by_its_role(hm):
    """A self-swap whose key map writes nothing and whose other maps are the identity is the model with the
    block's write removed at the dictionary keys only."""
    span, d = (0, 1), hm.d_model
    twin = HybridModel(copy.deepcopy(hm.model), hm.tokenizer)
    eye = RidgeMap(np.zeros(d), np.zeros(d), np.eye(d), 0.0, 1.0)
    m_out = {role: eye for role in TOKEN_ROLES} | {
        "key": RidgeMap(np.zeros(d), np.zeros(d), np.zeros((d, d)), 0.0, 1.0)
    }
    p = make_prompts(4, 1, 4, "chat", 2)[0]
    (ids,), (off,) = hm.tokenize([p.text])
    ids, roles = torch.tensor([ids]), token_roles(p, off)
    keys = torch.tensor([[r == "key" for r in roles]])
    role_ids = torch.tensor([[TOKEN_ROLES.index(r) for r in roles]])
    run = Runner(hm, ids)
    h_in = block_input(run, span[0])
    swapped = run.forward(block_edit(h_in, span[1], _swap(twin, span, eye, m_out, role_ids)))[0]
    removed = run.forward(block_edit(h_in, span[1], lambda h, out: torch.where(keys[..., None], h, out)))[0]
    assert_paths_close(swapped, removed)
    assert not torch.allclose(removed, run.forward()[0], atol=1e-3)


@pytest.fixture(scope="module")
def pair(saved_models):
    return load_model(saved_models["qwen3_5"]), load_model(saved_models["granitemoehybrid"])


def test_key_split_is_disjoint_seeded_and_checked(pair):
    a, b = pair
    fit, test, values, languages = split_keys(a, b, 1, 0.34, 4)
    assert not set(fit) & set(test) and len(test) == round((len(fit) + len(test)) * 0.34)
    assert split_keys(a, b, 1, 0.34, 4) == (fit, test, values, languages)
    assert split_keys(a, b, 2, 0.34, 4)[1] != test
    for p in split_prompts((fit, test, values, languages), 0, 10, 4, "chat", "test"):
        assert {k for k, _ in p.pairs} <= set(test)
    with pytest.raises(ValueError, match="too few for 40-pair"):
        split_keys(a, b, 1, 0.34, 40)


def test_maps_between_two_families_and_the_swap_rows(pair):
    recv, donor = pair
    spans = {
        "receiver": {"address": (0, 1), "encode_address": (0, 3)},
        "donor": {"address": (3, 4), "encode_address": (0, 4)},
    }
    split = split_keys(recv, donor, 1, 0.34, 4)
    fit = split_prompts(split, 0, 40, 4, "chat", "fit")
    data_r, data_d = collect(recv, fit, spans["receiver"]), collect(donor, fit, spans["donor"])
    # The stream entering layer 0 is the embedding: the store holds it for every token.
    (ids,), _ = recv.tokenize([fit[0].text])
    emb = recv.model.get_input_embeddings()(torch.tensor(ids)).detach().numpy()
    np.testing.assert_allclose(data_r["resid.0"][: len(ids)], emb, atol=1e-6)
    # Per prompt, the store holds the input embeddings of the queried key and of its answer.
    p = fit[0]
    key, answer = ids.index(recv.token_id(p.pairs[p.query][0])), ids.index(recv.token_id(p.answer))
    np.testing.assert_allclose(data_r["embedding.key"][0], emb[key], atol=1e-6)
    np.testing.assert_allclose(data_r["embedding.answer"][0], emb[answer], atol=1e-6)
    maps, means, fraction = fit_maps(data_r, data_d, spans["receiver"], spans["donor"], (1e-2, 1, 100))
    assert fraction == 1.0  # one tokenizer: every position aligns
    # A map's score is its R^2 on a store's rows: by hand for the final token's map (one row per prompt), the
    # map of the query vector.
    scores = map_scores(maps, data_r, data_d, spans["receiver"], spans["donor"])
    x, y = (
        final_block_writes(data_d, spans["donor"]["address"]),
        final_block_writes(data_r, spans["receiver"]["address"]),
    )
    final = maps["address.out.final"]
    pred = (x - final.mean_in) @ final.weight + final.mean_out
    assert scores["address.out.final"] == pytest.approx(1 - ((y - pred) ** 2).sum() / ((y - y.mean(0)) ** 2).sum())
    # Each role's mean write is the receiver's mean over its tokens of that role.
    first, last = spans["receiver"]["encode_address"]
    keys = data_r["role"] == TOKEN_ROLES.index("key")
    np.testing.assert_allclose(
        means["encode_address.key"], (data_r[f"resid.{last + 1}"] - data_r[f"resid.{first}"])[keys].mean(0), atol=1e-6
    )
    assert keys.sum() == 4 * len(fit)  # four dictionary keys per prompt, one token each
    few = [collect(m, fit[:5], s) for m, s in ((recv, spans["receiver"]), (donor, spans["donor"]))]
    with pytest.raises(ValueError, match="map address.out.question: 5 aligned tokens .* raise stitch.n_fit"):
        fit_maps(*few, spans["receiver"], spans["donor"], (1e-2, 1))
    assert maps["address.in"].weight.shape == (recv.d_model, donor.d_model)
    assert {maps[f"address.out.{role}"].weight.shape for role in TOKEN_ROLES} == {(donor.d_model, recv.d_model)}
    test = split_prompts(split, 1, 10, 4, "chat", "test")
    rows = swap_rows(recv, donor, spans, maps, means, donor_host(test, 1), 1)
    intact = {r["item"]: r for r in rows if r["condition"] == "intact" and r["transfer"] == "address"}
    logits = recv.model(recv.encode([test[0].text])[0]).logits[0, -1]
    answer = recv.token_id(language_forms(2)[test[0].language][test[0].pairs[test[0].query][1]])
    assert intact[0]["correct"] == int(logits.argmax() == answer)
    assert {(r["transfer"], r["condition"]) for r in rows} == {(t, c) for t in TRANSFERS for c in CONDITIONS}


def test_query_content_tells_a_key_code_from_an_answer_code():
    """A final-token write that is a linear image of the queried key's embedding scores R^2 ~ 1 for the key and
    ~ 0 for an unrelated answer, on prompts the probe was not fitted on; an older store is refused."""
    rng = np.random.default_rng(0)
    w = rng.normal(size=(16, 24))

    def store(n):
        key, answer = rng.normal(size=(n, 16)), rng.normal(size=(n, 16))
        n_tok = 3  # three tokens per prompt; the block (layers 0-1) writes only at the final one
        out = np.zeros((n * n_tok, 24))
        out[n_tok - 1 :: n_tok] = key @ w
        return {
            "resid.0": np.zeros_like(out),
            "resid.2": out,
            "prompt": np.repeat(np.arange(n), n_tok),
            "position": np.tile(np.arange(n_tok), n),
            "role": np.zeros(n * n_tok, dtype=np.int8),
            "embedding.key": key,
            "embedding.answer": answer,
        }

    r2 = query_content(store(200), store(50), (0, 1), (1e-4, 1e-2, 1))
    assert r2["key"] > 0.99 and abs(r2["answer"]) < 0.2
    old = store(20)
    del old["embedding.key"]
    with pytest.raises(ValueError, match="older hybridlens .* --forcerun stitch_acts"):
        query_content(old, store(20), (0, 1), (1,))


def test_self_stitch_through_fitted_maps_restores_the_intact_model(saved_models):
    """Maps fitted between a model and its copy are the identity (held-out R^2 = 1), so every transfer
    through them gives the intact model's answers: the fitting, alignment and swap plumbing end to end."""
    recv, donor = load_model(saved_models["qwen3_5"]), load_model(saved_models["qwen3_5"])
    spans = {"address": (0, 1), "encode_address": (0, 3)}
    split = split_keys(recv, donor, 1, 0.34, 4)
    fit = split_prompts(split, 0, 64, 4, "chat", "fit")  # more final positions than dimensions (32)
    maps, means, _ = fit_maps(collect(recv, fit, spans), collect(donor, fit, spans), spans, spans, (1e-4, 1))
    assert all(m.r2 > 0.999 for m in maps.values())
    test = split_prompts(split, 1, 8, 4, "chat", "test")
    # The identity holds on keys the maps never saw as well.
    test_r, test_d = collect(recv, test, spans), collect(donor, test, spans)
    assert all(r2 > 0.999 for r2 in map_scores(maps, test_r, test_d, spans, spans).values())
    rows = swap_rows(recv, donor, {"receiver": spans, "donor": spans}, maps, means, donor_host(test, 1), 1)
    got = {(r["transfer"], r["condition"], r["item"]): r for r in rows}
    for i in range(len(test)):
        assert got[("address", "stitched", i)]["correct"] == got[("address", "intact", i)]["correct"]
        assert got[("encode_address", "stitched", i)]["correct"] == got[("encode_address", "intact", i)]["correct"]


def test_blocks_from_a_circuit_and_a_circuit_without_address():
    circuit = {"groups": [[0, 1, 2], [4, 5, 6]], "encode": {"group": 0}, "address": {"group": 1}}
    assert blocks(circuit) == {"address": (4, 6), "encode_address": (0, 6)}
    circuit["address"]["group"] = None
    with pytest.raises(ValueError, match="no Address block .* pair another model"):
        blocks(circuit)
