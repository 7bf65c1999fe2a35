"""Reverse proxy: header hygiene, streaming, upstream errors mapped to 502/504."""
