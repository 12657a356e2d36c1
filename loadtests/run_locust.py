"""Run Locust headless against a local fedqa service and print req/s, p50, p95, p99 and failures per endpoint.

    # against a running service
    python loadtests/run_locust.py --host http://127.0.0.1:8055 --users 20 --duration 120 RetrievalUser
    # or start one (FEDQA_HOME=PATH fedqa serve) for the run
    python loadtests/run_locust.py --serve-home ~/fedqa-faq6 --port 8055 --users 20 --duration 120 RetrievalUser

User classes (positional, default RetrievalUser): RetrievalUser, AskUser, EvaluateUser (see locustfile.py).
Questions come from FEDQA_LOADTEST_QUERIES (--queries), the key from FEDQA_API_KEY. Locust's CSV files
(``<prefix>_stats.csv``, ``_failures.csv``, ``_exceptions.csv``, ``_stats_history.csv``) are kept under --csv-dir.
Only loopback targets are accepted unless --allow-remote is given. Exit code: 0 when no request failed.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import subprocess
import sys
import time
from contextlib import AbstractContextManager, nullcontext
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import REPO, require_loopback, serve  # noqa: E402

LOCUSTFILE = Path(__file__).resolve().parent / "locustfile.py"
USER_CLASSES = ("RetrievalUser", "AskUser", "EvaluateUser")


def read_stats(path: Path) -> list[dict]:
    """Rows of Locust's ``_stats.csv`` as numbers: endpoint, requests, failures, rps, p50/p95/p99 (ms)."""
    rows = []
    with path.open(newline="", encoding="utf-8") as fh:
        for row in csv.DictReader(fh):

            def num(key: str, row: dict = row) -> float:
                value = row.get(key, "")
                return float(value) if value not in ("", "N/A") else float("nan")

            rows.append(
                {
                    "endpoint": f"{row['Type']} {row['Name']}".strip() if row["Name"] != "Aggregated" else "Aggregated",
                    "requests": int(num("Request Count")),
                    "failures": int(num("Failure Count")),
                    "rps": round(num("Requests/s"), 2),
                    "p50_ms": num("50%"),
                    "p95_ms": num("95%"),
                    "p99_ms": num("99%"),
                    "avg_ms": round(num("Average Response Time"), 1),
                    "max_ms": num("Max Response Time"),
                }
            )
    return rows


def format_table(rows: list[dict]) -> str:
    """A plain text table of the stats rows."""
    head = f"{'endpoint':<46} {'requests':>8} {'fails':>6} {'req/s':>7} {'p50':>7} {'p95':>7} {'p99':>7} {'max':>7}"
    lines = [head, "-" * len(head)]
    for r in rows:
        lines.append(
            f"{r['endpoint'][:46]:<46} {r['requests']:>8} {r['failures']:>6} {r['rps']:>7.2f} "
            f"{r['p50_ms']:>7.0f} {r['p95_ms']:>7.0f} {r['p99_ms']:>7.0f} {r['max_ms']:>7.0f}"
        )
    lines.append("(latencies in ms)")
    return "\n".join(lines)


def run_locust(args: argparse.Namespace, host: str, prefix: Path) -> int:
    env = {**os.environ}
    if args.queries:
        env["FEDQA_LOADTEST_QUERIES"] = str(Path(args.queries).resolve())
    if args.wait:
        env["FEDQA_LOADTEST_WAIT"] = args.wait
    cmd = [
        sys.executable,
        "-m",
        "locust",
        "-f",
        str(LOCUSTFILE),
        "--headless",
        "--host",
        host,
        "-u",
        str(args.users),
        "-r",
        str(args.spawn_rate),
        "-t",
        f"{args.duration}s",
        "--csv",
        str(prefix),
        "--csv-full-history",
        "--only-summary",
        "--stop-timeout",
        "10",
        "--loglevel",
        "WARNING",
        *args.user_classes,
    ]
    # Locust stops itself after --duration; the timeout is only a guard against a hung run.
    return subprocess.run(cmd, cwd=REPO, env=env, timeout=args.duration + 120, check=False).returncode


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("user_classes", nargs="*", metavar="USER_CLASS", help=f"any of {', '.join(USER_CLASSES)}")
    ap.add_argument("--host", default="http://127.0.0.1:8000", help="service URL (ignored with --serve-home)")
    ap.add_argument("--serve-home", help="start 'fedqa serve' with this FEDQA_HOME for the run")
    ap.add_argument("--port", type=int, default=8055, help="port for --serve-home")
    ap.add_argument("--users", type=int, default=20)
    ap.add_argument("--spawn-rate", type=float, default=5.0, help="users started per second")
    ap.add_argument("--duration", type=int, default=120, help="seconds (at most 1800)")
    ap.add_argument("--queries", help="JSONL questions (FEDQA_LOADTEST_QUERIES)")
    ap.add_argument("--wait", help="think time 'min,max' seconds between a user's requests (FEDQA_LOADTEST_WAIT)")
    ap.add_argument("--csv-dir", default=str(REPO / "loadtests" / "results"), help="where Locust's CSV files are kept")
    ap.add_argument("--name", help="CSV file prefix (default: users, duration and time)")
    ap.add_argument("--allow-remote", action="store_true", help="allow a non-loopback --host")
    args = ap.parse_args(argv)
    if not 1 <= args.duration <= 1800:
        ap.error("--duration must be between 1 and 1800 seconds")
    args.user_classes = args.user_classes or ["RetrievalUser"]
    unknown = sorted(set(args.user_classes) - set(USER_CLASSES))
    if unknown:
        ap.error(f"unknown user class {unknown}; choose from {USER_CLASSES}")

    csv_dir = Path(args.csv_dir)
    csv_dir.mkdir(parents=True, exist_ok=True)
    prefix = csv_dir / (args.name or f"{'-'.join(args.user_classes)}-u{args.users}-t{args.duration}s-{time.strftime('%Y%m%d-%H%M%S')}")

    ctx: AbstractContextManager[object]
    if args.serve_home:
        host = f"http://127.0.0.1:{args.port}"
        ctx = serve(args.serve_home, args.port, log_path=f"{prefix}_service.log")
    else:
        host = args.host
        require_loopback(host, args.allow_remote)
        ctx = nullcontext()
    load_before = os.getloadavg()
    with ctx:
        t0 = time.monotonic()
        code = run_locust(args, host, prefix)
        wall = time.monotonic() - t0
    load_after = os.getloadavg()

    stats_file = Path(f"{prefix}_stats.csv")
    if not stats_file.is_file():
        print(f"locust wrote no stats (exit code {code})", file=sys.stderr)
        return code or 1
    rows = read_stats(stats_file)
    print(format_table(rows))
    summary = {
        "host": host,
        "user_classes": args.user_classes,
        "users": args.users,
        "duration_s": args.duration,
        "wall_s": round(wall, 1),
        "loadavg_before": [round(x, 2) for x in load_before],
        "loadavg_after": [round(x, 2) for x in load_after],
        "csv": str(stats_file),
        "endpoints": rows,
    }
    print(json.dumps(summary, allow_nan=True))
    failures = sum(r["failures"] for r in rows if r["endpoint"] != "Aggregated")
    return 0 if code == 0 and failures == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
