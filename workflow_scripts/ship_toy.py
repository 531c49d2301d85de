# Copy a trained, gated toy into zoo/ with its training spec and a manifest (rule ship_toy).
from hybridlens.runlog import script_log

with script_log(snakemake) as log:
    import json
    from pathlib import Path

    from hybridlens.store import git_commit, ship_directory, versions

    trained = Path(snakemake.input.config).parent
    spec = trained / "training.json"  # beside the checkpoint, so that it ships with it
    spec.write_text(json.dumps(snakemake.params.training, indent=1, sort_keys=True) + "\n")
    record = {"model": snakemake.wildcards.model, "commit": git_commit(), "versions": versions()}
    files = [f for f in sorted(trained.iterdir()) if f.is_file()]
    manifest = ship_directory(files, Path(snakemake.output.manifest).parent, record)
    log.info("shipped %s: %s", snakemake.wildcards.model, sorted(manifest["files"]))
