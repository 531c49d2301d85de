"""The engine's shortcuts against full forwards: shared prefixes, early stops and sdpa where nothing reads attention."""

import pytest
import torch

from hybridlens.interventions.engine import Edit, Runner, mixer_sites
from hybridlens.interventions.hooks import Trace
from hybridlens.interventions.on_items import encode, transplant
from hybridlens.interventions.patch import run
from hybridlens.models.adapter import WRITE_SITES, HybridModel
from hybridlens.models.toy import build_tokenizer, build_toy_model
from hybridlens.tasks.items import turns
from hybridlens.tasks.retrieval import make_prompts
from hybridlens.tasks.vocab import fused_word, language_forms
from hybridlens.validation import assert_paths_close


def _runners(hm, seed=3, n=4):
    batch = encode(hm, make_prompts(seed, n, 4, "chat", 2))
    return Runner(hm, batch.ids, batch.choices), Runner(hm, batch.ids, minimal=False)


def _close(a, b):
    """Two paths of one computation (shortcut against full forward, sdpa against eager)."""
    assert_paths_close(a, b)


@pytest.mark.parametrize("part", ["final", "question"])
def test_a_shared_prefix_forward_equals_the_full_forward_at_every_site(hm, part):
    fast, full = _runners(hm)
    at = encode(hm, make_prompts(3, 4, 4, "chat", 2), choices=False).positions(part)
    assert fast.first_position({"x": Edit(at, None)}, None, ()) == min(min(p) for p in at) > 0
    generator = torch.Generator().manual_seed(0)
    layers = hm.attention_layers()
    for layer in range(hm.n_layers):
        for name in WRITE_SITES:
            site = f"layers.{layer}.{name}"
            values = torch.randn(len(at), len(at[0]), hm.d_model, generator=generator)
            edits = {site: Edit(at, values)}
            got = fast.forward(edits, capture=[site], capture_at=at, attention=layers)
            want = full.forward(edits, capture=[site], capture_at=at, attention=layers)
            _close(got[0], want[0])
            for a in layers:
                _close(got[1][a], want[1][a])
            assert torch.equal(got[2][site], values)  # a capture of an edited site sees the edit
            _close(got[2][site], want[2][site])


def test_prefix_reuse_also_holds_for_functions_and_final_head_blocking(hm):
    fast, full = _runners(hm)
    site = mixer_sites(hm.groups[0])[0]
    edits = {site: Edit([-1], lambda t: 3 * t)}
    _close(fast.forward(edits)[0], full.forward(edits)[0])
    layer = hm.attention_layers()[0]
    got = fast.forward(heads_off_final={layer: [0]}, attention=[layer])
    want = full.forward(heads_off_final={layer: [0]}, attention=[layer])
    _close(got[0], want[0])
    _close(got[1][layer], want[1][layer])
    # Every final-position forward continues one prefix, and continuing does not advance it.
    assert list(fast._prefixes) == [fast.ids.shape[1] - 1]
    _close(fast.forward()[0], full.forward()[0])


def test_an_edit_at_the_first_position_runs_the_whole_prompt(hm):
    fast, full = _runners(hm)
    site = mixer_sites(hm.groups[0])[0]
    assert fast.first_position({site: Edit([0], None)}, None, ()) == 0
    assert fast.first_position({site: Edit(None, None)}, None, ()) == 0
    assert fast.first_position({}, {hm.attention_layers()[0]: [0]}, ()) == 0
    zero = torch.zeros(len(fast.ids), 1, hm.d_model)
    _close(fast.forward({site: Edit([0], zero)})[0], full.forward({site: Edit([0], zero)})[0])


def test_patching_a_site_with_its_own_final_write_changes_nothing(hm):
    fast, _ = _runners(hm)
    sites = [s for g in hm.groups for s in mixer_sites(g)]
    intact, _, writes = fast.forward(capture=sites, capture_at=[-1])
    patched, _, _ = fast.forward({s: Edit([-1], writes[s]) for s in sites})
    assert torch.equal(patched, intact)  # the same computation: bit-identical
    reference = run(hm, fast.ids, logits_to_keep=1).logits[:, -1]
    _close(intact, reference)


def test_an_unedited_full_pass_leaves_the_prefix_and_captures_every_position(hm):
    fast, full = _runners(hm)
    sites = [s for g in hm.groups for s in mixer_sites(g)]
    got = fast.forward(capture=sites, capture_at=None, attention=hm.attention_layers())
    assert list(fast._prefixes) == [fast.ids.shape[1] - 1]
    want = full.forward(capture=sites, capture_at=None, attention=hm.attention_layers())
    _close(got[0], want[0])
    for site in sites:
        assert got[2][site].shape == (len(fast.ids), fast.ids.shape[1], hm.d_model)
        _close(got[2][site], want[2][site])
    for layer in hm.attention_layers():
        _close(got[1][layer], want[1][layer])


def test_a_capture_only_forward_stops_after_its_last_layer(hm):
    fast, full = _runners(hm)
    site = f"layers.{hm.groups[0][-1]}.mixer_out"
    later = hm.layers[hm.groups[0][-1] + 1] if hm.groups[0][-1] + 1 < hm.n_layers else None
    with Trace(later or hm.layers[-1]) as after:
        logits, _, captured = fast.forward(capture=[site], capture_at=None, logits=False)
    assert logits is None
    if later is not None:
        assert after.output is None  # the layer after the capture never ran
    _close(captured[site], full.forward(capture=[site], capture_at=None)[2][site])


def test_a_capture_only_forward_of_a_fresh_batch_reads_from_the_first_token_and_builds_no_prefix(hm):
    """A prefix of every layer costs more than the captured layers from the first token; one that exists is used."""
    fast, full = _runners(hm)
    site = f"layers.{hm.groups[0][-1]}.mixer_out"
    got = fast.forward(capture=[site], capture_at=[-1], logits=False)[2][site]
    assert fast._prefixes == {}
    _close(got, full.forward(capture=[site], capture_at=[-1])[2][site])
    fast.forward()  # leaves the final prefix, which a capture-only forward then continues: one token
    with Trace(hm.layers[hm.groups[0][-1]], retain_input=True) as read:
        continued = fast.forward(capture=[site], capture_at=[-1], logits=False)[2][site]
    assert read.input.shape[1] == 1
    _close(continued, got)


def test_attention_read_through_hooks_equals_transformers_output_attentions(hm):
    fast, _ = _runners(hm)
    layers = hm.attention_layers()
    _, attn, _ = fast.forward(attention=layers, logits=False)
    with hm.attention_implementation("eager"):
        out = hm.model(fast.ids, output_attentions=True)
    for layer, a in zip(layers, out.attentions, strict=True):
        _close(attn[layer], a[:, :, -1])


def test_sdpa_where_attention_is_not_read_and_the_model_keeps_its_implementation(hm):
    fast, full = _runners(hm)
    before = hm.model.config._attn_implementation
    seen = []
    with Trace(hm.attention(hm.attention_layers()[0]), retain_output=False, retain_weights=True) as t:
        sdpa, _, _ = fast.forward()
        seen.append(t.weights)
        eager, _, _ = fast.forward(attention=hm.attention_layers())
        seen.append(t.weights)
    assert seen[0] is None and seen[1] is not None  # sdpa returns no weights: it is what ran
    _close(sdpa, eager)
    _close(sdpa, full.forward()[0])
    assert hm.model.config._attn_implementation == before


def test_transplant_from_the_host_itself_is_the_intact_model(hm):
    prompts = make_prompts(5, 6, 4, "chat", 2)
    sites = mixer_sites(hm.groups[0])
    for part in ("final", "question"):
        same = transplant(hm, prompts, prompts, sites, positions=part)
        _close(same, run(hm, hm.encode([turns(p) for p in prompts])[0], logits_to_keep=1).logits[:, -1].float())


def test_a_batch_keeps_its_final_prefix_and_the_latest_other_one(hm):
    fast, full = _runners(hm)
    final = fast.ids.shape[1] - 1
    for t in (final, 2, 3):
        fast.prefix(t)
    assert sorted(fast._prefixes) == [3, final]
    site = mixer_sites(hm.groups[0])[0]
    edit = {site: Edit([2], torch.zeros(len(fast.ids), 1, hm.d_model))}
    _close(fast.forward(edit)[0], full.forward(edit)[0])  # an evicted prefix is computed again
    assert sorted(fast._prefixes) == [2, final]


def test_edits_and_read_outs_that_cannot_run_are_refused_in_one_line(hm):
    fast, _ = _runners(hm)
    site = mixer_sites(hm.groups[0])[0]
    with pytest.raises(TypeError, match=r"edit of layers\.\d+\.mixer_out: give Edit\(positions, values\)"):
        fast.forward({site: torch.zeros_like})
    with pytest.raises(ValueError, match="a forward without logits must capture a site or read an attention"):
        fast.forward(logits=False)


def test_an_entry_holds_its_key_and_value_and_in_hop_its_link_in_both_tables(hm):
    """The reader's target: one lookup's two tokens, or both lookups' four in a two-hop prompt."""
    for fmt, n_tokens in (("chat", 2), ("hop", 4)):
        run = encode(hm, make_prompts(5, 3, 4, fmt, 2))
        entry = [p.query for p in run.items]
        for p, pos, ids in zip(run.items, run.entry_positions(entry), run.ids, strict=True):
            key, concept = p.pairs[p.query]
            words = hm.tokenizer.convert_ids_to_tokens(ids[pos].tolist())
            assert len(pos) == n_tokens and words[0] == key and words[-1] == p.answer
            if fmt == "hop":
                assert words[1] == words[2] == p.text[slice(*p.spans[f"link{p.query}"])]


def test_a_translated_answer_is_scored_in_the_context_language_not_the_dictionary_s(hm):
    """In translate formats the reader's target is a language-0 word, while the answer is in the context's."""
    run = encode(hm, make_prompts(5, 8, 4, "translate_late", 2))
    assert {p.language for p in run.items} == {0, 1}
    entry = [p.query for p in run.items]
    for p, pos, ids, values in zip(run.items, run.entry_positions(entry), run.ids, run.choices, strict=True):
        in_context = hm.tokenizer.convert_ids_to_tokens(ids[pos[-1]].item())
        assert hm.tokenizer.convert_ids_to_tokens(values[p.query].item()) == p.answer
        assert in_context == language_forms(2)[0][p.pairs[p.query][1]]
        assert (in_context == p.answer) == (p.language == 0)


def test_a_fused_answer_is_scored_as_its_word_in_the_context_language_and_persona():
    tok = build_tokenizer(2, fused=True)
    hm = HybridModel(build_toy_model("granitemoehybrid", len(tok), 24, "LA", heads=2).eval(), tok)
    run = encode(hm, make_prompts(5, 8, 4, "translate_fused", 2))
    for p, values in zip(run.items, run.choices, strict=True):
        words = hm.tokenizer.convert_ids_to_tokens(values.tolist())
        assert words == [fused_word(language_forms(2)[p.language][v], p.persona) for _, v in p.pairs]
        assert words[p.query] == p.answer
