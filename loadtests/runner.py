"""One scenario, end to end, headless: upstream + gateway + Locust + fairness report.

Everything runs on 127.0.0.1 with ephemeral ports and stops by itself: Locust gets a bounded
run time, every child is stopped by pid. Outputs in ``--out``: the generated configuration and
token file, process logs, Locust's CSV and HTML report, ``events/*.jsonl`` (one line per
request), ``metrics-before.txt``/``metrics-after.txt``, ``timeseries.json``, ``run.json``, and
the fairness report (``report.json``, ``report.md``, ``plots/*.png``).
"""

from __future__ import annotations

import json
import re
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gateway.supervision import stop_process
from loadtests import platform, procs, report, scenario
from loadtests.balancer import Balancer
from loadtests.sampler import Sampler, scrape

LOCUSTFILES = Path(__file__).resolve().parent / "locustfiles"
CPU_WARN_PERCENT = 80.0


@dataclass
class Options:
    name: str
    out: Path
    duration: float | None = None
    processes: int = 1
    user_scale: float | None = None
    quiet: bool = False


@dataclass
class RunState:
    gateways: list[procs.Proc] = field(default_factory=list)
    current: procs.Proc | None = None
    balancer: Balancer | None = None
    events: list[dict[str, Any]] = field(default_factory=list)
    load_start: float = 0.0
    openwhisk_keys: Path | None = None


def generator_verdict(locust_log: str, busiest_percent: float) -> tuple[bool, bool]:
    """(Locust warned about its CPU, the generator was the bottleneck)."""
    warned = bool(re.search(r"CPU usage (above|was too high|threshold was exceeded)", locust_log))
    return warned, warned or busiest_percent > CPU_WARN_PERCENT


def say(opts: Options, text: str) -> None:
    if not opts.quiet:
        print(f"[loadtest] {text}", flush=True)


def _token_of(token_file: Path, user: str) -> str:
    for line in token_file.read_text().splitlines():
        parts = line.split(",")
        if len(parts) >= 2 and parts[1] == user:
            return parts[0]
    raise RuntimeError(f"no token for {user}")


def _locust_argv(sc: scenario.Scenario, opts: Options, host: str, duration: float) -> list[str]:
    kinds = {t["kind"] for t in sc.tenants}
    locustfile = LOCUSTFILES / ("openwhisk.py" if "openwhisk" in kinds else "tenants.py")
    users = sum(int(t["users"]) for t in sc.tenants)
    argv = [
        sys.executable,
        "-m",
        "locust",
        "-f",
        str(locustfile),
        "--headless",
        "-H",
        host,
        "-u",
        str(users),
        "-r",
        str(max(users, 1)),
        "-t",
        f"{int(duration + 0.999)}s",
        "--csv",
        str(opts.out / "locust"),
        "--csv-full-history",
        "--html",
        str(opts.out / "locust.html"),
        "--stop-timeout",
        "2",
        "--loglevel",
        "INFO",
        "--exit-code-on-error",
        "0",
    ]
    if opts.processes > 1:
        argv += ["--processes", str(opts.processes)]
    return argv


def _run_events(
    sc: scenario.Scenario,
    opts: Options,
    st: RunState,
    config_dir: Path,
    token_file: Path,
    upstream_url: str,
    stop: threading.Event,
) -> None:
    doc = sc.doc
    for ev in sorted(sc.doc.get("events") or [], key=lambda e: float(e.get("at", 0))):
        at = scenario.seconds(ev.get("at", 0), "events[].at")
        while not stop.is_set() and (not st.load_start or time.time() < st.load_start + at):
            time.sleep(0.05)
        if stop.is_set():
            return
        action = ev.get("action")
        record: dict[str, Any] = {"action": action, "t": time.time(), "at": at}
        if action == "reload":
            doc = scenario.apply_changes(doc, ev.get("set") or {})
            scenario.write_config(config_dir, doc, sc.tenants, token_file, st.openwhisk_keys)
            if ev.get("sighup") and st.current is not None:
                st.current.signal(signal.SIGHUP)
            say(opts, f"t={at:.0f}s rewrote the configuration {ev.get('set')}")
        elif action == "restart" and st.current is not None and st.balancer is not None:
            old = st.current
            new = procs.start_gateway(
                f"gateway-{len(st.gateways) + 1}", opts.out, config_dir, upstream_url
            )
            st.gateways.append(new)
            st.balancer.switch(new.port)
            st.current = new
            sent = time.time()
            old.signal(signal.SIGTERM)
            flipped = None
            while old.popen.poll() is None and time.time() < sent + 30:
                if flipped is None and procs.readyz(old.url) != 200:
                    flipped = time.time() - sent
                time.sleep(0.02)
            record.update(
                readyzFlipSeconds=flipped,
                oldExitCode=old.popen.poll(),
                drainSeconds=time.time() - sent,
                newPort=new.port,
            )
            say(opts, f"t={at:.0f}s rolled to {new.name}: {record}")
        st.events.append(record)


def run(opts: Options) -> Path:
    sc = scenario.load(opts.name, {"duration": opts.duration, "userScale": opts.user_scale})
    duration = sc.duration
    out = opts.out
    out.mkdir(parents=True, exist_ok=True)
    event_dir = out / "events"
    event_dir.mkdir(exist_ok=True)
    for old in event_dir.glob("*.jsonl"):
        old.unlink()
    token_file = out / "tokens.csv"
    token_file.write_text(scenario.token_csv(sc.tenants))
    config_dir = out / "config"
    keys = None
    if sc.doc.get("platform"):
        platform.add_keys(sc.tenants)
        keys = platform.keys_file(out)
    scenario.write_config(config_dir, sc.doc, sc.tenants, token_file, keys)
    spec = {
        "serviceTime": sc.service_time,
        "scenario": sc.name,
        "tenants": sc.tenants,
        "tokenFile": str(token_file),
        "eventDir": str(event_dir),
        "duration": duration,
        "shape": sc.doc.get("shape"),
    }
    (out / "run-spec.json").write_text(json.dumps(spec, indent=1))
    scraper_token = _token_of(token_file, scenario.SCRAPER)

    st = RunState(openwhisk_keys=keys)
    if keys is not None:
        upstream = platform.start_up(out, sc.doc, sc.tenants)
    else:
        upstream = procs.start_upstream(
            out,
            sc.service_time,
            int(sc.doc.get("listItems", 50)),
            float(sc.doc.get("listFactor", 1.0)),
        )
    sampler: Sampler | None = None
    stop_events = threading.Event()
    locust_rc: int | None = None
    locust: subprocess.Popen[bytes] | None = None
    try:
        gw = procs.start_gateway("gateway-1", out, config_dir, upstream.url)
        st.gateways.append(gw)
        st.current = gw
        host = gw.url
        if any(e.get("action") == "restart" for e in sc.doc.get("events") or []):
            st.balancer = Balancer(gw.port)
            st.balancer.start()
            host = st.balancer.url
        say(
            opts,
            f"{sc.name}: upstream {upstream.url}, gateway {gw.url}, load -> {host}, "
            f"{duration:.0f}s, {opts.processes} locust process(es)",
        )
        before = scrape(gw.url, scraper_token)
        (out / "metrics-before.txt").write_text(before)

        def target() -> str:
            return st.current.url if st.current else gw.url

        def servers() -> dict[str, int]:
            found = {"upstream": upstream.popen.pid}
            if st.current is not None:
                found["gateway"] = st.current.popen.pid
            return found

        # A scrape blocks the gateway's event loop for a few to tens of ms: latency-sensitive
        # scenarios sample less often so the observer does not make their p99.
        interval = scenario.seconds(sc.doc.get("sampleInterval", 1), "sampleInterval")
        sampler = Sampler(target, scraper_token, interval, servers=servers)
        sampler.start()
        env = procs.child_env()
        env["APF_LT_RUN"] = str(out / "run-spec.json")
        log = (out / "locust.log").open("wb")
        started = time.time()
        locust = subprocess.Popen(
            _locust_argv(sc, opts, host, duration),
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env=env,
            cwd=procs.REPO,
        )
        sampler.locust_pid = locust.pid
        events_thread = threading.Thread(
            target=_run_events,
            args=(sc, opts, st, config_dir, token_file, upstream.url, stop_events),
            daemon=True,
        )
        events_thread.start()
        while locust.poll() is None:
            if not st.load_start and any(event_dir.glob("*.jsonl")):
                st.load_start = time.time()
            if time.time() > started + duration + 90:
                say(opts, "locust overran its run time; interrupting it")
                stop_process(locust, grace=20, sig=signal.SIGINT)
            time.sleep(0.1)
        locust_rc = locust.returncode
        log.close()
        stop_events.set()
        events_thread.join(60)
        sampler.stop()
        assert st.current is not None
        (out / "metrics-after.txt").write_text(scrape(st.current.url, scraper_token))
    finally:
        stop_events.set()
        if locust is not None and locust.poll() is None:  # interrupted: stop the generator
            stop_process(locust, grace=15, sig=signal.SIGINT)
        if sampler is not None:
            sampler.stop()
        if st.balancer is not None:
            st.balancer.stop()
        for g in st.gateways:
            g.stop()
        upstream.stop(5)

    locust_log = (out / "locust.log").read_text(errors="replace")
    cpu = sampler.cpu_summary()
    cpu_warning, bottleneck = generator_verdict(locust_log, cpu["busiestMeanPercent"])
    run_info = {
        "scenario": sc.name,
        "description": sc.doc.get("description", ""),
        "doc": sc.doc,
        "tenants": sc.tenants,
        "duration": duration,
        "processes": opts.processes,
        "locustExitCode": locust_rc,
        "events": st.events,
        "loadStart": st.load_start,
        "locustCpu": cpu,
        "locustCpuWarning": cpu_warning,
        "generatorBottleneck": bottleneck,
        "balancer": {
            "connections": st.balancer.connections,
            "connectErrors": st.balancer.connect_errors,
        }
        if st.balancer
        else None,
        "gatewayExitCodes": [g.popen.returncode for g in st.gateways],
    }
    (out / "run.json").write_text(json.dumps(run_info, indent=1, default=str))
    (out / "timeseries.json").write_text(json.dumps(sampler.series))
    if bottleneck:
        say(
            opts,
            f"WARNING: the load generator was the bottleneck (busiest locust process "
            f"{cpu['busiestMeanPercent']:.0f}% CPU, Locust CPU warning: {cpu_warning}); "
            f"try --processes {opts.processes + 1}",
        )

    result = report.generate(out)
    say(opts, f"report: {out / 'report.md'}")
    if not opts.quiet:
        print(report.summary_text(result), flush=True)
    return out
