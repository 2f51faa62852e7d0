"""From events to figures to decisions.

Layer: above :mod:`bench.procs` (whose event logs it reads) and :mod:`bench.scenario`
(whose figures table it fills); below the runner that writes through it and the
reports that read it. It reads only what a run directory holds. ``derive`` (figures of
a trial from its events), ``facts``, ``window`` and ``blame`` (its parts), ``writer`` and
``reader`` (a run directory), ``stats``, ``summary`` (per-point statistics and tables),
``compare``, ``gate`` and ``envcompare`` (baseline against candidate, service levels,
environments side by side), ``export`` (other tools' formats)."""
