"""apf-gateway: Kubernetes API Priority and Fairness for any HTTP API."""

__version__ = "0.1.0"
