"""LongBench-V2 from a local copy: loader, zero-shot multiple-choice scorer, summary.

The data set (503 items, contexts of 8k to 2M words) cannot be downloaded here; point `hla.longbench.path`
at its data.json (a JSON list, or JSON lines) with the fields below.

load      items from a local file, each checked for the fields the scorer reads
prompt    the zero-shot question text, with the assistant's answer prefilled up to the letter
score     per item: the letter with the highest next-token logit among A-D, after middle truncation
summary   accuracy overall and by difficulty and length class
"""

import json
from pathlib import Path

import torch

FIELDS = (
    "_id",
    "difficulty",
    "length",
    "question",
    "choice_A",
    "choice_B",
    "choice_C",
    "choice_D",
    "answer",
    "context",
)
LETTERS = ("A", "B", "C", "D")
ANSWER_PREFIX = "The correct answer is ("


def load(path, n: int = 0) -> list[dict]:
    """The first `n` items of a LongBench-V2 file (0 = all)."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"LongBench-V2 file {path} not found; set hla.longbench.path to a local data.json")
    text = path.read_text(encoding="utf-8")
    items = json.loads(text) if text.lstrip().startswith("[") else [json.loads(x) for x in text.splitlines() if x]
    for i, item in enumerate(items):
        missing = [f for f in FIELDS if f not in item]
        if missing:
            raise ValueError(f"{path}: item {i} lacks {missing}; is this LongBench-V2's data.json?")
        if item["answer"] not in LETTERS:
            raise ValueError(f"{path}: item {i} has answer {item['answer']!r}; expected one of {LETTERS}")
    return items[:n] if n else items


def prompt(item: dict) -> tuple[str, str]:
    """(user text, assistant prefix): the question after the document, the answer to be given as a letter."""
    user = (
        "Please read the following text and answer the question below.\n\n"
        f"<text>\n{item['context']}\n</text>\n\n"
        f"What is the correct answer to this question: {item['question']}\nChoices:\n"
        + "".join(f"({c}) {item['choice_' + c]}\n" for c in LETTERS)
        + '\nFormat your response as follows: "The correct answer is (insert answer here)".'
    )
    return user, ANSWER_PREFIX


def encode(tokenizer, item: dict, max_tokens: int) -> list[int]:
    """Token ids of the prompt, the document cut in the middle so the whole fits in `max_tokens`.

    With a chat template the question is the user turn and the answer prefix starts the assistant turn.
    """
    user, prefix = prompt(item)
    if getattr(tokenizer, "chat_template", None):
        text = tokenizer.apply_chat_template(
            [{"role": "user", "content": user}], tokenize=False, add_generation_prompt=True
        )
        text += prefix
    else:
        text = user + "\n" + prefix
    ids = tokenizer(text, add_special_tokens=False)["input_ids"]
    if len(ids) > max_tokens:  # keep the instructions at both ends, as LongBench does
        half = max_tokens // 2
        ids = ids[:half] + ids[len(ids) - (max_tokens - half) :]
    return ids


def letter_ids(tokenizer) -> list[int]:
    ids = [tokenizer(c, add_special_tokens=False)["input_ids"] for c in LETTERS]
    flat = [i[0] for i in ids if len(i) == 1]
    if len(set(flat)) != len(LETTERS) or tokenizer.unk_token_id in flat:
        raise ValueError(
            "this tokenizer has no distinct single tokens for the answer letters A-D; LongBench-V2 needs them"
        )
    return flat


@torch.no_grad()
def score(model, tokenizer, items: list[dict], max_tokens: int) -> list[dict]:
    """One row per item: the predicted letter (highest logit among A-D at the answer position) and correctness."""
    letters = letter_ids(tokenizer)
    device = next(model.parameters()).device
    rows = []
    for item in items:
        ids = torch.tensor([encode(tokenizer, item, max_tokens)], device=device)
        logits = model(ids, use_cache=False, logits_to_keep=1).logits[0, -1, letters].float()
        pred = LETTERS[int(logits.argmax())]
        rows.append(
            {
                "_id": item["_id"],
                "difficulty": item["difficulty"],
                "length": item["length"],
                "tokens": ids.shape[1],
                "answer": item["answer"],
                "pred": pred,
                "correct": int(pred == item["answer"]),
            }
        )
    return rows


def summary(rows: list[dict]) -> dict:
    """Accuracy overall, by difficulty (easy / hard) and by length class (short / medium / long)."""
    out = {"overall": sum(r["correct"] for r in rows) / len(rows) if rows else float("nan"), "n": len(rows)}
    for key in ("difficulty", "length"):
        for value in sorted({r[key] for r in rows}):
            group = [r["correct"] for r in rows if r[key] == value]
            out[f"{key}={value}"] = sum(group) / len(group)
    return out
