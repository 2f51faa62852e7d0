"""From events to figures to decisions: ``events`` (the event log), ``derive`` (figures
of a trial from its events), ``writer`` and ``reader`` (a run directory), ``stats``,
``summary`` (per-point statistics and tables), ``compare`` and ``gate`` (baseline
against candidate, service levels), ``export`` (other tools' formats)."""
