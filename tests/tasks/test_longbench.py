"""LongBench-V2 loader and scorer on a small fixture in the data set's format, with a locally trained BPE."""

import json
from pathlib import Path

import pytest
import torch
from tokenizers import Tokenizer, models, pre_tokenizers, trainers
from transformers import PreTrainedTokenizerFast

from hybridlens.models.toy import build_toy_model
from hybridlens.tasks.longbench import LETTERS, encode, load, prompt, score, summary

FIXTURE = Path(__file__).parents[1] / "fixtures" / "longbench_v2_sample.json"


@pytest.fixture(scope="module")
def bpe():
    items = load(FIXTURE)
    tok = Tokenizer(models.BPE(unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    texts = [prompt(item)[0] + prompt(item)[1] for item in items] + list(LETTERS)
    tok.train_from_iterator(texts, trainers.BpeTrainer(vocab_size=300, special_tokens=["<unk>", "<pad>"]))
    return PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="<unk>", pad_token="<pad>")


def test_load_checks_the_format(tmp_path):
    items = load(FIXTURE)
    assert [i["answer"] for i in items] == ["A", "B", "C"] and len(load(FIXTURE, n=2)) == 2
    broken = tmp_path / "data.json"
    broken.write_text(json.dumps([{k: v for k, v in items[0].items() if k != "choice_C"}]))
    with pytest.raises(ValueError, match=r"item 0 lacks \['choice_C'\]"):
        load(broken)
    lines = tmp_path / "data.jsonl"
    lines.write_text("\n".join(json.dumps(i) for i in items))
    assert load(lines) == items
    with pytest.raises(FileNotFoundError, match="hla.longbench.path"):
        load(tmp_path / "missing.json")


def test_middle_truncation_keeps_both_ends(bpe):
    item = load(FIXTURE)[2]
    full = encode(bpe, item, 10**6)
    cut = encode(bpe, item, 64)
    assert len(full) > 64 and len(cut) == 64
    assert cut[:32] == full[:32] and cut[32:] == full[-32:]


def test_score_takes_the_best_letter_at_the_answer_position(bpe):
    torch.manual_seed(0)
    model = build_toy_model("qwen3_5", len(bpe), 32, "LLA", heads=2, seed=0).eval()
    items = load(FIXTURE)
    rows = score(model, bpe, items, max_tokens=128)
    letters = [bpe(c, add_special_tokens=False)["input_ids"][0] for c in LETTERS]
    for item, row in zip(items, rows, strict=True):
        ids = torch.tensor([encode(bpe, item, 128)])
        with torch.no_grad():
            logits = model(ids, use_cache=False).logits[0, -1, letters]
        assert row["pred"] == LETTERS[int(logits.argmax())] and row["tokens"] <= 128
        assert row["correct"] == int(row["pred"] == item["answer"])
    s = summary(rows)
    assert s["n"] == 3 and s["overall"] == pytest.approx(sum(r["correct"] for r in rows) / 3)
    assert set(s) >= {"difficulty=easy", "difficulty=hard", "length=short", "length=medium", "length=long"}


def test_a_tokenizer_without_the_letters_is_refused(tokenizer):
    """The toy word-level tokenizer maps A-D to <unk>: scoring would be a tie, so it is refused."""
    model = build_toy_model("qwen3_5", len(tokenizer), 32, "LA", heads=2, seed=0)
    with pytest.raises(ValueError, match="answer letters"):
        score(model, tokenizer, load(FIXTURE), max_tokens=64)
