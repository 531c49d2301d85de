"""Gates and evaluation: held-out retrieval, language and persona fidelity of a trained toy.

GateFailed        a trained toy retrieves too little for the experiments to mean anything
held_out_prompts  prompts over the keys a model's tokenizer holds (a toy's: the ones it was trained on)
evaluate_model    held-out retrieval accuracy per format, language fidelity, persona fidelity
check_gate        raise when retrieval is below the threshold
"""

import torch

from hybridlens.errors import UserError
from hybridlens.interventions.cache import greedy
from hybridlens.tasks.items import turns
from hybridlens.tasks.prompt_sets import vocabulary
from hybridlens.tasks.retrieval import FORMATS, FUSED_FORMATS, make_prompts
from hybridlens.tasks.vocab import VALUES, fused_words, language_forms


class GateFailed(UserError):
    """A trained model does not retrieve well enough for the experiments to mean anything."""


def held_out_prompts(hm, seed: int, n: int, n_pairs: int, fmt: str):
    """Held-out prompts over every key word `hm`'s tokenizer holds as one token: a toy's are the keys it
    was trained on (KEYS, or more with the toy-spec key `keys`)."""
    return make_prompts(seed, n, n_pairs, fmt, hm.n_languages, keys=vocabulary(hm, n_pairs)[0])


@torch.no_grad()
def evaluate_model(hm, seed: int, n: int = 128, n_pairs: int = 8, formats=FORMATS):
    """Greedy two-token answers on held-out prompts, per format.

    retrieval: first token is the queried value; language: first token is a value in the context's
    language (any value); persona: second token is the persona's marker (FUSED_FORMATS: the first token
    is a value in the context's persona).
    """
    n_languages = hm.n_languages
    forms = language_forms(n_languages)
    rows = []
    for fmt in formats:
        prompts = held_out_prompts(hm, seed, n, n_pairs, fmt)
        ids, _ = hm.encode([turns(p) for p in prompts])
        tokens, _ = greedy(hm, ids, 2)
        answer = torch.tensor([hm.token_id(p.answer) for p in prompts])
        marker = torch.tensor([hm.token_id(p.marker) for p in prompts])
        first, second = tokens[:, 0].cpu(), tokens[:, 1].cpu()
        # (language, persona) of every answer word of this format; persona None where the word has none
        fused = fmt in FUSED_FORMATS
        plain = {table[v]: (v, lang, None) for lang, table in enumerate(forms) for v in VALUES}
        words = fused_words(n_languages) if fused else plain
        style = {hm.token_id(w): (lang, persona) for w, (_, lang, persona) in words.items()}
        got = [style.get(t, (None, None)) for t in first.tolist()]
        language = sum(lang == p.language for (lang, _), p in zip(got, prompts, strict=True)) / n
        if fused:
            persona = sum(persona == p.persona for (_, persona), p in zip(got, prompts, strict=True)) / n
        else:
            persona = (second == marker).float().mean().item()
        rows.append(
            {
                "format": fmt,
                "n_pairs": n_pairs,
                "n": n,
                "retrieval": (first == answer).float().mean().item(),
                "language": language,
                "persona": persona,
            }
        )
    return rows


def check_gate(name, rows, threshold, formats=FORMATS, label="gate", fix="train longer (zoo.steps) or lower zoo.gate"):
    """Raise GateFailed when retrieval on any of `formats` is below `threshold`."""
    worst = min((r for r in rows if r["format"] in formats), key=lambda r: r["retrieval"])
    if worst["retrieval"] < threshold:
        raise GateFailed(
            f"model {name}: {worst['n_pairs']}-pair retrieval on format {worst['format']!r} is "
            f"{worst['retrieval']:.3f} < {label} {threshold:g}; {fix}"
        )
