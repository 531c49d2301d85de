"""Cache surgery on all three families: reference comparisons and assertions on the cache contents."""

import copy

import pytest
import torch

from hybridlens.interventions.cache import CONDITIONS, channel_sites, cut, cut_at, greedy, prefill, splice, states
from hybridlens.interventions.hooks import Trace
from hybridlens.tasks.items import token_positions
from hybridlens.tasks.retrieval import make_prompts
from hybridlens.validation import assert_paths_close

N_NEW = 3


def context_and_question(hm, seed=0, n=3):
    """Token ids of the context (persona + dictionary) and of the question, split where the question starts."""
    prompts = make_prompts(seed, n, 4, "chat", 2)
    ids, offsets = hm.encode([p.text for p in prompts])
    split = token_positions(prompts[0], offsets[0], "question")[0]
    return ids[:, :split], ids[:, split:]


def channel_tensors(hm, cache, channel):
    out = {}
    for site in channel_sites(hm, channel):
        value = hm.read_cache(cache, site)
        out[site] = [t.clone() for t in value] if channel == "kv" else [value.clone()]
    return out


def test_full_cache_continues_like_the_whole_prompt(hm):
    context, question = context_and_question(hm)
    whole_tokens, whole_logits = greedy(hm, torch.cat([context, question], 1), N_NEW)
    _, cache = prefill(hm, context)
    tokens, logits = greedy(hm, question, N_NEW, cache=CONDITIONS["full"](hm, cache, None, None))
    assert torch.equal(tokens, whole_tokens)
    assert_paths_close(logits, whole_logits)


def test_emptying_both_channels_equals_the_question_alone(hm):
    """No KV and zero states: the continuation is a fresh forward of the question at the same positions."""
    context, question = context_and_question(hm)
    _, cache = prefill(hm, context)
    empty = cut(hm, cut(hm, cache, "kv"), "state")
    tokens, logits = greedy(hm, question, N_NEW, cache=empty, start=context.shape[1])
    fresh_tokens, fresh_logits = greedy(hm, question, N_NEW, start=context.shape[1])
    assert torch.equal(tokens, fresh_tokens)
    assert_paths_close(logits, fresh_logits)


@pytest.mark.parametrize("condition, kept, emptied", [("kv_only", "kv", "state"), ("state_only", "state", "kv")])
def test_split_conditions_empty_one_channel_and_keep_the_other(hm, condition, kept, emptied):
    context, question = context_and_question(hm)
    _, cache = prefill(hm, context)
    before = {ch: channel_tensors(hm, cache, ch) for ch in ("kv", "state")}
    edited = CONDITIONS[condition](hm, cache, None, None)
    for site, tensors in channel_tensors(hm, edited, kept).items():
        for a, b in zip(tensors, before[kept][site], strict=True):
            assert torch.equal(a, b), site
    for site, tensors in channel_tensors(hm, edited, emptied).items():
        if emptied == "kv":
            assert all(t.shape[-2] == 0 for t in tensors), site
        else:
            assert all(t.abs().max() == 0 for t in tensors), site
    # The original cache is untouched.
    for ch in ("kv", "state"):
        for site, tensors in channel_tensors(hm, cache, ch).items():
            assert all(torch.equal(a, b) for a, b in zip(tensors, before[ch][site], strict=True))


@pytest.mark.parametrize("condition, channel", [("kv_only", "state"), ("state_only", "kv")])
def test_emptied_channel_changes_what_its_mixer_writes(hm, condition, channel):
    """The first mixer that reads the emptied channel writes something else at the question tokens."""
    context, question = context_and_question(hm)
    _, cache = prefill(hm, context)
    # A Falcon-H1 layer's mixer() is its Mamba branch; the KV is read by its attention branch.
    attention = hm.attention(hm.attention_layers()[0])
    module = hm.mixer(hm.linear_layers()[0]) if channel == "state" else attention
    writes = {}
    for name in ("full", condition):
        with Trace(module, retain_output=True) as t:
            greedy(hm, question, 1, cache=CONDITIONS[name](hm, cache, None, None), start=context.shape[1])
        writes[name] = t.output[0] if isinstance(t.output, tuple) else t.output
    # Relative to the write's size: a random Falcon-H1 Mamba branch writes ~1e-3.
    assert (writes["full"] - writes[condition]).abs().max() > 0.01 * writes["full"].abs().max()


def test_neutral_variants_take_the_neutral_context_channel(hm):
    context, question = context_and_question(hm)
    neutral_ids, _ = context_and_question(hm, seed=5)
    _, cache = prefill(hm, context)
    _, neutral = prefill(hm, neutral_ids)
    for condition, channel in (("kv_only_neutral", "state"), ("state_only_neutral", "kv")):
        edited = CONDITIONS[condition](hm, cache, neutral, None)
        want = channel_tensors(hm, neutral, channel)
        for site, tensors in channel_tensors(hm, edited, channel).items():
            assert all(torch.equal(a, b) for a, b in zip(tensors, want[site], strict=True)), site


def test_cue_condition_replaces_the_cue_keys_and_values_only(hm):
    """cues_kv_neutral: the neutral context's keys and values at the cue positions, this context's everywhere
    else, every state kept; with this context's own cache as the source it is no edit at all, and at every
    position it is state_only_neutral."""
    prompts = make_prompts(0, 3, 4, "chat", 2)
    ids, offsets = hm.encode([p.text for p in prompts])
    split = token_positions(prompts[0], offsets[0], "question")[0]
    cues = token_positions(prompts[0], offsets[0], "cues")
    assert cues == list(range(6))  # Persona : name . Dictionary :, each one token of the toy tokenizer
    context, question = ids[:, :split], ids[:, split:]
    neutral_ids, _ = context_and_question(hm, seed=5)
    _, cache = prefill(hm, context)
    _, neutral = prefill(hm, neutral_ids)
    before = {ch: channel_tensors(hm, cache, ch) for ch in ("kv", "state")}
    edited = CONDITIONS["cues_kv_neutral"](hm, cache, neutral, None, cues)
    rest = [i for i in range(split) if i not in cues]
    for site, (keys, values) in channel_tensors(hm, edited, "kv").items():
        new_keys, new_values = hm.read_cache(neutral, site)
        assert torch.equal(keys[..., cues, :], new_keys[..., cues, :])
        assert torch.equal(values[..., cues, :], new_values[..., cues, :])
        assert torch.equal(keys[..., rest, :], before["kv"][site][0][..., rest, :])
    for site, tensors in channel_tensors(hm, edited, "state").items():
        assert all(torch.equal(a, b) for a, b in zip(tensors, before["state"][site], strict=True)), site
    full_tokens, full_logits = greedy(hm, question, N_NEW, cache=copy.deepcopy(cache), start=split)
    tokens, logits = greedy(hm, question, N_NEW, cache=cut_at(hm, cache, cues, cache), start=split)
    assert torch.equal(tokens, full_tokens) and torch.equal(logits, full_logits)
    every = cut_at(hm, cache, list(range(split)), neutral)
    tokens, logits = greedy(hm, question, N_NEW, cache=every, start=split)
    want_tokens, want_logits = greedy(
        hm, question, N_NEW, cache=CONDITIONS["state_only_neutral"](hm, cache, neutral, None), start=split
    )
    assert torch.equal(tokens, want_tokens) and torch.equal(logits, want_logits)
    with pytest.raises(ValueError, match="needs the context positions"):
        CONDITIONS["cues_kv_neutral"](hm, cache, neutral, None)


def test_state_swap(hm):
    a_ids, question = context_and_question(hm, seed=0)
    b_ids, _ = context_and_question(hm, seed=1)
    _, a = prefill(hm, a_ids)
    _, b = prefill(hm, b_ids)
    swapped = splice(hm, a, b)
    for channel, source in (("kv", a), ("state", b)):
        want = channel_tensors(hm, source, channel)
        for site, tensors in channel_tensors(hm, swapped, channel).items():
            assert all(torch.equal(x, y) for x, y in zip(tensors, want[site], strict=True)), site
    # Swapping with itself is no intervention at all.
    self_swap, self_logits = greedy(hm, question, N_NEW, cache=splice(hm, a, a))
    plain, plain_logits = greedy(hm, question, N_NEW, cache=copy.deepcopy(a))
    assert torch.equal(self_swap, plain) and torch.equal(self_logits, plain_logits)


def test_source_of_another_length_is_refused(hm):
    context, _ = context_and_question(hm)
    _, cache = prefill(hm, context)
    _, short = prefill(hm, context[:, :-2])
    with pytest.raises(ValueError, match="shape"):
        cut(hm, cache, "kv", short)


def test_a_state_from_a_context_of_another_length_is_that_contexts_whole_state(hm):
    """The state-swap pairs A's KV with the state of a B of any length: the spliced cache holds B's state as B's
    own prefill left it, and continuing it equals continuing A's cache with that state written in by hand."""
    context, question = context_and_question(hm)
    _, a = prefill(hm, context)
    _, b = prefill(hm, context[:, :-3])  # shorter: its KV could not be spliced, its state can
    swapped = splice(hm, a, states(hm, b))
    assert swapped.get_seq_length() == a.get_seq_length()
    from_cache = splice(hm, a, b)  # the other cache itself, not its states(), splices the same
    for site, tensor in states(hm, b).items():
        assert torch.equal(hm.read_cache(swapped, site), tensor), site
        assert torch.equal(hm.read_cache(from_cache, site), tensor), site
    by_hand = copy.deepcopy(a)
    for site, tensor in states(hm, b).items():
        hm.write_cache(by_hand, site, tensor.clone())
    split = context.shape[1]
    tokens, logits = greedy(hm, question, N_NEW, cache=swapped, start=split)
    want, want_logits = greedy(hm, question, N_NEW, cache=by_hand, start=split)
    assert torch.equal(tokens, want) and torch.equal(logits, want_logits)


def test_cue_positions_may_differ_row_by_row(hm):
    context, _ = context_and_question(hm)
    _, cache = prefill(hm, context)
    _, other = prefill(hm, torch.flip(context, [1]))
    rows = [[1, 2], [3]][: context.shape[0]] + [[0]] * max(0, context.shape[0] - 2)
    out = cut_at(hm, cache, rows, other)
    for site in channel_sites(hm, "kv"):
        keys, new = hm.read_cache(out, site)[0], hm.read_cache(other, site)[0]
        old = hm.read_cache(cache, site)[0]
        for row, at in enumerate(rows):
            rest = [i for i in range(context.shape[1]) if i not in at]
            assert torch.equal(keys[row, ..., at, :], new[row, ..., at, :]), site
            assert torch.equal(keys[row, ..., rest, :], old[row, ..., rest, :]), site
