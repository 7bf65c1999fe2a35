"""The ASGI front door: who sent a request, what it asks for, and admission."""
