"""ray-train's driver: ``python -m bench.strategies.ray_train.driver CONFIG.json``.

What a user's script does on the head node, and nothing more: connect to the cluster,
build a ``TorchTrainer`` with the point's ``ScalingConfig``, ``FailureConfig`` and
``TorchConfig``, and ``fit()``. The only addition is ftbench's observer in
``RunConfig(callbacks=...)`` (:mod:`.observe`). Ray Train's own knobs reach its controller
through this process's environment (set by the harness, :meth:`RayTrainParams.driver_env`).

Exit codes: 0 when ``fit()`` returned without error, 1 when training failed (Ray gave
up: ``max_failures`` spent, or an error it does not retry), 3 when the driver crashed.
"""

from __future__ import annotations

import json
import os
import sys
import traceback
from pathlib import Path
from typing import Any

from bench.procs.events import EventWriter
from bench.procs.hygiene import set_pdeathsig
from bench.rank.entry import spec_from_json
from bench.strategies.ray_train import RayTrainParams


def fit(config: dict[str, Any], events: EventWriter) -> int:
    import ray
    from ray.train import CheckpointConfig, FailureConfig, RunConfig, ScalingConfig
    from ray.train.torch import TorchConfig, TorchTrainer

    from bench.strategies.ray_train.observe import RayObserver
    from bench.strategies.ray_train.rank import train_fn

    spec = spec_from_json(config["spec"], file=config["spec_path"])
    params: RayTrainParams = spec.recovery.params
    world = spec.workload.world_size
    ray.init(address=config["address"], log_to_driver=True)
    events.emit("ray_connected", address=config["address"], ray=ray.__version__)
    # Ray's elastic form is a (min, max) pair; its stubs still say int.
    workers: Any = (params.min_workers, world) if params.min_workers else world
    observer: Any = RayObserver(spec.events_dir)
    timeout_s: Any = spec.workload.pg_timeout_s  # a float is a timedelta's seconds too
    trainer = TorchTrainer(
        train_fn,
        train_loop_config={"spec": config["spec"], "hosts": config["hosts"]},
        scaling_config=ScalingConfig(num_workers=workers, use_gpu=False),
        torch_config=TorchConfig(backend=spec.backend, timeout_s=timeout_s),
        run_config=RunConfig(
            name=config["name"],
            storage_path=config["storage"],
            failure_config=FailureConfig(max_failures=params.max_failures),
            checkpoint_config=CheckpointConfig(num_to_keep=2),
            callbacks=[observer],
        ),
    )
    events.emit("fit_start", num_workers=list(workers) if isinstance(workers, tuple) else workers)
    try:
        result = trainer.fit()
    except Exception as err:  # TrainingFailedError: Ray gave up
        events.emit("fit_end", error=f"{type(err).__name__}: {err}"[:500])
        return 1
    events.emit("fit_end", error=str(result.error)[:500] if result.error else "")
    return 1 if result.error else 0


def main(path: str) -> int:
    set_pdeathsig()
    config = json.loads(Path(path).read_text())
    config["spec_path"] = path
    events_dir = Path(json.loads(config["spec"])["events_dir"])
    pid = os.getpid()
    events = EventWriter(events_dir / f"driver-{pid}.jsonl", src="driver", pid=pid)
    events.emit("proc_start", role="ray_driver")
    code = 3
    try:
        code = fit(config, events)
    except BaseException as err:
        events.emit("crash", error=f"{type(err).__name__}: {err}"[:500], traceback=traceback.format_exc()[-2000:])
    finally:
        events.emit("proc_exit", exitcode=code)
        events.close()
    return code


if __name__ == "__main__":
    sys.stdout.flush()
    os._exit(main(sys.argv[1]))
