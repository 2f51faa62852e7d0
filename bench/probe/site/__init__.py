"""The folder ftbench puts first on a job's ``PYTHONPATH``: ``sitecustomize`` and the
probe it starts (:mod:`bench.probe.site.ftbench_probe` and its ``ftbench_probe_*``
modules), nothing else, since every name here becomes importable in the job. The
harness imports the probe from here too."""
