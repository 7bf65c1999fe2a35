"""HTTP helpers shared by the front door: Kubernetes ``Status`` bodies, fixed ASGI replies."""
