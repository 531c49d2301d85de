# Copy a trained model into zoo/ with its training spec and a manifest (rules ship_toy, ship_hla).
from hybridlens.runlog import script_log

with script_log(snakemake) as log:
    import json
    from pathlib import Path

    from hybridlens.store import git_commit, ship_directory, versions
    from hybridlens.zoo import check_gate

    name, trained = snakemake.params.name, Path(snakemake.input[0]).parent
    if hasattr(snakemake.input, "eval"):  # a toy ships only with its margin over the gate
        evaluation = json.loads(Path(snakemake.input.eval).read_text())
        gate, margin = evaluation["gate"], snakemake.params.margin
        label = f"gate {gate} + margin {margin} ="
        fix = "a shipped toy clears its gate by zoo.margin; train it longer (zoo.target, steps)"
        check_gate(name, evaluation["rows"], round(gate + margin, 6), evaluation["gated_formats"], label, fix)
    spec = trained / "training.json"  # beside the checkpoint, so that it ships with it
    spec.write_text(json.dumps(snakemake.params.training, indent=1, sort_keys=True) + "\n")
    record = {"model": name, "commit": git_commit(), "versions": versions()}
    # The checkpoint's files, not the run's records beside them (hidden: a table's .provenance)
    files = [f for f in sorted(trained.iterdir()) if f.is_file() and not f.name.startswith(".")]
    manifest = ship_directory(files, Path(snakemake.output.manifest).parent, record)
    log.info("shipped %s: %s", name, sorted(manifest["files"]))
