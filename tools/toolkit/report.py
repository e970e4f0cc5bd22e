"""The benchmark table: one row per figure, one column per path, and a check column for the targets.

Targets are judged here from the medians, so a reader sees at once which ones hold on this
machine and by how much; nothing fails the command, because a noisy box must not turn CI red.
"""
from typing import Any, Dict, List, Optional, Tuple

COLUMNS = ("direct", "relay", "adapter", "peer")
Row = Tuple[str, Dict[str, str], str]


def _num(value: Optional[float], digits: int = 0) -> str:
    if value is None:
        return "-"
    if digits == 0:
        return "{:,.0f}".format(value)
    return "{:.{d}f}".format(value, d=digits)


def _pair(a: Optional[float], b: Optional[float], digits: int = 2) -> str:
    if a is None and b is None:
        return "-"
    return "%s / %s" % (_num(a, digits), _num(b, digits))


def _ratio(a: Optional[float], b: Optional[float]) -> Optional[float]:
    return a / b if a is not None and b else None


def _verdict(ok: Optional[bool]) -> str:
    return "?" if ok is None else ("ok" if ok else "MISS")


def _at_most(value: Optional[float], limit: float) -> str:
    return "%s (<=%s %s)" % (_num(value, 2), limit, _verdict(None if value is None else value <= limit))


def _throughput_rows(tp: Dict[str, Dict[str, Any]], lat: Dict[str, Dict[str, Any]],
                     first: Dict[str, Dict[str, Any]], floor: Dict[str, Any]) -> List[Row]:
    eps = {name: tp[name].get("events_per_s") for name in tp}
    vs_relay = _ratio(eps.get("adapter"), eps.get("relay"))
    vs_peer = _ratio(eps.get("adapter"), eps.get("peer"))
    check = "adapter/relay %s (>=0.7 %s)" % (_num(vs_relay, 2), _verdict(None if vs_relay is None else vs_relay >= 0.7))
    if "peer" in tp:
        check += "; adapter/peer %s (>=2 %s)" % (_num(vs_peer, 2), _verdict(None if vs_peer is None else vs_peer >= 2))
    rows: List[Row] = [("1 throughput, events/s", {n: _num(v) for n, v in eps.items()}, check)]
    rows.append(("  vs direct", {n: _num(_ratio(v, eps.get("direct")), 2) for n, v in eps.items()}, ""))
    cpu_vs_floor = _ratio(tp.get("adapter", {}).get("server_us_per_event"), floor.get("us_per_event"))
    spread = tp.get("adapter", {}).get("server_us_runs") or []
    rows.append(("  server CPU us/event", {n: _num(tp[n].get("server_us_per_event"), 1) for n in tp if n != "direct"},
                 "process in the middle, from /proc; adapter/floor (row 6) %s%s" % (
                     _at_most(cpu_vs_floor, 1.25),
                     "; adapter %s-%s over %d reps" % (_num(min(spread), 1), _num(max(spread), 1), len(spread))
                     if len(spread) > 1 else "")))
    rows.append(("  runtime CPU us/event", {n: _num(tp[n].get("runtime_us_per_event"), 1) for n in tp}, ""))
    rows.append(("  client CPU us/event", {n: _num(tp[n].get("client_us_per_event"), 1) for n in tp},
                 "bench client reading thread"))
    rows.append(("  wire bytes/event", {n: _num(tp[n].get("bytes_per_event")) for n in tp}, ""))
    rows.append(("  latency under load p50 / p99 ms", {n: _pair(tp[n].get("p50_ms"), tp[n].get("p99_ms"), 1)
                                                        for n in tp}, "queueing behind the burst"))
    errors = {n: str(len(tp[n].get("errors") or [])) for n in tp}
    rows.append(("  failed runs", errors, "; ".join(e for n in tp for e in (tp[n].get("errors") or [])[:1])[:90]))
    if not tp:
        return rows
    direct = lat.get("direct", {})
    rows.append(("2 latency p50 / p99 ms (paced deltas)", {n: _pair(lat[n]["p50_ms"], lat[n]["p99_ms"]) for n in lat},
                 "stamp -> arrival, 5 ms apart, run settled"))
    added = {n: _pair(_sub(lat[n]["p50_ms"], direct.get("p50_ms")), _sub(lat[n]["p99_ms"], direct.get("p99_ms")))
             for n in lat if n != "direct"}
    p50 = _sub(lat.get("adapter", {}).get("p50_ms"), direct.get("p50_ms"))
    rows.append(("  added vs direct p50 / p99 ms", added,
                 "adapter p50 %s ms (<1 %s)" % (_num(p50, 2), _verdict(None if p50 is None else p50 < 1.0))))
    peer_first = first.get("peer", {})
    ad_first = first.get("adapter", {})
    check = "direct/relay: first A2A frame"
    if peer_first:
        check += "; adapter/peer %s" % _at_most(_ratio(ad_first.get("first_event_ms"), peer_first.get("first_event_ms")), 0.5)
    rows.append(("3 time to RUN_STARTED ms", {n: _num(first[n]["first_event_ms"], 1) for n in first}, check))
    check = "firehose 1, from the POST"
    if peer_first:
        check += "; adapter/peer %s" % _at_most(_ratio(ad_first.get("first_delta_ms"), peer_first.get("first_delta_ms")), 0.5)
    rows.append(("  time to first TEXT_MESSAGE_CONTENT ms", {n: _num(first[n]["first_delta_ms"], 1) for n in first},
                 check))
    rows.append(("  runs measured", {n: str(first[n].get("runs", "-")) for n in first}, "medians above are over these"))
    rows.append(("  server CPU ms per run", {n: _num(first[n].get("server_cpu_ms_per_run"), 2) for n in first},
                 "direct: the runtime's own cost; 10 ms ticks, averaged"))
    return rows


def _sub(a: Optional[float], b: Optional[float]) -> Optional[float]:
    return a - b if a is not None and b is not None else None


def _concurrency_rows(conc: Dict[str, Dict[str, Dict[str, Any]]], heartbeat: float) -> List[Row]:
    rows: List[Row] = []
    for level in sorted(conc, key=int):
        per = conc[level]
        ad = per.get("adapter", {})
        late = ad.get("heartbeat_late_max_ms")
        expected = (ad.get("idle_s") or 0) > heartbeat
        ok: Optional[bool] = ad.get("errors") == 0 and (
            not expected or (late is not None and late < heartbeat * 1000 * 0.5))
        rows.append(("4 %s streams (sleep %s): done / errors" % (level, _num(ad.get("idle_s"), 1)),
                     {n: "%d/%d / %d" % (c["completed"], c["streams"] * c["reps"], c["errors"])
                      for n, c in per.items()},
                     "errors 0, heartbeats on time: %s; adapter stall-sweep closes %s%s" % (
                         _verdict(ok), _num(ad.get("stall_closes")), _samples(per) + _busy(per))))
        rows.append(("  heartbeat lateness max / p99 ms", {n: _pair(c["heartbeat_late_max_ms"],
                                                                    c["heartbeat_late_p99_ms"], 1)
                                                           for n, c in per.items()},
                     "past each one's interval (%s); p99 once all were open: %s; streams with one: %s" % (", ".join(
                         "%s %ss" % (n, _num(c.get("heartbeat_interval_s"), 1)) for n, c in per.items()
                         if c.get("heartbeat_interval_s")), ", ".join(
                         "%s %s ms" % (n, _num(c.get("steady_late_p99_ms"), 1)) for n, c in per.items()
                         if c.get("heartbeat_interval_s")), ", ".join(
                         "%s %s/%s" % (n, _num(c["streams_with_heartbeat"]), c["streams"]) for n, c in per.items()))))
        rows.append(("  stream duration p50 / max s", {n: _pair(c.get("stream_s_p50"), c.get("stream_s_max"), 2)
                                                       for n, c in per.items()},
                     "ideal: the silence (%s s) plus a few ms" % _num(ad.get("idle_s"), 1)))
        p99, rss = ad.get("heartbeat_late_p99_ms"), ad.get("peak_rss_mb")
        rows.append(("  peak RSS MB / peak threads", {n: "%s / %s" % (_num(c["peak_rss_mb"], 1), _num(c["peak_threads"]))
                                                      for n, c in per.items()},
                     "adapter: errors 0, lateness p99 <= 250 ms, RSS <= 250 MB: %s" % _verdict(
                         ad.get("errors") == 0 and p99 is not None and p99 <= 250 and rss is not None and rss <= 250)))
        cpu = ad.get("idle_cpu_pct")
        beats = ad["streams"] / heartbeat if heartbeat else None  # heartbeats per second while all are idle
        per_beat = cpu / 100.0 / beats * 1e6 if cpu is not None and beats else None
        rows.append(("  CPU while heartbeating, % of a core", {n: _num(c["idle_cpu_pct"], 1) for n, c in per.items()},
                     "window %s s; adapter %s us per heartbeat; ~0 wanted (<5%%): %s" % (
                         _num(ad.get("idle_window_s"), 2), _num(per_beat), _verdict(None if cpu is None else cpu < 5.0))))
        rows.append(("  ramp to all streams open s", {n: _num(c["ramp_s"], 2) for n, c in per.items()},
                     "bench client (one selector thread) CPU s: %s" % ", ".join(
                         "%s %s" % (n, _num(c.get("client_cpu_s"), 1)) for n, c in per.items())))
    return rows


def _busy(per: Dict[str, Any]) -> str:
    """Reps that started while the runtime still ran the previous row's requests (their figures are suspect)."""
    busy = {n: c.get("runtime_busy_at_start") for n, c in per.items() if c.get("runtime_busy_at_start")}
    return "".join("; %s started with %d runtime requests left" % kv for kv in busy.items())


def _samples(per: Dict[str, Dict[str, Any]]) -> str:
    crashes = [c["crash"] for c in per.values() if c.get("crash")]
    if crashes:
        return "; " + crashes[0][:110]
    samples = [s for c in per.values() for s in c.get("error_samples", [])]
    return ("; e.g. " + samples[0][:70]) if samples else ""


def _startup_rows(st: Dict[str, Dict[str, Any]]) -> List[Row]:
    ad, peer = st.get("adapter", {}), st.get("peer")
    start = ad.get("startup_s")
    check = "adapter %s s (<0.5 %s)" % (_num(start, 2), _verdict(None if start is None else start < 0.5))
    rss_check = ""
    if peer:
        rss_ok = ad.get("idle_rss_mb", 0) < peer.get("idle_rss_mb", 0)
        rss_check = "adapter/peer %s (below peer %s)" % (_num(_ratio(ad.get("idle_rss_mb"), peer.get("idle_rss_mb")), 2),
                                                      _verdict(rss_ok))
    return [("5 start-up to 200 /health s (min)", {n: "%s (%s)" % (_num(c["startup_s"], 2), _num(c["startup_min_s"], 2))
                                                   for n, c in st.items()}, check),
            ("  idle RSS MB / threads", {n: "%s / %s" % (_num(c["idle_rss_mb"], 1), _num(c["idle_threads"]))
                                         for n, c in st.items()}, rss_check),
            ("  idle CPU s over %s s, no streams" % _num(ad.get("idle_window_s"), 0),
             {n: _num(c["idle_cpu_s"], 2) for n, c in st.items()},
             "~0 wanted: %s" % _verdict(None if ad.get("idle_cpu_s") is None else ad["idle_cpu_s"] <= 0.02))]


def _breakdown_rows(bd: Dict[str, Any]) -> List[Row]:
    """One tiny run of the traced in-process adapter, phase by phase: start offset + duration, ms."""
    rows: List[Row] = [("0 one tiny run, phase by phase", {"adapter": "at / took ms"},
                        "in-process traced adapter, median of %d warm runs (%d failed); cold = the first run"
                        % (bd["runs"], bd["failures"]))]
    for phase in bd["phases"]:
        if phase["at_ms"] is None and phase["cold_at_ms"] is None:
            continue
        took = phase["ms"]
        cell = _num(phase["at_ms"], 2) + ("" if not took else " / %s" % _num(took, 2))
        cold = "cold %s" % _num(phase["cold_at_ms"], 2) + ("" if not phase["cold_ms"] else " / %s" % _num(
            phase["cold_ms"], 2))
        if phase["runs_with"] < bd["runs"]:
            cold += "; in %d of %d warm runs" % (phase["runs_with"], bd["runs"])
        rows.append(("  " + phase["phase"], {"adapter": cell}, cold))
    bare = bd.get("bare") or {}
    if bare.get("first_byte_ms") is not None:
        rows.append(("  bare waitress: first byte / 2nd chunk", {"adapter": "%s / %s" % (
            _num(bare["first_byte_ms"], 2), _num(bare["second_chunk_ms"], 2))},
            "a trivial app (reads the body, writes 3 chunks) on the same server settings and client, "
            "median of %d: the server's and loopback's share of the first byte" % bare["runs"]))
    counts = bd["counts"]
    rows.append(("  fsyncs file / dir before RUN_STARTED", {"adapter": "%s / %s" % (
        _num(counts.get("fsync (file) before RUN_STARTED")), _num(counts.get("fsync (directory) before RUN_STARTED")))},
        "per run: %s / %s; upstream connects per run: %s "
        "(the bench runtime, on waitress, closes the connection of every streamed response)" % (
            _num(counts.get("fsync (file) per run")), _num(counts.get("fsync (directory) per run")),
            _num(counts.get("upstream TCP connect per run"), 1))))
    return rows


def _growth_rows(gr: Dict[str, Any]) -> List[Row]:
    rows: List[Row] = []
    pop = gr.get("populated", {})
    medians = [c["run_started_ms"] for c in pop.values() if c.get("run_started_ms")]
    mid = sorted(medians)[len(medians) // 2] if medians else None
    spread = max(abs(m - mid) / mid for m in medians) * 100 if mid else None
    for size in sorted(pop, key=int):
        c = pop[size]
        rows.append(("7 RUN_STARTED ms, %s threads in state dir" % _num(int(size)),
                     {"adapter": _pair(c.get("run_started_ms"), c.get("p90_ms"), 1)},
                     "median / p90 of %d new threads; adapter start-up %s s; written in %s s" % (
                         c.get("runs", 0), _num(c.get("startup_s"), 2), _num(c.get("populate_s"), 1))))
    if pop:
        rows.append(("  spread across populations", {"adapter": "%s%%" % _num(spread, 0)},
                     "largest distance from the middle median, runs alternating between the populations "
                     "(within 20%% wanted: %s)" % _verdict(None if spread is None else spread <= 20)))
    many = gr.get("many_runs")
    if many:
        rows.append(("  %s runs in a row: RSS before / after MB" % _num(many["runs"]),
                     {"adapter": _pair(many["rss_before_mb"], many["rss_after_mb"], 1)},
                     "%d lanes, %s runs/s, %d errors, peak %s MB; growth %s MB (<=10 wanted: %s)" % (
                         many["lanes"], _num(many.get("runs_per_s"), 0), many["errors"], _num(many["rss_peak_mb"], 1),
                         _num(many["growth_mb"], 1), _verdict(many["errors"] == 0 and many["growth_mb"] <= 10))))
    big = gr.get("big_run")
    if big:
        rows.append(("  one %s-event run: RSS before / peak / after" % _num(big["events"]),
                     {"adapter": "%s / %s / %s" % (_num(big["rss_before_mb"], 1), _num(big["rss_peak_mb"], 1),
                                                   _num(big["rss_after_mb"], 1))},
                     "%s events/s, complete: %s; after - before %s MB (<=10 wanted: %s)" % (
                         _num(big.get("events_per_s")), big["ok"], _num(big["growth_mb"], 1),
                         _verdict(big["ok"] and big["growth_mb"] <= 10))))
    return rows


def render(figures: Dict[str, Any]) -> str:
    config = figures["config"]
    tp = figures.get("throughput", {})
    rows = _breakdown_rows(figures["breakdown"]) if figures.get("breakdown") else []
    rows += _throughput_rows(tp, figures.get("latency", {}), figures.get("first", {}),
                             figures.get("floor", {})) if tp else []
    rows += _concurrency_rows(figures.get("concurrency", {}), config["heartbeat_s"])
    if figures.get("startup"):
        rows += _startup_rows(figures["startup"])
    fl = figures.get("floor", {})
    adapter_eps = tp.get("adapter", {}).get("events_per_s")
    if fl:
        rows.append(("6 floor: in-process decode+encode", {},
                     "%s events/s = %s us/event (median of %s passes%s, %s-%s); adapter reaches %s of it" % (
                         _num(fl.get("events_per_s")), _num(fl.get("us_per_event"), 1), _num(fl.get("passes")),
                         " between the throughput reps" if fl.get("between_reps") else "",
                         _num(fl.get("us_min"), 1), _num(fl.get("us_max"), 1),
                         _num(_ratio(adapter_eps, fl.get("events_per_s")), 2))))
    if figures.get("growth"):
        rows += _growth_rows(figures["growth"])
    columns = [c for c in COLUMNS if any(c in r[1] for r in rows)]
    if not rows:
        rows = [("(no section measured)", {}, "")]
    width = max(len(r[0]) for r in rows)
    widths = {c: max([len(c)] + [len(r[1].get(c, "")) for r in rows]) for c in columns}
    head = "%-*s  %s  %s" % (width, "figure", "  ".join(c.rjust(widths[c]) for c in columns), "check")
    lines = ["iaccode_agui benchmark: firehose %s deltas, %s reps (median), concurrency %s, %s CPUs, Python %s, %s s"
             % (_num(config["deltas"]), config["reps"], ",".join(map(str, config["levels"])), config["cpus"],
                config["python"], config.get("wall_s", "?")),
             "peer: %s" % (config.get("peer") or "none"),
             "adapter: %s; load average %s at the start, %s at the end" % (
                 " ".join(config.get("adapter_args") or []) or "defaults", config.get("load_start", "?"),
                 config.get("load_end", "?")), head, "-" * len(head)]
    for label, cells, check in rows:
        lines.append("%-*s  %s  %s" % (width, label, "  ".join(cells.get(c, "").rjust(widths[c]) for c in columns),
                                       check))
    return "\n".join(lines)
