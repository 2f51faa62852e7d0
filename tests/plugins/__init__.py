"""Plug-ins that live outside ftbench, loaded through ``$FTBENCH_PLUGINS`` (tests only)."""
