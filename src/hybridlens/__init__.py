"""hybridlens: causal experiments on hybrid (linear + softmax attention) language models.

    import hybridlens as hl
    hm = hl.load_model("zoo/qwen_toy")

Names are imported on first use, so that `import hybridlens` stays cheap and torch-free for the workflow's
parse step. docs/api.md walks through them.
"""

import importlib

__version__ = "0.1.0"

# name -> module that defines it
_API = {
    # models and sites
    "load_model": "hybridlens.models.adapter",
    "HybridModel": "hybridlens.models.adapter",
    "Site": "hybridlens.models.adapter",
    "parse_site": "hybridlens.models.adapter",
    "SITES": "hybridlens.models.adapter",
    # tracing and patching
    "Trace": "hybridlens.interventions.hooks",
    "TraceDict": "hybridlens.interventions.hooks",
    "run": "hybridlens.interventions.patch",
    "Runner": "hybridlens.interventions.engine",
    "Edit": "hybridlens.interventions.engine",
    "transplant": "hybridlens.interventions.on_items",
    "runner": "hybridlens.interventions.on_items",
    "transplant_ids": "hybridlens.interventions.engine",
    # cache surgery
    "prefill": "hybridlens.interventions.cache",
    "greedy": "hybridlens.interventions.cache",
    "cut": "hybridlens.interventions.cache",
    "splice": "hybridlens.interventions.cache",
    "cut_at": "hybridlens.interventions.cache",
    "states": "hybridlens.interventions.cache",
    "CONDITIONS": "hybridlens.interventions.cache",
    # tasks and their items
    "Item": "hybridlens.tasks.items",
    "Batch": "hybridlens.interventions.on_items",
    "encode": "hybridlens.interventions.on_items",
    "Turns": "hybridlens.tasks.items",
    "turns": "hybridlens.tasks.items",
    "token_positions": "hybridlens.tasks.items",
    "POSITION_SETS": "hybridlens.tasks.items",
    "Triple": "hybridlens.tasks.items",
    "triples": "hybridlens.tasks",
    "Prompt": "hybridlens.tasks.retrieval",
    "make_prompt": "hybridlens.tasks.retrieval",
    "make_prompts": "hybridlens.tasks.retrieval",
    "donor_host_pairs": "hybridlens.tasks.retrieval",
    "clean_corrupt_pairs": "hybridlens.tasks.retrieval",
    # comparing two paths of one computation
    "assert_paths_close": "hybridlens.validation",
    "path_ulps": "hybridlens.validation",
    # experiments
    "extract": "hybridlens.experiments.extract",
    "logit_lens": "hybridlens.experiments.extract",
    "localize": "hybridlens.experiments.circuit",
    "evaluate_model": "hybridlens.zoo",
}
__all__ = sorted(_API)


def __getattr__(name):
    if name not in _API:
        raise AttributeError(f"module 'hybridlens' has no attribute {name!r}")
    value = getattr(importlib.import_module(_API[name]), name)
    globals()[name] = value
    return value


def __dir__():
    return sorted(set(globals()) | set(_API))
