"""How a pipeline process runs: the torch device, GPU time of a stage, fault-injection pause points and
the forkserver's preload."""
