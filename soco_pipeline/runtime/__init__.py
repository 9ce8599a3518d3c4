"""How a pipeline process runs: torch device, GPU time, fault-injection pause points, forkserver preload,
Ctrl-C delivered again after a finalizer swallowed it."""
