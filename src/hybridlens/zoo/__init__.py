"""The toy zoo: small hybrid models trained on seeded retrieval prompts, the fixtures that make every code path
run on a laptop and in CI (docs/zoo.md). The spec of the shipped toys is zoo/zoo.yaml (`make zoo`).

spec      ToySpec, the only source of toy defaults, and the checks that refuse a spec that cannot train
train     training batches, the curriculum, group dropout, and train_and_save (one- and two-phase recipes)
surgery   weight surgery between phases: fresh weights, frozen lookups, redrawn rows, a parent continued
evaluate  held-out retrieval, language and persona fidelity, and the gate
"""

from hybridlens.zoo.evaluate import GateFailed, check_gate, evaluate_model
from hybridlens.zoo.spec import ToySpec
from hybridlens.zoo.train import train_and_save

__all__ = ["GateFailed", "ToySpec", "check_gate", "evaluate_model", "train_and_save"]
