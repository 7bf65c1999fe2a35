"""Prometheus export of the core's statistics, with Kubernetes' exact names, labels and buckets."""
