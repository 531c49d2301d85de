"""Toy training step with the zoo's training chunks (16-token GDN chunks, 32-token Mamba-2 chunks)
divided by the same step with transformers' 64-token chunks, on one CPU thread, at the toys' sequence
lengths. Prints the ratios; not a test.

    python bench/toy_training_step.py [--batch 32 --lengths 32 64 84 96 --repeats 5]
"""

import argparse
import time

import torch
from transformers import AutoModelForCausalLM

from hybridlens.models.families import FAMILIES
from hybridlens.models.toy import build_tokenizer, build_toy_model

TOYS = {"qwen3_5": (64, "LLLALLLA"), "granitemoehybrid": (48, "LLLA"), "falcon_h1": (48, "PPPP")}


def step_time(model, ids, kwargs, repeats):
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)

    def step():
        loss = model(ids, **kwargs).logits.logsumexp(-1).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()

    step()  # warm-up
    start = time.perf_counter()
    for _ in range(repeats):
        step()
    return (time.perf_counter() - start) / repeats


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--lengths", type=int, nargs="+", default=[32, 64, 84, 96])
    ap.add_argument("--repeats", type=int, default=5)
    args = ap.parse_args()
    torch.set_num_threads(1)
    vocab = len(build_tokenizer(2))
    for family, (hidden, layout) in TOYS.items():
        fast = build_toy_model(family, vocab, hidden, layout)
        if family == "qwen3_5":  # the 64-token default is the GDN function's, reached without the argument
            default, kwargs = fast, FAMILIES[family].toy_forward_kwargs(fast)
        else:  # Mamba-2's chunk is a config field
            config = fast.config.__class__.from_dict({**fast.config.to_dict(), "mamba_chunk_size": 64})
            default, kwargs = AutoModelForCausalLM.from_config(config, attn_implementation="eager"), {}
            default.load_state_dict(fast.state_dict())
        for length in args.lengths:
            ids = torch.randint(0, vocab, (args.batch, length))
            t_fast = step_time(fast, ids, kwargs, args.repeats)
            t_default = step_time(default, ids, {}, args.repeats)
            print(
                f"{family:17s} {length:4d} tokens: {t_fast * 1e3:6.0f} ms / {t_default * 1e3:6.0f} ms "
                f"with 64-token chunks = {t_fast / t_default:.2f}"
            )


if __name__ == "__main__":
    main()
