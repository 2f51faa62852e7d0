"""Fault injectors: the mechanisms that break a running job, and undo what they did.

Injectors act on processes, namespaces and links; they know nothing about scenarios,
figures or the harness (``bench`` imports ``injectors``, never the reverse). Every
transient fault is undone by its injector, and anything that must be undone even if
the harness dies is recorded with :mod:`injectors.undo` first.
"""
