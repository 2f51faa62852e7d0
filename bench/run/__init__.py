"""Running scenarios: ``runner`` (points x trials into a results directory), ``trial``
(one trial's driver loop) and ``schedule`` (when faults fire and whom they hit)."""
