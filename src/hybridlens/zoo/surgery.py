"""Weight surgery between training phases: frozen lookups, rows drawn afresh, a parent's weights continued.

fresh_model          the untrained model a toy spec draws from its seed
freeze_first_lookup  fix a chain toy's first lookup: freeze the embedding and the layers below freeze_below
redraw_embeddings    draw words' embedding rows afresh at the embedding's scale
start_from           a `from` toy's weights before its training: the parent's, fused words added, layers redrawn
"""

import torch

from hybridlens.errors import UserError
from hybridlens.models.adapter import HybridModel, load_model
from hybridlens.models.toy import build_tokenizer, build_toy_model, share_embedding
from hybridlens.tasks.retrieval import FUSED_FORMATS
from hybridlens.tasks.vocab import VALUES, fused_words, language_forms
from hybridlens.zoo.spec import ToySpec


def fresh_model(family: str, spec: ToySpec, vocab_size: int):
    """The untrained model a toy spec draws from its seed."""
    return build_toy_model(
        family, vocab_size, spec.hidden_size, spec.layout, spec.heads, spec.seed, spec.state_size, spec.positions
    )


def freeze_first_lookup(model, tokenizer, n_languages: int, seed: int, freeze_below: int):
    """Fix a chain toy's first lookup: freeze the token embedding and the layers below `freeze_below`.

    The first phase never predicts a value word, so their tied embeddings collapse onto one direction;
    they are drawn afresh at the embedding's scale, so the second phase can tell them apart.
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


def start_from(parent, family: str, spec: ToySpec):
    """(model, tokenizer) a `from` toy starts its training with: the trained checkpoint `parent`, the fused words
    appended to its tokenizer when the toy's formats need them and drawn afresh (the parent never predicted them),
    and the mixers of the `redraw` layers replaced by those an untrained toy of this spec draws from its seed, so
    that what a layer learned in the parent's training is gone while every other layer keeps it."""
    hm = load_model(parent, attn_implementation="eager", family=family)
    model, tokenizer = hm.model.train(), hm.tokenizer
    n_parent, seed, n_languages = len(tokenizer), spec.seed, spec.n_languages
    fused = any(f in FUSED_FORMATS for f in spec.formats)
    if fused and fused_words(n_languages).keys() - tokenizer.vocab:
        old, tokenizer = tokenizer.get_vocab(), build_tokenizer(n_languages, spec.keys, fused=True)
        if any(tokenizer.get_vocab().get(w) != i for w, i in old.items()):
            raise UserError(f"{parent}: its tokenizer is not a toy's of {n_languages} languages; train it as one")
        _append_words(model, tokenizer, fused_words(n_languages), seed)
    if spec.embedding:  # frozen as in the parent, whose rows stay exact; appended words get the shared draw's
        kept = model.get_input_embeddings().weight[:n_parent].clone()
        share_embedding(model, **spec.embedding)
        with torch.no_grad():
            model.get_input_embeddings().weight[:n_parent] = kept
    if spec.redraw:
        vocab = build_tokenizer(n_languages, spec.keys, fused=fused)  # an untrained toy's of this spec
        fresh, own = HybridModel(fresh_model(family, spec, len(vocab)), vocab), HybridModel(model, tokenizer)
        for layer in spec.redraw:
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
