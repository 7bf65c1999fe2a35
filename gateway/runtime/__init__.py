"""A Python action runtime speaking the OpenWhisk action-proxy protocol (``/init`` + ``/run``).

Run it as ``python -m gateway.runtime --host 127.0.0.1 --port 0``; the first stdout line is
``LISTENING <port>``. This package imports nothing at import time so that a cold start pays
only for what the runtime actually uses (see ``docs/performance.md``, "Action runtime").

Modules: ``http`` (a tiny threaded HTTP/1.1 server), ``action`` (loading and calling the
action), ``app`` (the two routes), ``context`` (per-activation ``__OW_*`` values for
concurrent actions), ``logs`` (router side: split the runtime's output per activation).
"""

#: Written as the last line on stdout and stderr after every init and run.
SENTINEL = "XXX_THE_END_OF_A_WHISK_ACTIVATION_XXX"
