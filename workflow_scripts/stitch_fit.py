# Ridge maps of both directions from the two stores (rule stitch_fit).
from hybridlens.runlog import script_log

with script_log(snakemake) as log:
    import json

    from hybridlens.experiments import stitch
    from hybridlens.store import expected, read_store, write_store

    w = snakemake.wildcards
    want = {m: expected("stitch_acts", p["source"], p["config"], w.seed) for m, p in snakemake.params.stores.items()}
    stores = {m: read_store(snakemake.input[side], expect=want[m]) for side, m in (("a", w.a), ("b", w.b))}
    tests = {m: read_store(snakemake.input[f"{side}_test"], expect=want[m])[0] for side, m in (("a", w.a), ("b", w.b))}
    spans = {m: {k: tuple(v) for k, v in json.loads(attrs["blocks"]).items()} for m, (_, attrs) in stores.items()}
    datasets, report = {}, []
    for receiver, donor in ((w.a, w.b), (w.b, w.a)):
        maps, means, fraction = stitch.fit_maps(
            stores[receiver][0], stores[donor][0], spans[receiver], spans[donor], snakemake.params.lambdas
        )
        scores = stitch.map_scores(maps, tests[receiver], tests[donor], spans[receiver], spans[donor])
        for name, m in maps.items():
            for part in ("weight", "mean_in", "mean_out"):
                datasets[f"{receiver}.{name}.{part}"] = getattr(m, part)
            report.append(
                {
                    "receiver": receiver,
                    "donor": donor,
                    "map": name,
                    "lambda": m.lam,
                    "r2": m.r2,
                    "r2_test": scores[name],
                    "aligned": fraction,
                }
            )
            log.info(
                "%s <- %s %s: lambda %g, R2 %.3f held out, %.3f on test keys",
                receiver,
                donor,
                name,
                m.lam,
                m.r2,
                scores[name],
            )
        for name, mean in means.items():
            datasets[f"{receiver}.mean_write.{name}"] = mean
    contents = []
    for m, (data, _) in stores.items():
        r2 = stitch.query_content(data, tests[m], spans[m]["address"], snakemake.params.lambdas)
        contents += [{"model": m, "content": c, "r2_test": v} for c, v in r2.items()]
        log.info("%s: Address write at the final token -> embedding of the %s", m, r2)
    # The maps carry both stores' provenance, so the swap job can check them against the models it loads.
    attrs = {
        "seed": int(w.seed),
        "map_names": json.dumps(list(maps)),
        "mean_names": json.dumps(list(means)),
        "spans": json.dumps(spans),
    }
    for m, (_, a) in stores.items():
        attrs |= {f"{key}.{m}": a[key] for key in ("model_source", "config_hash", "tokenizer_hash")}
    write_store(snakemake.output.maps, datasets, attrs, "stitch_maps")
    with open(snakemake.output.fit, "w") as f:
        json.dump({"seed": int(w.seed), "maps": report, "query_content": contents}, f, indent=1)
