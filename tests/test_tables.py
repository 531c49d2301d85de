"""Tables sealed with what their rule wrote."""

import json

from hybridlens.tables import changed, seal


def test_a_sealed_table_is_listed_once_its_bytes_change_and_not_once_it_is_gone(tmp_path):
    table = tmp_path / "results/split_prefill/q/retention.tsv"
    table.parent.mkdir(parents=True)
    table.write_text("condition\tretention\nfull\t0.983\n")
    seal(table, "split_prefill", {"model": "q"})
    record = json.loads((table.parent / ".retention.tsv.provenance").read_text())
    assert record["rule"] == "split_prefill" and record["wildcards"] == {"model": "q"} and len(record["sha256"]) == 64
    assert changed(tmp_path / "results") == []
    table.write_text("condition\tretention\nfull\t0.083\n")
    (line,) = changed(tmp_path / "results")
    assert line.startswith(f"{table} is not what rule split_prefill wrote (its sha256 differs from ")
    assert f"rm {table}, then run again" in line
    table.unlink()
    assert changed(tmp_path / "results") == []


def test_gather_names_each_rows_model_from_its_files_directory(tmp_path):
    from hybridlens.tables import gather

    paths = []
    for model, value in (("qwen_toy", 1), ("granite_toy", 2)):
        (tmp_path / model).mkdir()
        (tmp_path / model / "t.csv").write_text(f"a,b\n{value},x\n")
        paths.append(tmp_path / model / "t.csv")
    table = gather(reversed(paths))
    assert list(table.columns) == ["a", "b", "model"]
    assert table.values.tolist() == [[2, "x", "granite_toy"], [1, "x", "qwen_toy"]]
