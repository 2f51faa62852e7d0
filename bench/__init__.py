"""ftbench: fault-injection and recovery-latency benchmarks for distributed PyTorch."""

__version__ = "0.1.0"
