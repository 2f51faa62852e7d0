"""A report's content before it is rendered: a list of blocks (headings, paragraphs,
tables, images) that every section appends to, and both renderers read."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd


@dataclass
class Block:
    kind: str  # "h1" | "h2" | "h3" | "p" | "note" | "pre" | "table" | "img"
    text: str = ""
    table: pd.DataFrame | None = None
    image: Path | None = None
    alt: str = ""


@dataclass
class Report:
    blocks: list[Block] = field(default_factory=list)
    images: list[Path] = field(default_factory=list)
    left_out: list[tuple[str, str]] = field(default_factory=list)
    """(section, why): what had nothing to show, said once at the end."""

    def add(self, kind: str, text: str = "", **kw: object) -> None:
        self.blocks.append(Block(kind, text, **kw))  # type: ignore[arg-type]

    def figure(self, path: Path | None, caption: str, alt: str = "figure") -> None:
        """An image and its caption; without an image, the caption as a note (a plain
        sentence in italics, never re-read as Markdown: figure names hold underscores)."""
        if path is None:
            self.add("note", caption)
            return
        self.images.append(path)
        self.add("img", caption, image=path, alt=alt)

    def omit(self, section: str, why: str) -> None:
        """Leave a section out: it has nothing to show, and the report says why once."""
        self.left_out.append((section, why))
