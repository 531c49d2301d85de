# Judge an experiment's built-in checks (validation.json) against their tolerances (rule validate_<experiment>).
from hybridlens.runlog import script_log

with script_log(snakemake) as log:
    import json
    from pathlib import Path

    from hybridlens.errors import UserError
    from hybridlens.validation import describe, judge, read_checks

    allowed = snakemake.params.allowed  # check name -> {key: the config key, ulps: its value}
    verdicts = [
        judge(c, allowed[c.name]["ulps"]) | {"key": allowed[c.name]["key"]} for c in read_checks(snakemake.input[0])
    ]
    for v in verdicts:
        log.info(describe(v))
    failed = [v for v in verdicts if not v["passed"]]
    if failed:
        more = f" ({len(failed) - 1} more in the log)" if len(failed) > 1 else ""
        raise UserError(f"{describe(failed[0])}{more}; its tables are kept in {Path(snakemake.input[0]).parent}")
    with open(snakemake.output[0], "w") as f:
        json.dump(verdicts, f, indent=1)
