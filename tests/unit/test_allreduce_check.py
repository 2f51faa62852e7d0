"""The allreduce workload checks every result, and a wrong one cannot pass unseen."""

from __future__ import annotations

import math

import pytest
import torch

from bench.rank.comm import CollectiveError, StockCollectives
from bench.workloads.allreduce import AllReduceParams
from bench.workloads.allreduce.impl import AllReduceWorkload


class Overwrite:
    """A rank-side hook that spoils ``count`` elements of the reduced tensor with ``value``."""

    def __init__(self, value: float, count: int) -> None:
        self.value, self.count = value, count

    def before(self, tensor: torch.Tensor) -> None:
        pass

    def after(self, tensor: torch.Tensor) -> None:
        tensor[: self.count] = self.value


def _workload(comm: StockCollectives) -> AllReduceWorkload:
    w = AllReduceWorkload(AllReduceParams(size_bytes=4096), seed=0, world_size=1, device=torch.device("cpu"))
    w.attach(comm)
    return w


def test_a_right_result_reports_no_wrong_elements(lone_group: StockCollectives) -> None:
    fields = _workload(lone_group).step(1)
    assert fields["wrong_elements"] == 0 and fields["bytes"] == 4096


@pytest.mark.parametrize(("value", "count"), [(2.0, 3), (0.0, 1), (math.nan, 2), (math.inf, 1)])
def test_every_wrong_element_is_counted(lone_group: StockCollectives, value: float, count: int) -> None:
    lone_group.hooks.append(Overwrite(value, count))
    with pytest.raises(CollectiveError) as info:
        _workload(lone_group).step(1)
    assert info.value.how == "bad_result"
    assert f"wrong in {count} of 1024 elements" in str(info.value)
