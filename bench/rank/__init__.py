"""Code that runs inside rank processes: ``entry`` (every rank's main), ``loop`` (the
strategy-free training loop), ``policy`` (what a strategy decides there), ``comm``
(collectives, abortable and hooked) and ``state`` (checkpoints and peer transfers)."""
