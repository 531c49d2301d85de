"""Extraction on prompts of mixed lengths: forwards per item and wall time with left-padded batches (the
default where a family pads exactly) against batches of one token length (Family.left_padding = False), and
the largest difference between the two extractions in ulps of the path allowance. Not a test; every number
comes from one run.

    python bench/padding.py [--model zoo/qwen_toy] [--items 64] [--batch 16] [--threads 2]

The task: dictionary prompts of 2 to 9 pairs (toy rendering), so that lengths differ as a user's own
prompts do; every write site captured at the final position.
"""

import argparse
import dataclasses
import time

import torch

from hybridlens.experiments.extract import extract
from hybridlens.models.adapter import load_model
from hybridlens.tasks.retrieval import make_prompts
from hybridlens.validation import Check, judge


def measured(hm, prompts, sites, batch):
    calls = 0
    forward = hm.model.forward

    def counted(*args, **kwargs):
        nonlocal calls
        calls += 1
        return forward(*args, **kwargs)

    hm.model.forward = counted
    try:
        start = time.perf_counter()
        data = extract(hm, prompts, sites, "final", batch_size=batch)
        return data, calls, time.perf_counter() - start
    finally:
        hm.model.forward = forward


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="zoo/qwen_toy")
    parser.add_argument("--items", type=int, default=64)
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    hm = load_model(args.model)
    prompts = [p for i in range(args.items) for p in make_prompts(i, 1, 2 + i % 8, "chat", 2)]
    lengths = sorted({len(x) for x in hm.tokenize([p.text for p in prompts])[0]})
    sites = [f"layers.{layer}.layer_out" for layer in range(hm.n_layers)]
    padded, padded_calls, padded_s = measured(hm, prompts, sites, args.batch)
    family = hm.family
    hm.family = dataclasses.replace(family, left_padding=False)
    grouped, grouped_calls, grouped_s = measured(hm, prompts, sites, args.batch)
    hm.family = family
    check = Check("padded", "left-padded batches", "batches of one length", str(hm.model.dtype).split(".")[1])
    for site in sites:
        check.update(torch.as_tensor(padded[site]), torch.as_tensor(grouped[site]))
    verdict = judge(check, None)
    print(f"{args.model}: {len(prompts)} prompts of {len(lengths)} lengths ({lengths[0]}..{lengths[-1]} tokens)")
    print(f"batches of one length : {grouped_calls / len(prompts):.3f} forwards per item, {grouped_s:.2f} s")
    print(f"left-padded batches   : {padded_calls / len(prompts):.3f} forwards per item, {padded_s:.2f} s")
    print(f"forwards ratio {grouped_calls / padded_calls:.2f}x, time ratio {grouped_s / padded_s:.2f}x")
    print(f"largest difference: {verdict['ulps']:.3g} ulps of {verdict['allowed_ulps']:.4g} allowed")


if __name__ == "__main__":
    main()
