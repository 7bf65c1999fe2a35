"""The front door's access log and request IDs (docs/frontdoor.md, "Access log", "Request
IDs"): ``middleware`` records one entry per request on the event loop, ``writer`` formats and
writes them from a background thread, ``fields`` turns an entry into a line."""
