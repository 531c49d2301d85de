"""How many seeds of each shipped toy's recipe clear its gate by the margin. Not a test.

Every toy of zoo/zoo.yaml is trained with each seed by the pipeline's own train_toy and
evaluate_toy rules, in a copy of this checkout whose registry holds one entry per (toy, seed) and whose
gate is 0, so that a failing seed still writes its evaluation. A (toy, seed) whose spec is what zoo/ ships
is read from zoo/ instead of being trained again. Prints steps, training seconds, held-out retrieval per
gated format and whether it clears gate + margin, then the count per toy.

    python bench/zoo_seeds.py [--seeds 0 1 2] [--toys qwen_toy falcon_toy] [--keep DIR]
"""

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import yaml
from snakemake.utils import validate

from hybridlens.config import TOY_TRAINING_KEYS

REPO = Path(__file__).resolve().parents[1]
PARTS = ["Snakefile", "rules", "workflow_scripts", "config", "profiles", "report", "environment.yml"]
SNAKEMAKE = str(Path(sys.executable).with_name("snakemake"))


def shipped_result(name, family, toy, zoo_training):
    """zoo/<name>'s eval and training record when it was trained from exactly this spec, else None."""
    directory = REPO / "zoo" / name
    if not (directory / "training.json").is_file():
        return None
    spec = json.loads((directory / "training.json").read_text())
    wanted = {"family": family, "toy": {k: v for k, v in toy.items() if k != "gate"}, "zoo": zoo_training}
    if spec != json.loads(json.dumps(wanted, sort_keys=True)):
        return None
    return json.loads((directory / "eval.json").read_text()), json.loads((directory / "trained_on.json").read_text())


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--toys", nargs="+", help="registry names (default: every toy of the preset)")
    parser.add_argument("--keep", help="run in this directory and keep it (default: a temporary one)")
    args = parser.parse_args()
    preset = yaml.safe_load((REPO / "zoo/zoo.yaml").read_text())
    zoo = {"zoo": yaml.safe_load((REPO / "config/config.yaml").read_text())["zoo"] | preset["zoo"]}
    validate(zoo, str(REPO / "config/schema.yaml"))  # the schema's defaults, as the workflow fills them in
    zoo = zoo["zoo"]
    zoo_training = {k: zoo[k] for k in TOY_TRAINING_KEYS}
    toys = {n: m for n, m in preset["models"].items() if not args.toys or n in args.toys}
    root = Path(args.keep or tempfile.mkdtemp(prefix="zoo-seeds-"))
    root.mkdir(parents=True, exist_ok=True)
    registry, results = {}, {}
    for name, entry in toys.items():
        for seed in args.seeds:
            toy = entry["source"]["toy"] | {"seed": seed}
            found = shipped_result(name, entry["family"], toy, zoo_training)
            if found:
                results[name, seed] = (*found, "zoo/")
            else:
                registry[f"{name}_seed{seed}"] = {"family": entry["family"], "source": {"toy": toy | {"gate": 0.0}}}
    try:
        if registry:
            for part in PARTS:
                (shutil.copytree if (REPO / part).is_dir() else shutil.copy)(REPO / part, root / part)
            config = {"models": registry, "zoo": preset["zoo"], "hla": {"source": None}}
            (root / "seeds.yaml").write_text(yaml.safe_dump(config))
            targets = [f"results/models/{n}/eval.json" for n in registry]
            command = [SNAKEMAKE, "--cores", "2", "--keep-going", "--configfile", "seeds.yaml", "--", *targets]
            subprocess.run(command, cwd=root, capture_output=True, text=True)
            for n in registry:
                name, seed = n.rsplit("_seed", 1)
                directory = root / "results/models" / n
                if (directory / "eval.json").is_file():
                    trained = json.loads((directory / "trained_on.json").read_text())
                    results[name, int(seed)] = (json.loads((directory / "eval.json").read_text()), trained, "run")
        print("toy          seed  steps  seconds  retrieval (gated formats)  clears gate + margin   from")
        for name, entry in toys.items():
            gate = entry["source"]["toy"].get("gate", zoo["gate"])
            passed = 0
            for seed in args.seeds:
                if (name, seed) not in results:
                    print(f"{name:12s} {seed:4d}  failed (see {root}/logs/train_toy/{name}_seed{seed}.log)")
                    continue
                evaluation, trained, where = results[name, seed]
                gated = [r["retrieval"] for r in evaluation["rows"] if r["format"] in zoo["formats"]]
                ok = min(gated) >= gate + zoo["margin"] - 1e-9
                passed += ok
                scores = " / ".join(f"{g:.3f}" for g in gated)
                print(
                    f"{name:12s} {seed:4d} {trained['steps']:6d} {trained['seconds']:8.0f}  {scores:25s}  "
                    f"{'yes' if ok else 'no':3s} ({gate} + {zoo['margin']})  {where}"
                )
            print(f"{name}: {passed} of {len(args.seeds)} seeds clear gate {gate} + margin {zoo['margin']}")
    finally:
        if not args.keep:
            shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
