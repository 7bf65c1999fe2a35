"""Every ``sampleInterval`` (1 s unless a scenario says otherwise) during a run: the gateway's
per-level seat gauges and integrals, and the load generator's CPU.

The seat gauges give the borrowing evidence (``current_limit_seats`` moving away from
``nominal_limit_seats``); the engine's seat-seconds counter and its elapsed time under each
level give the mean seats busy between two samples (``loadtests.plotdata``), which an
instantaneous gauge read between short requests does not. Locust's CPU is measured per
process (master and workers) with psutil: a generator above ~80% of a core is the bottleneck,
and its latencies include its own queueing.
"""

from __future__ import annotations

import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from typing import Any

import psutil

from loadtests import promtext

GAUGES = (
    "apiserver_flowcontrol_current_executing_seats",
    "apiserver_flowcontrol_current_limit_seats",
    "apiserver_flowcontrol_nominal_limit_seats",
    "apiserver_flowcontrol_current_inqueue_requests",
    "gateway_flowcontrol_priority_level_seat_seconds_total",
    "apiserver_flowcontrol_priority_level_seat_utilization_count",  # elapsed ns per level
)


def scrape(url: str, token: str, timeout: float = 5.0) -> str:
    req = urllib.request.Request(url + "/metrics", headers={"Authorization": f"Bearer {token}"})
    with urllib.request.urlopen(req, timeout=timeout) as resp:
        return str(resp.read().decode())


class Sampler:
    def __init__(
        self,
        target: Callable[[], str],
        token: str,
        interval: float = 1.0,
        servers: Callable[[], dict[str, int]] | None = None,
    ) -> None:
        self.target = target  # the current gateway URL (changes on a rolling restart)
        # role -> pid of the system under test (gateway, upstream): their CPU explains latency
        # that APF's own queues do not (everything shares this machine's cores).
        self.servers = servers or dict
        self.server_cpu: dict[str, list[float]] = {}
        self._server_procs: dict[int, psutil.Process] = {}
        self.token = token
        self.interval = interval
        self.series: list[dict[str, Any]] = []
        self.cpu: dict[int, list[float]] = {}
        self.locust_pid: int | None = None
        self._procs: dict[int, psutil.Process] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(10)

    def _locust_procs(self) -> list[psutil.Process]:
        if self.locust_pid is None:
            return []
        try:
            root = psutil.Process(self.locust_pid)
            found = [root, *root.children(recursive=True)]
        except psutil.Error:
            found = []
        fresh = []
        for p in found:
            if p.pid not in self._procs:
                p.cpu_percent(None)  # the first call only primes the counter
                self._procs[p.pid] = p
                fresh.append(p.pid)
        return [p for pid, p in self._procs.items() if pid not in fresh and p.is_running()]

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            now = time.time()
            row: dict[str, Any] = {"t": now}
            try:
                samples = promtext.parse(scrape(self.target(), self.token))
                row.update(promtext.gauges(samples, GAUGES, "priority_level"))
            except (urllib.error.URLError, OSError, ValueError):
                row["error"] = True
            self.series.append(row)
            for p in self._locust_procs():
                try:
                    self.cpu.setdefault(p.pid, []).append(p.cpu_percent(None))
                except psutil.Error:
                    continue
            for role, pid in self.servers().items():
                try:
                    proc = self._server_procs.get(pid)
                    if proc is None:
                        proc = self._server_procs[pid] = psutil.Process(pid)
                        proc.cpu_percent(None)
                        continue
                    self.server_cpu.setdefault(role, []).append(proc.cpu_percent(None))
                except psutil.Error:
                    continue

    def cpu_summary(self) -> dict[str, Any]:
        per = {}
        for pid, v in self.cpu.items():
            steady = v[2:] if len(v) > 4 else v  # skip start-up (imports, spawning)
            if steady:
                per[str(pid)] = {
                    "mean": sum(steady) / len(steady),
                    "max": max(steady),
                    "samples": len(steady),
                }
        peak = max((d["mean"] for d in per.values()), default=0.0)
        servers = {
            role: {"mean": sum(v) / len(v), "max": max(v)}
            for role, v in self.server_cpu.items()
            if v
        }
        return {"processes": per, "busiestMeanPercent": peak, "servers": servers}
