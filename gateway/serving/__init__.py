"""The client-facing HTTP server: uvicorn's HTTP/1.1 protocols with client timeouts and limits."""
