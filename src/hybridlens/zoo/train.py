"""Training and curriculum: batches of seeded retrieval prompts, the adaptive curriculum, group dropout, and
the one- and two-phase recipes that train and save a toy.

training_batch    prompts followed by their answers and further questions or recitals, with target positions
train_toy         train a toy model on seeded retrieval prompts with an adaptive curriculum
running_accuracy  the curriculum's running accuracy (under group dropout: of the prompts it judges)
GroupDropout      zero whole groups of linear mixers per training prompt; its gate judges the sets kept
train_and_save    build, train and save_pretrained one toy model (+ tokenizer) from its registry entry
"""

import dataclasses
import math
import random

import torch
from tqdm import tqdm

from hybridlens.interventions.hooks import first_tensor, replace_first
from hybridlens.models.adapter import HybridModel
from hybridlens.models.families import family_of
from hybridlens.models.toy import build_tokenizer, share_embedding
from hybridlens.store import save_checkpoint
from hybridlens.tasks.retrieval import FUSED_FORMATS, answer_word, hop_links, make_prompts, question_words
from hybridlens.tasks.vocab import KEYS, fused_words, key_words, language_forms
from hybridlens.zoo.evaluate import evaluate_model
from hybridlens.zoo.spec import QUESTIONS, ToySpec
from hybridlens.zoo.surgery import freeze_first_lookup, fresh_model, redraw_embeddings, start_from


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
    When every key gets asked, the last answer is the one value not yet given: a shortcut by elimination
    that some toys learn instead of the lookup.
    questions="repeat": `extra_queries` keys drawn with replacement: no elimination, and a key asked
    again can be answered from the earlier answer; longer sequences on small dictionaries.
    questions="recite": the dictionary `extra_queries` more times, each in a new order and in the
    prompt's pair syntax, every value a target: 4 tokens per target instead of a 10-token question
    and its answer, so a step carries more targets per token.
    A hop prompt's recital is its first table, key = link, so the first lookup is a target of its own:
    trained on the composed answer alone, a hop toy need not learn it. The links are not
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
    spec: ToySpec,
    seed: int,
    answer: str = "value",
    link_questions: int = 0,
    progress: bool = True,
    val_seed: int = 7001,
    val_n: int = 128,
    log_every: int = 25,
):
    """AdamW on the answer and persona-marker tokens of seeded retrieval prompts.

    One phase of training: spec.steps at most, on spec.formats, with the batches drawn from `seed`.
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

    spec.keys: how many key words dictionaries draw from (key_words).
    answer, link_questions: what the batches ask (training_batch); the validation always scores the value.
    spec.group_drop: the probability that a group's mixers are zeroed in a training prompt (GroupDropout).
    spec.group_gate: which of its prompts the curriculum judges: `whole`, those that kept every group; `each`,
    every set of kept groups on its own, the worst counting, so that a stage ends only once each set answers.

    Returns the training curve: rows {step, n_pairs, loss, accuracy}, and `validation` (the worst
    format's validation retrieval) on the rows where it was measured.
    """
    steps, stages, n_languages, formats, target = spec.steps, spec.stages, spec.n_languages, spec.formats, spec.target
    advance, done, anneal, batch_size = spec.advance, spec.done, spec.anneal, spec.batch_size
    keys = key_words(spec.keys)
    torch.manual_seed(seed)
    rng = random.Random(seed)
    # No weight decay on gains and biases: decay pulls Qwen3.5's zero-centred norm gains back to 1.
    matrices = [p for p in model.parameters() if p.ndim >= 2]
    vectors = [p for p in model.parameters() if p.ndim < 2]
    groups = [{"params": matrices, "weight_decay": 0.01}, {"params": vectors, "weight_decay": 0.0}]
    opt = torch.optim.AdamW(groups, lr=spec.lr)
    reached = None  # step at which the last stage reached `done`

    def schedule(s):
        factor = min(1.0, (s + 1) / 50)  # warm-up
        if anneal and reached is not None:
            factor *= 0.5 * (1 + math.cos(math.pi * min(1.0, (s - reached) / anneal)))
        return factor

    scheduler = torch.optim.lr_scheduler.LambdaLR(opt, schedule)
    fast = family_of(model.config.model_type).toy_forward_kwargs(model)
    model.train()
    # The running accuracy averages over ~640 prompts whatever the batch, so that at a small batch a lucky
    # stretch of steps cannot end a stage early.
    weight = min(1.0, batch_size / 640)
    stage, ema, curve = 0, 0.0, []
    validator = HybridModel(model, tokenizer)
    drop = GroupDropout(validator, spec.group_drop, seed, spec.group_gate) if spec.group_drop else None
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
                tokenizer, prompts, spec.extra_queries, rng, n_languages, spec.questions, answer, link_questions
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
            if target is not None and reached is not None and (step - reached) % spec.validate_every == 0:
                model.eval()
                rows = evaluate_model(validator, val_seed, val_n, n_pairs, formats)
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
    from, the groups share the query.
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


def train_and_save(family: str, toy: dict, zoo: dict, out_dir, progress=True, parent=None):
    """Train a toy model from its registry entry `toy` and the run's zoo settings; save it where `out_dir` says.

    parent: the trained checkpoint directory of the toy's `from`, whose weights it continues to train.
    Files are written to a temporary directory beside `out_dir` and moved into place at the end,
    so an interrupted run leaves no half-written weights. Returns the training curve rows.
    """
    spec = ToySpec.of(toy, zoo)
    first = spec.pretrain["formats"] if spec.pretrain else []
    fused = any(f in FUSED_FORMATS for f in [*spec.formats, *first])
    if spec.parent:
        model, tokenizer = start_from(parent, family, spec)
    else:
        tokenizer = build_tokenizer(spec.n_languages, spec.keys, fused=fused)
        model = fresh_model(family, spec, len(tokenizer))
        if spec.embedding:
            share_embedding(model, **spec.embedding)
    seed, chain, curve = spec.batch_seed, spec.chain, []
    if chain:  # first phase: the link as the answer; then the first lookup is fixed and the value trained
        phase = dataclasses.replace(spec, steps=chain["steps"], target=None)
        curve = train_toy(model, tokenizer, phase, seed, answer="link", progress=progress)
        curve = [row | {"phase": "link"} for row in curve]
        freeze_first_lookup(model, tokenizer, spec.n_languages, spec.seed, chain["freeze_below"])
        seed += 100
    elif spec.pretrain:  # first phase: formats whose lookup trains on its own; then the toy's formats from those
        # It ends as any toy's training does (done, then the target), so the second phase starts from a
        # lookup validated on prompts it never trained on.
        phase = dataclasses.replace(spec, formats=tuple(first), steps=spec.pretrain["steps"])
        curve = train_toy(model, tokenizer, phase, seed, progress=progress)
        curve = [row | {"phase": "pretrain"} for row in curve]
        if fused and not any(f in FUSED_FORMATS for f in first):
            redraw_embeddings(model, tokenizer, fused_words(spec.n_languages), spec.seed)
        seed += 100
    link_questions = chain["link_questions"] if chain else 0
    rows = train_toy(model, tokenizer, spec, seed, link_questions=link_questions, progress=progress)
    offset, tag = (curve[-1]["step"] + 1, {"phase": "value" if chain else "main"}) if curve else (0, {})
    curve += [row | tag | {"step": row["step"] + offset} for row in rows]
    save_checkpoint(out_dir, model, tokenizer, safe_serialization=True)
    return curve
