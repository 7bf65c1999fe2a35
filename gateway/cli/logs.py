"""Logging for the platform's long-running commands (``router``, ``manager serve``): one
timestamped line per event on stderr, which ``apf-gateway up`` keeps in STATE-DIR/logs."""

from __future__ import annotations

import argparse
import logging

LEVELS = ("debug", "info", "warning", "error")


def add_log_level(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--log-level",
        default="info",
        choices=LEVELS,
        help="least severe events logged on stderr (default info)",
    )


def configure_logging(level: str) -> None:
    logging.basicConfig(
        level=level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    # per-request lines would drown what the process does; the front door has its own
    logging.getLogger("aiohttp.access").setLevel(logging.WARNING)
