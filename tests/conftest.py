"""Shared fixtures: tiny random-weight models of all three families, saved and reloaded for real."""

import pytest
import torch
from tokenizers import Tokenizer, models, pre_tokenizers, trainers
from transformers import PreTrainedTokenizerFast

from hybridlens.models.adapter import load_model
from hybridlens.models.toy import build_tokenizer, build_toy_model
from hybridlens.tasks.retrieval import make_prompts


def pytest_configure(config):
    config.addinivalue_line("markers", "slow: a whole study's run, minutes long; HYBRIDLENS_SLOW=1 runs it")


# Layouts with at least two attention layers where the family has them.
TINY = {
    "qwen3_5": dict(hidden_size=32, layout="LLALLA", heads=2),
    "granitemoehybrid": dict(hidden_size=24, layout="LLALLA", heads=2),
    "falcon_h1": dict(hidden_size=32, layout="PPP", heads=2),
}
FAMILIES = list(TINY)


@pytest.fixture(scope="session")
def tokenizer():
    return build_tokenizer(2)


@torch.no_grad()
def audible(model):
    """build_toy_model starts Granite's and Falcon-H1's Mamba branches silent (zero norm gain: a training choice); the
    intervention tests need every mixer to write something, so their random models get gain 1 back."""
    for name, p in model.named_parameters():
        if name.endswith("mamba.norm.weight"):
            p.fill_(1.0)


@pytest.fixture(scope="session")
def make_audible():
    """audible, for tests that build their own toy models."""
    return audible


@pytest.fixture(scope="session")
def saved_models(tmp_path_factory, tokenizer):
    """family -> directory of a random-weight model saved with save_pretrained (+ tokenizer)."""
    out = {}
    for family, spec in TINY.items():
        model = build_toy_model(family, len(tokenizer), seed=0, **spec)
        audible(model)
        path = tmp_path_factory.mktemp(family)
        model.save_pretrained(path, safe_serialization=True)
        tokenizer.save_pretrained(path)
        out[family] = path
    return out


@pytest.fixture(scope="session", params=FAMILIES)
def hm(request, saved_models):
    """A HybridModel per family, loaded through the adapter's real loading path."""
    torch.manual_seed(0)
    return load_model(saved_models[request.param])


@pytest.fixture(scope="session")
def bpe():
    """A small byte-level BPE trained here on the task text: it splits some words into several tokens."""
    tok = Tokenizer(models.BPE(unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    texts = [p.text + " " + p.target for p in make_prompts(0, 300, 8, "chat")]
    tok.train_from_iterator(texts, trainers.BpeTrainer(vocab_size=400, special_tokens=["<unk>", "<pad>"]))
    return PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="<unk>", pad_token="<pad>")
