import pytest
import torch

from hybridlens.interventions.cache import greedy, prefill
from hybridlens.interventions.hooks import Trace
from hybridlens.interventions.patch import run
from hybridlens.models.adapter import HybridModel, UnsupportedModel, load_model, parse_site
from hybridlens.models.toy import build_toy_model
from hybridlens.tasks.retrieval import make_prompts
from hybridlens.validation import assert_paths_close


def _ids(hm, n=3, n_pairs=4, seed=0):
    prompts = make_prompts(seed, n, n_pairs, "chat")
    return hm.encode([p.text for p in prompts])[0]


def test_kinds_and_groups(hm):
    expected = {
        "qwen3_5": (["linear", "linear", "attention"] * 2, [[0, 1], [3, 4]]),
        "granitemoehybrid": (["linear", "linear", "attention"] * 2, [[0, 1], [3, 4]]),
        "falcon_h1": (["parallel"] * 3, [[0], [1], [2]]),
    }[hm.family.name]
    assert (hm.kinds, hm.groups) == expected


@torch.no_grad()
def test_patch_with_own_activations_is_identity(hm):
    ids = _ids(hm)
    sites = [f"layers.{layer}.{s}" for layer in range(hm.n_layers) for s in ("resid_pre", "mixer_out", "layer_out")]
    plain = run(hm, ids, capture=sites)
    for site in sites:  # one site at a time, all positions, own values: the same computation, bit for bit
        patched = run(hm, ids, patch={site: (None, plain.captured[site])}).logits
        assert torch.equal(patched, plain.logits), site
    # all sites at once, at a position subset
    cap = run(hm, ids, capture=sites, positions=[0, 5, -1]).captured
    patched = run(hm, ids, patch={s: ([0, 5, -1], cap[s]) for s in sites}).logits
    assert torch.equal(patched, plain.logits)
    assert_paths_close(plain.logits, hm.model(ids).logits)  # hooks that only read change nothing


@torch.no_grad()
def test_patch_changes_output(hm):
    """A patch with other values must reach the logits (guards against hooks that do nothing)."""
    ids = _ids(hm)
    plain = hm.model(ids).logits
    zero = torch.zeros(ids.shape[0], 1, hm.d_model)
    patched = run(hm, ids, patch={"layers.0.mixer_out": ([-1], zero)}).logits
    assert (patched[:, -1] - plain[:, -1]).abs().max().item() > 1e-3
    assert torch.equal(patched[:, :-1], plain[:, :-1])  # causal: earlier positions untouched


@torch.no_grad()
@pytest.mark.parametrize("split", [1, 17, -1])
def test_prefill_then_continue_equals_full_forward(hm, split):
    ids = _ids(hm)
    t = split % ids.shape[1]
    full = hm.model(ids).logits[:, -1]
    _, cache = prefill(hm, ids[:, :t])
    cont = hm.model(ids[:, t:], past_key_values=cache, use_cache=True).logits[:, -1]
    assert_paths_close(cont, full)


@torch.no_grad()
def test_greedy_from_cache_equals_greedy_from_prompt(hm):
    ids = _ids(hm)
    whole, _ = greedy(hm, ids, 3)
    _, cache = prefill(hm, ids[:, :-4])
    cont, _ = greedy(hm, ids[:, -4:], 3, cache=cache)
    assert torch.equal(whole, cont)


@torch.no_grad()
def test_layer_out_equals_next_resid_pre(hm):
    ids = _ids(hm)
    sites = [f"layers.{i}.layer_out" for i in range(hm.n_layers - 1)]
    sites += [f"layers.{i + 1}.resid_pre" for i in range(hm.n_layers - 1)]
    cap = run(hm, ids, capture=sites).captured
    for i in range(hm.n_layers - 1):
        assert torch.equal(cap[f"layers.{i}.layer_out"], cap[f"layers.{i + 1}.resid_pre"])


@torch.no_grad()
def test_cache_sites_read_and_write(hm):
    ids = _ids(hm)
    _, cache = prefill(hm, ids)
    lin, att = hm.linear_layers()[0], hm.attention_layers()[0]
    state = hm.read_cache(cache, f"layers.{lin}.state")
    keys, values = hm.read_cache(cache, f"layers.{att}.kv")
    assert state.shape[0] == ids.shape[0] and keys.shape[-2] == ids.shape[1] == values.shape[-2]
    hm.write_cache(cache, f"layers.{lin}.state", torch.zeros_like(state))
    assert hm.read_cache(cache, f"layers.{lin}.state").abs().sum() == 0
    with pytest.raises(ValueError, match="shape"):
        hm.write_cache(cache, f"layers.{lin}.conv", torch.zeros(1, 2, 3))


def test_unknown_site_names_valid_ones(hm):
    with pytest.raises(LookupError, match="unknown site 'layers.0.attn_weights'.*resid_pre"):
        parse_site("layers.0.attn_weights")
    with pytest.raises(LookupError, match="out of range"):
        hm.module_for(f"layers.{hm.n_layers}.resid_pre")
    if "attention" in hm.kinds:
        with pytest.raises(LookupError, match="attention layer, it has no state"):
            hm.read_cache(None, f"layers.{hm.kinds.index('attention')}.state")


def test_unembed_matches_model_logits(hm):
    ids = _ids(hm)
    with torch.no_grad():
        cap = run(hm, ids, capture=[f"layers.{hm.n_layers - 1}.layer_out"], positions=[-1])
        lens = hm.unembed(cap.captured[f"layers.{hm.n_layers - 1}.layer_out"][:, 0])
    assert_paths_close(lens, cap.logits[:, -1])


@torch.no_grad()
def test_a_forward_resumed_at_a_layer_runs_that_layer_on_the_given_stream_and_none_before(hm):
    ids = _ids(hm)
    layer = hm.n_layers // 2
    sites = [f"layers.{layer}.resid_pre", f"layers.{hm.n_layers - 1}.layer_out"]
    full = run(hm, ids, capture=sites)
    with hm.resumed(layer, full.captured[sites[0]]), Trace(hm.layers[layer - 1]) as before:
        resumed = run(hm, ids, capture=sites)
    assert before.output is None  # the layer before never ran
    assert torch.equal(resumed.captured[sites[0]], full.captured[sites[0]])
    assert_paths_close(resumed.logits, full.logits)
    with hm.resumed(layer, 2 * full.captured[sites[0]]):  # the given stream is what the layer reads
        assert not torch.allclose(run(hm, ids).logits, full.logits, atol=1e-3)
    with hm.resumed(hm.n_layers, full.captured[sites[1]]):  # after the last layer: only the unembedding runs
        after = run(hm, ids).logits
    assert torch.equal(after, full.logits)
    assert list(hm.base.layers) == hm.layers  # the layers are back
    with pytest.raises(ValueError, match=r"resume at layer 0: give 1\.\.\d+ \(0 resumes nothing\)"):
        hm.resumed(0, full.captured[sites[0]]).__enter__()


def test_refuses_model_without_linear_layers(tokenizer):
    model = build_toy_model("qwen3_5", len(tokenizer), 32, "AA", heads=2)
    with pytest.raises(UnsupportedModel, match="no linear layers"):
        HybridModel(model, tokenizer, "attention-only")


def test_refuses_unknown_family(tmp_path, tokenizer):
    from transformers import LlamaConfig, LlamaForCausalLM

    LlamaForCausalLM(
        LlamaConfig(
            vocab_size=len(tokenizer),
            hidden_size=16,
            intermediate_size=32,
            num_hidden_layers=1,
            num_attention_heads=2,
        )
    ).save_pretrained(tmp_path)
    with pytest.raises(UnsupportedModel, match="model_type 'llama' is not a hybrid family"):
        load_model(tmp_path)


def test_raw_prompts_read_a_chat_model_without_its_template(tmp_path):
    """prompts: raw is the explicit choice of plain-text prompts, even where the tokenizer brings a template."""
    import shutil

    from hybridlens.models.source import has_chat_template

    directory = tmp_path / "chat_model"
    shutil.copytree("zoo/qwen_toy", directory)
    (directory / "manifest.json").unlink()  # a user's copy, not our shipped toy
    assert not has_chat_template(directory) and not load_model(directory).has_chat_template
    (directory / "chat_template.jinja").write_text(
        "{% for m in messages %}<|{{ m.role }}|> {{ m.content }}{% endfor %}"
    )
    assert has_chat_template(directory) and load_model(directory).has_chat_template
    raw = load_model(directory, prompts="raw")
    assert not raw.has_chat_template and raw.tokenizer.chat_template is None
