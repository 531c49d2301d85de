"""Real-shape checkpoints of the published configs: structure, saving as the hub does, loading, framing, and the
adapter's properties on the shapes no toy has (MoE, the multimodal wrapper, Falcon-H1's multipliers), in float32
and bfloat16."""

import json

import pytest
import torch

from hybridlens.interventions.cache import CONDITIONS, channel_sites, greedy, prefill
from hybridlens.interventions.on_items import encode
from hybridlens.interventions.patch import run
from hybridlens.models.adapter import UnsupportedModel, load_model
from hybridlens.models.realshape import REAL_CONFIGS, build_realshape, layer_pattern, realshape_config
from hybridlens.tasks.items import token_positions, turns
from hybridlens.tasks.prompt_sets import prompt_set
from hybridlens.tasks.retrieval import make_prompts
from hybridlens.tasks.vocab import KEYS, VALUES
from hybridlens.validation import assert_paths_close

# The paper preset's eight models, and the Falcon-H1 config whose muP multipliers are published.
PRESET = [
    "Qwen__Qwen3.5-0.8B",
    "Qwen__Qwen3.5-2B",
    "Qwen__Qwen3.5-4B",
    "Qwen__Qwen3.5-9B",
    "Qwen__Qwen3.5-27B",
    "Qwen__Qwen3.5-35B-A3B",
    "ibm-granite__granite-4.0-h-tiny",
    "tiiuae__Falcon-H1-1.5B-Instruct",
]
MULTIPLIERS = "tiiuae__Falcon-H1-0.5B-Instruct"
KIND = {"linear_attention": "linear", "mamba": "linear", "full_attention": "attention", "attention": "attention"}


def published(name):
    return json.loads((REAL_CONFIGS / f"{name}.config.json").read_text())


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """name -> (directory, in-memory model), float32 checkpoints, built once per module."""
    cache = {}

    def get(name):
        if name not in cache:
            out = tmp_path_factory.mktemp(name.replace(".", "_"))
            model, _ = build_realshape(REAL_CONFIGS / f"{name}.config.json", out, dtype="float32")
            cache[name] = out, model
        return cache[name]

    return get


@torch.no_grad()
@pytest.mark.parametrize("name", PRESET + [MULTIPLIERS])
def test_checkpoint_loads_to_the_in_memory_model_with_the_config_layer_pattern(built, name):
    path, model = built(name)
    pub, saved = published(name), json.loads((path / "config.json").read_text())
    assert saved["architectures"] == pub["architectures"]
    index = json.loads((path / "model.safetensors.index.json").read_text())["weight_map"]
    shards = set(index.values())
    assert len(shards) >= 2 and all((path / s).is_file() for s in shards)
    hm = load_model(path)
    ids, _ = hm.encode([turns(p) for p in make_prompts(0, 2, 4, "chat", 2)])
    assert (hm.model(ids).logits - model(input_ids=ids).logits).abs().max().item() <= 1e-5
    pattern = layer_pattern(saved.get("text_config", saved))
    assert hm.kinds == [KIND.get(t, "parallel") for t in pattern]
    linear = [i for i, k in enumerate(hm.kinds) if k == "linear"]
    runs = [r for r in hm.groups if r[0] in linear]
    assert sum(runs, []) == linear and all(b - a == 1 for r in runs for a, b in zip(r, r[1:], strict=False))
    assert hm.has_chat_template and hm.single_token_words(KEYS + VALUES) == KEYS + VALUES


def test_structure_is_kept_while_width_depth_vocabulary_and_experts_shrink():
    q27 = realshape_config(published("Qwen__Qwen3.5-27B"))["text_config"]
    assert (q27["linear_num_key_heads"], q27["linear_num_value_heads"], q27["linear_key_head_dim"]) == (16, 48, 128)
    assert (q27["num_attention_heads"], q27["num_key_value_heads"], q27["head_dim"]) == (24, 4, 256)
    assert q27["attn_output_gate"] and q27["rope_parameters"]["partial_rotary_factor"] == 0.25
    assert q27["layer_types"] == ["linear_attention"] * 3 + ["full_attention"] + ["linear_attention"] * 3 + [
        "full_attention"
    ]
    assert q27["intermediate_size"] / q27["hidden_size"] == pytest.approx(17408 / 5120, rel=0.05)
    moe = realshape_config(published("Qwen__Qwen3.5-35B-A3B"), experts=8)["text_config"]
    assert (moe["num_experts"], moe["num_experts_per_tok"], moe["model_type"]) == (8, 2, "qwen3_5_moe_text")
    granite = realshape_config(published("ibm-granite__granite-4.0-h-tiny"))
    assert [i for i, t in enumerate(granite["layer_types"]) if t == "attention"] == [5, 15]
    assert granite["hidden_size"] % 24 == 0 and granite["mamba_d_head"] * 48 == 2 * granite["hidden_size"]
    falcon = realshape_config(published(MULTIPLIERS))
    pub = published(MULTIPLIERS)
    for key in ("ssm_multipliers", "mlp_multipliers", "key_multiplier", "lm_head_multiplier", "embedding_multiplier"):
        assert falcon[key] == pub[key]
    with pytest.raises(ValueError, match="repeats every 4 layers; use a multiple of 4"):
        realshape_config(published("Qwen__Qwen3.5-0.8B"), layers=6)
    with pytest.raises(ValueError, match="needs a multiple of 24"):
        realshape_config(published("ibm-granite__granite-4.0-h-tiny"), hidden=64)
    nemotron = realshape_config(published("nvidia__Nemotron-H-8B-Base-8K"))  # no period shorter than its depth
    assert nemotron["hybrid_override_pattern"] == published("nvidia__Nemotron-H-8B-Base-8K")["hybrid_override_pattern"]
    assert nemotron["chunk_size"] == 32  # its Mamba-2 chunk has its own name; the plain scan pads to it


def test_qwen_checkpoint_keeps_the_wrapper_weight_names_experts_and_the_real_template(built):
    path, _ = built("Qwen__Qwen3.5-35B-A3B")
    names = json.loads((path / "model.safetensors.index.json").read_text())["weight_map"]
    assert any(n.startswith("model.visual.") for n in names)
    assert "model.language_model.layers.0.mlp.experts.7.down_proj.weight" in names
    assert "model.language_model.layers.0.mlp.shared_expert.up_proj.weight" in names
    assert (path / "chat_template.jinja").read_text() == (REAL_CONFIGS / "Qwen3.5.chat_template.jinja").read_text()


def test_real_qwen_template_frames_the_papers_prompt_and_spans_point_into_the_turns(built):
    hm = load_model(built("Qwen__Qwen3.5-0.8B")[0])
    (p,), counts = prompt_set(hm, {"format": "chat", "n_pairs": 8, "n": 1, "seed": 3})
    assert p.framing == "paper" and counts["languages"] == 1
    text, _ = hm.render(turns(p))
    assert text == (
        f"<|im_start|>user\n{p.text}<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n{p.prefill}"
    )  # the thinking block closed, the assistant turn prefilled up to the answer
    batch = encode(hm, [p])
    ids, offsets = batch.ids, batch.offsets
    # The answer is the token after "**": the framed ids are a prefix of the answered text.
    answered = hm.tokenizer(text + p.answer, add_special_tokens=False)["input_ids"]
    assert answered == ids[0].tolist() + [batch.choices[0, p.query].item()]
    assert hm.tokenizer.decode(ids[0]) == text
    for i, (key, _) in enumerate(p.pairs):
        (k_pos,) = token_positions(p, offsets[0], f"key{i}")
        assert hm.tokenizer.decode(ids[0, k_pos]).strip() == key == p.text[slice(*p.spans[f"key{i}"])]
        (v_pos,) = token_positions(p, offsets[0], f"value{i}")
        assert hm.tokenizer.decode(ids[0, v_pos]).strip("= ") == p.text[slice(*p.spans[f"value{i}"])]
    special = set(hm.tokenizer.all_special_ids)
    spans = {i for name in p.spans for i in token_positions(p, offsets[0], name)}
    assert not spans & {i for i, t in enumerate(ids[0].tolist()) if t in special}


def test_a_family_that_disagrees_with_the_checkpoint_is_refused(built):
    path, _ = built("Qwen__Qwen3.5-0.8B")
    with pytest.raises(UnsupportedModel, match="registry says family 'granitemoehybrid'.*set family: qwen3_5$"):
        load_model(path, family="granitemoehybrid")


# --- the adapter's properties on the shapes no toy has, in float32 and bfloat16 ---------------------------------
SHAPES = ["Qwen__Qwen3.5-35B-A3B", "Qwen__Qwen3.5-0.8B", MULTIPLIERS]  # MoE, multimodal wrapper, muP multipliers
DTYPES = ("float32", "bfloat16")


def assert_close(actual, expected, dtype):
    """Two paths (a recurrent continuation and a chunked prefill) that ran in `dtype` round differently."""
    assert_paths_close(actual.float(), expected.float(), dtype=dtype)


@pytest.fixture(scope="module", params=[(s, d) for s in SHAPES for d in DTYPES], ids=lambda p: f"{p[0]}-{p[1]}")
def shape(request, built):
    name, dtype = request.param
    return load_model(built(name)[0], dtype=dtype), dtype


def _ids(hm, n=2):
    return hm.encode([p.text for p in make_prompts(0, n, 4, "chat", 2)])[0]


@torch.no_grad()
def test_self_patch_is_identity_at_every_write_site(shape):
    hm, _ = shape
    ids = _ids(hm)
    plain = hm.model(ids).logits
    sites = [f"layers.{i}.{s}" for i in range(hm.n_layers) for s in ("resid_pre", "mixer_out", "layer_out")]
    captured = run(hm, ids, capture=sites).captured
    for site in sites:  # own values written back: bit-identical in every dtype
        assert torch.equal(run(hm, ids, patch={site: (None, captured[site])}).logits, plain), site


@torch.no_grad()
@pytest.mark.parametrize("split", [1, 9, -1])
def test_prefill_then_continue_equals_one_forward(shape, split):
    hm, dtype = shape
    ids = _ids(hm)
    t = split % ids.shape[1]
    full = hm.model(ids).logits[:, -1]
    _, cache = prefill(hm, ids[:, :t])
    assert_close(hm.model(ids[:, t:], cache=cache, use_cache=True).logits[:, -1], full, dtype)


@torch.no_grad()
def test_state_and_conv_round_trip_through_the_cache(shape):
    hm, _ = shape
    ids = _ids(hm)
    _, cache = prefill(hm, ids)
    for site in channel_sites(hm, "state"):
        value = hm.read_cache(cache, site).clone()
        hm.write_cache(cache, site, torch.zeros_like(value))
        assert hm.read_cache(cache, site).abs().sum() == 0
        hm.write_cache(cache, site, value)
        assert torch.equal(hm.read_cache(cache, site), value)
    with pytest.raises(ValueError, match="shape"):
        hm.write_cache(cache, channel_sites(hm, "state")[0], torch.zeros(1, 2, 3))


@torch.no_grad()
def test_split_prefill_identities(shape):
    hm, dtype = shape
    ids = _ids(hm)
    context, question = ids[:, :-6], ids[:, -6:]
    whole_tokens, whole_logits = greedy(hm, ids, 2)
    _, cache = prefill(hm, context)
    tokens, logits = greedy(hm, question, 2, cache=CONDITIONS["full"](hm, cache, None, None))
    assert_close(logits, whole_logits, dtype)
    # Both channels emptied: the question alone, at the positions it has in the whole prompt.
    empty = CONDITIONS["state_only"](hm, CONDITIONS["kv_only"](hm, cache, None, None), None, None)
    start = context.shape[1]
    _, alone = greedy(hm, question, 1, cache=empty, start=start)
    pos = torch.arange(start, start + question.shape[1])[None].expand(question.shape[0], -1)
    fresh = hm.model(question, position_ids=pos).logits[:, -1]
    assert_close(alone, fresh, dtype)


@torch.no_grad()
@pytest.mark.parametrize("name", ["Qwen__Qwen3.5-35B-A3B", "Qwen__Qwen3.5-9B"])
def test_hla_converts_every_gdn_mixer_and_all_gates_one_is_the_original(built, name):
    from hybridlens.models.hla import HLALayer, to_hla

    hm = load_model(built(name)[0])  # 9B: grouped value heads (16 key : 32 value)
    ids = _ids(hm)
    before = hm.model(ids, use_cache=False).logits
    to_hla(hm.model, "gdn", chunk=16, bucket=4)
    converted = [i for i, layer in enumerate(hm.layers) if isinstance(getattr(layer, "linear_attn", None), HLALayer)]
    assert converted == hm.linear_layers()
    assert_paths_close(hm.model(ids, use_cache=False).logits, before)  # chunks of 16 against 64


def test_command_writes_a_checkpoint_and_refuses_bad_sizes_in_one_line(tmp_path, capsys):
    from hybridlens.models.realshape import main

    config = str(REAL_CONFIGS / "Qwen__Qwen3.5-35B-A3B.config.json")
    main([config, str(tmp_path / "q"), "--layers", "12", "--experts", "4", "--dtype", "float32"])
    saved = json.loads((tmp_path / "q/config.json").read_text())["text_config"]
    assert (saved["num_hidden_layers"], saved["num_experts"], saved["num_experts_per_tok"]) == (12, 4, 2)
    assert "Qwen3_5MoeForConditionalGeneration" in capsys.readouterr().out
    with pytest.raises(SystemExit) as exit_:
        main([config, str(tmp_path / "bad"), "--layers", "6"])
    assert exit_.value.code == 2
    assert capsys.readouterr().err.strip().splitlines()[-1].endswith("repeats every 4 layers; use a multiple of 4")
    with pytest.raises(SystemExit):
        main([config, str(tmp_path / "bad"), "--vocab", "512"])
    err = capsys.readouterr().err
    assert "task words (e.g. " in err and err.strip().endswith("use --vocab 1024 or more")
    assert not (tmp_path / "bad").exists()
