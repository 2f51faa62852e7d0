"""What strategies share on the harness side.

Layer: below the strategy plug-ins (:mod:`bench.strategies`), above the host agents
(:mod:`bench.hosts`) and the rank side. ``job`` is the contract (a :class:`Job` per
trial and its :class:`TrialContext`), ``supervisor`` the harness acting as the node
agent of ranks it starts itself, ``elastic`` the torchelastic-shaped launchers
(torchrun's and NVRx's ``ft_launcher``) run and observed, ``nvrx`` which NVRx is
installed. Nothing here names a strategy.
"""
