import dataclasses
import math
import random
from pathlib import Path

import pytest
import torch
from torch.optim.optimizer import register_optimizer_step_pre_hook
from transformers import AutoModelForCausalLM

from hybridlens.errors import UserError
from hybridlens.interventions.cache import greedy, prefill
from hybridlens.models.adapter import HybridModel, Site, load_model
from hybridlens.models.families import FAMILIES
from hybridlens.models.toy import build_tokenizer, build_toy_model, share_embedding
from hybridlens.tasks.retrieval import FUSED_FORMATS, hop_links, make_prompts
from hybridlens.tasks.vocab import VALUES, fused_words, language_forms
from hybridlens.validation import Check, assert_paths_close, path_ulps
from hybridlens.zoo import train as train_module
from hybridlens.zoo.evaluate import GateFailed, check_gate, evaluate_model, held_out_prompts
from hybridlens.zoo.spec import ToySpec, check_from, check_toy, check_trained_format
from hybridlens.zoo.surgery import redraw_embeddings, start_from
from hybridlens.zoo.train import GroupDropout, running_accuracy, train_and_save, train_toy, training_batch

ZOO = dict(
    n_languages=2,
    steps=40,
    batch_size=8,
    lr=3e-3,
    extra_queries=1,
    questions="distinct",
    formats=["chat"],
    stages=[4],
    advance=0.9,
    done=0.98,
    anneal=0,
    target=None,
)


TRAIN = {"hidden_size": 16, "layout": "LA"}  # what train_toy reads of a spec is its curriculum, not its shape


def phase(toy, zoo=ZOO, **keys) -> ToySpec:
    """What train_and_save trains one phase of registry entry `toy` with, for the toys trained again by hand."""
    return dataclasses.replace(toy if isinstance(toy, ToySpec) else ToySpec.of(toy, zoo), **keys)


def test_training_batch_targets_are_answers_and_markers(tokenizer):
    prompts = make_prompts(0, 4, 4, "chat")
    ids, targets, answers = training_batch(tokenizer, prompts, 2, random.Random(0), 2)
    words = tokenizer.convert_ids_to_tokens(ids[0].tolist())
    assert [words[t] for t in targets[:2]] == [prompts[0].answer, prompts[0].marker]
    assert words[: len(prompts[0].text.split())] == prompts[0].text.split()
    assert len(targets) == 6 and words[targets[2] - 1] == "?"
    assert answers.tolist() == [True, False] * 3


def _questions(tokenizer, prompt, row, targets):
    """(key, answer) of every question after the first, read back from the token ids."""
    words, keys = tokenizer.convert_ids_to_tokens(row.tolist()), {k for k, _ in prompt.pairs}
    return [(next(w for w in reversed(words[:t]) if w in keys), words[t]) for t in targets[2::2].tolist()]


@pytest.mark.parametrize("n_pairs", [2, 8])
def test_distinct_questions_ask_each_other_key_once(tokenizer, n_pairs):
    prompts = make_prompts(3, 8, n_pairs, "chat")
    ids, targets, _ = training_batch(tokenizer, prompts, 6, random.Random(0), 2, "distinct")
    for p, row in zip(prompts, ids, strict=True):
        asked = _questions(tokenizer, p, row, targets)
        keys = [k for k, _ in asked]
        assert len(keys) == min(6, n_pairs - 1) and len(set(keys)) == len(keys)
        assert p.pairs[p.query][0] not in keys
        values = {k: v for k, v in p.pairs}
        assert all(a == language_forms(2)[p.language][values[k]] for k, a in asked)


def test_every_value_target_of_a_fused_batch_is_in_the_context_language_and_persona():
    tokenizer = build_tokenizer(2, fused=True)
    prompts = make_prompts(3, 8, 8, "translate_fused")
    meaning = fused_words(2)
    ids, targets, _ = training_batch(tokenizer, prompts, 6, random.Random(0), 2, "distinct")
    for p, row in zip(prompts, ids, strict=True):
        asked = _questions(tokenizer, p, row, targets)
        values = {k: v for k, v in p.pairs}
        assert len(asked) == 6 and all(meaning[a] == (values[k], p.language, p.persona) for k, a in asked)
    ids, targets, answers = training_batch(tokenizer, prompts, 2, random.Random(0), 2, "recite")
    for p, row in zip(prompts, ids, strict=True):
        words = tokenizer.convert_ids_to_tokens(row[targets[answers]].tolist())
        recited = sorted(meaning[w] for w in words[1:])
        assert recited == sorted((v, p.language, p.persona) for _, v in p.pairs for _ in range(2))


def test_repeated_questions_draw_keys_with_replacement(tokenizer):
    prompts = make_prompts(3, 8, 2, "list")
    ids, targets, _ = training_batch(tokenizer, prompts, 6, random.Random(0), 2, "repeat")
    assert len(targets) == 2 * 7  # six further questions even on a two-pair dictionary
    for p, row in zip(prompts, ids, strict=True):
        asked = _questions(tokenizer, p, row, targets)
        values = {k: v for k, v in p.pairs}
        assert all(a == language_forms(2)[p.language][values[k]] for k, a in asked)
    # every key gets asked somewhere, the first question's key included
    asked = {
        (p.pairs[p.query][0], k)
        for p, row in zip(prompts, ids, strict=True)
        for k, _ in _questions(tokenizer, p, row, targets)
    }
    assert any(a == b for a, b in asked) and any(a != b for a, b in asked)
    with pytest.raises(ValueError, match="unknown questions mode 'random'; use one of"):
        training_batch(tokenizer, prompts, 6, random.Random(0), 2, "random")


@pytest.mark.parametrize(
    "fmt, syntax",
    [
        ("chat", ["k", "=", "v", ","]),
        ("list", ["*", "k", "=", "v"]),
        ("translate", ["k", "=", "v", ","]),
        ("translate_late", ["k", "=", "v", ","]),
    ],
)
def test_recitals_repeat_the_dictionary_in_new_orders_with_every_value_a_target(tokenizer, fmt, syntax):
    """Recitals write values in the context's language, which in translate is not the dictionary's."""
    prompts = make_prompts(3, 8, 4, fmt)
    ids, targets, answers = training_batch(tokenizer, prompts, 2, random.Random(0), 2, "recite")
    assert len(targets) == 2 + 2 * 4 and answers.tolist() == [True, False] + [True] * 8
    reordered = []
    for p, row in zip(prompts, ids, strict=True):
        words = tokenizer.convert_ids_to_tokens(row.tolist())
        values = {k: language_forms(2)[p.language][v] for k, v in p.pairs}
        recited = words[len(p.text.split()) + 2 :]
        for r in range(2):  # each recital: "." then four items in the prompt's pair syntax
            recital = recited[r * 17 : (r + 1) * 17]
            items = [recital[1 + 4 * i : 5 + 4 * i] for i in range(4)]
            assert recital[0] == "." and all(item[syntax.index("=")] == "=" for item in items)
            keys = [item[syntax.index("k")] for item in items]
            assert sorted(keys) == sorted(values)  # every key once per recital
            assert all(item[syntax.index("v")] == values[item[syntax.index("k")]] for item in items)
            reordered.append(keys != [k for k, _ in p.pairs])
        assert [words[t] for t in targets[2:].tolist()] == [w for w in recited if w in values.values()]
    assert any(reordered)  # recitals are reshuffled, not the prompt's order


def test_a_hop_recital_is_the_first_table_with_links_as_targets_but_not_answers(tokenizer):
    """The first lookup (key -> link) becomes a target; the curriculum still scores only the composed answer."""
    prompts = make_prompts(5, 8, 4, "hop")
    ids, targets, answers = training_batch(tokenizer, prompts, 2, random.Random(0), 2, "recite")
    assert len(targets) == 2 + 2 * 4 and answers.tolist() == [True, False] + [False] * 8
    for p, row in zip(prompts, ids, strict=True):
        words = tokenizer.convert_ids_to_tokens(row.tolist())
        assert words[targets[0]] == p.answer
        link_of = dict(zip((k for k, _ in p.pairs), hop_links(p.pairs)[0], strict=True))
        recited = [words[t - 2 : t + 1] for t in targets[2:].tolist()]
        assert all(key in link_of and eq == "=" and link == link_of[key] for key, eq, link in recited)
        assert sorted(key for key, _, _ in recited) == sorted(list(link_of) * 2)  # every key once per recital


def test_a_chain_toy_answers_with_the_link_first_and_then_asks_links_values(tokenizer):
    """Phase one: the hop answer is the queried key's link. Phase two adds questions asking a link's value,
    about the same entries in every row (the targets are shared), which are targets but not answers."""
    prompts = make_prompts(5, 8, 4, "hop")
    ids, targets, answers = training_batch(tokenizer, prompts, 1, random.Random(0), 2, "recite", "link", 2)
    assert len(targets) == 2 + 4 + 2 and answers.tolist() == [True, False] + [False] * 6
    asked = []
    for p, row in zip(prompts, ids, strict=True):
        words = tokenizer.convert_ids_to_tokens(row.tolist())
        links = hop_links(p.pairs)[0]
        assert words[targets[0]] == links[p.query] != p.answer
        value_of = {link: language_forms(2)[p.language][v] for link, (_, v) in zip(links, p.pairs, strict=True)}
        for t in targets[-2:].tolist():
            link = words[t - 2]
            assert words[t - 8 : t + 1] == [".", "What", "is", "the", "value", "of", link, "?", value_of[link]]
        asked.append([links.index(words[t - 2]) for t in targets[-2:].tolist()])
    assert len({tuple(a) for a in asked}) == 1 and len(set(asked[0])) == 2  # two entries, the same in every row
    with pytest.raises(ValueError, match="unknown answer 'links'; use 'value' or 'link'"):
        training_batch(tokenizer, prompts, 1, random.Random(0), 2, "recite", "links")


def test_a_chain_toy_keeps_its_first_phase_below_freeze_below_and_redraws_the_value_embeddings(tmp_path):
    spec = {"hidden_size": 16, "layout": "LALA", "heads": 2, "seed": 3, "formats": ["hop"], "questions": "recite"}
    spec |= {"steps": 6, "chain": {"steps": 5, "freeze_below": 2}}
    curve = train_and_save("qwen3_5", spec, ZOO, tmp_path / "chain", False)
    assert [(r["step"], r["phase"]) for r in curve] == [(0, "link"), (4, "link"), (5, "value"), (10, "value")]
    chain = load_model(tmp_path / "chain").model
    # The first phase alone, from the same initialisation: what train_and_save passes for this spec.
    tokenizer = build_tokenizer(2)
    first = build_toy_model("qwen3_5", len(tokenizer), 16, "LALA", 2, 3)
    train_toy(first, tokenizer, phase(spec, steps=5), 3, answer="link", progress=False)
    for layer, (a, b) in enumerate(zip(HybridModel(first, tokenizer).layers, chain.model.layers, strict=True)):
        same = all(torch.equal(x, y) for x, y in zip(a.parameters(), b.parameters(), strict=True))
        assert same == (layer < 2), layer
    values = tokenizer.convert_tokens_to_ids([f[v] for f in language_forms(2) for v in VALUES])
    kept = torch.ones(len(tokenizer), dtype=torch.bool)
    kept[values] = False
    e_first, e_chain = first.get_input_embeddings().weight, chain.get_input_embeddings().weight
    assert torch.equal(e_first[kept], e_chain[kept]) and not torch.equal(e_first[~kept], e_chain[~kept])
    assert e_chain[~kept].std().item() == pytest.approx(e_first.std().item(), rel=0.2)  # drawn at its scale


def test_a_pretrained_toy_trains_its_first_formats_then_its_own_from_those_weights_with_fused_rows_redrawn(tmp_path):
    spec = {"hidden_size": 16, "layout": "LALA", "heads": 2, "seed": 3, "formats": ["fused_notes"], "steps": 6}
    spec |= {"questions": "recite", "pretrain": {"formats": ["notes"], "steps": 5}}
    curve = train_and_save("qwen3_5", spec, ZOO, tmp_path / "toy", False)
    assert [(r["step"], r["phase"]) for r in curve] == [(0, "pretrain"), (4, "pretrain"), (5, "main"), (10, "main")]
    saved = load_model(tmp_path / "toy")
    assert set(fused_words(2)) <= set(saved.tokenizer.get_vocab())  # the tokenizer holds the second phase's words
    # The same two phases by hand, with and without drawing the fused rows afresh in between.
    tokenizer = build_tokenizer(2, fused=True)
    fused = tokenizer.convert_tokens_to_ids(list(fused_words(2)))
    models = []
    for redraw in (True, False):
        model = build_toy_model("qwen3_5", len(tokenizer), 16, "LALA", 2, 3)
        train_toy(model, tokenizer, phase(spec, steps=5, formats=("notes",)), 3, progress=False)
        if redraw:
            before = model.get_input_embeddings().weight.detach().clone()
            redraw_embeddings(model, tokenizer, fused_words(2), 3)
            after = model.get_input_embeddings().weight
            kept = torch.ones(len(tokenizer), dtype=torch.bool)
            kept[fused] = False
            assert torch.equal(before[kept], after[kept]) and not torch.equal(before[~kept], after[~kept])
            assert after[~kept].std().item() == pytest.approx(before.std().item(), rel=0.2)  # drawn at its scale
        train_toy(model, tokenizer, phase(spec), 103, progress=False)
        models.append(model)
    for (name, p), a in zip(saved.model.named_parameters(), models[0].parameters(), strict=True):
        assert torch.equal(p, a), name
    assert not all(torch.equal(a, b) for a, b in zip(models[0].parameters(), models[1].parameters(), strict=True))


def test_a_pretrained_toy_without_fused_words_draws_no_rows_afresh(tmp_path):
    spec = {"hidden_size": 16, "layout": "LALA", "heads": 2, "seed": 3, "formats": ["chat"], "steps": 6}
    train_and_save("qwen3_5", spec | {"pretrain": {"formats": ["list"], "steps": 5}}, ZOO, tmp_path / "toy", False)
    tokenizer = build_tokenizer(2)
    model = build_toy_model("qwen3_5", len(tokenizer), 16, "LALA", 2, 3)
    train_toy(model, tokenizer, phase(spec, steps=5, formats=("list",)), 3, progress=False)
    train_toy(model, tokenizer, phase(spec), 103, progress=False)
    saved = load_model(tmp_path / "toy").model
    for (name, p), a in zip(saved.named_parameters(), model.parameters(), strict=True):
        assert torch.equal(p, a), name


def test_a_pretrained_toys_first_phase_trains_to_the_validation_target(tmp_path):
    """`done: 0` is reached on the first step: without the target the first phase would end there; with an
    unreachable one it validates its own formats and runs all its steps."""
    spec = {"hidden_size": 16, "layout": "LALA", "heads": 2, "formats": ["chat"], "steps": 3, "done": 0.0}
    spec |= {"target": 1.0, "pretrain": {"formats": ["list"], "steps": 5}}
    curve = train_and_save("qwen3_5", spec, ZOO | {"validate_every": 2}, tmp_path / "toy", False)
    first = [r for r in curve if r["phase"] == "pretrain"]
    assert [r["step"] for r in first if "validation" in r] == [0, 2, 4] and first[-1]["step"] == 4
    assert all(0.0 <= r["validation"] < 1.0 for r in first if "validation" in r)


def test_a_toy_with_both_chain_and_pretrain_is_refused_in_one_line():
    spec = {"hidden_size": 16, "layout": "LALA", "formats": ["hop"], "chain": {"steps": 5, "freeze_below": 2}}
    with pytest.raises(UserError, match=r"^m.toy: chain and pretrain are ways of training in two phases; keep one"):
        check_toy(spec | {"pretrain": {"formats": ["chat"], "steps": 5}}, "m.toy")


PARENT = {"hidden_size": 16, "layout": "LALA", "heads": 2, "seed": 3, "formats": ["notes"], "steps": 5}
PARENT |= {"questions": "recite"}


def test_a_from_toy_continues_its_parents_weights_with_fused_words_added_and_its_redraw_layers_drawn_afresh(tmp_path):
    train_and_save("qwen3_5", PARENT, ZOO, tmp_path / "parent", False)
    parent = load_model(tmp_path / "parent")
    child = PARENT | {"seed": 7, "formats": ["fused_notes"], "steps": 6, "from": "parent", "redraw": [1]}
    starts = []
    for global_seed in (0, 1):  # resizing draws the appended rows from the global generator; they are redrawn
        torch.manual_seed(global_seed)
        starts.append(start_from(tmp_path / "parent", "qwen3_5", ToySpec.of(child, ZOO)))
    (model, tokenizer), (again, _) = starts
    assert all(torch.equal(p, q) for p, q in zip(model.parameters(), again.parameters(), strict=True))
    old, new = parent.tokenizer.get_vocab(), tokenizer.get_vocab()
    assert all(new[w] == i for w, i in old.items()) and set(fused_words(2)) <= set(new)
    e_parent, e = parent.model.get_input_embeddings().weight, model.get_input_embeddings().weight
    assert torch.equal(e[: len(old)], e_parent) and e.shape[0] == len(tokenizer)
    assert e[len(old) :].std().item() == pytest.approx(e_parent.std().item(), rel=0.2)  # drawn at its scale
    # Layer 1's attention is an untrained toy's of the child's seed; every other weight is the parent's.
    fresh = build_toy_model("qwen3_5", len(tokenizer), 16, "LALA", 2, 7)
    redrawn = {n for n, _ in model.named_parameters() if n.startswith("model.layers.1.self_attn.")}
    assert len(redrawn) == 6
    mine, theirs, untrained = (dict(m.named_parameters()) for m in (model, parent.model, fresh))
    for name, p in mine.items():
        if name in redrawn:
            assert torch.equal(p, untrained[name]) and not torch.equal(p, theirs[name]), name
        elif "embed_tokens" not in name and "lm_head" not in name:
            assert torch.equal(p, theirs[name]), name
    # train_and_save trains exactly that start on the child's formats, its batches drawn by its seed.
    train_and_save("qwen3_5", child, ZOO, tmp_path / "child", False, parent=tmp_path / "parent")
    train_toy(model, tokenizer, phase(child), 7, progress=False)
    saved = load_model(tmp_path / "child").model
    for (name, p), q in zip(saved.named_parameters(), model.parameters(), strict=True):
        assert torch.equal(p, q), name


@pytest.mark.parametrize("family, layout", [("granitemoehybrid", "LLA"), ("falcon_h1", "PP"), ("nemotron_h", "LFA")])
def test_redraw_replaces_exactly_the_layers_mixers_in_every_layer_kind(tmp_path, family, layout):
    """A linear layer's whole mixer, an attention layer's, a parallel layer's two, an MLP-only layer's MLP."""
    spec = {"hidden_size": 16, "layout": layout, "heads": 2, "seed": 3, "formats": ["chat"], "steps": 3}
    train_and_save(family, spec, ZOO, tmp_path / "parent", False)
    parent = load_model(tmp_path / "parent")
    untrained = HybridModel(build_toy_model(family, len(parent.tokenizer), 16, layout, 2, 5), parent.tokenizer)
    for layer in range(len(layout)):
        model, _ = start_from(
            tmp_path / "parent", family, ToySpec.of(spec | {"from": "p", "redraw": [layer], "seed": 5}, ZOO)
        )
        mixers = [m for m in {untrained.mixer(layer), untrained.attention(layer)} if m is not None]
        fresh = {id(p) for m in mixers for p in m.parameters()}
        for (name, p), q, u in zip(
            model.named_parameters(), parent.model.parameters(), untrained.model.parameters(), strict=True
        ):
            assert torch.equal(p, u if id(u) in fresh else q), (layer, name)
        assert len(fresh) >= 2


def test_a_from_toy_of_a_fused_parent_keeps_its_tokenizer_and_redraws_what_its_own_spec_would_draw(tmp_path):
    fused = PARENT | {"formats": ["fused_notes"]}
    train_and_save("qwen3_5", fused, ZOO, tmp_path / "parent", False)
    parent = load_model(tmp_path / "parent")
    model, tokenizer = start_from(
        tmp_path / "parent", "qwen3_5", ToySpec.of(PARENT | {"seed": 7, "from": "p", "redraw": [1]}, ZOO)
    )
    assert tokenizer.get_vocab() == parent.tokenizer.get_vocab()
    assert torch.equal(model.get_input_embeddings().weight, parent.model.get_input_embeddings().weight)
    untrained = build_toy_model("qwen3_5", len(build_tokenizer(2)), 16, "LALA", 2, 7)  # the notes-only spec's
    mine, untrained = (m.model.layers[1].self_attn.parameters() for m in (model, untrained))
    assert all(torch.equal(p, q) for p, q in zip(mine, untrained, strict=True))


def test_an_untied_toy_appends_both_tables_rows_independent_of_the_global_generator(tmp_path):
    spec = {"hidden_size": 16, "layout": "LFA", "heads": 2, "seed": 3, "formats": ["chat"], "steps": 3}
    train_and_save("nemotron_h", spec, ZOO, tmp_path / "parent", False)
    parent = load_model(tmp_path / "parent").model
    child = spec | {"from": "p", "seed": 7, "formats": ["fused_notes"]}
    starts = []
    for global_seed in (0, 1):
        torch.manual_seed(global_seed)
        starts.append(start_from(tmp_path / "parent", "nemotron_h", ToySpec.of(child, ZOO))[0])
    for old, table in ((parent, "get_input_embeddings"), (parent, "get_output_embeddings")):
        a, b = (getattr(m, table)().weight for m in starts)
        rows = getattr(old, table)().weight
        assert torch.equal(a, b) and torch.equal(a[: len(rows)], rows), table
        assert a[len(rows) :].std().item() == pytest.approx(rows.std().item(), rel=0.2), table


def test_a_from_toy_with_a_shared_embedding_keeps_the_parents_rows_exactly_and_frozen(tmp_path):
    spec = PARENT | {"formats": ["chat"], "embedding": {"seed": 5, "dim": 9}}  # 223 x 9 rows: not a multiple of 16
    train_and_save("qwen3_5", spec, ZOO, tmp_path / "parent", False)
    rows = load_model(tmp_path / "parent").model.get_input_embeddings().weight
    model, tokenizer = start_from(
        tmp_path / "parent", "qwen3_5", ToySpec.of(spec | {"from": "p", "formats": ["fused_notes"]}, ZOO)
    )
    weight = model.get_input_embeddings().weight
    assert torch.equal(weight[: len(rows)], rows) and not weight.requires_grad
    fresh = build_toy_model("qwen3_5", len(tokenizer), 16, "LALA", 2, 3)
    share_embedding(fresh, seed=5, dim=9)
    assert torch.allclose(weight[len(rows) :], fresh.get_input_embeddings().weight[len(rows) :])


def test_a_from_toy_can_start_from_a_from_toy(tmp_path):
    train_and_save("qwen3_5", PARENT, ZOO, tmp_path / "p", False)
    child = PARENT | {"from": "p", "seed": 7, "formats": ["fused_notes"], "steps": 3}
    train_and_save("qwen3_5", child, ZOO, tmp_path / "c", False, parent=tmp_path / "p")
    grandchild = child | {"from": "c", "formats": ["chat"], "redraw": [3]}
    train_and_save("qwen3_5", grandchild, ZOO, tmp_path / "g", False, parent=tmp_path / "c")
    c, g = load_model(tmp_path / "c"), load_model(tmp_path / "g")
    assert g.tokenizer.get_vocab() == c.tokenizer.get_vocab()  # the fused words the first continuation added
    assert not torch.equal(
        g.model.model.layers[0].linear_attn.out_proj.weight, c.model.model.layers[0].linear_attn.out_proj.weight
    )


def test_a_from_toy_of_the_parents_formats_starts_from_the_parent_unchanged(tmp_path):
    train_and_save("qwen3_5", PARENT, ZOO, tmp_path / "parent", False)
    parent = load_model(tmp_path / "parent")
    model, tokenizer = start_from(
        tmp_path / "parent", "qwen3_5", ToySpec.of(PARENT | {"seed": 7, "from": "parent"}, ZOO)
    )
    assert tokenizer.get_vocab() == parent.tokenizer.get_vocab()
    for (name, p), q in zip(model.named_parameters(), parent.model.parameters(), strict=True):
        assert torch.equal(p, q), name


def _registry(**toys):
    return {name: {"family": "qwen3_5", "source": {"toy": PARENT | spec}} for name, spec in toys.items()}


@pytest.mark.parametrize(
    "models, line",
    [
        (
            _registry(c={"from": "p"}, q={}) | {"p": {"family": "qwen3_5", "source": "zoo/qwen_toy"}},
            "config models.c.source.toy.from: p is not a toy of the registry; name one of its toys (q)",
        ),
        (
            _registry(c={"from": "b"}, b={"from": "c"}),
            "config models.b.source.toy.from: c -> b -> c starts from itself; break the cycle",
        ),
        (
            _registry(c={"from": "p", "layout": "LLAA"}, p={}),
            "config models.c.source.toy.layout: LLAA where p, whose weights it starts from, has LALA; set it to p's",
        ),
        (
            _registry(c={"from": "p", "state_size": 4}, p={}),
            "config models.c.source.toy.state_size: 4 where p, whose weights it starts from, has unset; set it to p's",
        ),
        (
            _registry(c={"from": "p"}) | {"p": {"family": "granitemoehybrid", "source": {"toy": PARENT}}},
            "config models.c.family: p, whose weights it starts from, is a granitemoehybrid toy; set granitemoehybrid",
        ),
        (  # the entry to fix is b, whichever toy's check meets it first
            _registry(c={"from": "b"}, b={"from": "x"}),
            "config models.b.source.toy.from: x is not a toy of the registry; name one of its toys (c)",
        ),
        (
            _registry(c={"from": "p"}),
            "config models.c.source.toy.from: p is not a toy of the registry; add the toy it starts from to models",
        ),
    ],
    ids=["unknown", "cycle", "layout", "state-size", "family", "unknown-grandparent", "no-other-toy"],
)
def test_a_from_toy_that_cannot_start_from_its_parent_is_refused_in_one_line(models, line):
    with pytest.raises(UserError) as err:
        check_from("c", models)
    assert str(err.value) == line


def test_a_from_toy_of_the_same_architecture_and_another_seed_passes():
    check_from("c", _registry(c={"from": "p", "seed": 9, "formats": ["fused_notes"], "redraw": [3]}, p={}))
    check_from("c", _registry(c={"from": "b", "heads": 2, "positions": "rope"}, b={"from": "p"}, p={}))  # defaults


@pytest.mark.parametrize(
    "spec, line",
    [
        ({"redraw": [1]}, "m.toy.redraw: layers are drawn afresh in weights trained before; set from"),
        ({"from": "p", "redraw": [4]}, "m.toy.redraw: [4] names a layer the 4-layer layout lacks; use 0 to 3"),
        (
            {"from": "p", "pretrain": {"formats": ["chat"], "steps": 5}},
            "m.toy: pretrain and from are ways of training in two phases; keep one of them",
        ),
    ],
    ids=["redraw-alone", "redraw-out-of-range", "from-and-pretrain"],
)
def test_a_redraw_or_from_toy_that_cannot_train_is_refused_in_one_line(spec, line):
    with pytest.raises(UserError) as err:
        check_toy(PARENT | spec, "m.toy")
    assert str(err.value) == line


def test_a_group_gate_without_group_dropout_is_refused_in_one_line():
    spec = {"hidden_size": 16, "layout": "LALA", "group_drop": 0.5, "group_gate": "each"}
    check_toy(spec, "m.toy")  # this one trains
    with pytest.raises(UserError, match=r"^m.toy.group_gate: it judges the groups that group dropout keeps; set gr"):
        check_toy(spec | {"group_drop": 0}, "m.toy")


@pytest.mark.parametrize(
    "change, line",
    [
        ({"formats": ["chat", "hop"]}, "m.toy.chain: a chain toy trains on hop prompts alone; set formats: [hop]"),
        (
            {"chain": {"steps": 5, "freeze_below": 4}},
            "m.toy.chain.freeze_below: 4 freezes all 4 layers; freeze the layers up to the first lookup's reader",
        ),
    ],
    ids=["formats", "freeze-all"],
)
def test_a_chain_that_cannot_train_is_refused_in_one_line(change, line):
    spec = {"hidden_size": 16, "layout": "LALA", "formats": ["hop"], "chain": {"steps": 5, "freeze_below": 2}}
    check_toy(spec, "m.toy")  # this one trains
    with pytest.raises(UserError) as err:
        check_toy(spec | change, "m.toy")
    assert str(err.value).startswith(line)


def test_an_analysis_in_a_format_a_toy_was_not_trained_on_is_refused_in_one_line():
    trained = {"granite_toy": ["chat", "list"], "granite_fused": ["translate_fused"]}
    check_trained_format("stitch", "pairs", "chat", {"granite_toy": trained["granite_toy"]})  # trained on it
    with pytest.raises(UserError) as err:
        check_trained_format("stitch", "pairs", "chat", trained)
    assert str(err.value) == (
        "config stitch.format: granite_fused was trained on translate_fused, not chat; set stitch.format to a "
        "format it was trained on, or list in stitch.pairs only models trained on chat"
    )
    with pytest.raises(UserError, match="config scale.format: granite_toy was trained on chat, list, not rev"):
        check_trained_format("scale", "models", "rev", trained)


def test_short_training_lowers_the_loss(tokenizer):
    model = build_toy_model("qwen3_5", len(tokenizer), 32, "LLA", heads=2)
    spec = phase(TRAIN, steps=100, stages=(2,), batch_size=8, lr=3e-3)
    curve = train_toy(model, tokenizer, spec, 0, progress=False, log_every=10)
    first, last = curve[0]["loss"], sum(r["loss"] for r in curve[-2:]) / 2
    assert last < 0.8 * first  # an untrained model stays at ~1.0x


def test_anneal_decays_the_learning_rate_to_zero_after_done_and_ends_training(tokenizer):
    model = build_toy_model("qwen3_5", len(tokenizer), 16, "LA", heads=2)
    rates = []
    hook = register_optimizer_step_pre_hook(lambda opt, args, kwargs: rates.append(opt.param_groups[0]["lr"]))
    try:
        spec = phase(TRAIN, steps=40, stages=(4,), batch_size=4, lr=1e-3, done=0.0, anneal=10)
        curve = train_toy(model, tokenizer, spec, 0, progress=False)
    finally:
        hook.remove()
    # done is reached at step 0, so the decay multiplies the warm-up from the start.
    expected = [1e-3 * (s + 1) / 50 * 0.5 * (1 + math.cos(math.pi * s / 10)) for s in range(11)]
    assert rates == pytest.approx(expected, abs=1e-12) and rates[-1] == pytest.approx(0.0, abs=1e-12)
    assert curve[-1]["step"] == 10


def test_a_validation_target_trains_on_past_done_and_stops_once_reached(tokenizer):
    model = build_toy_model("qwen3_5", len(tokenizer), 16, "LA", heads=2)
    spec = phase(TRAIN, steps=10, stages=(2,), batch_size=4, done=0.0, validate_every=3, formats=("chat", "list"))
    curve = train_toy(model, tokenizer, phase(spec, target=1.1), 0, val_n=4, progress=False)  # validated to the end
    validated = [r for r in curve if "validation" in r]
    assert [r["step"] for r in validated] == [0, 3, 6, 9] and curve[-1]["step"] == 9
    hm = HybridModel(model, tokenizer)
    worst = min(r["retrieval"] for r in evaluate_model(hm, 7001, 4, 2, formats=("chat", "list")))
    assert validated[-1]["validation"] == worst  # the validation set is evaluate_model's, at its own seed
    model = build_toy_model("qwen3_5", len(tokenizer), 16, "LA", heads=2)
    curve = train_toy(model, tokenizer, phase(spec, target=0.0), 0, val_n=4, progress=False)  # reached at once
    assert curve[-1]["step"] == 0 and curve[-1]["validation"] >= 0.0


def test_a_toy_spec_overrides_the_zoo_stopping_rules(tmp_path):
    spec = {"hidden_size": 16, "layout": "LA", "heads": 2}
    assert train_and_save("qwen3_5", {**spec, "done": 0.0}, ZOO, tmp_path / "a", False)[-1]["step"] == 0
    assert train_and_save("qwen3_5", {**spec, "done": 0.0, "anneal": 3}, ZOO, tmp_path / "b", False)[-1]["step"] == 3
    assert train_and_save("qwen3_5", spec, {**ZOO, "done": 0.0, "anneal": 4}, tmp_path / "c", False)[-1]["step"] == 4
    assert train_and_save("qwen3_5", {**spec, "anneal": 3}, ZOO, tmp_path / "e", False)[-1]["step"] == ZOO["steps"] - 1
    assert train_and_save("qwen3_5", spec, ZOO, tmp_path / "d", False)[-1]["step"] == ZOO["steps"] - 1


def test_a_toy_spec_sets_the_formats_it_trains_on(tmp_path):
    spec = {"hidden_size": 16, "layout": "LA", "heads": 2, "steps": 3}

    def weights(path):
        return load_model(path).model.state_dict()

    train_and_save("qwen3_5", {**spec, "formats": ["translate"]}, ZOO, tmp_path / "toy", False)
    train_and_save("qwen3_5", spec, {**ZOO, "formats": ["translate"]}, tmp_path / "zoo", False)
    train_and_save("qwen3_5", spec, ZOO, tmp_path / "chat", False)
    toy, zoo, chat = weights(tmp_path / "toy"), weights(tmp_path / "zoo"), weights(tmp_path / "chat")
    assert all(torch.equal(toy[k], zoo[k]) for k in toy)
    assert not all(torch.equal(toy[k], chat[k]) for k in toy)


def test_data_seed_draws_the_batches_and_seed_the_initial_weights(tmp_path):
    spec = {"hidden_size": 16, "layout": "LA", "heads": 2, "steps": 3, "seed": 3}

    def weights(path):
        return load_model(path).model.state_dict()

    train_and_save("qwen3_5", {**spec, "data_seed": 1}, ZOO, tmp_path / "crossed", False)
    train_and_save("qwen3_5", spec, ZOO, tmp_path / "same", False)
    train_and_save("qwen3_5", {**spec, "data_seed": 3}, ZOO, tmp_path / "explicit", False)
    # The reference: weights drawn with seed 3, trained on the batches of seed 1.
    tokenizer = build_tokenizer(2)
    model = build_toy_model("qwen3_5", len(tokenizer), 16, "LA", 2, 3)
    train_toy(model, tokenizer, phase(spec), 1, progress=False)
    crossed, same, explicit = weights(tmp_path / "crossed"), weights(tmp_path / "same"), weights(tmp_path / "explicit")
    reference = model.state_dict()
    assert all(torch.equal(crossed[k], reference[k]) for k in crossed)
    assert all(torch.equal(same[k], explicit[k]) for k in same)  # data_seed defaults to seed
    assert not all(torch.equal(crossed[k], same[k]) for k in same)


def test_group_dropout_zeroes_whole_groups_per_prompt_and_only_in_training(tokenizer, make_audible):
    """Each prompt of a training batch runs as if its dropped groups' mixers were zeroed by the intervention
    engine; in eval mode, and once removed, the model is intact."""
    from hybridlens.interventions.patch import run

    model = build_toy_model("granitemoehybrid", len(tokenizer), 32, "LALA", heads=2)
    make_audible(model)
    hm = HybridModel(model, tokenizer)
    ids, _ = hm.encode([p.text for p in make_prompts(0, 4, 4, "chat", 2)])
    groups = ["layers.0.mixer_out", "layers.2.mixer_out"]  # G0 and G1 of LALA, one layer each
    with torch.no_grad():
        intact = run(hm, ids).logits
        # Zeroing every group must change the logits, or the comparisons below could not fail.
        assert (run(hm, ids, patch=dict.fromkeys(groups, torch.zeros_like)).logits - intact).abs().max() > 0.1
        drop = GroupDropout(hm, 0.5, seed=0)
        drop.keep = torch.tensor([[1.0, 1.0], [0.0, 1.0], [1.0, 0.0], [0.0, 0.0]])
        model.train()
        dropped = model(ids).logits
        model.eval()
        assert torch.equal(model(ids).logits, intact)
        drop.remove()
        model.train()
        assert torch.allclose(model(ids).logits, intact)
        model.eval()
        for row, kept in enumerate(drop.keep.tolist()):
            edits = {site: torch.zeros_like for site, k in zip(groups, kept, strict=True) if not k}
            expected = run(hm, ids[row : row + 1], patch=edits).logits[0]
            assert_paths_close(dropped[row], expected, f"row {row}")  # a batch of four against one row
    drop.draw(4000)  # each group independently at the rate asked, but one of two kept where both were drawn
    assert drop.keep.shape == (4000, 2) and drop.keep.sum(1).min() == 1
    assert abs(drop.keep.mean().item() - (0.5 + 0.25 / 2)) < 0.03


def test_under_group_dropout_the_running_accuracy_counts_only_the_prompts_that_kept_every_group():
    hits = torch.tensor([[1.0, 1.0], [0.0, 0.0], [1.0, 0.0], [0.0, 0.0]])
    assert running_accuracy(0.5, hits, 0.1) == pytest.approx(0.9 * 0.5 + 0.1 * 0.375)
    whole = torch.tensor([True, False, True, False])  # their mean is 0.75, half the batch
    assert running_accuracy(0.5, hits, 0.1, whole) == pytest.approx(0.95 * 0.5 + 0.05 * 0.75)
    assert running_accuracy(0.5, hits, 0.1, torch.zeros(4, dtype=torch.bool)) == 0.5


def test_the_each_gate_judges_every_set_of_kept_groups_and_takes_the_worst(tokenizer):
    hm = HybridModel(build_toy_model("granitemoehybrid", len(tokenizer), 16, "LALA", heads=2), tokenizer)
    whole, each = GroupDropout(hm, 0.5, seed=0), GroupDropout(hm, 0.5, seed=0, gate="each")
    hits = torch.tensor([[1.0, 1.0], [0.0, 1.0], [1.0, 1.0], [0.0, 0.0]])
    for drop in (whole, each):
        drop.keep = torch.tensor([[1.0, 1.0], [1.0, 0.0], [1.0, 1.0], [1.0, 0.0]])
    assert whole.running_accuracy(hits, 0.1) == pytest.approx(0.05 * 1.0)  # two of four kept both: all hit
    assert each.running_accuracy(hits, 0.1) == 0.0  # G1 alone has not been drawn yet
    each.keep = torch.tensor([[0.0, 1.0], [0.0, 1.0], [1.0, 1.0], [1.0, 0.0]])
    # per set, a quarter of the batch weighs 0.025 and half 0.05: both kept (0.05, then 1.0 at 0.025), G0
    # alone (0.25 at 0.05, then 0.0 at 0.025), G1 alone (0.75 at 0.05); G0 alone is the worst
    expected = {(True, True): 0.975 * 0.05 + 0.025, (True, False): 0.975 * 0.0125, (False, True): 0.0375}
    assert each.running_accuracy(hits, 0.1) == pytest.approx(min(expected.values()))
    assert each.emas == pytest.approx(expected)


def test_an_interrupted_training_leaves_no_group_dropout_on_the_model(tokenizer, make_audible):
    model = build_toy_model("granitemoehybrid", len(tokenizer), 32, "LALA", heads=2)
    make_audible(model)

    def interrupt(opt, args, kwargs):
        raise KeyboardInterrupt  # a notebook's Ctrl-C during the first step

    hook = register_optimizer_step_pre_hook(interrupt)
    try:
        with pytest.raises(KeyboardInterrupt):
            train_toy(
                model, tokenizer, phase(TRAIN, steps=5, stages=(2,), batch_size=4, group_drop=0.9), 0, progress=False
            )
    finally:
        hook.remove()
    hm = HybridModel(model, tokenizer)
    ids, _ = hm.encode([p.text for p in make_prompts(0, 8, 2, "chat", 2)])
    with torch.no_grad():
        model.eval()
        intact = model(ids).logits
        model.train()  # a dropout hook left behind would zero groups here
        assert torch.allclose(model(ids).logits, intact)
    assert not any(hm.mixer(layer)._forward_hooks for group in hm.groups for layer in group)


def test_a_toy_spec_sets_the_group_dropout_of_its_training(tmp_path):
    spec = {"hidden_size": 16, "layout": "LALA", "heads": 2, "steps": 3}
    train_and_save("granitemoehybrid", spec, ZOO, tmp_path / "plain", False)
    train_and_save("granitemoehybrid", {**spec, "group_drop": 0.0}, ZOO, tmp_path / "zero", False)
    train_and_save("granitemoehybrid", {**spec, "group_drop": 0.5}, ZOO, tmp_path / "dropped", False)
    plain, zero, dropped = (load_model(tmp_path / d).model.state_dict() for d in ("plain", "zero", "dropped"))
    assert all(torch.equal(plain[k], zero[k]) for k in plain)
    assert not all(torch.equal(plain[k], dropped[k]) for k in plain)


def test_a_toy_spec_sets_what_the_curriculum_judges_under_group_dropout(tmp_path, monkeypatch):
    gates = []

    class Recorded(train_module.GroupDropout):  # the real dropout, noting the gate it was given
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            gates.append(self.gate)

    monkeypatch.setattr(train_module, "GroupDropout", Recorded)
    spec = {"hidden_size": 16, "layout": "LALA", "heads": 2, "steps": 2, "group_drop": 0.5}
    train_and_save("granitemoehybrid", spec, ZOO, tmp_path / "whole", False)
    train_and_save("granitemoehybrid", {**spec, "group_gate": "each"}, ZOO, tmp_path / "each", False)
    assert gates == ["whole", "each"]


@pytest.mark.parametrize("fmt", FUSED_FORMATS)
def test_a_fused_toy_holds_the_fused_words_and_scores_the_persona_of_its_answer_word(tmp_path, fmt):
    spec = {"hidden_size": 16, "layout": "LA", "heads": 2, "steps": 20, "formats": [fmt]}
    train_and_save("granitemoehybrid", spec, {**ZOO, "lr": 1e-2}, tmp_path, False)
    hm = load_model(tmp_path)
    assert hm.tokenizer.get_vocab() == build_tokenizer(2, fused=True).get_vocab()
    [row] = evaluate_model(hm, seed=5, n=32, n_pairs=4, formats=[fmt])
    # the reference: the greedy answer word read back as (concept, language, persona)
    prompts = held_out_prompts(hm, 5, 32, 4, fmt)
    tokens, _ = greedy(hm, hm.encode([p.text for p in prompts])[0], 2)
    meaning = fused_words(2)
    got = [meaning.get(w, (None,) * 3) for w in hm.tokenizer.convert_ids_to_tokens(tokens[:, 0].tolist())]
    answers = [(p.pairs[p.query][1], p.language, p.persona) for p in prompts]
    assert row["retrieval"] == sum(g == a for g, a in zip(got, answers, strict=True)) / 32
    assert row["language"] == sum(g[1] == p.language for g, p in zip(got, prompts, strict=True)) / 32
    assert row["persona"] == sum(g[2] == p.persona for g, p in zip(got, prompts, strict=True)) / 32


def test_saved_model_reloads_through_the_adapter_with_identical_logits(tmp_path):
    train_and_save("granitemoehybrid", {"hidden_size": 24, "layout": "LLA", "heads": 2}, ZOO, tmp_path, False)
    hm = load_model(tmp_path, attn_implementation="eager")  # build_toy_model's, so that logits match bit for bit
    tok = build_tokenizer(2)
    fresh = build_toy_model("granitemoehybrid", len(tok), 24, "LLA", heads=2)
    fresh.load_state_dict(hm.model.state_dict())
    ids = torch.tensor([tok.convert_tokens_to_ids(make_prompts(0, 1, 4)[0].text.split())])
    with torch.no_grad():
        assert torch.equal(hm.model(ids).logits, fresh.eval()(ids).logits)
    assert hm.tokenizer.get_vocab() == tok.get_vocab()


def test_gate_fails_on_an_untrained_model(tokenizer):
    hm = HybridModel(build_toy_model("qwen3_5", len(tokenizer), 32, "LLA", heads=2).eval(), tokenizer)
    rows = evaluate_model(hm, seed=5, n=16, n_pairs=4)
    assert [r["format"] for r in rows] == ["chat", "list", "rev"]
    assert all(r["retrieval"] < 0.5 for r in rows)
    with pytest.raises(GateFailed, match=r"model untrained: 4-pair retrieval on format '\w+' is 0\.\d+ < gate 0\.95"):
        check_gate("untrained", rows, 0.95)
    check_gate("untrained", rows, 0.0)  # a gate of 0 passes


@pytest.mark.parametrize("family, layout", [("granitemoehybrid", "LLA"), ("qwen3_5", "LLA"), ("falcon_h1", "PP")])
def test_a_fresh_toy_writes_little_into_the_residual_stream_from_its_linear_mixers(tokenizer, family, layout):
    """Granite's Mamba-2 normalises after its gate, so transformers' init writes unit-RMS noise per layer;
    build_toy_model starts that branch silent (and the Falcon-H1 toy's, which gets the same norm). Every
    family's linear mixers then write far less than the token embedding carries (measured before the
    fix: Granite 1.3 against 0.14)."""
    hm = HybridModel(build_toy_model(family, len(tokenizer), 48, layout, heads=2), tokenizer)
    ids, _ = hm.encode([p.text for p in make_prompts(0, 4, 4, "chat", 2)])
    sites = [f"layers.{i}.mixer_out" for i in hm.linear_layers()]
    from hybridlens.interventions.patch import run

    res = run(hm, ids, capture=sites + ["layers.0.resid_pre"], positions=None)
    embedding = res.captured["layers.0.resid_pre"].norm(dim=-1).mean()
    for site in sites:
        assert res.captured[site].norm(dim=-1).mean() < 0.5 * embedding, site
    if family != "qwen3_5":  # the Mamba-2 branches start exactly silent (zero gain on their gated norm)
        assert all(res.captured[site].abs().max() == 0 for site in sites)


@pytest.mark.parametrize("family, layout", [("qwen3_5", "LLA"), ("granitemoehybrid", "LLA"), ("falcon_h1", "PP")])
def test_shorter_training_chunks_leave_the_logits_unchanged(tokenizer, make_audible, family, layout):
    """Toys train with shorter scan chunks than transformers' 64 (less padding on CPU); the chunked
    scans are exact, so the logits must equal those of 64-token chunks on sequences spanning several."""
    model = build_toy_model(family, len(tokenizer), 32, layout, heads=2).eval()
    make_audible(model)  # the Mamba-2 branches start silent; the test must see their scan
    prompts = make_prompts(3, 4, 8, "chat", 2)
    ids, _, _ = training_batch(tokenizer, prompts, 3, random.Random(0), 2)
    assert ids.shape[1] > 64
    fast = FAMILIES[family].toy_forward_kwargs(model)
    if family == "qwen3_5":
        assert fast == {"chunk_size": 16}
        reference = model
    else:
        assert fast == {} and model.config.mamba_chunk_size == 32
        config = model.config.__class__.from_dict({**model.config.to_dict(), "mamba_chunk_size": 64})
        reference = AutoModelForCausalLM.from_config(config, attn_implementation="eager").eval()
        reference.load_state_dict(model.state_dict())
    with torch.no_grad():
        expected = reference(ids).logits
        assert_paths_close(model(ids, **fast).logits, expected)
        assert expected.std() > 0.1


@pytest.mark.parametrize(
    "family, layout, shape", [("qwen3_5", "LA", (1, 2, 4, 8)), ("granitemoehybrid", "LA", (1, 2, 16, 4))]
)
def test_a_toy_spec_sets_the_size_of_the_linear_heads_state(tmp_path, family, layout, shape):
    """state_size is Gated DeltaNet's key head width and Mamba's state size: the cache's state holds that many keys."""
    spec = {"hidden_size": 16, "layout": layout, "heads": 2, "state_size": 4, "steps": 1}
    train_and_save(family, spec, ZOO, tmp_path, False)
    hm = load_model(tmp_path)
    ids = torch.tensor([hm.tokenizer.convert_tokens_to_ids(make_prompts(0, 1, 2)[0].text.split())])
    _, cache = prefill(hm, ids)
    assert tuple(hm.read_cache(cache, Site(0, "state")).shape) == shape


def test_a_state_size_for_a_family_without_one_is_refused_in_one_line():
    with pytest.raises(ValueError, match=r"^toy state_size 4 for family lfm2: its toys have no state size to set"):
        build_toy_model("lfm2", 64, 16, "LA", heads=2, state_size=4)


@pytest.mark.parametrize("positions, invariant", [("none", True), ("rope", False)])
def test_a_toy_without_positions_has_attention_blind_to_token_order(positions, invariant):
    """With positions none, a first attention layer sees its context as a set: reordering the tokens before
    the last leaves its write there unchanged; with RoPE it changes."""
    model = build_toy_model("granitemoehybrid", 64, 16, "AL", heads=2, seed=0, positions=positions).eval()
    writes = []
    model.model.layers[0].self_attn.register_forward_hook(lambda m, a, out: writes.append(out[0][:, -1]))
    ids = torch.tensor([[5, 9, 13, 17, 21, 30], [17, 5, 21, 9, 13, 30]])
    with torch.no_grad():
        model(ids)
    # Blind to order: the same sums in another order, within path_ulps; with RoPE, beyond them.
    check = Check("order", "", "", "float32").update(writes[0][0], writes[0][1])
    assert (check.ulps <= path_ulps("float32")) == invariant
    assert writes[0].abs().max() > 1e-3


def test_a_toy_spec_passes_positions_to_the_saved_config(tmp_path):
    spec = {"hidden_size": 16, "layout": "LA", "heads": 2, "positions": "none", "steps": 1}
    train_and_save("granitemoehybrid", spec, ZOO, tmp_path, False)
    assert load_model(tmp_path).model.config.position_embedding_type == "nope"


def test_positions_none_for_a_family_that_always_rotates_is_refused_in_one_line():
    with pytest.raises(ValueError, match=r"^toy positions none for family qwen3_5: its class always rotates"):
        build_toy_model("qwen3_5", 64, 16, "LA", heads=2, positions="none")


def test_toys_with_a_shared_embedding_embed_unseen_tokens_as_linear_images_of_each_other(tmp_path):
    shared = {"layout": "LA", "heads": 2, "steps": 3, "embedding": {"seed": 5, "dim": 12}}
    train_and_save("qwen3_5", {"hidden_size": 16, **shared}, ZOO, tmp_path / "q", False)
    train_and_save("granitemoehybrid", {"hidden_size": 24, **shared}, ZOO, tmp_path / "g", False)
    q, g = (load_model(tmp_path / n).model.get_input_embeddings().weight.detach() for n in "qg")
    fit, held = slice(0, len(q) // 2), slice(len(q) // 2, None)
    proj = torch.linalg.lstsq(q[fit], g[fit]).solution
    assert_paths_close(q[held] @ proj, g[held])  # frozen through training, and one geometry
    train_and_save("qwen3_5", {"hidden_size": 16, "layout": "LA", "heads": 2, "steps": 3}, ZOO, tmp_path / "a", False)
    a = load_model(tmp_path / "a").model.get_input_embeddings().weight.detach()
    proj = torch.linalg.lstsq(a[fit], g[fit]).solution
    assert not torch.allclose(a[held] @ proj, g[held], atol=1e-3)
    with pytest.raises(ValueError, match="shared embedding width 20 exceeds the toy's hidden_size 16"):
        train_and_save(
            "qwen3_5", {**shared, "hidden_size": 16, "embedding": {"seed": 5, "dim": 20}}, ZOO, tmp_path, False
        )


def test_a_toy_spec_trains_on_more_keys_and_only_its_tokenizer_holds_them(tmp_path, tokenizer, bpe):
    """keys: N adds the extra key words to the toy's tokenizer after every other word (whose ids stay) and
    draws training and held-out dictionaries from all N; every other tokenizer keeps its key list."""
    from hybridlens.tasks.prompt_sets import vocabulary
    from hybridlens.tasks.vocab import EXTRA_KEYS, KEYS, key_words

    train_and_save(
        "qwen3_5", {"hidden_size": 16, "layout": "LA", "heads": 2, "keys": 100, "steps": 1}, ZOO, tmp_path, False
    )
    hm = load_model(tmp_path)
    vocab, default = hm.tokenizer.get_vocab(), tokenizer.get_vocab()
    assert {w: vocab[w] for w in default} == default and len(vocab) == len(default) + 38
    assert vocabulary(hm, 8)[0] == KEYS + EXTRA_KEYS[:38] == key_words(100)
    for other in (tokenizer, bpe):
        small = HybridModel(build_toy_model("qwen3_5", len(other), 16, "LA", heads=2), other)
        assert not set(vocabulary(small, 4)[0]) & set(EXTRA_KEYS)
    # The gate's held-out prompts draw from the model's keys, and a default toy's are the old ones.
    asked = {k for p in held_out_prompts(hm, 5, 16, 8, "chat") for k, _ in p.pairs}
    assert asked & set(EXTRA_KEYS) and asked <= set(key_words(100))
    toy = HybridModel(build_toy_model("qwen3_5", len(tokenizer), 16, "LA", heads=2), tokenizer)
    assert held_out_prompts(toy, 5, 16, 8, "chat") == make_prompts(5, 16, 8, "chat", 2)
    with pytest.raises(ValueError, match="toy keys 2000: there are 1062 key words"):
        key_words(2000)


def test_the_toy_spec_defaults_are_the_schemas_and_every_toy_key_is_a_field():
    import yaml

    from hybridlens.config import TOY_TRAINING_KEYS

    schema = yaml.safe_load((Path(__file__).resolve().parents[2] / "config/schema.yaml").read_text())
    toy, zoo = schema["definitions"]["toy"]["properties"], schema["properties"]["zoo"]["properties"]
    fields = {f.name: f.default for f in dataclasses.fields(ToySpec)}
    assert {"parent" if k == "from" else k for k in toy} <= fields.keys()
    assert set(TOY_TRAINING_KEYS) <= fields.keys()
    defaults = {k: p["default"] for section in (toy, zoo) for k, p in section.items() if "default" in p}
    defaults |= {k: p["default"] for k, p in toy["chain"]["properties"].items() if "default" in p}
    shared = {k: v for k, v in defaults.items() if k in fields}
    assert shared.keys() >= {"heads", "seed", "steps", "questions", "extra_queries", "done", "target", "gate"}
    for key, default in shared.items():
        assert fields[key] == (tuple(default) if isinstance(default, list) else default), key
    assert ToySpec.of({"hidden_size": 8, "layout": "LA", "chain": {"steps": 1, "freeze_below": 1}}).chain == {
        "steps": 1,
        "freeze_below": 1,
        "link_questions": defaults["link_questions"],
    }
    # a toy key wins over the zoo section's, which wins over the default
    spec = ToySpec.of({"hidden_size": 8, "layout": "LA", "steps": 5, "from": "p"}, {"steps": 7, "lr": 0.1, "margin": 1})
    assert (spec.steps, spec.lr, spec.done, spec.parent) == (5, 0.1, defaults["done"], "p")
    with pytest.raises(UserError, match="unknown keys stepz"):
        ToySpec.of({"hidden_size": 8, "layout": "LA", "stepz": 5})


@pytest.mark.parametrize("n", [2, 3])
def test_a_toys_languages_are_read_from_its_checkpoint(tmp_path, n):
    """No call passes a toy's number of languages: its tokenizer holds every form of each, and says so."""
    spec = {"hidden_size": 16, "layout": "LA", "heads": 2, "steps": 1, "formats": ["chat"]}
    train_and_save("qwen3_5", spec, ZOO | {"n_languages": n}, tmp_path, False)
    hm = load_model(tmp_path)
    assert hm.n_languages == n
    assert {p.language for p in held_out_prompts(hm, 5, 64, 4, "chat")} == set(range(n))


def test_a_real_tokenizer_holds_no_toy_language_and_reads_the_default_two():
    from hybridlens.models.real_tokenizer import qwen_tokenizer
    from hybridlens.tasks.vocab import DEFAULT_LANGUAGES, toy_languages

    assert toy_languages(qwen_tokenizer().get_vocab()) == 0 and DEFAULT_LANGUAGES == 2
    assert (
        toy_languages(build_tokenizer(3).get_vocab()) == 3 == toy_languages(build_tokenizer(3, 100, True).get_vocab())
    )
