"""The parts of docs pages that are generated from code, so that they cannot drift.

``docs/adding-a-strategy.md`` carries two kinds of generated part, each between HTML
comments: the table of :class:`~bench.scenario.strategy.Strategy`'s fields (name,
default, and the field's docstring, which is the documentation), and the files of the
example plug-in (``tests/plugins/giveup``), copied whole. ``tests/unit/test_docs.py``
fails when the page differs from what this module makes of it;
``python -m bench.scenario.docgen`` rewrites it.
"""

from __future__ import annotations

import ast
import dataclasses
import inspect
import re
import sys
from pathlib import Path

from bench.scenario import registry, strategy

ROOT = Path(__file__).resolve().parents[2]
PAGE = ROOT / "docs" / "adding-a-strategy.md"
FIELDS = re.compile(r"(<!-- fields -->\n).*?(<!-- end fields -->)", re.S)
FILE = re.compile(r"(<!-- file: (?P<path>[\w./-]+) -->\n```python\n).*?(```)", re.S)


def field_docs(cls: type) -> dict[str, str]:
    """Each field's docstring (the string literal after it in the class body), through
    the bases too, read from the source: Python keeps no attribute docstrings."""
    docs: dict[str, str] = {}
    for klass in reversed(cls.__mro__):
        if klass.__module__ not in (registry.__name__, strategy.__name__):
            continue
        body = ast.parse(inspect.getsource(klass)).body[0]
        assert isinstance(body, ast.ClassDef)
        for node, after in zip(body.body, body.body[1:], strict=False):
            if (
                isinstance(node, ast.AnnAssign)
                and isinstance(node.target, ast.Name)
                and isinstance(after, ast.Expr)
                and isinstance(after.value, ast.Constant)
                and isinstance(after.value.value, str)
            ):
                docs[node.target.id] = " ".join(after.value.value.split())
    return docs


def fields_table() -> str:
    docs = field_docs(strategy.Strategy)
    rows = ["| field | default | what it means |", "|---|---|---|"]
    for f in dataclasses.fields(strategy.Strategy):
        if f.default is not dataclasses.MISSING:
            default = f"`{f.default!r}`"
        elif f.default_factory is not dataclasses.MISSING:
            default = f"`{f.default_factory()!r}`"
        else:
            default = "required"
        meaning = docs.get(f.name, "").replace("|", "\\|")
        rows.append(f"| `{f.name}` | {default} | {meaning} |")
    return "\n".join(rows) + "\n"


def render(text: str) -> str:
    """``text`` (the page) with its generated parts made anew."""
    text = FIELDS.sub(lambda m: m.group(1) + fields_table() + m.group(2), text)
    return FILE.sub(lambda m: m.group(1) + (ROOT / m.group("path")).read_text() + m.group(3), text)


if __name__ == "__main__":
    PAGE.write_text(render(PAGE.read_text()))
    sys.stdout.write(f"wrote {PAGE}\n")
