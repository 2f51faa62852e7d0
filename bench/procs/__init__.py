"""Processes of a run: the launcher, their hygiene, the guard, what the machine is.

``launcher`` (the run's forkserver and a trial's store and rank processes), ``hygiene``
(parent-death signals, the run marker, sweeping), ``guard`` (sweeps a run whose harness
died), ``leftovers`` (``ftbench cleanup``), ``environment`` (versions, machine, knobs,
clock for run.json) and ``zygote`` (the forkserver's preload).
"""
