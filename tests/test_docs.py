"""The documentation's code runs as written."""

import re
from pathlib import Path

import pytest

DOCS = Path(__file__).resolve().parents[1] / "docs"


def python_blocks(page: Path) -> list[str]:
    return re.findall(r"^```python\n(.*?)^```", page.read_text(), flags=re.S | re.M)


def test_the_api_walk_through_runs_top_to_bottom(monkeypatch, capsys):
    monkeypatch.chdir(DOCS.parent)  # the page loads zoo/qwen_toy relative to the repository
    blocks = python_blocks(DOCS / "api.md")
    assert len(blocks) >= 8
    namespace = {}
    for i, block in enumerate(blocks):
        try:
            exec(compile(block, f"docs/api.md block {i + 1}", "exec"), namespace)
        except Exception as err:
            pytest.fail(f"docs/api.md block {i + 1} failed: {err!r}\n{block}")
    out = capsys.readouterr().out
    # The walk-through's numbers are the shipped toy's: its Address group redirects, the other does not.
    redirects = [float(r) for r in re.findall(r"redirect (\d\.\d\d)", out)]
    assert max(redirects) >= 0.9 and min(redirects) <= 0.2, out


def test_the_api_names_what_it_lists():
    import hybridlens as hl

    for name in hl.__all__:
        assert getattr(hl, name) is not None
    with pytest.raises(AttributeError, match="no attribute 'load'"):
        hl.load  # noqa: B018


@pytest.mark.parametrize(
    "section, page",
    [
        ("circuit", "circuit"),
        ("split_prefill", "split-prefill"),
        ("scale", "scale"),
        ("stitch", "stitch"),
        ("hla", "hla"),
    ],
)
def test_each_experiment_page_documents_every_key_of_its_config_section(section, page):
    import yaml

    schema = yaml.safe_load((DOCS.parent / "config/schema.yaml").read_text())["properties"][section]

    def keys(properties, prefix=""):
        for key, spec in properties.items():
            yield prefix + key
            if "properties" in spec:
                yield from keys(spec["properties"], f"{prefix}{key}.")

    text = (DOCS / f"{page}.md").read_text()
    missing = [k for k in keys(schema["properties"]) if f"`{k}`" not in text]
    assert not missing, f"docs/{page}.md does not document {missing}"


def test_the_readme_family_table_is_the_registry():
    """The README's table of supported families is written from the registry; rewrite it after adding one."""
    from hybridlens.models.families import REGISTRY, family_table
    from hybridlens.models.families.__main__ import BEGIN, END

    readme = (DOCS.parent / "README.md").read_text()
    table = readme.split(BEGIN, 1)[1].split(END, 1)[0].strip()
    assert table == family_table().strip(), "run: python -m hybridlens.models.families --write README.md"
    assert len(table.splitlines()) == len(REGISTRY) + 2


def test_the_adding_a_family_example_is_the_shipped_module():
    blocks = python_blocks(DOCS / "adding-a-family.md")
    module = (DOCS.parent / "src/hybridlens/models/families/bamba.py").read_text()
    rows = (DOCS.parent / "tests/models/test_families.py").read_text()
    assert blocks[0] in module and blocks[1].splitlines()[1] in rows


def test_the_tasks_page_documents_every_task_key_and_every_jsonl_field():
    import yaml

    from hybridlens.tasks import TASKS, module

    schema = yaml.safe_load((DOCS.parent / "config/schema.yaml").read_text())["properties"]["tasks"]
    keys = set(schema["additionalProperties"]["properties"])
    listed = [kind for kind in TASKS if not getattr(module(kind), "SECTION", None)]  # style: split_prefill's keys
    assert keys == {"kind"} | {k for kind in listed for k in module(kind).DEFAULTS}  # the schema is the registry's
    text = (DOCS / "tasks.md").read_text()
    missing = [k for k in sorted(keys - {"kind"}) + sorted(module("jsonl").FIELDS) if f"`{k}`" not in text]
    assert not missing, f"docs/tasks.md does not document {missing}"


# Run numbers belong in tables the pipeline writes (summary.md, a study's findings), not in the manual: outside
# code, a page's prose may not hold a measured-looking number. Definitions go in backticks (`gate: 0.97`).
MEASURED = {
    "a decimal": r"(?<![\w.\-/:])\d+\.\d+(?![\w.])",
    "a percentage": r"\d\s?%",
    "a plus-minus": r"±",
    "a duration": r"\b\d+(?:\.\d+)?\s?(?:s|ms|min|minutes?|seconds?|hours?|h)\b",
}


def prose(text: str) -> str:
    """The page without its fenced code blocks and inline code."""
    text = re.sub(r"^```.*?^```", "", text, flags=re.S | re.M)
    return re.sub(r"`[^`\n]*`", "", text)


def measured(text: str) -> list[str]:
    found = []
    for n, line in enumerate(prose(text).splitlines(), 1):
        found += [f"line {n}: {what} {m.group(0)!r}" for what, p in MEASURED.items() for m in re.finditer(p, line)]
    return found


@pytest.mark.parametrize("page", sorted(p.name for p in DOCS.glob("*.md")) + ["../README.md"])
def test_the_manual_holds_no_run_numbers(page):
    found = measured((DOCS / page).read_text())
    assert not found, f"docs/{page}: move measured numbers to a table the pipeline writes: {found[:5]}"


def test_the_run_number_rule_catches_a_pasted_results_table_and_passes_definitions():
    pasted = "| model | redirect |\n|---|---|\n| qwen_toy | 0.983 [0.967, 0.997] |\nIt took 46 minutes.\n"
    assert len(measured(pasted)) == 4
    definitions = "The gate is `gate: 0.95`; Qwen3.5 and Granite-4.0-H (arXiv:2501.01234) use layer 3.\n"
    assert measured(definitions + "```\nredirect 0.98\n```\n") == []
