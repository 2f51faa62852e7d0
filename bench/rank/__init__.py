"""Code that runs inside rank processes, and the contracts of what runs there.

Layer: above :mod:`bench.procs` and :mod:`bench.scenario`; the workloads and strategies
above it implement its contracts. ``entry`` (every rank's main), ``loop`` (the
strategy-free training loop), ``policy`` (the contract of what a strategy decides
there), ``workload`` (the contract of what a workload computes), ``comm``
(collectives, abortable and hooked), ``state`` (peer transfers), ``checkpoint`` (the
checkpoint designs) and ``zygote`` (the forkserver's preload, which warms this layer's
imports)."""
