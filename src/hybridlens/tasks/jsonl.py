"""A user's own prompts: one item per line of a JSONL file (docs/tasks.md has the format and an example).

Each line is an object with a prompt, given as
  "prompt":   the user turn (a model with a chat template puts it there),
  "messages": chat turns [{"role": "system" | "user" | "assistant", "content": ...}], the user turn required,
              an assistant turn last being the prefill the answer continues, or
  "text":     raw text, read as it is even by a model with a chat template (for base models);
"answer" (what continues the prompt; its first token is what logit metrics read), and optionally "lead"
(what stands between the prompt's end and the answer, e.g. " "), "choices" (answers whose logits metrics
compare, the answer among them), "name", "language" and "persona" (the reply language, as a language code,
and the persona the context sets: split-prefill's style), and the partners "donor", "corrupt" and "swap":
objects of the same fields.
A span is marked inline as [[name:text]]: the text stays in the prompt and its characters are the span `name`.

load    the items of a file, every problem refused in one line naming the line and the field
check   load() for the workflow's parse step (no torch, no model)
items   (items, counts) of a config task for one model
"""

import json
import re
from pathlib import Path

from hybridlens.tasks.items import Item

DEFAULTS = {"file": None}  # config keys of a JSONL task; None: required
PARTNERS = ("donor", "corrupt", "swap")
FIELDS = {"prompt", "messages", "text", "answer", "lead", "choices", "name", "language", "persona", *PARTNERS}
SPAN = re.compile(r"\[\[([A-Za-z_][A-Za-z0-9_]*):(.*?)\]\]", re.S)
ROLES = ("system", "user", "assistant")


def load(path) -> list[Item]:
    """The items of a JSONL file, in line order (blank lines skipped)."""
    path = Path(path)
    if not path.is_file():
        raise ValueError(f"task file {path} does not exist; give a JSONL file of prompts (docs/tasks.md)")
    out = []
    for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        if not line.strip():
            continue
        where = f"{path}:{n}"
        try:
            record = json.loads(line)
        except json.JSONDecodeError as err:
            raise ValueError(f"{where}: not JSON ({err.msg}, column {err.colno}); one object per line") from None
        out.append(_item(record, where))
    if not out:
        raise ValueError(f"task file {path} holds no items; one JSON object per line")
    return out


def _item(record, where, partner=False) -> Item:
    if not isinstance(record, dict):
        raise ValueError(f"{where}: a line is one JSON object, not {type(record).__name__}")
    unknown = sorted(set(record) - (FIELDS - set(PARTNERS) if partner else FIELDS))
    if unknown:
        raise ValueError(
            f"{where}: unknown field {unknown[0]!r}; fields are {sorted(FIELDS)} (a partner has none of its own)"
        )
    given = [k for k in ("prompt", "messages", "text") if k in record]
    if len(given) != 1:
        raise ValueError(
            f"{where}: give exactly one of the fields 'prompt', 'messages' and 'text' (got {given or 'none'})"
        )
    for key in ("answer", "lead", "name", "prompt", "text", "language", "persona"):
        if key in record and not isinstance(record[key], str):
            raise ValueError(f"{where}: field {key!r} must be a string")
    if not record.get("answer"):
        raise ValueError(f"{where}: field 'answer' is missing or empty; every item needs the answer that follows")
    spans, plain, at = {}, [], 0
    for segment in _turns(record, where):  # spans index the non-empty turns joined by newlines (Turns.joined)
        text, found = _strip_spans(segment, where)
        for name, (a, b) in found.items():
            if name in spans:
                raise ValueError(f"{where}: span {name!r} marked twice; names are unique within an item")
            spans[name] = (a + at, b + at)
        plain.append(text)
        at += len(text) + 1 if text else 0
    system, user, prefill = plain
    choices = record.get("choices", [])
    if not isinstance(choices, list) or not all(isinstance(c, str) and c for c in choices):
        raise ValueError(f"{where}: field 'choices' must be a list of non-empty strings")
    if choices and record["answer"] not in choices:
        raise ValueError(f"{where}: field 'choices' must hold the answer {record['answer']!r}")
    partners = {}
    for key in PARTNERS if not partner else ():
        if key in record:
            partners[key] = _item(record[key], f"{where} ({key})", partner=True)
    return Item(
        user,
        record["answer"],
        spans,
        system=system,
        prefill=prefill,
        lead=record.get("lead", ""),
        choices=tuple(choices),
        partners=partners,
        name=record.get("name") or where,
        raw="text" in record,
        language=record.get("language", ""),
        persona=record.get("persona", ""),
    )


def _turns(record, where) -> tuple[str, str, str]:
    """(system, user, prefill) of a record, spans still marked."""
    if "prompt" in record or "text" in record:
        return "", record.get("prompt", record.get("text")), ""
    messages = record["messages"]
    if not isinstance(messages, list) or not all(
        isinstance(m, dict) and set(m) == {"role", "content"} and isinstance(m["content"], str) for m in messages
    ):
        raise ValueError(f'{where}: field \'messages\' must be a list of {{"role": ..., "content": ...}} objects')
    roles = [m["role"] for m in messages]
    if roles not in (["user"], ["system", "user"], ["user", "assistant"], ["system", "user", "assistant"]):
        raise ValueError(
            f"{where}: field 'messages' has roles {roles}; give an optional system turn, the user turn and an "
            "optional assistant turn last (the prefill)"
        )
    turn = {m["role"]: m["content"] for m in messages}
    return turn.get("system", ""), turn["user"], turn.get("assistant", "")


def _strip_spans(text, where) -> tuple[str, dict[str, tuple[int, int]]]:
    """The text without its [[name:text]] marks, and the character span of each."""
    out, spans, last = [], {}, 0
    for m in SPAN.finditer(text):
        out.append(text[last : m.start()])
        start = sum(map(len, out))
        if m.group(1) in spans:
            raise ValueError(f"{where}: span {m.group(1)!r} marked twice; names are unique within an item")
        spans[m.group(1)] = (start, start + len(m.group(2)))
        out.append(m.group(2))
        last = m.end()
    out.append(text[last:])
    plain = "".join(out)
    if "[[" in plain:
        raise ValueError(f"{where}: a span mark is not [[name:text]] (a name is letters, digits and _)")
    return plain, spans


def check(spec: dict, where: str) -> list[Item]:
    return load(spec["file"])


def items(hm, spec: dict):
    """(items, counts) of a JSONL task; counts: how many items, and how many carry each partner."""
    loaded = load(spec["file"])
    counts = {"items": len(loaded)} | {p: sum(p in it.partners for it in loaded) for p in PARTNERS}
    return loaded, counts
