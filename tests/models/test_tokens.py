"""Answers and keys with a real BPE tokenizer (trained here on the task text), not only the toy one."""

import ast
import re

import pytest

from hybridlens.models.adapter import HybridModel, Turns
from hybridlens.models.toy import build_toy_model
from hybridlens.tasks.items import token_positions
from hybridlens.tasks.prompt_sets import prompt_set
from hybridlens.tasks.retrieval import make_prompts
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
    prompts, counts = prompt_set(toy, task)
    assert prompts == make_prompts(3, 20, 4, "chat", 2)
    assert counts == {"keys": len(KEYS), "values": len(VALUES), "languages": 2}
    hm = HybridModel(build_toy_model("qwen3_5", len(bpe), 32, "LLA", heads=2), bpe)
    prompts, counts = prompt_set(hm, task)
    assert counts["values"] < len(VALUES) and counts["keys"] <= len(KEYS)  # this BPE splits some words
    for p in prompts:
        words = [p.text[slice(*span)] for name, span in p.spans.items() if name.startswith(("key", "value"))]
        assert all(len(bpe(" " + w, add_special_tokens=False)["input_ids"]) == 1 for w in words)
    with pytest.raises(ValueError, match=r"single-token words .* too few for 64-pair") as refused:
        prompt_set(hm, task | {"n_pairs": 64})
    said = ast.literal_eval(re.search(r"single-token words (\{.*?\})", str(refused.value)).group(1))
    assert said["languages"] == 0 and counts["values"] <= said["values"] < len(VALUES)  # kept, not listed


TEMPLATE = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


def test_chat_template_renders_the_turns_and_spans_still_find_their_tokens(bpe, tokenizer):
    import copy

    chat = copy.deepcopy(bpe)
    chat.chat_template = TEMPLATE
    hm = HybridModel(build_toy_model("qwen3_5", len(chat), 32, "LLA", heads=2), chat)
    (p,), _ = prompt_set(hm, {"format": "chat", "n_pairs": 4, "n": 1, "seed": 1, "framing": "toy"})
    system = Turns(p.text, system="Be brief.", prefill="Answer:")
    text, pieces = hm.render(system)
    head = "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\n"
    assert text == head + p.text + "<|im_end|>\n<|im_start|>assistant\nAnswer:"
    # Each turn's characters map to their place in the joined turns, "Be brief.\n<text>\nAnswer:".
    assert [(text[a : a + n], system.joined[j : j + n]) for a, j, n in pieces] == [
        ("Be brief.", "Be brief."),
        (p.text, p.text),
        ("Answer:", "Answer:"),
    ]
    ids, offsets = hm.encode([Turns(p.text)])
    for i, (key, value) in enumerate(p.pairs):
        (v_pos,) = token_positions(p, offsets[0], f"value{i}")
        assert ids[0, v_pos].item() == hm.token_id(value)
        assert key in chat.decode(ids[0, token_positions(p, offsets[0], f"key{i}")])
    # Template tokens belong to no span and get (-1, -1); the final position is the template's last token.
    n_prefix = len(chat("<|im_start|>user\n", add_special_tokens=False)["input_ids"])
    assert offsets[0][:n_prefix] == [(-1, -1)] * n_prefix and offsets[0][-1] == (-1, -1)
    spans = {i for name in p.spans for i in token_positions(p, offsets[0], name)}
    assert not spans & set(range(n_prefix))
    assert token_positions(p, offsets[0], "final") == [ids.shape[1] - 1]
    # Without a template (the toy zoo) the joined turns are the whole input.
    toy = HybridModel(build_toy_model("qwen3_5", len(tokenizer), 32, "LLA", heads=2), tokenizer)
    assert not toy.has_chat_template and toy.render(p.text) == (p.text, [(0, 0, len(p.text))])
    assert toy.encode([p.text])[0][0].tolist() == tokenizer(p.text, add_special_tokens=False)["input_ids"]
