"""Train and evaluate the toy zoo.

training_batch    prompts followed by their answers and further questions or recitals, with target positions
train_toy         train a toy model on seeded retrieval prompts with an adaptive curriculum
running_accuracy  the curriculum's running accuracy (under group dropout: of the prompts it judges)
GroupDropout      zero whole groups of linear mixers per training prompt; its gate judges the sets kept
held_out_prompts  prompts over the keys a model's tokenizer holds (a toy's: the ones it was trained on)
evaluate_model    held-out retrieval accuracy per format, language fidelity, persona fidelity
check_gate        raise when retrieval is below the threshold
check_toy         refuse a toy spec whose keys cannot train as asked (chain, pretrain, from, group_gate), in one line
check_from        refuse a `from` toy whose parent is no toy of the registry or has another architecture
start_from        a `from` toy's weights before its training: the parent's, fused words added, layers redrawn
train_and_save    build, train and save_pretrained one toy model (+ tokenizer) from its registry entry
"""

import dataclasses
import json
import math
import random

import torch
from tqdm import tqdm

from hybridlens.errors import UserError
from hybridlens.interventions.cache import greedy
from hybridlens.interventions.hooks import first_tensor, replace_first
from hybridlens.models.adapter import HybridModel, load_model
from hybridlens.models.families import family_of
from hybridlens.models.toy import build_tokenizer, build_toy_model, share_embedding
from hybridlens.store import save_checkpoint
from hybridlens.tasks.items import turns
from hybridlens.tasks.prompt_sets import vocabulary
from hybridlens.tasks.retrieval import FORMATS, FUSED_FORMATS, answer_word, hop_links, make_prompts, question_words
from hybridlens.tasks.vocab import KEYS, VALUES, fused_words, key_words, language_forms


class GateFailed(UserError):
    """A trained model does not retrieve well enough for the experiments to mean anything."""


QUESTIONS = ("distinct", "repeat", "recite")


def training_batch(
    tokenizer,
    prompts,
    extra_queries: int,
    rng,
    n_languages: int,
    questions: str = "distinct",
    answer: str = "value",
    link_questions: int = 0,
):
    """Token ids [batch, pos], the positions of the tokens to train on, and which of them are answers.

    Each prompt is followed by its answer and marker, then by more retrieval targets from the same
    dictionary, so the binding of keys to values is learned from a denser signal. The first answer
    is the evaluated one; `answers` is False at the persona markers. Every value target is the word the
    format answers with (answer_word): in FUSED_FORMATS, recitals and further answers carry the persona too.
    questions="distinct": min(extra_queries, n_pairs - 1) questions about other keys, each asked once.
    When every key gets asked, the last answer is the one value not yet given: a shortcut worth 0.75
    on two pairs. Trained on it, the Qwen3.5 toys leave 0.75 but the Mamba-2 toys never did (measured).
    questions="repeat": `extra_queries` keys drawn with replacement: no elimination, and a key asked
    again can be answered from the earlier answer; longer sequences on small dictionaries.
    questions="recite": the dictionary `extra_queries` more times, each in a new order and in the
    prompt's pair syntax, every value a target: 4 tokens per target instead of a 10-token question
    and its answer. Measured: the Granite toy stops at 1775 steps (176 s) instead of 2488 (309 s with
    repeat); the Falcon-H1 toy (seed 0, four heads) holds out 0.89 / 0.84 after 4500 (566 s), repeat 0.80
    after 4158 (~700 s). docs/zoo.md records the runs behind each toy's current settings.
    A hop prompt's recital is its first table, key = link, so the first lookup is a target of its own:
    trained on the composed answer alone, no hop toy learned it (docs/circuit.md). The links are not
    answers, so the curriculum still advances on the composed answer.
    answer="link": a hop prompt is answered with the queried key's link, the first lookup alone (a chain
    toy's first phase). link_questions: after everything else, that many questions asking a link's value,
    the same entries in every row, each value a target but not an answer: the second lookup on its own.
    """
    if questions not in QUESTIONS:
        raise ValueError(f"unknown questions mode {questions!r}; use one of {QUESTIONS}")
    if answer not in ("value", "link"):
        raise ValueError(f"unknown answer {answer!r}; use 'value' or 'link'")
    if answer == "link":
        prompts = [dataclasses.replace(p, answer=hop_links(p.pairs)[0][p.query]) for p in prompts]
    forms = language_forms(n_languages)
    sequences, targets, answers = [], None, None
    for p in prompts:
        words = p.text.split() + [p.answer, p.marker]
        tgt, ans = [len(words) - 2, len(words) - 1], [True, False]
        if questions == "recite":
            links = hop_links(p.pairs)[0] if p.fmt == "hop" else None
            for _ in range(extra_queries):
                order = list(range(len(p.pairs)))
                rng.shuffle(order)
                words.append(".")
                for i in order:
                    key, concept = p.pairs[i]
                    value = links[i] if links else answer_word(p.fmt, forms, p.language, p.persona, concept)
                    words += ["*", key, "=", value] if p.fmt == "list" else [key, "=", value, ","]
                    tgt.append(len(words) - (1 if p.fmt == "list" else 2))
                    ans.append(not links)
        else:
            if questions == "repeat":
                keys = [rng.randrange(len(p.pairs)) for _ in range(extra_queries)]
            else:
                keys = [i for i in range(len(p.pairs)) if i != p.query]
                rng.shuffle(keys)
                keys = keys[:extra_queries]
            for i in keys:
                answer = answer_word(p.fmt, forms, p.language, p.persona, p.pairs[i][1])
                words += [".", *question_words(p.fmt, p.pairs[i][0]), answer, p.marker]
                tgt += [len(words) - 2, len(words) - 1]
                ans += [True, False]
        sequences.append(words)
        targets, answers = tgt, ans
    if link_questions:
        picks = rng.sample(range(len(prompts[0].pairs)), link_questions)
        for words, p in zip(sequences, prompts, strict=True):
            links, asked = hop_links(p.pairs)[0], []
            for i in picks:  # asked like the hop question, without its "Question :" header
                words += [".", *question_words(p.fmt, links[i])[2:], forms[p.language][p.pairs[i][1]]]
                asked.append(len(words) - 1)
        targets, answers = targets + asked, answers + [False] * link_questions
    rows = [tokenizer.convert_tokens_to_ids(words) for words in sequences]
    return torch.tensor(rows), torch.tensor(targets), torch.tensor(answers)


def train_toy(
    model,
    tokenizer,
    steps: int,
    stages=(2, 4, 8),
    batch_size: int = 64,
    lr: float = 1.5e-3,
    seed: int = 0,
    n_languages: int = 2,
    formats=("chat", "list"),
    extra_queries: int = 7,
    questions: str = "distinct",
    advance: float = 0.9,
    done: float = 0.98,
    anneal: int = 0,
    target: float | None = None,
    validate_every: int = 100,
    val_seed: int = 7001,
    val_n: int = 128,
    log_every: int = 25,
    progress: bool = True,
    keys=None,
    answer: str = "value",
    link_questions: int = 0,
    group_drop: float = 0.0,
    group_gate: str = "whole",
):
    """AdamW on the answer and persona-marker tokens of seeded retrieval prompts.

    Curriculum: dictionaries have stages[0] pairs until the running answer accuracy (an EMA over
    ~640 prompts of the teacher-forced accuracy on every answer in the batch) reaches `advance`, then
    stages[1], and so on; training stops early once the last stage reaches `done`. Retrieval
    emerges abruptly after a plateau whose length varies from seed to seed, so a fixed schedule
    either wastes steps or moves on before the binding is learned.
    target: once the last stage reaches `done`, training goes on until greedy retrieval on `val_n`
    validation prompts per format (seed `val_seed`, not the gate's) reaches `target` on every
    format, checked every `validate_every` steps. The running accuracy scores teacher-forced answers,
    not the first greedy answer the gate scores, so reaching it says little about the margin.
    anneal > 0: from the step the last stage reaches `done`, the learning rate decays to zero (cosine)
    over `anneal` steps, and training ends there at the latest, so that it ends on small steps rather
    than at the full rate.

    keys: the key words dictionaries draw from (default KEYS).
    answer, link_questions: what the batches ask (training_batch); the validation always scores the value.
    group_drop: the probability that a group's mixers are zeroed in a training prompt (GroupDropout).
    group_gate: which of its prompts the curriculum judges: `whole`, those that kept every group; `each`,
    every set of kept groups on its own, the worst counting, so that a stage ends only once each set answers.

    Returns the training curve: rows {step, n_pairs, loss, accuracy}, and `validation` (the worst
    format's validation retrieval) on the rows where it was measured.
    """
    torch.manual_seed(seed)
    rng = random.Random(seed)
    # No weight decay on gains and biases: decay pulls Qwen3.5's zero-centred norm gains back to 1.
    matrices = [p for p in model.parameters() if p.ndim >= 2]
    vectors = [p for p in model.parameters() if p.ndim < 2]
    groups = [{"params": matrices, "weight_decay": 0.01}, {"params": vectors, "weight_decay": 0.0}]
    opt = torch.optim.AdamW(groups, lr=lr)
    reached = None  # step at which the last stage reached `done`

    def schedule(s):
        factor = min(1.0, (s + 1) / 50)  # warm-up
        if anneal and reached is not None:
            factor *= 0.5 * (1 + math.cos(math.pi * min(1.0, (s - reached) / anneal)))
        return factor

    scheduler = torch.optim.lr_scheduler.LambdaLR(opt, schedule)
    fast = family_of(model.config.model_type).toy_forward_kwargs(model)
    model.train()
    # The running accuracy averages over ~640 prompts whatever the batch (0.9 per step at 64): at batch 16 a
    # per-step 0.9 let a lucky stretch end training early (4-pair list retrieval 0.89 held out, measured).
    weight = min(1.0, batch_size / 640)
    stage, ema, curve = 0, 0.0, []
    validator = HybridModel(model, tokenizer)
    drop = GroupDropout(validator, group_drop, seed, group_gate) if group_drop else None
    # A notebook's interrupt must not leave the dropout hooks on the model.
    try:
        bar = tqdm(range(steps), disable=not progress, mininterval=2, desc="train")
        for step in bar:
            if drop:
                drop.draw(batch_size)
            n_pairs = stages[stage]
            prompts = make_prompts(
                rng.randrange(2**31), batch_size, n_pairs, rng.choice(formats), n_languages, keys=keys or KEYS
            )
            ids, targets, answers = training_batch(
                tokenizer, prompts, extra_queries, rng, n_languages, questions, answer, link_questions
            )
            logits = model(ids[:, :-1], **fast).logits[:, targets - 1]  # predictions of every target
            loss = torch.nn.functional.cross_entropy(logits.transpose(1, 2), ids[:, targets])
            opt.zero_grad()
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()
            hits = (logits[:, answers].argmax(-1) == ids[:, targets[answers]]).float()
            acc = hits.mean().item()
            ema = drop.running_accuracy(hits, weight) if drop else running_accuracy(ema, hits, weight)
            row = {"step": step, "n_pairs": n_pairs, "loss": loss.item(), "accuracy": acc}
            if step % log_every == 0 or step == steps - 1:
                curve.append(row)
                bar.set_postfix(loss=f"{loss.item():.3f}", acc=f"{ema:.2f}", pairs=n_pairs)
            last = stage == len(stages) - 1
            if not last and ema >= advance:
                stage, ema = stage + 1, 0.0
                if drop:
                    drop.emas.clear()
            elif last and reached is None and ema >= done:
                reached = step
                if target is None and not anneal:
                    curve.append(row)
                    break
            if target is not None and reached is not None and (step - reached) % validate_every == 0:
                model.eval()
                rows = evaluate_model(validator, val_seed, val_n, n_pairs, n_languages, formats)
                model.train()
                curve.append(row | {"validation": min(r["retrieval"] for r in rows)})
                bar.set_postfix(loss=f"{loss.item():.3f}", validation=f"{curve[-1]['validation']:.3f}")
                if curve[-1]["validation"] >= target:
                    break
            if anneal and reached is not None and step - reached >= anneal:  # learning rate is down to zero
                curve.append(row)
                break
            scheduler.step()  # after `reached` is known, so the decay starts on the next step
    finally:
        if drop:
            drop.remove()
    model.eval()
    return curve


def running_accuracy(ema: float, hits, weight: float, mask=None) -> float:
    """The curriculum's running accuracy after one batch: an EMA of the answers' hits [prompts, answers].

    mask: under group dropout, the prompts judged (GroupDropout.running_accuracy); they count with the
    weight of their share of the batch.
    """
    if mask is None:
        return (1 - weight) * ema + weight * hits.mean().item()
    if not mask.any():
        return ema
    share = weight * mask.float().mean().item()
    return (1 - share) * ema + share * hits[mask].mean().item()


class GroupDropout:
    """Zero every mixer of a group, each group independently with probability p per training prompt, but
    never every group of a prompt (a one-group model is left whole). Inactive in eval mode, so validation
    and every analysis see the whole model.

    A reader can then not count on an earlier group's write being there. If the curriculum judges only the
    prompts that kept every group (gate `whole`), the toys made the later groups dispensable; judging each
    set of kept groups (gate `each`) makes a later group answer alone, and with a state too small to answer
    from, the groups share the query (docs/scale.md).
    """

    def __init__(self, hm, p: float, seed: int, gate: str = "whole"):
        self.p, self.gate, self.generator, self.keep = p, gate, torch.Generator().manual_seed(seed), None
        self.emas = {}  # running accuracy per judged set of kept groups
        self.handles = [
            hm.mixer(layer).register_forward_hook(self._hook(g))
            for g, layers in enumerate(hm.groups)
            for layer in layers
        ]
        self.n_groups = len(hm.groups)

    def draw(self, batch_size: int):
        keep = torch.rand(batch_size, self.n_groups, generator=self.generator) >= self.p
        # A prompt with every group dropped cannot be answered; keep one of its groups, drawn at random.
        none = ~keep.any(1)
        keep[none, torch.randint(self.n_groups, (int(none.sum()),), generator=self.generator)] = True
        self.keep = keep.float()

    def running_accuracy(self, hits, weight: float) -> float:
        """The curriculum's running accuracy after this batch's hits: that of the prompts that kept every
        group (`whole`), or the worst of every set of kept groups, 0 until each set has been drawn (`each`)."""
        keep = self.keep.bool()
        if self.gate == "each":
            judged, sets = {tuple(k.tolist()): (keep == k).all(1) for k in keep.unique(dim=0)}, 2**self.n_groups - 1
        else:
            judged, sets = {(True,) * self.n_groups: keep.all(1)}, 1
        for kept, mask in judged.items():
            self.emas[kept] = running_accuracy(self.emas.get(kept, 0.0), hits, weight, mask)
        return min(self.emas.values()) if len(self.emas) == sets else 0.0

    def _hook(self, g):
        def hook(module, args, output):
            if not module.training:
                return None
            return replace_first(output, first_tensor(output) * self.keep[:, g, None, None])

        return hook

    def remove(self):
        for h in self.handles:
            h.remove()


def held_out_prompts(hm, seed: int, n: int, n_pairs: int, fmt: str, n_languages: int):
    """Held-out prompts over every key word `hm`'s tokenizer holds as one token: a toy's are the keys it
    was trained on (KEYS, or more with the toy-spec key `keys`)."""
    return make_prompts(seed, n, n_pairs, fmt, n_languages, keys=vocabulary(hm, n_pairs, n_languages)[0])


@torch.no_grad()
def evaluate_model(hm, seed: int, n: int = 128, n_pairs: int = 8, n_languages: int = 2, formats=FORMATS):
    """Greedy two-token answers on held-out prompts, per format.

    retrieval: first token is the queried value; language: first token is a value in the context's
    language (any value); persona: second token is the persona's marker (FUSED_FORMATS: the first token
    is a value in the context's persona).
    """
    forms = language_forms(n_languages)
    rows = []
    for fmt in formats:
        prompts = held_out_prompts(hm, seed, n, n_pairs, fmt, n_languages)
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


def check_toy(toy: dict, where: str):
    """Raise UserError when a toy spec's keys cannot train as asked: a `chain`'s first phase answers with a
    hop prompt's link, and its second needs layers above the frozen ones; `group_gate` judges the groups
    that group dropout keeps, so it needs `group_drop`."""
    if "group_gate" in toy and not toy.get("group_drop"):
        raise UserError(f"{where}.group_gate: it judges the groups that group dropout keeps; set group_drop")
    phases = [k for k in ("chain", "pretrain", "from") if k in toy]
    if len(phases) > 1:
        raise UserError(f"{where}: {' and '.join(phases)} are ways of training in two phases; keep one of them")
    if "redraw" in toy and "from" not in toy:
        raise UserError(f"{where}.redraw: layers are drawn afresh in weights trained before; set from")
    if any(i >= len(toy["layout"]) for i in toy.get("redraw", ())):
        n = len(toy["layout"])
        raise UserError(f"{where}.redraw: {toy['redraw']} names a layer the {n}-layer layout lacks; use 0 to {n - 1}")
    chain = toy.get("chain")
    if chain is None:
        return
    if set(toy.get("formats", ())) != {"hop"}:
        raise UserError(f"{where}.chain: a chain toy trains on hop prompts alone; set formats: [hop]")
    if not chain["freeze_below"] < len(toy["layout"]):
        raise UserError(
            f"{where}.chain.freeze_below: {chain['freeze_below']} freezes all {len(toy['layout'])} layers; "
            "freeze the layers up to the first lookup's reader, fewer than the layout has"
        )


# What a toy starts from must have the same shape (unset keys at their defaults); its seed draws only what is new.
ARCHITECTURE = {"hidden_size": None, "layout": None, "heads": 4, "state_size": None, "positions": "rope"}
ARCHITECTURE |= {"keys": None, "embedding": None}


def check_from(name: str, models: dict):
    """Raise UserError when toy `name`'s `from` names no toy of the registry `models`, leads back to itself, or
    names one of another family or architecture: the toy continues training the parent's weights."""
    chain = [name]
    while "from" in _toy(models[chain[-1]]):
        child, parent = chain[-1], _toy(models[chain[-1]])["from"]
        where = f"config models.{child}.source.toy.from"
        if parent not in models or not _toy(models[parent]):
            toys = ", ".join(sorted(m for m in models if _toy(models[m]) and m != child))
            fix = f"name one of its toys ({toys})" if toys else "add the toy it starts from to models"
            raise UserError(f"{where}: {parent} is not a toy of the registry; {fix}")
        if parent in chain:
            raise UserError(f"{where}: {' -> '.join([*chain, parent])} starts from itself; break the cycle")
        chain.append(parent)
    if len(chain) == 1:
        return
    parent, where = chain[1], f"config models.{name}"
    if models[parent]["family"] != models[name]["family"]:
        family = models[parent]["family"]
        raise UserError(f"{where}.family: {parent}, whose weights it starts from, is a {family} toy; set {family}")
    toy, first = _toy(models[name]), _toy(models[parent])
    for key, default in ARCHITECTURE.items():
        mine, theirs = toy.get(key, default), first.get(key, default)
        if mine != theirs:
            raise UserError(
                f"{where}.source.toy.{key}: {_shown(mine)} where {parent}, whose weights it starts from, has "
                f"{_shown(theirs)}; set it to {parent}'s"
            )


def _shown(value) -> str:
    return "unset" if value is None else json.dumps(value) if isinstance(value, dict) else str(value)


def _toy(entry: dict) -> dict | None:
    source = entry["source"]
    return source.get("toy") if isinstance(source, dict) else None


def check_trained_format(section: str, models_key: str, fmt: str, trained: dict) -> None:
    """Raise UserError when an analysis asks a toy in a format it was not trained on. A toy answers little or
    nothing of another format (granite_toy, trained on chat and list, retrieves 0.08 of rev prompts), so the
    analysis would measure a mechanism the toy does not have. trained: toy name -> its training formats."""
    for name, formats in trained.items():
        if fmt not in formats:
            raise UserError(
                f"config {section}.format: {name} was trained on {', '.join(formats)}, not {fmt}; set "
                f"{section}.format to a format it was trained on, or list in {section}.{models_key} only models "
                f"trained on {fmt}"
            )


def freeze_first_lookup(model, tokenizer, n_languages: int, seed: int, freeze_below: int):
    """Fix a chain toy's first lookup: freeze the token embedding and the layers below `freeze_below`.

    The first phase never predicts a value word, so their tied embeddings collapse onto one direction
    (docs/circuit.md); they are drawn afresh at the embedding's scale, so the second phase can tell them apart.
    """
    redraw_embeddings(model, tokenizer, [form[v] for form in language_forms(n_languages) for v in VALUES], seed)
    for module in (model.get_input_embeddings(), *HybridModel(model, tokenizer).layers[:freeze_below]):
        module.requires_grad_(False)


def redraw_embeddings(model, tokenizer, words, seed: int):
    """Draw `words`' embedding rows afresh at the embedding's scale: rows a phase of training never predicted
    collapse onto one direction when tied to the unembedding, and the next phase could not tell them apart."""
    ids = tokenizer.convert_tokens_to_ids(list(words))
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        weight = model.get_input_embeddings().weight
        weight[ids] = torch.randn(len(ids), weight.shape[1], generator=generator) * weight.std()


def _fresh(family: str, toy: dict, vocab_size: int):
    """The untrained model a toy spec draws from its seed."""
    return build_toy_model(
        family,
        vocab_size,
        toy["hidden_size"],
        toy["layout"],
        toy.get("heads", 4),
        toy.get("seed", 0),
        toy.get("state_size"),
        toy.get("positions", "rope"),
    )


def start_from(parent, family: str, toy: dict, n_languages: int):
    """(model, tokenizer) a `from` toy starts its training with: the trained checkpoint `parent`, the fused words
    appended to its tokenizer when the toy's formats need them and drawn afresh (the parent never predicted them),
    and the mixers of the `redraw` layers replaced by those an untrained toy of this spec draws from its seed, so
    that what a layer learned in the parent's training is gone while every other layer keeps it."""
    hm = load_model(parent, attn_implementation="eager", family=family)
    model, tokenizer = hm.model.train(), hm.tokenizer
    n_parent, seed = len(tokenizer), toy.get("seed", 0)
    fused = any(f in FUSED_FORMATS for f in toy.get("formats", ()))
    if fused and fused_words(n_languages).keys() - tokenizer.vocab:
        old, tokenizer = tokenizer.get_vocab(), build_tokenizer(n_languages, toy.get("keys"), fused=True)
        if any(tokenizer.get_vocab().get(w) != i for w, i in old.items()):
            raise UserError(f"{parent}: its tokenizer is not a toy's of {n_languages} languages; train it as one")
        _append_words(model, tokenizer, fused_words(n_languages), seed)
    if "embedding" in toy:  # frozen as in the parent, whose rows stay exact; appended words get the shared draw's
        kept = model.get_input_embeddings().weight[:n_parent].clone()
        share_embedding(model, **toy["embedding"])
        with torch.no_grad():
            model.get_input_embeddings().weight[:n_parent] = kept
    if toy.get("redraw"):
        vocab = build_tokenizer(n_languages, toy.get("keys"), fused=fused)  # an untrained toy's of this spec
        fresh, own = HybridModel(_fresh(family, toy, len(vocab)), vocab), HybridModel(model, tokenizer)
        for layer in toy["redraw"]:
            for part in (HybridModel.mixer, HybridModel.attention):
                if part(own, layer) is not None:
                    part(own, layer).load_state_dict(part(fresh, layer).state_dict())
    return model, tokenizer


def _append_words(model, tokenizer, words, seed: int):
    """Grow the embedding (and an untied unembedding) to `tokenizer`, drawing `words`' rows from `seed` at each
    table's trained scale: resizing fills new rows from the global generator, which must not decide a toy."""
    tables = (model.get_input_embeddings, model.get_output_embeddings)
    untied = model.get_output_embeddings().weight is not model.get_input_embeddings().weight
    tables = tables if untied else tables[:1]
    scales = [table().weight.std().item() for table in tables]
    model.resize_token_embeddings(len(tokenizer), mean_resizing=False)
    ids = tokenizer.convert_tokens_to_ids(list(words))
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for table, scale in zip(tables, scales, strict=True):
            weight = table().weight
            weight[ids] = torch.randn(len(ids), weight.shape[1], generator=generator) * scale


def train_and_save(family: str, toy: dict, zoo: dict, out_dir, progress=True, parent=None):
    """Train a toy model from its registry spec and zoo settings; save it where `out_dir` says.

    parent: the trained checkpoint directory of the toy's `from`, whose weights it continues to train.
    Files are written to a temporary directory beside `out_dir` and moved into place at the end,
    so an interrupted run leaves no half-written weights. Returns the training curve rows.
    """
    formats = toy.get("formats", zoo["formats"])
    pretrain = toy.get("pretrain")
    first = pretrain["formats"] if pretrain else []
    fused = any(f in FUSED_FORMATS for f in [*formats, *first])
    if "from" in toy:
        model, tokenizer = start_from(parent, family, toy | {"formats": formats}, zoo["n_languages"])
    else:
        tokenizer = build_tokenizer(zoo["n_languages"], toy.get("keys"), fused=fused)
        model = _fresh(family, toy, len(tokenizer))
        if "embedding" in toy:
            share_embedding(model, **toy["embedding"])
    # The batches have a seed of their own, so that crossing it with the weights' tells which one a result follows.
    seed, chain = toy.get("data_seed", toy.get("seed", 0)), toy.get("chain")
    target = toy.get("target", zoo.get("target"))
    settings = dict(
        stages=toy.get("stages", zoo["stages"]),
        batch_size=toy.get("batch_size", zoo["batch_size"]),
        lr=toy.get("lr", zoo["lr"]),
        n_languages=zoo["n_languages"],
        extra_queries=toy.get("extra_queries", zoo["extra_queries"]),
        questions=toy.get("questions", zoo["questions"]),
        formats=formats,
        advance=zoo["advance"],
        done=toy.get("done", zoo["done"]),
        anneal=toy.get("anneal", zoo["anneal"]),
        validate_every=zoo.get("validate_every", 100),
        progress=progress,
        keys=key_words(toy.get("keys")),
        group_drop=toy.get("group_drop", 0.0),
        group_gate=toy.get("group_gate", "whole"),
    )
    curve = []
    if chain:  # first phase: the link as the answer; then the first lookup is fixed and the value trained
        curve = train_toy(model, tokenizer, chain["steps"], seed=seed, answer="link", **settings)
        curve = [row | {"phase": "link"} for row in curve]
        freeze_first_lookup(model, tokenizer, zoo["n_languages"], toy.get("seed", 0), chain["freeze_below"])
        seed += 100
    elif pretrain:  # first phase: formats whose lookup trains on its own; then the toy's formats from those weights
        # It ends as any toy's training does (done, then the target), so the second phase starts from a
        # lookup validated on prompts it never trained on.
        first_settings = settings | {"formats": first, "target": target}
        curve = train_toy(model, tokenizer, pretrain["steps"], seed=seed, **first_settings)
        curve = [row | {"phase": "pretrain"} for row in curve]
        if fused and not any(f in FUSED_FORMATS for f in first):
            redraw_embeddings(model, tokenizer, fused_words(zoo["n_languages"]), toy.get("seed", 0))
        seed += 100
    rows = train_toy(
        model,
        tokenizer,
        toy.get("steps", zoo["steps"]),
        seed=seed,
        target=target,
        link_questions=chain.get("link_questions", 2) if chain else 0,
        **settings,
    )
    offset, tag = (curve[-1]["step"] + 1, {"phase": "value" if chain else "main"}) if curve else (0, {})
    curve += [row | tag | {"step": row["step"] + offset} for row in rows]
    save_checkpoint(out_dir, model, tokenizer, safe_serialization=True)
    return curve
