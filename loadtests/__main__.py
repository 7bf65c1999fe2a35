"""``python -m loadtests SCENARIO``: the same as ``apf-gateway loadtest SCENARIO``."""

from __future__ import annotations

import argparse
import sys

from loadtests.cli import add_arguments, main

if __name__ == "__main__":
    parser = argparse.ArgumentParser(prog="python -m loadtests")
    add_arguments(parser)
    sys.exit(main(parser.parse_args()))
