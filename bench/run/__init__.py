"""Running scenarios.

Layer: above the strategies (whose Jobs it drives) and the results (which it writes);
below the commands. ``runner`` (points x trials into a results directory), ``trial``
(one trial's driver loop), ``schedule`` (when faults fire and whom they hit),
``preflight`` (once-per-run records), ``hangs`` (stacks of hung ranks), ``watchdog``
(NCCL's watchdog log)."""
