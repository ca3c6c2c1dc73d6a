"""The soak over replicas (issue 57; docs/serving/replicas.md): etcd, 3 tiny
`tandem serve` replicas sharing one notes root and vllm-router (`consistent_hash` on
`X-User-ID`, as the replicas lane runs them: bench/replicas/cluster.py), then 1,000
simulated users of 2 or 3 turns each through the router (bench/replicas/drive.py). Per
user: time to first token and the cached fraction of their later turns; the router's
overhead against the same request sent straight to the user's replica; every note the
users were told was remembered checked on the shared root. Every process it started is
stopped at the end, on an error and on Ctrl-C.

    python -m bench.replicas.soak [--users 1000] [--concurrency 24] [--out DIR]
    tandem bench --replicas [--quick]

results.json, summary.md and replicas.png under bench/results/replicas/.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import re
import signal
import statistics
import tempfile
import time
from datetime import datetime
from pathlib import Path
from typing import Any

from bench.load.clients import percentile
from bench.paths import RESULTS_DIR
from bench.replicas.cluster import ROUTER_PIN, Cluster
from bench.replicas.drive import SoakPlan, UserRun, run_users, say
from bench.report import write_run

RESULTS = RESULTS_DIR / "replicas"
PLOT = "replicas.png"
CACHED_GOAL = 0.95


def _dist(values: list[float], low: bool = False) -> dict[str, Any]:
    """p50 and the worse tail of `values`: p95 and max for times; p5 (95 % of users at
    or above it) and min for cached fractions."""
    if low:
        return {"n": len(values), "p50": percentile(values, 50), "p5": percentile(values, 5),
                "min": min(values) if values else None}
    return {"n": len(values), "p50": percentile(values, 50), "p95": percentile(values, 95),
            "max": max(values) if values else None}


def figures(runs: list[UserRun], plan: SoakPlan, cluster: Cluster,
            wall_s: float) -> dict[str, Any]:
    turns = [t for r in runs for t in r.turns]
    statuses: dict[str, int] = {}
    errors: dict[str, int] = {}
    for turn in turns:
        statuses[str(turn.status)] = statuses.get(str(turn.status), 0) + 1
        if turn.error:
            errors[turn.error] = errors.get(turn.error, 0) + 1
    first = [r.turns[0].ttft_s for r in runs if r.turns and r.turns[0].ttft_s is not None]
    later = [statistics.mean(ts) for r in runs
             if (ts := [t.ttft_s for t in r.turns[1:] if t.ttft_s is not None])]
    # a user's cached fraction: their worst later turn
    cached = [min(fs) for r in runs if (fs := r.later_cached())]
    per_replica: dict[str, int] = {}
    for run in runs:
        per_replica[run.replica or "unknown"] = per_replica.get(run.replica or "unknown", 0) + 1
    return {
        "plan": {"users": plan.users, "replicas": plan.replicas,
                 "concurrency": plan.concurrency, "max_tokens": plan.max_tokens,
                 "budget_s": plan.budget_s, "pair_every": plan.pair_every,
                 "quiet_pairs": plan.quiet_pairs},
        "users_done": len(runs), "users_not_started": plan.users - len(runs),
        "requests": len(turns) + 2 * sum((r.routed_s is not None) + (
            r.quiet_routed_s is not None) for r in runs), "turns": len(turns),
        "turns_by_status": statuses, "errors": errors, "load_wall_s": round(wall_s, 1),
        "users_per_replica": per_replica,
        "ttft_first_turn_s": _dist(first), "ttft_later_turns_s": _dist(later),
        "later_turn_cached_fraction": {
            **_dist(cached, low=True),
            "users_at_or_above_goal": sum(c >= CACHED_GOAL for c in cached) / len(cached)
            if cached else None, "goal": CACHED_GOAL},
        "router_overhead_under_load": _overhead([(r.routed_s, r.direct_s) for r in runs]),
        "router_overhead_quiet": _overhead([(r.quiet_routed_s, r.quiet_direct_s)
                                            for r in runs]),
        "per_user": [{"user": r.user, "replica": r.replica,
                      "ttft_s": [None if t.ttft_s is None else round(t.ttft_s, 4)
                                 for t in r.turns],
                      "status": [t.status for t in r.turns],
                      "later_cached": [round(c, 4) for c in r.later_cached()],
                      "routed_s": _round(r.routed_s), "direct_s": _round(r.direct_s),
                      "quiet_routed_s": _round(r.quiet_routed_s),
                      "quiet_direct_s": _round(r.quiet_direct_s)} for r in runs],
        "notes": _notes_kept(runs, cluster),
    }


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 4)


def _overhead(timed: list[tuple[float | None, float | None]]) -> dict[str, Any]:
    """The router's pairs: each path's p50 time to first token, their ratio and the
    paired difference (routed minus direct, the same prompt on the same replica)."""
    pairs = [(a, b) for a, b in timed if a is not None and b is not None]
    routed = percentile([a for a, _ in pairs], 50)
    direct = percentile([b for _, b in pairs], 50)
    extra = [(a - b) * 1000 for a, b in pairs]
    return {"pairs": len(pairs), "routed_ttft_p50_s": routed, "direct_ttft_p50_s": direct,
            "ttft_ratio_of_p50s": routed / direct if routed and direct else None,
            "paired_extra_ms_p50": percentile(extra, 50),
            "paired_extra_ms_p95": percentile(extra, 95)}


ROUTED = re.compile(r"key='header:x-user-id:([^']+)' -> worker='([^']+)'")
RING = re.compile(r"Updated consistent hash ring with (\d+) workers")


def router_log(path: Path) -> dict[str, Any]:
    """What vllm-router's own log says of the run: each time it rebuilt its hash ring
    (a replica taken out by a failed health check, or put back) with how many workers,
    and the users it routed to more than one replica."""
    workers: dict[str, set[str]] = {}
    rings: list[int] = []
    try:
        lines = path.read_text(errors="replace").splitlines()
    except OSError:
        return {"read": False}
    for line in lines:
        if (routed := ROUTED.search(line)) is not None:
            workers.setdefault(routed[1], set()).add(routed[2])
        elif (ring := RING.search(line)) is not None:
            rings.append(int(ring[1]))
    moved = sorted(user for user, seen in workers.items() if len(seen) > 1)
    return {"read": True, "ring_workers": rings, "users_routed": len(workers),
            "users_on_more_than_one_replica": moved}


def _notes_kept(runs: list[UserRun], cluster: Cluster) -> dict[str, int]:
    """Each note the users were told was remembered, looked for on the shared root."""
    told = [r for r in runs if r.turns and r.turns[0].remembered]
    lost = 0
    for index_run in told:
        number = index_run.user.removeprefix("user")
        folder = cluster.shared / "notes" / index_run.user
        texts = "\n".join(p.read_text(errors="replace") for p in folder.rglob("*.md")
                          if "archive" not in p.parts) if folder.is_dir() else ""
        lost += f"jar number {int(number)}" not in texts
    return {"acknowledged": len(told), "lost": lost}


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value * 1000:.0f} ms"


def _frac(value: float | None) -> str:
    return "-" if value is None else f"{value:.3f}"


def markdown(results: dict[str, Any]) -> str:
    plan, first, later = results["plan"], results["ttft_first_turn_s"], \
        results["ttft_later_turns_s"]
    cached, env = results["later_turn_cached_fraction"], results["environment"]
    rows = [
        ("users done (of planned), concurrency",
         f"{results['users_done']} ({plan['users']}), {plan['concurrency']}"),
        ("replicas, users on each", f"{plan['replicas']}, " + ", ".join(
            f"{k}: {v}" for k, v in sorted(results["users_per_replica"].items()))),
        ("turns, by status", f"{results['turns']}, " + ", ".join(
            f"{k}: {v}" for k, v in sorted(results["turns_by_status"].items()))),
        ("first turn TTFT per user: p50 / p95 / max",
         f"{_ms(first['p50'])} / {_ms(first['p95'])} / {_ms(first['max'])}"),
        ("later turns' TTFT per user (mean of theirs): p50 / p95 / max",
         f"{_ms(later['p50'])} / {_ms(later['p95'])} / {_ms(later['max'])}"),
        ("later turns' cached fraction per user (their worst): p50 / p5 / min",
         f"{_frac(cached['p50'])} / {_frac(cached['p5'])} / {_frac(cached['min'])}"),
        (f"users whose every later turn is >= {cached['goal']} cached",
         _frac(cached["users_at_or_above_goal"])),
        *_overhead_rows("under load", results["router_overhead_under_load"]),
        *_overhead_rows("one at a time", results["router_overhead_quiet"]),
        *_router_rows(results.get("router_log") or {}),
        ("notes acknowledged, lost",
         f"{results['notes']['acknowledged']}, {results['notes']['lost']}"),
        ("load: wall, whole run", f"{results['load_wall_s']} s, {env['run_wall_s']} s"),
        ("load average (1 min) at start, end", f"{env['loadavg_start']}, {env['loadavg_end']}"),
    ]
    return "\n".join([
        "# Soak over replicas", "",
        f"{plan['replicas']} tiny replicas (`tandem serve --profile tiny`, memory on) sharing "
        f"one notes root, etcd for the leases, {env['router']} in front (`consistent_hash` "
        "on `X-User-ID`), all on loopback on one machine "
        f"({env['cpus']} CPUs, shared); {env['started']}. Each user: a memory command, "
        "then 1 or 2 more turns of the same conversation through the router; every "
        f"{plan['pair_every']}th user then sends the last turn again through the router and "
        "straight to their replica (alternating which goes first), and after the load "
        f"{plan['quiet_pairs']} users do the same one at a time. The cached fraction of a "
        "later turn is its cached tokens over the turn before's prompt tokens. The users' "
        "keys share one secret behind their own key ids (one scrypt to make the file; each "
        "replica still checks each key it meets with scrypt, on that user's first turn). "
        "`python -m bench.replicas.soak`.", "",
        "| | |", "| --- | --- |", *[f"| {k} | {v} |" for k, v in rows], ""])


def _fmt_ms(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f} ms"


def _router_rows(log: dict[str, Any]) -> list[tuple[str, str]]:
    if not log.get("read"):
        return []
    moved = log["users_on_more_than_one_replica"]
    return [("the router's hash ring, workers at each rebuild (its log)",
             " -> ".join(str(n) for n in log["ring_workers"]) or "-"),
            ("users the router sent to more than one replica (its log)",
             f"{len(moved)} of {log['users_routed']}" + (f": {', '.join(moved[:10])}"
                                                         if moved else ""))]


def _overhead_rows(when: str, over: dict[str, Any]) -> list[tuple[str, str]]:
    return [(f"router vs direct {when}, the same cached prompt: TTFT p50 routed / direct "
             "(ratio), pairs",
             f"{_ms(over['routed_ttft_p50_s'])} / {_ms(over['direct_ttft_p50_s'])} "
             f"({_frac(over['ttft_ratio_of_p50s'])}), {over['pairs']}"),
            (f"the router's extra per request {when}, paired: p50 / p95",
             f"{_fmt_ms(over['paired_extra_ms_p50'])} / "
             f"{_fmt_ms(over['paired_extra_ms_p95'])}")]


def plot(results: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    users = results["per_user"]
    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4))
    cached = sorted(min(u["later_cached"]) for u in users if u["later_cached"])
    left.plot(cached, [i / max(1, len(cached)) for i in range(len(cached))])
    left.axvline(CACHED_GOAL, color="grey", linestyle="--", label=f"goal {CACHED_GOAL}")
    left.set_xlabel("worst later turn's cached fraction")
    left.set_ylabel("share of users at or below")
    left.set_title("Affinity: each user's later turns")
    left.legend()
    top = 1.0
    for prefix, label in (("", "under load"), ("quiet_", "one at a time")):
        pairs = [(u[f"{prefix}direct_s"] * 1000, u[f"{prefix}routed_s"] * 1000)
                 for u in users if u[f"{prefix}routed_s"] and u[f"{prefix}direct_s"]]
        right.scatter([p[0] for p in pairs], [p[1] for p in pairs], s=5, label=label)
        top = max([max(p) for p in pairs] + [top])
    right.set_xscale("log")
    right.set_yscale("log")
    right.legend()
    right.plot([1, top], [1, top], color="grey", linestyle="--")
    right.set_xlabel("TTFT straight to the replica (ms)")
    right.set_ylabel("TTFT through the router (ms)")
    right.set_title("Router overhead, same cached prompt")
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def _loadavg() -> float:
    return os.getloadavg()[0]


def run_replicas_soak(plan: SoakPlan, out_dir: Path | None = None) -> dict[str, Any]:
    """Start the cluster, run the users, stop every process; write the run's files."""
    started, load_start = time.monotonic(), _loadavg()
    stamp = datetime.now().isoformat(timespec="seconds")
    users = [f"user{i:04d}" for i in range(plan.users)]
    # SIGTERM ends the run as Ctrl-C does, through the `finally` that stops the cluster
    previous = signal.signal(signal.SIGTERM, signal.default_int_handler)
    try:
        with tempfile.TemporaryDirectory(prefix="tandem-replicas-soak-") as tmp:
            cluster = Cluster(Path(tmp), replicas=plan.replicas, lease_ttl_s=10.0,
                              lease_idle_s=60.0)
            try:
                say("starting etcd")
                cluster.start_etcd()
                cluster.make_replicas()
                say(f"making {len(users)} keys (one scrypt: they share a secret)")
                cluster.keys = cluster.add_keys(users, one_secret=True)
                for node in cluster.nodes:
                    say(f"starting {node.name}")
                    cluster.start_replica(node)
                    cluster.wait_replica(node)
                cluster.start_router()
                say(f"{len(users)} users, {plan.concurrency} at once, through {cluster.router_url}")
                load_started = time.monotonic()

                def progress(count: int, done: list[UserRun]) -> None:
                    if count % 50 == 0 or count == len(users):
                        spent = time.monotonic() - load_started
                        say(f"{count}/{len(users)} users in {spent:.0f} s "
                            f"(~{spent / count * (len(users) - count):.0f} s left)")

                runs = asyncio.run(run_users(cluster, users, plan, progress))
                results = figures(runs, plan, cluster, time.monotonic() - load_started)
            finally:
                say("stopping the cluster")
                cluster.stop()
            results["router_log"] = router_log(cluster.root / "router.log")
    finally:
        signal.signal(signal.SIGTERM, previous)
    results["environment"] = {"started": stamp, "cpus": os.cpu_count(), "router": ROUTER_PIN,
                              "loadavg_start": round(load_start, 2),
                              "loadavg_end": round(_loadavg(), 2),
                              "run_wall_s": round(time.monotonic() - started, 1)}
    out = out_dir or RESULTS
    print(write_run(out, results, markdown(results), lambda folder: plot(results,
                                                                          folder / PLOT)))
    say(f"written to {out}")
    return results


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.replicas.soak",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("--users", type=int, default=1000)
    parser.add_argument("--replicas", type=int, default=3)
    parser.add_argument("--concurrency", type=int, default=24)
    parser.add_argument("--budget", type=float, default=480.0,
                        help="seconds of load after which no new user starts")
    parser.add_argument("--out", type=Path, help=f"results folder (default {RESULTS})")
    args = parser.parse_args(argv)
    plan = SoakPlan(users=args.users, replicas=args.replicas, concurrency=args.concurrency,
                    budget_s=args.budget)
    try:
        run_replicas_soak(plan, args.out)
    except KeyboardInterrupt:
        say("interrupted: every process it started is stopped")
        return 130
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
