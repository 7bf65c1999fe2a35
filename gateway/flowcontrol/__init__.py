"""Pure Kubernetes API Priority and Fairness core: no I/O, injected clock, never awaits."""
