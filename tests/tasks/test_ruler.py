"""RULER's synthetic tasks on Qwen's real BPE tokenizer: prompts fill their length, ask what the context holds,
and are scored as RULER scores."""

import collections
import re

import pytest
import torch

from hybridlens.models.real_tokenizer import qwen_tokenizer
from hybridlens.tasks import ruler


@pytest.fixture(scope="module")
def tokenizer():
    return qwen_tokenizer()


@pytest.mark.parametrize("task", sorted(ruler.TASKS))
@pytest.mark.parametrize("length", [1024, 4096])
def test_prompts_fill_their_length_with_the_generation_budget(tokenizer, task, length):
    samples = ruler.make_samples(task, tokenizer, length, 2, seed=3)
    budget = length - ruler.TASKS[task].new_tokens
    for s in samples:
        assert s.tokens == len(tokenizer(s.prompt, add_special_tokens=False)["input_ids"])
        assert 0.85 * budget < s.tokens <= budget, (task, s.tokens)
    assert samples == ruler.make_samples(task, tokenizer, length, 2, seed=3)  # seeded
    assert samples[0].prompt != samples[1].prompt


def _needles(prompt):
    return re.findall(r"One of the special magic \w+ for (\S+) is: (\S+)\.", prompt)


@pytest.mark.parametrize(
    "task, values_per_answer",
    [("niah_single_1", 1), ("niah_multikey_1", 1), ("niah_multikey_2", 1), ("niah_multikey_3", 1),
     ("niah_multivalue", 4), ("niah_multiquery", 1)],
)  # fmt: skip
def test_a_needle_answer_is_every_value_of_the_asked_keys(tokenizer, task, values_per_answer):
    spec = ruler.TASKS[task]
    (s,) = ruler.make_samples(task, tokenizer, 1024, 1, seed=5)
    question = s.prompt.rsplit("\n", 1)[-1]
    needles = _needles(s.prompt)
    asked = {k for k, _ in needles if f"for {k}" in question or f", {k}" in question or f"and {k}" in question}
    assert len(asked) == spec.n_queries
    assert sorted(s.answers) == sorted(v for k, v in needles if k in asked)
    assert len(s.answers) == spec.n_queries * values_per_answer
    if spec.haystack == "needle":  # distractors: many more needles than answers
        assert len(needles) > ruler.MIN_SIZE and "The grass is green." not in s.prompt
    else:
        assert s.prompt.count(ruler.NOISE) > 10
    singular = spec.n_queries * spec.n_values == 1
    assert s.prompt.startswith("A special magic" if singular else "Some special magic")
    assert s.prompt.endswith("mentioned in the provided text " + ("is" if singular else "are"))
    if spec.values == "uuids":
        assert all(
            re.fullmatch(r"[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}", v) for v in s.answers
        )


def test_variable_tracking_answers_the_chain_of_the_asked_value_after_a_worked_example(tokenizer):
    (s,) = ruler.make_samples("vt", tokenizer, 2048, 1, seed=2)
    example, task = s.prompt.split("\n\nMemorize and track", 1)
    assert example.startswith("Memorize and track") and len(example.rsplit(": ", 1)[-1].split()) == 5
    value = re.search(r"assigned the value (\d+) in the text above", task).group(1)
    bound = {}
    for name, rhs in re.findall(r"VAR ([A-Z]{5}) = (VAR [A-Z]{5}|\d+)", task):
        bound[name] = bound.get(rhs[4:]) if rhs.startswith("VAR") else rhs
    assert sorted(n for n, v in bound.items() if v == value) == sorted(s.answers) and len(s.answers) == 5
    assert task.endswith("5 variables are assigned the value " + value + ", they are: ")


@pytest.mark.parametrize("length, repeats", [(2048, 6), (4096, 30)])  # RULER's counts below and from 4K
def test_common_words_are_the_ten_listed_most_often(tokenizer, length, repeats):
    (s,) = ruler.make_samples("cwe", tokenizer, length, 1, seed=4)
    main = s.prompt.split("\nBelow is a numbered list")[-1]
    counts = collections.Counter(re.findall(r"\d+\. ([^\s]+)", main.split("\nQuestion:")[0]))
    assert {w for w, c in counts.items() if c == repeats} == set(s.answers) and len(s.answers) == 10
    assert max(c for w, c in counts.items() if w not in s.answers) < repeats


def test_frequent_words_are_the_three_most_frequent_after_the_dots(tokenizer):
    (s,) = ruler.make_samples("fwe", tokenizer, 4096, 1, seed=6)
    text = s.prompt.split("coded words. ", 1)[1].split("\nQuestion:")[0]
    ranked = [w for w, _ in collections.Counter(text.split()).most_common(4)]
    assert ranked[0] == "..." and tuple(ranked[1:]) == s.answers


def test_the_score_is_rulers_string_match_all():
    assert ruler.score(" 1234567 and then 7654321.", ["1234567", "7654321"]) == 1.0
    assert ruler.score("Landscape, briefs\x00", ["landscape", "exotic", "BRIEFS", "x"]) == 0.5
    assert ruler.score("", ["a"]) == 0.0


def test_bad_requests_are_refused_in_one_line(tokenizer):
    with pytest.raises(ValueError, match=r"RULER task 'qa_1'; use one of \['cwe', 'fwe', "):
        ruler.make_samples("qa_1", tokenizer, 4096, 1)
    with pytest.raises(
        ValueError,
        match="RULER: 130 tokens of this tokenizer cannot hold even the smallest niah_single_1 prompt; use a longer",
    ):
        ruler.make_samples("niah_single_1", tokenizer, 130, 1)


def test_evaluate_generates_greedily_and_scores(tokenizer):
    from hybridlens.models.hla import to_hla
    from hybridlens.models.toy import build_toy_model

    model = build_toy_model("qwen3_5", len(tokenizer), 32, "LA", heads=2, seed=0).eval()
    to_hla(model, chunk=32, bucket=8)
    samples = ruler.make_samples("vt", tokenizer, 1024, 1, seed=1)
    (row,) = ruler.evaluate(model, tokenizer, samples)
    ids = torch.tensor([tokenizer(samples[0].prompt, add_special_tokens=False)["input_ids"]])
    with torch.no_grad():
        for _ in range(ruler.TASKS["vt"].new_tokens):
            ids = torch.cat([ids, model(ids, use_cache=False, logits_to_keep=1).logits.argmax(-1)], 1)
    greedy = tokenizer.decode(ids[0, samples[0].tokens :], skip_special_tokens=True)
    assert row["prediction"] == greedy and row["score"] == ruler.score(greedy, samples[0].answers)
    assert (row["task"], row["length"], row["tokens"]) == ("vt", 1024, samples[0].tokens)
