"""``ftbench calibrate``: ftbench's figures against a bare torch.distributed loop.

Layer: above :mod:`bench.run` (whose trials it interleaves with bare ones), below the
commands.

ftbench is only worth its figures. Calibration runs, on the user's own machine, the same
fault under the same configuration twice over: through ftbench (the stock ``failstop``
strategy) and through a bare torch.distributed script with no ftbench code in its ranks
(``bare_rank.py``), interleaved trial by trial. It compares the first and the last
survivor's detection, and also measures the harness's own instruments: how long a
signal takes from the injection stamp to its delivery, and what writing one event costs.
Modules: ``cases`` (what is calibrated), ``bare`` (one bare trial), ``probes`` (the
instruments), ``session`` (interleaving, statistics, verdict, results directory).
"""
