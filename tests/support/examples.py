"""How many examples a Hypothesis property test draws: its own count, scaled for a re-run.

The interpreted suite draws each test's full count. The compiled-build test
(tests/test_compiled_build.py) runs the same tests a second time against the mypyc-compiled
modules with ``APF_EXAMPLES_SCALE`` below 1: every property still runs compiled, on fewer
examples, since the full search over the same logic was just done interpreted; what the
compiled run looks for (a type or semantics difference of the compiled code) shows in the
first examples. ``APF_EXAMPLES_SCALE`` above 1 runs the properties longer by hand.
"""

from __future__ import annotations

import os


def examples(count: int) -> int:
    """``count`` times ``APF_EXAMPLES_SCALE`` (default 1), at least 10."""
    scale = float(os.environ.get("APF_EXAMPLES_SCALE", "1"))
    return max(10, round(count * scale)) if scale != 1 else count
