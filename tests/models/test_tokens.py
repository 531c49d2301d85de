"""Answers and keys with a real BPE tokenizer (trained here on the task text), not only the toy one."""

import pytest

from hybridlens.models.adapter import HybridModel
from hybridlens.models.toy import build_toy_model
from hybridlens.tasks.prompt_sets import prompt_set
from hybridlens.tasks.retrieval import make_prompts, token_positions
from hybridlens.tasks.vocab import KEYS, VALUES


def test_token_id_is_the_token_that_follows_a_space(bpe):
    hm = HybridModel(build_toy_model("qwen3_5", len(bpe), 32, "LLA", heads=2), bpe)
    words = hm.single_token_words(VALUES)
    assert 0 < len(words) < len(VALUES)  # a small BPE vocabulary splits some words
    p = next(p for p in make_prompts(1, 200, 4, "chat", n_languages=1) if p.answer in words)
    ids = bpe(p.text + " " + p.answer, add_special_tokens=False)["input_ids"]
    assert ids[-1] == hm.token_id(p.answer)
    dropped = sorted(set(VALUES) - set(words))[0]
    with pytest.raises(ValueError, match=f"'{dropped}' is [2-9] tokens"):
        hm.token_id(dropped)


def test_a_word_a_word_level_tokenizer_does_not_hold_is_refused(tokenizer):
    """The toy tokenizer encodes an unknown word as one token, <unk>: that is no single-token word."""
    hm = HybridModel(build_toy_model("qwen3_5", len(tokenizer), 32, "LLA", heads=2), tokenizer)
    with pytest.raises(ValueError, match="'k000' is not in this tokenizer's vocabulary"):
        hm.token_id("k000")
    assert hm.single_token_words(["garlic", "k000", "fire"]) == ["garlic", "fire"]


def test_prompt_set_keeps_every_word_for_the_toy_tokenizer_and_a_subset_for_bpe(tokenizer, bpe):
    task = {"format": "chat", "n_pairs": 4, "n": 20, "seed": 3}
    toy = HybridModel(build_toy_model("qwen3_5", len(tokenizer), 32, "LLA", heads=2), tokenizer)
    prompts, counts = prompt_set(toy, task, 2)
    assert prompts == make_prompts(3, 20, 4, "chat", 2)
    assert counts == {"keys": len(KEYS), "values": len(VALUES), "languages": 2}
    hm = HybridModel(build_toy_model("qwen3_5", len(bpe), 32, "LLA", heads=2), bpe)
    prompts, counts = prompt_set(hm, task, 2)
    assert counts["values"] < len(VALUES) and counts["keys"] <= len(KEYS)  # this BPE splits some words
    for p in prompts:
        words = [p.text[slice(*span)] for name, span in p.spans.items() if name.startswith(("key", "value"))]
        assert all(len(bpe(" " + w, add_special_tokens=False)["input_ids"]) == 1 for w in words)
    with pytest.raises(ValueError, match=r"single-token words .* too few for 64-pair"):
        prompt_set(hm, task | {"n_pairs": 64}, 2)


TEMPLATE = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


def test_chat_template_frames_prompts_and_spans_still_find_their_tokens(bpe, tokenizer):
    import copy

    chat = copy.deepcopy(bpe)
    chat.chat_template = TEMPLATE
    hm = HybridModel(build_toy_model("qwen3_5", len(chat), 32, "LLA", heads=2), chat)
    prefix, suffix = hm.frame
    assert prefix == "<|im_start|>user\n" and suffix == "<|im_end|>\n<|im_start|>assistant\nAnswer:"
    (p,), _ = prompt_set(hm, {"format": "chat", "n_pairs": 4, "n": 1, "seed": 1}, 1)  # single-token words
    ids, offsets = hm.encode([p.text])
    assert offsets[0][0][0] == -len(prefix) and offsets[0][-1][1] == len(p.text) + len(suffix)
    for i, (key, value) in enumerate(p.pairs):
        (v_pos,) = token_positions(p, offsets[0], f"value{i}")
        assert ids[0, v_pos].item() == hm.token_id(value)
        assert key in chat.decode(ids[0, token_positions(p, offsets[0], f"key{i}")])
    # Template tokens belong to no span; the final position is the prefill's last token, before the answer.
    spans = {i for name in p.spans for i in token_positions(p, offsets[0], name)}
    n_prefix = len(chat(prefix, add_special_tokens=False)["input_ids"])
    assert not spans & set(range(n_prefix))
    assert token_positions(p, offsets[0], "final") == [ids.shape[1] - 1]
    assert offsets[0][-1][0] >= len(p.text)  # the last token belongs to the prefill
    # Without a template (the toy zoo) the prompt is the whole input.
    toy = HybridModel(build_toy_model("qwen3_5", len(tokenizer), 32, "LLA", heads=2), tokenizer)
    assert toy.frame == ("", "")
    assert toy.encode([p.text])[0][0].tolist() == tokenizer(p.text, add_special_tokens=False)["input_ids"]
