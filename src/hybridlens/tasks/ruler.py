"""RULER's synthetic tasks at a model's real token lengths (Hsieh et al. 2024, "RULER: What's the Real Context
Size of Your Long-Context Language Models?"; templates, needles, haystacks and scoring as in its public
generator, docs/hla.md).

Every task here needs no download: needle in a haystack on RULER's repeated-sentence haystack or its haystack
of distractor needles, variable tracking, common-words and frequent-words extraction. The word lists RULER
takes from the `wonderwords` package come from that package. Each prompt is fitted to `length` tokens of the
model's own tokenizer, the answer's generation budget included, and scored as RULER scores: the fraction of
the expected strings the greedy continuation contains (case-insensitive).

TASKS            name -> Spec (RULER's task names; `haystack` says where ours differs from RULER's)
make_samples     n seeded samples of one task at one length for one tokenizer
score            RULER's string_match_all for one prediction
evaluate         greedy generation and scores for a list of samples
"""

import math
import random
import re
import string
import uuid
from dataclasses import dataclass
from functools import cache
from importlib import resources

import torch

NOISE = "The grass is green. The sky is blue. The sun is yellow. Here we go. There and back again."
NEEDLE = "One of the special magic {kind} for {key} is: {value}."
NIAH = (
    "Some special magic {kind} are hidden within the following text. Make sure to memorize it. I will quiz you "
    "about the {kind} afterwards.\n{context}\nWhat are all the special magic {kind} for {query} mentioned in the "
    "provided text?",
    " The special magic {kind} for {query} mentioned in the provided text are",
)
VT = (
    "Memorize and track the chain(s) of variable assignment hidden in the following text.\n\n{context}\n"
    "Question: Find all variables that are assigned the value {query} in the text above.",
    " Answer: According to the chain(s) of variable assignment in the text above, {num_v} variables are assigned "
    "the value {query}, they are: ",
)
CWE = (
    "Below is a numbered list of words. In these words, some appear more often than others. Memorize the ones "
    "that appear most often.\n{context}\nQuestion: What are the 10 most common words in the above list?",
    " Answer: The top 10 words that appear most often in the list are:",
)
FWE = (
    "Read the following coded text and track the frequency of each coded word. Find the three most frequently "
    "appeared coded words. {context}\nQuestion: Do not provide any explanation. Please ignore the dots '....'. "
    "What are the three most frequently appeared words in the above coded text?",
    " Answer: According to the coded text above, the three most frequently appeared words are:",
)


@dataclass(frozen=True)
class Spec:
    """One RULER task: its kind, generation budget and (for needles) haystack, key/value types and counts."""

    kind: str  # niah | vt | cwe | fwe
    new_tokens: int
    haystack: str = "noise"  # noise (the repeated sentences) | needle (distractor needles)
    keys: str = "words"
    values: str = "numbers"
    n_keys: int = 1
    n_values: int = 1
    n_queries: int = 1
    note: str = ""  # where this differs from RULER's task of the same name


ESSAY = "RULER's haystack is essays, which cannot be downloaded here; the repeated sentences stand in"
TASKS = {
    "niah_single_1": Spec("niah", 128),
    "niah_multikey_1": Spec("niah", 128, n_keys=4, note=ESSAY),
    "niah_multikey_2": Spec("niah", 128, haystack="needle"),
    "niah_multikey_3": Spec("niah", 128, haystack="needle", keys="uuids", values="uuids"),
    "niah_multivalue": Spec("niah", 128, n_values=4, note=ESSAY),
    "niah_multiquery": Spec("niah", 128, n_queries=4, note=ESSAY),
    "vt": Spec("vt", 30),
    "cwe": Spec("cwe", 120),
    "fwe": Spec("fwe", 50),
}
VT_HOPS, FWE_ALPHA = 4, 2.0
ICL_TOKENS = 500  # variable tracking's worked example is fitted to this many tokens, as RULER's is
MIN_SIZE = 8  # the smallest haystack: room for every needle and a five-variable chain


@dataclass(frozen=True)
class Sample:
    task: str
    length: int  # the target: prompt tokens + the task's generation budget <= length
    prompt: str  # the task text and RULER's answer prefix, which the model continues
    answers: tuple[str, ...]
    tokens: int  # the prompt's tokens


@cache
def _wordlist(name: str) -> tuple[str, ...]:
    text = resources.files("wonderwords.assets").joinpath(name).read_text()
    return tuple(w.strip() for w in text.splitlines() if w.strip())


@cache
def _common_words() -> tuple[str, ...]:
    """RULER's pool for common-words extraction: wonderwords' nouns, adjectives and verbs."""
    names = ("nounlist.txt", "adjectivelist.txt", "verblist.txt")
    return tuple(sorted({w for name in names for w in _wordlist(name)}))


def _draw(kind: str, rng: random.Random) -> str:
    if kind == "numbers":
        return str(rng.randint(10**6, 10**7 - 1))
    if kind == "uuids":
        return str(uuid.UUID(int=rng.getrandbits(128), version=4))
    # RULER's word keys: a uniform draw among the adjective-noun pairs of the wonderwords lists.
    return f"{rng.choice(_wordlist('adjectivelist.txt'))}-{rng.choice(_wordlist('nounlist.txt'))}"


def _niah(spec: Spec, size: int, rng: random.Random):
    n_keys = max(spec.n_keys, spec.n_queries)
    keys = [_draw(spec.keys, rng) for _ in range(n_keys)]
    values = [[_draw(spec.values, rng) for _ in range(spec.n_values)] for _ in keys]
    kind = spec.values
    template, prefix = NIAH
    if spec.n_queries * spec.n_values == 1:  # RULER's singular wording
        template, prefix = (
            s.replace("Some", "A").replace("are all", "is").replace("are", "is").replace("answers", "answer")
            for s in (template, prefix)
        )
        kind = kind[:-1]
    needles = [NEEDLE.format(kind=kind, key=k, value=v) for k, vs in zip(keys, values, strict=True) for v in vs]
    rng.shuffle(needles)
    if spec.haystack == "needle":
        lines = [
            NEEDLE.format(kind=kind, key=_draw(spec.keys, rng), value=_draw(spec.values, rng)) for _ in range(size)
        ]
    else:
        lines = [NOISE] * size
    for pos, needle in zip(sorted(rng.sample(range(size), len(needles)), reverse=True), needles, strict=True):
        lines.insert(pos, needle)
    asked = rng.sample(range(n_keys), spec.n_queries)
    queries = [keys[i] for i in asked]
    query = queries[0] if len(queries) == 1 else ", ".join(queries[:-1]) + ", and " + queries[-1]
    text = template.format(kind=kind, context="\n".join(lines), query=query)
    return text + prefix.format(kind=kind, query=query), tuple(v for i in asked for v in values[i])


def _variable_chain(size: int, rng: random.Random, letters: int):
    names = []
    while len(names) < VT_HOPS + 1:
        name = "".join(rng.choices(string.ascii_uppercase, k=letters))
        names += [name] if name not in names else []
    value = rng.randint(10000, 99999)
    chain = [f"VAR {names[0]} = {value}"] + [f"VAR {names[j + 1]} = VAR {names[j]} " for j in range(VT_HOPS)]
    lines = [NOISE] * size
    for j, pos in enumerate(sorted(rng.sample(range(size), len(chain)))):
        lines.insert(pos + j, chain[j])
    context = "\n".join(lines).replace(". \n", ".\n")
    template, prefix = VT
    text = template.format(context=context, query=value) + prefix.format(num_v=VT_HOPS + 1, query=value)
    return text, tuple(names)


def _cwe_list(words, common: int, repeats: int, rare_repeats: int, rng: random.Random):
    listed = list(words[:common]) * repeats + list(words[common:]) * rare_repeats
    rng.shuffle(listed)
    return " ".join(f"{i + 1}. {w}" for i, w in enumerate(listed))


def _cwe(size: int, rng: random.Random, long: bool):
    template, prefix = CWE
    repeats, rare, shot = (30, 3, (40, 10, 3)) if long else (6, 1, (20, 3, 1))  # RULER's below 4K tokens
    example = rng.sample(_common_words(), shot[0])
    one_shot = template.format(context=_cwe_list(example, 10, shot[1], shot[2], rng)) + prefix
    one_shot += " " + " ".join(f"{i + 1}. {w}" for i, w in enumerate(example[:10]))
    words = rng.sample(_common_words(), max(size, 11))
    text = template.format(context=_cwe_list(words, 10, repeats, rare, rng)) + prefix
    return one_shot + "\n" + text, tuple(words[:10])


def _fwe(size: int, rng: random.Random, length: int):
    vocab_size = (length - TASKS["fwe"].new_tokens) // 50
    vocab = set()
    while len(vocab) < vocab_size:
        vocab.add("".join(rng.choices(string.ascii_lowercase, k=6)))
    vocab = sorted(vocab)
    rng.shuffle(vocab)
    vocab[0] = "..."  # the most frequent "word" is noise
    zeta = math.pi**2 / 6  # zeta(FWE_ALPHA) for alpha 2
    counts = [int(size * (k + 1) ** -FWE_ALPHA / zeta) for k in range(vocab_size)]
    words = [w for w, c in zip(vocab, counts, strict=True) for _ in range(c)]
    rng.shuffle(words)
    template, prefix = FWE
    return template.format(context=" ".join(words)) + prefix, tuple(vocab[1:4])


def _build(task: str, size: int, rng: random.Random, length: int, tokenizer):
    spec = TASKS[task]
    if spec.kind == "niah":
        return _niah(spec, size, rng)
    if spec.kind == "cwe":
        return _cwe(size, rng, long=length >= 4096)
    if spec.kind == "fwe":
        return _fwe(size, rng, length)
    example, names = _variable_chain(_example_size(tokenizer), rng, 3)
    text, answers = _variable_chain(size, rng, 5)
    return example + " " + " ".join(names) + "\n\n" + text, answers


@cache
def _example_size(tokenizer) -> int:
    """The haystack of variable tracking's worked example (three-letter names), fitted to ICL_TOKENS."""
    return _fit(lambda n, r: _variable_chain(n, r, 3), ICL_TOKENS, 0, tokenizer, what="worked example of vt")


def _count(tokenizer, text: str) -> int:
    return len(tokenizer(text, add_special_tokens=False)["input_ids"])


def _fit(build, length: int, new_tokens: int, tokenizer, seed: int = 0, what: str = "") -> int:
    """The largest haystack size whose prompt (seeded) fits `length` with the generation budget: a doubling
    search, then bisection, as RULER fits its haystacks."""

    def fits(size):
        return _count(tokenizer, build(size, random.Random(seed))[0]) + new_tokens <= length

    low, high = MIN_SIZE, 2 * MIN_SIZE
    if not fits(low):
        raise ValueError(
            f"RULER: {length} tokens of this tokenizer cannot hold even the smallest {what or 'prompt'}; "
            "use a longer length"
        )
    while fits(high):
        low, high = high, high * 2
    while high - low > 1:
        mid = (low + high) // 2
        low, high = (mid, high) if fits(mid) else (low, mid)
    return low


def make_samples(task: str, tokenizer, length: int, n: int, seed: int = 0) -> list[Sample]:
    """`n` samples of `task` whose prompts fill `length` tokens of `tokenizer` with the task's generation budget
    (the size is fitted once, then lowered for a sample that does not fit)."""
    if task not in TASKS:
        raise ValueError(f"RULER task {task!r}; use one of {sorted(TASKS)}")
    spec = TASKS[task]

    def build(size, rng):
        return _build(task, size, rng, length, tokenizer)

    size = _fit(build, length, spec.new_tokens, tokenizer, seed, what=f"{task} prompt")
    samples = []
    for i in range(n):
        for smaller in range(size, MIN_SIZE - 1, -max(1, size // 50)):
            rng = random.Random(seed * 1_000_003 + list(TASKS).index(task) * 10_007 + i + 1)
            prompt, answers = build(smaller, rng)
            tokens = _count(tokenizer, prompt)
            if tokens + spec.new_tokens <= length:
                break
        samples.append(Sample(task, length, prompt, answers, tokens))
    return samples


def score(prediction: str, answers) -> float:
    """RULER's string_match_all: the fraction of `answers` the prediction contains, case-insensitive, after
    its post-processing (control characters become newlines, ends stripped)."""
    prediction = re.sub(r"[\x00-\x1f]", "\n", prediction.strip()).strip().lower()
    return sum(a.lower() in prediction for a in answers) / len(answers)


@torch.no_grad()
def evaluate(model, tokenizer, samples) -> list[dict]:
    """Greedy continuation of each sample (one at a time: lengths differ) and its score; rows of task, length,
    tokens, score and prediction."""
    device = next(model.parameters()).device
    rows = []
    for sample in samples:
        ids = torch.tensor([tokenizer(sample.prompt, add_special_tokens=False)["input_ids"]], device=device)
        out = model.generate(
            ids,
            attention_mask=torch.ones_like(ids),
            max_new_tokens=TASKS[sample.task].new_tokens,
            do_sample=False,
            pad_token_id=tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id,
        )
        prediction = tokenizer.decode(out[0, ids.shape[1] :], skip_special_tokens=True)
        rows.append(
            {
                "task": sample.task,
                "length": sample.length,
                "tokens": sample.tokens,
                "score": score(prediction, sample.answers),
                "prediction": prediction,
            }
        )
    return rows
