"""Progress lines: the job's own step numbers and loss, read from what it prints.

Each known format is a regular expression with a ``step`` group and, where the format
has one, a ``loss`` group; ``auto`` tries them in turn on each line. Colours are taken
out first. Progress bars (Hugging Face's and Lightning's tqdm) count what they count:
Lightning's counts batches within an epoch, so its step is ``epoch x batches + batch``,
which is the global step only while every epoch has ``batches`` steps (not in a last
epoch cut short by ``max_steps``, nor in the epoch a job resumed in the middle of, whose
bar shows no epoch): the optimizer's own count then places the steps, where it keeps
one (Adam). Lightning draws no line per step with ``rich`` installed (its RichProgressBar
is then the default, and into a pipe it draws only the last frame): give the Trainer
``TQDMProgressBar``. Hugging Face's Trainer prints its loss in a log line of its own,
which goes with the step its bar showed last.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass

ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")
RANK_PREFIX = re.compile(r"^\[(?:rank|default)(\d+)\]:")
"""torch's prefix of a rank's lines (``[rank0]:`` from its excepthook and logging,
``[default0]:`` from torchrun's ``--tee``)."""
NUMBER = r"[-+]?(?:\d+\.?\d*(?:[eE][-+]?\d+)?|nan|inf)"

PREFIX = r"^(?:\[\w+\]:)?\s*"
"""A line's start, past a rank prefix."""
FORMATS: dict[str, re.Pattern[str]] = {
    # ``step N`` and maybe ``loss X`` on a line of its own kind: not inside a data
    # structure a log dumps (torchft's ``QuorumMember { ... step: 0 ... }``).
    "plain": re.compile(rf"^(?!.*[{{}}]).*?\bstep[\s:=#]*(?P<step>\d+)\b(?:.*?\bloss[\s:=]*(?P<loss>{NUMBER}))?", re.I),
    "torchtitan": re.compile(rf"\bstep:\s*(?P<step>\d+)\s+loss:\s*(?P<loss>{NUMBER})"),
    "megatron": re.compile(rf"\biteration\s+(?P<step>\d+)\s*/\s*\d+\s*\|(?:.*?\blm loss:\s*(?P<loss>{NUMBER}))?"),
    # The Trainer's own bar has no description (another tqdm bar, "Writing model shards:
    # 100%|...| 1/1 [", is not a step); transformers 5 quotes its logged values.
    "huggingface": re.compile(
        rf"(?:{PREFIX}\d{{1,3}}%\|[^|]*\|\s*(?P<step>\d+)/\d+\s*\[)|(?:'loss':\s*'?(?P<loss>{NUMBER})'?)"
    ),
    "lightning": re.compile(
        rf"\bEpoch\s+(?P<epoch>\d+):.*?\|\s*(?P<batch>\d+)/(?P<batches>\d+)\s*\["
        rf"(?:.*?(?:^|[\s,])\w*loss=(?P<loss>{NUMBER}))?"
    ),
}


@dataclass(frozen=True, slots=True)
class ProgressLine:
    t: int
    """When the harness read the line (CLOCK_MONOTONIC)."""
    step: int | None
    loss: float | None
    rank: int | None
    """The rank a prefix names, if any."""


def parse(lines: Iterable[tuple[int, str, str]], fmt: str) -> list[ProgressLine]:
    """The progress lines among ``(t, stream, text)``, by format name or regular expression."""
    patterns = list(FORMATS.values()) if fmt == "auto" else [] if fmt == "none" else None
    if patterns is None:
        patterns = [FORMATS[fmt]] if fmt in FORMATS else [re.compile(fmt)]
    out: list[ProgressLine] = []
    last_step: int | None = None
    for t, _stream, raw in lines:
        text = ANSI.sub("", raw)
        prefix = RANK_PREFIX.match(text)
        rank = int(prefix.group(1)) if prefix else None
        for pattern in patterns:
            m = pattern.search(text)
            if m is None:
                continue
            step, loss = _values(m)
            if step is None and loss is None:
                continue
            if step is None:  # a loss on a line of its own: the step shown last
                step = last_step
            last_step = step if step is not None else last_step
            out.append(ProgressLine(t=t, step=step, loss=loss, rank=rank))
            break
    return out


def _values(m: re.Match[str]) -> tuple[int | None, float | None]:
    groups = m.groupdict()
    step: int | None = None
    if groups.get("step") is not None:
        step = int(groups["step"])
    elif groups.get("batch") is not None:
        step = int(groups["epoch"]) * int(groups["batches"]) + int(groups["batch"])
    loss = groups.get("loss")
    return step, (float(loss) if loss is not None else None)
