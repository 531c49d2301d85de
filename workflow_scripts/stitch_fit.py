# Ridge maps of both directions from the two stores (rule stitch_fit).
from hybridlens.runlog import script_log

with script_log(snakemake) as log:
    import json

    from hybridlens.experiments import stitch
    from hybridlens.store import read_store, write_store

    w = snakemake.wildcards
    stores = {w.a: read_store(snakemake.input.a), w.b: read_store(snakemake.input.b)}
    spans = {m: {k: tuple(v) for k, v in json.loads(attrs["blocks"]).items()} for m, (_, attrs) in stores.items()}
    datasets, report = {}, []
    for receiver, donor in ((w.a, w.b), (w.b, w.a)):
        maps, means, fraction = stitch.fit_maps(
            stores[receiver][0], stores[donor][0], spans[receiver], spans[donor], snakemake.params.lambdas
        )
        for name, m in maps.items():
            for part in ("weight", "mean_in", "mean_out"):
                datasets[f"{receiver}.{name}.{part}"] = getattr(m, part)
            report.append(
                {"receiver": receiver, "donor": donor, "map": name, "lambda": m.lam, "r2": m.r2, "aligned": fraction}
            )
            log.info("%s <- %s %s: lambda %g, held-out R2 %.3f", receiver, donor, name, m.lam, m.r2)
        for name, mean in means.items():
            datasets[f"{receiver}.mean_write.{name}"] = mean
    write_store(snakemake.output.maps, datasets, {"map_names": json.dumps(list(maps)), "spans": json.dumps(spans)})
    with open(snakemake.output.fit, "w") as f:
        json.dump({"seed": int(w.seed), "maps": report}, f, indent=1)
