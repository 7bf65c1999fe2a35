"""Kubernetes pieces of the container manager: the API call table, pod rendering, the
Agones-style eviction mapping, the pod watch and the Lease store. Imports lightkube only in
the modules that talk to the API server (``api``, ``watch``, ``lease``)."""
