"""``workload.device``: where the ranks' tensors live, checked like every scenario key, and
resolved on the machine (CUDA asked for where there is none is a skip reason, as NCCL
without GPUs is); a rank's device memory peaks; the upload that a GPU rank times apart."""

from __future__ import annotations

import pytest
import torch

from bench.procs.machine import resolve_device
from bench.rank.checkpoint import NEEDS_CUDA, unavailable
from bench.rank.loop import device_memory
from bench.rank.workload import move
from bench.scenario.config import ConfigError
from bench.scenario.loader import load

BASE = """
name = "d"
[workload]
kind = "ddp"
world_size = 2
steps = 20
backend = "{backend}"
device = "{device}"
[recovery]
strategy = "restart"
[recovery.restart]
checkpoint = "{design}"
"""

CUDA = torch.cuda.is_available()


def scenario(write_scenario, *, backend: str = "gloo", device: str = "auto", design: str = "torch-save"):
    return load(write_scenario(BASE.format(backend=backend, device=device, design=design)))


def test_the_default_is_auto(write_scenario) -> None:
    text = BASE.format(backend="gloo", device="auto", design="torch-save").replace('device = "auto"\n', "")
    assert load(write_scenario(text)).workload.device == "auto"


def test_an_unknown_device_names_the_allowed_ones(write_scenario) -> None:
    with pytest.raises(ConfigError) as err:
        scenario(write_scenario, device="tpu")
    assert err.value.key == "workload.device"
    assert "cuda" in err.value.expected and "cpu" in err.value.expected


def test_host_tensors_under_nccl_are_refused(write_scenario) -> None:
    with pytest.raises(ConfigError) as err:
        scenario(write_scenario, backend="nccl", device="cpu")
    assert err.value.key == "workload.device"


def test_gloo_with_cuda_tensors_validates(write_scenario) -> None:
    sc = scenario(write_scenario, backend="gloo", device="cuda")
    assert (sc.workload.backend, sc.workload.device) == ("gloo", "cuda")


def test_nvrx_async_is_refused_on_host_tensors_and_accepted_on_cuda_ones(write_scenario) -> None:
    for device in ("auto", "cpu"):
        with pytest.raises(ConfigError, match=r"torch\.cuda\.synchronize"):
            scenario(write_scenario, device=device, design="nvrx-async")
    sc = scenario(write_scenario, device="cuda", design="nvrx-async")
    assert sc.recovery.params.checkpoint == "nvrx-async"
    # On this machine: runnable where a CUDA device is, else the runner skips the point for
    # the device (resolve_device's reason), not for the design.
    assert unavailable("nvrx-async", "gloo", "cuda", 2) is None
    assert NEEDS_CUDA["nvrx-async"] in (unavailable("nvrx-async", "gloo", "cpu", 2) or "")


def test_the_device_resolves_with_the_backend() -> None:
    assert resolve_device("auto", "gloo") == "cpu"
    assert resolve_device("cpu", "gloo") == "cpu"
    assert resolve_device("auto", "nccl") == "cuda"


@pytest.mark.skipif(CUDA, reason="this machine has a CUDA device: CUDA points run here")
def test_cuda_without_a_device_is_a_reason_to_skip() -> None:
    with pytest.raises(RuntimeError, match=r'workload\.device = "cuda" needs a CUDA device'):
        resolve_device("cuda", "gloo")


@pytest.mark.skipif(not CUDA, reason="no CUDA device here: the CUDA path is skipped, as every CUDA point is")
def test_cuda_resolves_where_there_is_a_device() -> None:
    assert resolve_device("cuda", "gloo") == "cuda"


def test_no_device_memory_is_reported_off_cuda() -> None:
    """Empty, not zero: a CPU rank has no GPU figure."""
    assert device_memory(torch.device("cpu")) == {}


def test_an_upload_keeps_the_optimizer_on_the_moved_parameters() -> None:
    """``move`` counts what it moves and leaves the optimizer stepping the same
    parameters: what is already on the device moves nothing; to the GPU, a tied weight
    and each momentum buffer count once."""
    model = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.Linear(8, 8))
    model[1].weight = model[0].weight  # tied, as the transformer's head and embedding are
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    model(torch.ones(2, 8)).sum().backward()
    opt.step()  # momentum buffers exist now
    params = list(model.parameters())
    assert move(model, opt, torch.device("cpu")) == 0
    assert [id(p) for p in model.parameters()] == [id(p) for p in params]
    if not CUDA:
        pytest.skip("no CUDA device here: the move to a GPU is checked where there is one")
    moved = move(model, opt, torch.device("cuda", 0))
    assert moved == 2 * sum(p.nbytes for p in params)  # parameters and their momentum
    assert all(p.is_cuda and id(p) in {id(q) for q in params} for p in opt.param_groups[0]["params"])
    assert all(s["momentum_buffer"].is_cuda for s in opt.state.values())


def test_a_collective_future_takes_a_result_on_the_tensors_device() -> None:
    """reinit's DDP hook completes its future with the bucket itself: on a GPU the
    future must name the device, or torch refuses the result."""
    from bench.rank.abortable import future_for

    cpu = future_for(torch.ones(2))
    cpu.set_result(torch.ones(2))
    assert cpu.value().sum() == 2
    if not CUDA:
        pytest.skip("no CUDA device here: the GPU half of this test runs where there is one")
    gpu_tensor = torch.ones(2, device="cuda")
    gpu = future_for(gpu_tensor)
    gpu.set_result(gpu_tensor)
    assert gpu.value().device.type == "cuda"
