"""``fenceline soak``: prints the report and exits 1 when a check fails."""

from __future__ import annotations

import argparse

from fenceline.errors import InvalidArgument
from fenceline.soak import run_soak


def soak_from_args(args: argparse.Namespace) -> int:
    if args.renderers <= 0 or args.seconds <= 0 or args.kill_every <= 0 or args.warmup < 0:
        raise InvalidArgument("--renderers, --seconds and --kill-every must be positive")
    if args.hostile < 0:
        raise InvalidArgument("--hostile must not be negative")
    report = run_soak(
        args.renderers, args.seconds, args.kill_every, args.warmup, hostile=args.hostile
    )
    s, e = report.start, report.end
    print(f"{report.renderers} renderers for {report.seconds:.0f} s: {report.runs} runs, "
          f"{report.kills} kills, {report.wrong_outputs} wrong outputs")
    if report.quiet_rss_kib:
        print(f"rss after the renderers' warm-up {report.quiet_rss_kib} KiB, after one round of "
              f"every hostile client {s.rss_kib} KiB "
              f"({s.rss_kib / report.quiet_rss_kib - 1:+.1%}: a first use's, not checked)")
    print(f"rss {s.rss_kib} KiB -> {e.rss_kib} KiB ({report.rss_growth:+.1%}), fds {s.fds} -> {e.fds}, "
          f"mappings {s.mappings} -> {e.mappings}, /dev/shm entries {s.shm_entries} -> {e.shm_entries}")
    print(f"service errors: {report.service_errors or 'none'}")
    h = report.hostile
    if h is not None:
        print(f"hostile clients ended: {h.clients}; released at most {h.released_max_s:.2f} s "
              f"after their end, {h.released_over_2s} over 2 s, {h.never_released} never")
        for problem in h.anomalies[:10]:
            print(f"  hostile anomaly: {problem}")
    checks = report.checks()
    for name, ok in checks.items():
        print(f"  {'ok' if ok else 'FAILED':>6}  {name}")
    if args.json is not None:
        args.json.write_text(report.to_json())
    return 0 if all(checks.values()) else 1
