"""``ftbench scale``: the control planes of the recovery stacks under thousands of
participants, measured with the stacks' own coordinators and clients.

Layer: above :mod:`bench.report` (whose plotting helpers it shares), :mod:`bench.rank`
(whose membership protocol is one of the coordinators measured) and :mod:`bench.procs`
(processes, stores, hygiene); :mod:`bench.project` reads its runs to project recovery
phases that are control-plane work.

What grows with a job's size in a recovery is mostly its control plane: the TCPStore
that every rank connects to, torchrun's c10d rendezvous, torchft's lighthouse, NVRx's
store barriers, the membership agreement of the in-process strategies. None of that
needs GPUs or training to measure: it needs many real clients against the real
coordinator, which one machine can hold. Here the coordinator runs in a process of its
own and the participants are real client objects (torch's ``TCPStore``,
``DynamicRendezvousHandler``, torchft's ``LighthouseClient``, NVRx's store, ftbench's
``Membership``), many to a process, one thread each.

- :mod:`bench.scale.spec`: what a sweep measures (coordinators, sizes, knobs), checked;
- :mod:`bench.scale.coordinators`: each coordinator, its operations and what a
  participant is (a rank, a host, a replica group);
- :mod:`bench.scale.servers`, :mod:`bench.scale.participants`: the coordinator's process
  and the participants' side, each using the stack's own classes;
- :mod:`bench.scale.worker`: a process of participants, driven over a pipe;
- :mod:`bench.scale.remote`, :mod:`bench.scale.hostside`, :mod:`bench.scale.capacity`:
  the participants spread over a cluster's hosts (``--agents-at``): the harness's side,
  each host agent's side (its processes of participants, relayed through the run store
  as sealed JSON), what one host can hold;
- :mod:`bench.scale.system`: what the operating system says (CPU time, bytes on the
  coordinator's port, the limits that bound N, the resolver);
- :mod:`bench.scale.driver`: a sweep, point by point, until a limit stops it; what it
  records (:mod:`bench.scale.records`);
- :mod:`bench.scale.rundir`: the run directory (``scale.json``, ``points.csv``);
- :mod:`bench.scale.growth`, :mod:`bench.scale.curves`: growth models, fits, crossings;
- :mod:`bench.scale.anchors`: published figures beside ftbench's;
- :mod:`bench.scale.page`: tables, plots and ``scale.md``.

The method, its limits and the figures measured here: ``docs/scale.md``.
"""
