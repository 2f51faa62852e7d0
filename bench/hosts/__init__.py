"""The host-agent subsystem: the harness's hands and clock on each host of a multi-host trial.

Layer: above the process mechanics (:mod:`bench.procs`) and the rank side
(:mod:`bench.rank`), which it starts; below :mod:`bench.jobs`, whose strategies drive
it. ``agent`` is the agent on a host (it starts ranks and elastic agents, carries out
faults, answers clock probes), ``launcher`` the harness's side that drives the agents
it started itself, ``cluster`` the agents a cluster's own tools started (``ftbench host
--serve``), ``clock`` the alignment of their clocks to the harness's. See
docs/multihost.md.
"""
