import pytest

from hybridlens.errors import UserError
from hybridlens.findings import render, tables

RETENTION = """condition\tproperty\tretention\tretention_lo\tretention_hi\tmodel
kv_only\tretrieval\t0.5\t0.25\t0.75\ta
kv_only\tretrieval\t1.0\t0.9\t1.0\tb
state_only\tretrieval\t0.0\t0.0\t0.125\ta
"""
SWAP = "style\tsource\tcount\tfraction\tmodel\nlanguage\tA\t3\t0.3\ta\nlanguage\tB\t7\t0.7\ta\n"
STITCH = "receiver\trate\tlo\thi\nx\t0.875\t0.5\t1.0\n"


@pytest.fixture
def root(tmp_path):
    (tmp_path / "results/tables").mkdir(parents=True)
    (tmp_path / "results/tables/r.tsv").write_text(RETENTION)
    (tmp_path / "results/tables/s.tsv").write_text(SWAP)
    (tmp_path / "results/st.tsv").write_text(STITCH)
    return tmp_path


def test_a_placeholder_is_the_tables_value_with_its_interval(root):
    text = "kept {{ tables/r.tsv | model=a, condition=kv_only | retention }}, lost {{ tables/r.tsv | model=a, "
    text += "condition=state_only | retention }}; {{ tables/s.tsv | model=a, source=B | count }} items."
    assert render(text, root) == "kept 0.500 [0.250, 0.750], lost 0.000 [0.000, 0.125]; 7 items."


def test_aggregates_and_named_intervals(root):
    text = "{{ tables/r.tsv | condition=kv_only | min(retention) }}-{{ tables/r.tsv | condition=kv_only | "
    text += "max(retention) }} on {{ tables/r.tsv | condition=kv_only | count(retention>=0.9) }}; "
    text += "{{ tables/s.tsv | | sum(count) }} swapped; {{ st.tsv | receiver=x | rate [lo, hi] }}"
    assert render(text, root) == "0.500-1.000 on 1 of 2; 10 swapped; 0.875 [0.500, 1.000]"


def test_tables_lists_what_a_template_reads_once_each(root):
    text = "{{ tables/r.tsv | | max(retention) }} {{ st.tsv | | rate }} {{ tables/r.tsv | model=a | min(retention) }}"
    assert tables(text) == ["results/tables/r.tsv", "results/st.tsv"]


@pytest.mark.parametrize(
    "placeholder, message",
    [
        ("{{ tables/r.tsv | condition=kv_only | retention }}", "2 rows of tables/r.tsv match condition=kv_only"),
        ("{{ tables/r.tsv | model=c | retention }}", "0 rows of tables/r.tsv match model=c"),
        ("{{ tables/r.tsv | layer=3 | retention }}", "tables/r.tsv has no column layer"),
    ],
)
def test_a_placeholder_that_selects_wrongly_is_refused_naming_it(root, placeholder, message):
    with pytest.raises(UserError, match=r"^claims\.md: \{\{ tables/r\.tsv .*; fix the placeholder") as err:
        render(f"a claim: {placeholder}.", root)
    assert message in str(err.value)
