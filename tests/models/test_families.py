"""The property suite: every registered family, as a tiny random-weight model saved and loaded through load_model,
keeps the identities every experiment relies on. A new family adds one row to FAMILY_ROWS."""

import json

import pytest
import torch
import transformers

from hybridlens.interventions.cache import CONDITIONS, cut, greedy, prefill
from hybridlens.interventions.engine import Edit, Runner
from hybridlens.interventions.hooks import Trace
from hybridlens.interventions.patch import run
from hybridlens.models.adapter import WRITE_SITES, load_model
from hybridlens.models.families import FAMILIES, LETTERS, REFUSED, REGISTRY, UnsupportedModel
from hybridlens.models.source import check_source
from hybridlens.models.toy import build_toy_model
from hybridlens.tasks.items import turns
from hybridlens.tasks.retrieval import make_prompts
from hybridlens.validation import assert_paths_close

# family -> (toy layout, hidden size, the groups that layout has)
FAMILY_ROWS = {
    "qwen3_5": ("LLALLA", 32, [[0, 1], [3, 4]]),
    "qwen3_5_moe": ("LLALLA", 32, [[0, 1], [3, 4]]),
    "qwen3_next": ("LLALLA", 32, [[0, 1], [3, 4]]),
    "olmo_hybrid": ("LLALLA", 32, [[0, 1], [3, 4]]),
    "lara_mini": ("LLALLA", 32, [[0, 1], [3, 4]]),  # layer 2 sliding-window attention, layer 5 global
    "kimi_linear": ("LLALLA", 32, [[0, 1], [3, 4]]),
    "bailing_hybrid": ("LLALLA", 32, [[0, 1], [3, 4]]),
    "granitemoehybrid": ("LLALLA", 24, [[0, 1], [3, 4]]),
    "bamba": ("LLALLA", 24, [[0, 1], [3, 4]]),
    "nemotron_h": ("LFLAFLA", 32, [[0, 2], [5]]),  # MLP-only layers end no group
    "zamba2": ("LLPLLP", 32, [[0, 1], [2], [3, 4], [5]]),
    "falcon_h1": ("PPP", 32, [[0], [1], [2]]),
    "jamba": ("LLALLA", 32, [[0, 1], [3, 4]]),
    "zamba": ("LLPLLP", 32, [[0, 1], [2], [3, 4], [5]]),
    "lfm2": ("LLALLA", 32, [[0, 1], [3, 4]]),
    "lfm2_moe": ("LLALLA", 32, [[0, 1], [3, 4]]),
    "lfm3": ("LLALLA", 32, [[0, 1], [3, 4]]),  # layer 2 full attention, layer 5 sliding-window
}


def test_every_registered_family_has_a_row():
    assert sorted(FAMILY_ROWS) == sorted(REGISTRY)


@pytest.mark.parametrize("model_type", sorted(REFUSED))
def test_a_hybrid_that_cannot_be_supported_is_refused_with_its_reason(tmp_path, model_type):
    """Before any weights load: check_source reads only config.json."""
    (tmp_path / "config.json").write_text(json.dumps({"model_type": model_type}))
    with pytest.raises(UnsupportedModel) as err:
        check_source(str(tmp_path), None, "config models.x.source")
    assert str(err.value) == (
        f"config models.x.source ({tmp_path}): hybridlens cannot analyse model_type {model_type!r}: "
        f"{REFUSED[model_type]}"
    )
    assert model_type in transformers.CONFIG_MAPPING  # the refusal names a model type transformers ships


@pytest.fixture(scope="module", params=list(FAMILY_ROWS))
def fm(request, tmp_path_factory, tokenizer):
    """(HybridModel, layout, groups) of one family, saved with save_pretrained and loaded through load_model."""
    layout, hidden, groups = FAMILY_ROWS[request.param]
    model = build_toy_model(request.param, len(tokenizer), hidden, layout, heads=2, seed=0)
    fam = FAMILIES[request.param]
    with torch.no_grad():  # the toys start some Mamba-2 branches silent; these tests need every mixer to write
        for layer in fam.base_model(model).layers:
            norm = getattr(fam.linear_mixer(layer), "norm", None)
            if norm is not None and hasattr(norm, "weight"):
                norm.weight.fill_(1.0)
    path = tmp_path_factory.mktemp(request.param)
    model.save_pretrained(path)
    tokenizer.save_pretrained(path)
    torch.manual_seed(0)
    return load_model(path), layout, groups


def test_the_saved_tokenizer_loads_as_it_was_saved(fm, tokenizer):
    """AutoTokenizer would rebuild the toys' word-level tokenizer as the class some model types register."""
    hm, _, _ = fm
    text = make_prompts(0, 1, 3, "chat")[0].text
    assert hm.tokenizer(text)["input_ids"] == tokenizer(text)["input_ids"]
    assert tokenizer.unk_token_id not in hm.tokenizer(text)["input_ids"]


def _ids(hm, n=2, n_pairs=3, seed=0):
    return hm.encode([p.text for p in make_prompts(seed, n, n_pairs, "chat")])[0]


def test_kinds_and_groups_follow_the_config_layer_pattern(fm):
    hm, layout, groups = fm
    assert hm.kinds == [LETTERS[c] for c in layout] == hm.family.layer_kinds(hm.config)
    assert hm.groups == groups


@torch.no_grad()
def test_patching_every_write_site_with_its_own_values_is_the_identity(fm):
    hm, _, _ = fm
    ids = _ids(hm)
    sites = [f"layers.{layer}.{s}" for layer in range(hm.n_layers) for s in WRITE_SITES]
    reference = run(hm, ids, capture=sites)
    plain, captured = reference.logits, reference.captured
    for site in sites:  # the same computation with its own values written back: the same bits
        patched = run(hm, ids, patch={site: (None, captured[site])}).logits
        assert torch.equal(patched, plain), site
    zero = torch.zeros(ids.shape[0], 1, hm.d_model)  # and a patch with other values reaches the logits
    moved = run(hm, ids, patch={f"layers.{hm.linear_layers()[0]}.mixer_out": ([-1], zero)}).logits
    assert (moved[:, -1] - plain[:, -1]).abs().max().item() > 1e-4


@torch.no_grad()
@pytest.mark.parametrize("split", [1, 9, -1])
def test_prefill_then_continue_equals_one_forward(fm, split):
    hm, _, _ = fm
    ids = _ids(hm)
    t = split % ids.shape[1]
    full = hm.model(ids).logits[:, -1]
    _, cache = prefill(hm, ids[:, :t])
    dropped = copy_of(cache)  # what a continuation that ignored the cached states would give
    for site in [f"layers.{i}.{name}" for i in hm.linear_layers() for name in hm.state_sites]:
        hm.write_cache(dropped, site, torch.zeros_like(hm.read_cache(dropped, site)))
    dropped = hm.model(ids[:, t:], cache=dropped, use_cache=True).logits[:, -1]
    cont = hm.model(ids[:, t:], cache=cache, use_cache=True).logits[:, -1]
    assert_paths_close(cont, full)
    # The carried state is read: the same continuation from zeroed states gives other bits (were the states
    # ignored, both would run one computation on the same inputs and agree exactly, on any CPU).
    assert not torch.equal(dropped, cont)


@torch.no_grad()
def test_state_and_conv_read_write_round_trip(fm):
    hm, _, _ = fm
    ids = _ids(hm)
    _, cache = prefill(hm, ids[:, :-1])
    reference = hm.model(ids[:, -1:], cache=copy_of(cache), use_cache=True).logits[:, -1]
    for layer in hm.linear_layers():
        for name in hm.state_sites:
            site = f"layers.{layer}.{name}"
            saved = hm.read_cache(cache, site).clone()
            hm.write_cache(cache, site, torch.zeros_like(saved))
            assert hm.read_cache(cache, site).abs().max() == 0
            zeroed = hm.model(ids[:, -1:], cache=copy_of(cache), use_cache=True).logits[:, -1]
            assert (zeroed - reference).abs().max().item() > 1e-6, site  # the continuation reads it
            hm.write_cache(cache, site, saved)
            assert torch.equal(hm.read_cache(cache, site), saved)
    restored = hm.model(ids[:, -1:], cache=copy_of(cache), use_cache=True).logits[:, -1]
    assert torch.equal(restored, reference)
    missing = {"state", "conv"} - set(hm.state_sites)
    for name in missing:  # a site the family does not keep is refused in one line that names what it keeps
        with pytest.raises(LookupError, match="keeps no"):
            hm.read_cache(cache, f"layers.{hm.linear_layers()[0]}.{name}")


def copy_of(cache):
    import copy

    return copy.deepcopy(cache)


@torch.no_grad()
def test_split_prefill_identities(fm):
    hm, _, _ = fm
    ids = _ids(hm)
    context, question = ids[:, :-4], ids[:, -4:]
    whole_tokens, whole_logits = greedy(hm, ids, 3)
    _, cache = prefill(hm, context)
    tokens, logits = greedy(hm, question, 3, cache=CONDITIONS["full"](hm, cache, None, None))
    assert torch.equal(tokens, whole_tokens)
    assert_paths_close(logits, whole_logits)
    empty = cut(hm, cut(hm, cache, "kv"), "state")  # both channels cut == a fresh forward at the same positions
    tokens, logits = greedy(hm, question, 3, cache=empty, start=context.shape[1])
    fresh_tokens, fresh_logits = greedy(hm, question, 3, start=context.shape[1])
    assert torch.equal(tokens, fresh_tokens)
    assert_paths_close(logits, fresh_logits)


@torch.no_grad()
def test_head_ablation_equals_zeroing_that_heads_slice_of_the_output_projection(fm):
    hm, _, _ = fm
    prompts = make_prompts(0, 2, 3, "chat")
    layer = hm.attention_layers()[-1]
    proj, n_heads, dim = hm.head_mixer(layer)
    head = n_heads - 1
    ids = hm.encode([turns(p) for p in prompts])[0]
    ablated = Runner(hm, ids, minimal=False).forward(heads_off={layer: [head]})[0]
    intact = Runner(hm, ids, minimal=False).forward()[0]
    weight = proj.weight  # a new tensor on this layer's projection: Zamba2's hybrid layers share the parameter
    try:
        proj.weight = torch.nn.Parameter(weight.detach().clone())
        proj.weight[:, head * dim : (head + 1) * dim] = 0
        zeroed = Runner(hm, ids, minimal=False).forward()[0]
    finally:
        proj.weight = weight
    torch.testing.assert_close(ablated, zeroed, atol=1e-5, rtol=0)
    assert (ablated - intact).abs().max().item() > 1e-5


@torch.no_grad()
def test_a_forward_resumed_at_its_first_edited_layer_is_the_forward_that_runs_every_layer(fm):
    """Every write site of every layer, the first and the last included, edited at the final position and at a
    middle one (a shared prefix and a resumed layer combined) and at every position (the layer alone): a second
    forward resumes at the edited layer from the recorded stream, the layers before it do not run, and it gives
    the first one's bits; both equal a full forward's logits, captures and attention."""
    hm, _, _ = fm
    ids = _ids(hm)
    fast, full = Runner(hm, ids), Runner(hm, ids, minimal=False)
    generator = torch.Generator().manual_seed(0)
    for layer in range(hm.n_layers):
        read = [a for a in hm.attention_layers() if a >= layer]
        for name in WRITE_SITES:
            site = f"layers.{layer}.{name}"
            values = torch.randn(ids.shape[0], 1, hm.d_model, generator=generator)
            for edit in (Edit([-1], values), Edit([ids.shape[1] // 2], values), Edit(None, lambda t: 0.5 * t + 0.1)):
                where = f"{site} at {'every position' if edit.positions is None else f'position {edit.positions}'}"
                forward = {"edits": {site: edit}, "capture": [site], "capture_at": edit.positions, "attention": read}
                first = fast.forward(**forward)
                with Trace(hm.layers[max(layer - 1, 0)]) as before:
                    again = fast.forward(**forward)
                assert (before.output is None) == (layer > 0), where
                assert torch.equal(again[0], first[0]) and torch.equal(again[2][site], first[2][site]), where
                want = full.forward(**forward)
                assert_paths_close(again[0], want[0], where)
                assert_paths_close(again[2][site], want[2][site], where)
                for a in read:
                    assert torch.equal(again[1][a], first[1][a]), f"{where}, attention of layer {a}"
                    assert_paths_close(again[1][a], want[1][a], f"{where}, attention of layer {a}")
    heads = {hm.attention_layers()[-1]: [0]}  # a head ablation at every position resumes at its layer too
    assert torch.equal(fast.forward(heads_off=heads)[0], fast.forward(heads_off=heads)[0])
    assert_paths_close(fast.forward(heads_off=heads)[0], full.forward(heads_off=heads)[0])
    intact = fast.forward()[0]
    with Trace(hm.layers[-1]) as after:
        again = fast.forward()[0]
    assert after.output is None  # unedited again: no layer runs
    assert torch.equal(again, intact)
    assert_paths_close(again, full.forward()[0])


@torch.no_grad()
def test_attention_weights_are_read_per_layer(fm):
    """Every attention layer's weights come from that layer (Zamba2's hybrid layers share one block)."""
    hm, _, _ = fm
    prompts = make_prompts(0, 2, 3, "chat")
    layers = hm.attention_layers()
    ids = hm.encode([turns(p) for p in prompts])[0]
    attn = Runner(hm, ids).forward(attention=layers)[1]
    with hm.attention_implementation("eager"):
        reference = hm.model(ids, output_attentions=True).attentions
    # transformers returns one attention tensor per attention layer, in layer order
    reference = [a for a in reference if a is not None]
    assert len(reference) == len(layers)
    for layer, ref in zip(layers, reference, strict=True):
        assert_paths_close(attn[layer], ref[:, :, -1].float())


@torch.no_grad()
def test_a_left_padded_batch_equals_each_prompt_alone(fm):
    """Prompts of different lengths share a batch where the family says its padded forward is the unpadded
    one (Family.left_padding): at every real position the logits and every write site, and after the prompt
    every linear layer's cached states, equal each prompt's own forward, within the path allowance."""
    hm, _, _ = fm
    assert hm.family.left_padding
    prompts = [make_prompts(seed, 1, n_pairs, "chat")[0] for seed, n_pairs in ((0, 2), (1, 4), (2, 3))]
    ids = [hm.tokenizer(p.text, add_special_tokens=False)["input_ids"] for p in prompts]
    padded, mask, shifts = hm.pad(ids)
    assert sorted(shifts)[0] == 0 and len(set(shifts)) == 3 and max(shifts) > 4  # more than a conv's window
    sites = [f"layers.{layer}.{s}" for layer in range(hm.n_layers) for s in WRITE_SITES]
    states = [f"layers.{layer}.{name}" for layer in hm.linear_layers() for name in hm.state_sites]
    cache = hm.new_cache()
    batch = run(hm, padded, capture=sites, cache=cache, attention_mask=mask)
    for i, (x, s) in enumerate(zip(ids, shifts, strict=True)):
        own_cache = hm.new_cache()
        own = run(hm, torch.tensor([x]), capture=sites, cache=own_cache)
        assert_paths_close(batch.logits[i, s:], own.logits[0], f"item {i} logits")
        for site in sites:
            assert_paths_close(batch.captured[site][i, s:], own.captured[site][0], f"item {i} {site}")
        for site in states:
            assert_paths_close(hm.read_cache(cache, site)[i], hm.read_cache(own_cache, site)[0], f"item {i} {site}")
