"""A model of the coordinators ``ftbench scale`` measures, to put back together on any
machine what one machine measured apart: the coordinator's service, the requests and
bytes each participant costs it, and each participant's own work.

On one machine every participant and the coordinator share its cores, so a measured
curve is bounded by the participants' CPU, which on a cluster is spread over as many
hosts. The model replays each operation's protocol against a machine given as a
parameter (:mod:`bench.scale.model.machine`): this machine (C cores shared by all,
participants packed as threads into processes that share an interpreter lock), where
it must reproduce the measurement, and a cluster (a CPU per participant, the coordinator
on a host of its own, a network between), where it meets published figures.

- :mod:`bench.scale.model.demand`: what each operation asks of the coordinator and of
  a participant, fitted from a scale run's readings;
- :mod:`bench.scale.model.machine`: the machines, with the source of every value;
- :mod:`bench.scale.model.protocols`: each operation's shape (a gather, a timer, a
  compare-and-set race), read from the stacks' own code;
- :mod:`bench.scale.model.sim`: the discrete-event simulation (simpy);
- :mod:`bench.scale.model.closed`: closed forms of the same, checked by the simulation,
  for sizes the simulation cannot reach in minutes;
- :mod:`bench.scale.model.predict`: p50, p95 and ``all`` of an operation at N, on a
  machine; the validation against a run and the published anchors.

The method and what it reproduces: ``docs/scale.md`` ("A model of the protocols").
"""
