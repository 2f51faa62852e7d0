"""A report's content before it is rendered: a list of blocks (headings, paragraphs,
tables, images) that every section appends to, and both renderers read."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd


@dataclass
class Block:
    kind: str  # "h1" | "h2" | "h3" | "p" | "table" | "img"
    text: str = ""
    table: pd.DataFrame | None = None
    image: Path | None = None
    alt: str = ""


@dataclass
class Report:
    blocks: list[Block] = field(default_factory=list)
    images: list[Path] = field(default_factory=list)

    def add(self, kind: str, text: str = "", **kw: object) -> None:
        self.blocks.append(Block(kind, text, **kw))  # type: ignore[arg-type]

    def figure(self, path: Path | None, caption: str, alt: str = "figure") -> None:
        if path is None:
            self.add("p", f"_{caption}_")
            return
        self.images.append(path)
        self.add("img", caption, image=path, alt=alt)
