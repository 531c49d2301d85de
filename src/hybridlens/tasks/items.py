"""The task interface: what every task yields, and how an experiment turns it into tokens.

A task (a module of tasks/, registered in tasks/__init__.py) yields items. An item is a prompt given as chat
turns (an optional system turn, the user turn, an optional prefill of the assistant turn; for a model without
a chat template their joined text), the answer that continues it, the answers whose logits metrics compare
(`choices`), named character spans of its parts, and the counterfactual partners an experiment pairs it with.
Experiments and the engine see token ids and token positions only; interventions.on_items makes them from
items. This module imports no torch, so the workflow checks a user's task files at parse time.

Item             a task item; tasks with more structure (tasks.retrieval.Prompt) carry the same fields
Turns, turns     chat turns, and an item's (what HybridModel.render puts in the chat template)
choice_words     the answers an item's metrics compare
answer_index     which of them is the answer (a dictionary prompt: the queried entry)
Triple           a host item with its donor (same context, another answer) and another context asking the donor's
donor_triples    a user's items with donors as Triples (no `other`); require_entries refuses what they lack
token_positions  token indices of a position set or span of an item, from a tokenizer's offsets
entry_parts      span names of one dictionary entry (key, value; links in hop)
POSITION_SETS    final, question, dict, all
token_roles      each token's role (TOKEN_ROLES: key, value, question, final, other) from an item's span names
"""

from dataclasses import dataclass, field
from typing import NamedTuple

POSITION_SETS = ("final", "question", "dict", "all")


class Turns(NamedTuple):
    """A prompt as chat turns: the user turn, an optional system turn and an optional prefill of the assistant
    turn. Character offsets index `joined`, the non-empty turns in order joined by newlines, which is also the
    whole text given to a model without a chat template."""

    user: str
    system: str = ""
    prefill: str = ""
    raw: bool = False  # read as text even by a model with a chat template (a base model's prompt)

    @property
    def joined(self) -> str:
        return "\n".join(t for t in (self.system, self.user, self.prefill) if t)


@dataclass(frozen=True)
class Item:
    """One prompt and its answer. Spans are (start, end) character offsets into turns(item).joined."""

    text: str  # the user turn; for a model without a chat template the turns' joined text is what it reads
    answer: str  # what continues the prompt after `lead`; its first token is what logit metrics read
    spans: dict[str, tuple[int, int]] = field(default_factory=dict, compare=False)
    system: str = ""
    prefill: str = ""  # the start of the assistant turn, up to the answer
    lead: str = ""  # what stands between the prompt's end and the answer (" " when the answer is a next word)
    choices: tuple[str, ...] = ()  # answers whose logits metrics compare; () = (answer,)
    partners: dict[str, "Item"] = field(default_factory=dict, compare=False)  # donor, corrupt, ...
    name: str = ""  # where the item comes from (a file's line), for messages
    raw: bool = False  # text for a base model: no chat template around it
    language: str = ""  # the language the context asks replies in (a language code), if the item says
    persona: str = ""  # the persona the context gives (split-prefill's style), if any


def turns(item) -> Turns:
    return Turns(item.text, item.system, item.prefill, getattr(item, "raw", False))


def choice_words(item) -> tuple[str, ...]:
    return tuple(item.choices) or (item.answer,)


def answer_index(item) -> int:
    return choice_words(item).index(item.answer)


@dataclass
class Triple:
    """The circuit's unit: the donor asks A, the host asks B of the same context, `other` is another context
    that also holds A (another value, at another entry) and asks A."""

    seed: int
    index: int
    donor: Item
    host: Item
    other: Item | None  # a user's items have none


def donor_index(triple) -> int:
    """Which of the host's choices the donor's answer is: the entry a transplant redirects the host to."""
    return choice_words(triple.host).index(triple.donor.answer)


def donor_triples(items, seed: int = 0) -> list[Triple]:
    """Items with a donor partner as the sweep's (donor, host) triples, in item order."""
    return [Triple(seed, i, it.partners["donor"], it, None) for i, it in enumerate(items)]


def require_entries(items, who: str) -> None:
    """Refuse, in one line naming the item, one whose donor's answer is not among its choices, or whose
    answer's and donor's entries are not marked ([[value{i}:...]] holding choice i, so choices come in entry
    order): the sweep reads the host's logits of both answers and its readers' attention to both entries."""
    for it in items:
        choices, donor = choice_words(it), it.partners["donor"].answer
        if donor not in choices:
            raise ValueError(f"{it.name}: the donor's answer {donor!r} is not among the choices; {who} compares both")
        joined = turns(it).joined
        for i in (choices.index(it.answer), choices.index(donor)):
            span = it.spans.get(f"value{i}")
            if span is None or joined[span[0] : span[1]] != choices[i]:
                held = "no such span" if span is None else f"it holds {joined[span[0] : span[1]]!r}"
                raise ValueError(
                    f"{it.name}: choice {i} {choices[i]!r} is not marked [[value{i}:{choices[i]}]] ({held}); list "
                    f"choices in entry order and mark each entry's value, since {who} reads attention to it"
                )


def token_positions(item, offsets, part: str) -> list[int]:
    """Token indices of a part of `item`, from the tokenizer's character offsets.

    part: a position set (final, question, dict = every key and value token, all) or a span name
    (query, persona, cues, key{i}, value{i}, or any span a user's item names). Chat-template tokens belong
    to no span.
    """
    if part == "all":
        return list(range(len(offsets)))
    if part == "final":
        return [len(offsets) - 1]
    if part == "dict":
        names = [n for n in item.spans if n.startswith(("key", "value", "link"))]
    elif part in item.spans:
        names = [part]
    else:
        raise ValueError(f"unknown prompt part {part!r}; use {POSITION_SETS} or one of {sorted(item.spans)}")
    out = []
    for name in names:
        s, e = item.spans[name]
        out += [i for i, (a, b) in enumerate(offsets) if a < e and b > s and b > a]
    return sorted(set(out))


def entry_parts(item, entry: int) -> list[str]:
    """Span names of one dictionary entry: its key and value, and in hop the link in both tables."""
    return [n for n in (f"key{entry}", f"link{entry}", f"linkkey{entry}", f"value{entry}") if n in item.spans]


TOKEN_ROLES = ("key", "value", "question", "final", "other")


def token_roles(prompt, offsets) -> list[str]:
    """Each token's role in TOKEN_ROLES: a dictionary key or value, the question's key, the final token
    (where the query is built), or other (persona, template and function words)."""
    # span names: key{i}, value{i}, query; in hop also link{i} (a value of the first table), linkkey{i}
    role_of_span = {"key": "key", "value": "value", "query": "question", "link": "value", "linkkey": "key"}
    roles = ["other"] * len(offsets)
    for name in prompt.spans:
        role = role_of_span.get(name.rstrip("0123456789"))
        for i in token_positions(prompt, offsets, name) if role else ():
            roles[i] = role
    roles[-1] = "final"
    return roles
