"""The documentation that is generated from code stays in step with it."""

from __future__ import annotations

from pathlib import Path

from bench.scenario import figures

ROOT = Path(__file__).resolve().parents[2]


def test_figures_md_is_the_figures_table() -> None:
    assert (ROOT / "docs" / "figures.md").read_text() == figures.markdown(), (
        "docs/figures.md is stale: python -m bench.scenario.figures > docs/figures.md"
    )


def test_every_figure_has_a_unit_a_direction_and_a_meaning() -> None:
    for f in (*figures.FIGURES, figures.PHASE):
        assert f.unit and f.better and f.meaning, f
    assert figures.higher_is_better("goodput") and not figures.higher_is_better("ttr_s")
    assert figures.unit("phase_import_s") == "s" and not figures.is_figure("phase__s")


def test_code_cites_only_the_repository() -> None:
    outside = ("DESIGN" + ".md", "FACTS" + ".md", "../" + "shared")  # the project's inputs, kept outside it
    for path in [
        *ROOT.glob("bench/**/*.py"),
        *ROOT.glob("injectors/**/*.py"),
        *ROOT.glob("tests/**/*.py"),
        *ROOT.glob("docs/*.md"),
        *ROOT.glob("scenarios/*.toml"),
        ROOT / "README.md",
    ]:
        text = path.read_text()
        assert not any(name in text for name in outside), path


def test_adding_a_strategy_is_what_the_code_makes_of_it() -> None:
    """Its field table is generated from ``Strategy`` and its example is the giveup
    plug-in's files, copied whole (tests/integ/test_plugins.py runs that plug-in)."""
    from bench.scenario import docgen

    page = docgen.PAGE.read_text()
    assert page == docgen.render(page), "docs/adding-a-strategy.md is stale: python -m bench.scenario.docgen"
    assert page.count("<!-- file: tests/plugins/giveup/") == 2


def test_the_field_table_names_every_field_of_a_strategy() -> None:
    import dataclasses

    from bench.scenario import docgen
    from bench.scenario.strategy import Strategy

    table = docgen.fields_table()
    docs = docgen.field_docs(Strategy)
    for f in dataclasses.fields(Strategy):
        assert f"| `{f.name}` |" in table and docs.get(f.name), f"Strategy.{f.name} has no docstring"


def test_every_docs_page_is_linked_from_the_readme() -> None:
    readme = (ROOT / "README.md").read_text()
    missing = [p.name for p in (ROOT / "docs").glob("*.md") if f"docs/{p.name}" not in readme]
    assert missing == [], f"docs pages the README does not link: {missing}"


def test_relative_links_of_the_docs_lead_somewhere() -> None:
    import re

    broken = []
    for page in [ROOT / "README.md", *(ROOT / "docs").glob("*.md")]:
        for target in re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", page.read_text()):
            if "://" not in target and not (page.parent / target).exists():
                broken.append(f"{page.relative_to(ROOT)}: {target}")
    assert broken == []
