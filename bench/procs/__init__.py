"""Process mechanics: how a run starts, watches and ends processes on one host.

Layer: above :mod:`bench.scenario` only; everything that starts or records a process
builds on it. ``launcher`` (the run's forkserver and a trial's store and rank
processes), ``hygiene`` (parent-death signals, the run marker, sweeping), ``guard``
(sweeps a run whose harness died), ``leftovers`` (``ftbench cleanup``), ``store``
(stores bound to one address, free ports), ``events`` (the event log every process
appends to, and its readers), ``venvs`` (the virtual environments of ``--env``), ``pipinstall`` (their pip) and
``machine`` (versions, machine, knobs, clock for run.json).
"""
