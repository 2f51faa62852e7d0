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
