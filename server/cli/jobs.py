"""``tandem jobs ...``: the cognition jobs from a terminal.

    tandem jobs list  [--user U] [--home H] [--json]
    tandem jobs run   JOB [--user U] [--url URL] [--profile P]
    tandem jobs model JOB (--inherit | BASE_URL --model NAME [--api-key-env VAR])

`run` asks the running server (`--url`, default http://127.0.0.1:8000, with
$TANDEM_API_KEY when set); when none answers it starts its own engine from the profile.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
from collections.abc import Callable
from dataclasses import asdict
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx

from conductor.memory.types import (
    INHERIT,
    JOBS,
    JobController,
    JobModels,
    LayerFiles,
    default_home,
    endpoint_model,
    read_job_state,
)
from server.cli.notes import user_or_refusal

DEFAULT_URL = "http://127.0.0.1:8000"


def register(subparsers: Any, default_profile: Callable[[], str]) -> None:
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--user", default=None, help="whose layers (default: "
                        "$TANDEM_USER, else the OS user name)")
    common.add_argument("--home", default=None,
                        help="Tandem home (default: $TANDEM_HOME or ~/.tandem)")
    jobs = subparsers.add_parser("jobs", help="cognition jobs: list, run, choose a model")
    sub = jobs.add_subparsers(dest="jobs_command", metavar="COMMAND", required=True)
    listed = sub.add_parser("list", parents=[common], help="each job: triggers, dirty count, "
                            "last run, model")
    listed.add_argument("--json", action="store_true", help="print JSON")
    run = sub.add_parser("run", parents=[common], help="run a job now")
    run.add_argument("job", choices=list(JOBS))
    run.add_argument("--url", default=DEFAULT_URL, help=f"the server (default {DEFAULT_URL})")
    run.add_argument("--profile", default=None, help="the profile of an engine of its own "
                     "when no server answers (default: the default profile)")
    model = sub.add_parser("model", parents=[common], help="run a job on the served engine "
                           "(--inherit) or on an OpenAI-compatible endpoint")
    model.add_argument("job", choices=list(JOBS))
    model.add_argument("base_url", nargs="?", help="the endpoint, e.g. http://host:8001/v1")
    model.add_argument("--inherit", action="store_true", help="run it on the served engine")
    model.add_argument("--model", dest="model_name", help="the endpoint's model name")
    model.add_argument("--api-key-env", help="the environment variable holding its API key")
    jobs.set_defaults(func=lambda args: run_command(args, default_profile))


def _fail(message: str) -> int:
    print(f"tandem jobs: {message}", file=sys.stderr)
    return 2


def run_command(args: argparse.Namespace, default_profile: Callable[[], str]) -> int:
    user, code = user_or_refusal(args.user, "jobs")  # the folder the server reads
    if user is None:
        return code
    home = Path(args.home).expanduser() if args.home else default_home()
    root = home / "memory"
    models = JobModels(root / "jobs" / "models.json")
    if args.jobs_command == "list":
        return _list(root, user, models, args.json)
    if args.jobs_command == "model":
        if args.inherit == bool(args.base_url):
            return _fail("give --inherit, or a base URL with --model")
        try:
            chosen = INHERIT if args.inherit else endpoint_model(
                args.base_url, args.model_name or "", args.api_key_env)
        except ValueError as exc:
            return _fail(str(exc))
        models.set(args.job, chosen)
        print(f"{args.job}: {chosen.describe()}")
        return 0
    return _run(args, home, user, default_profile)


def _list(root: Path, user: str, models: JobModels, as_json: bool) -> int:
    controller = JobController(root, lambda: datetime.now(UTC))
    state = read_job_state(LayerFiles(root, user))
    rows = [{"job": name, "schedule_utc_hours": list(spec.hours),
             "state_threshold": spec.threshold, "dirty": controller.dirty(user, spec),
             "last_run": state.last_run.get(name) if state else None,
             "model": models.get(name).describe()} for name, spec in JOBS.items()]
    if as_json:
        print(json.dumps(rows, indent=1))
        return 0
    for row in rows:
        last = row["last_run"]
        when = f"{last['outcome']} at {last['at']}" if last else "never run"
        hours = ", ".join(f"{h:02d}:00" for h in row["schedule_utc_hours"])
        print(f"{row['job']:<28} dirty {row['dirty']:>3}/{row['state_threshold']:<3} "
              f"at {hours} UTC; {when}; model {row['model']}")
    return 0


def _run(args: argparse.Namespace, home: Path, user: str,
         default_profile: Callable[[], str]) -> int:
    key = os.environ.get("TANDEM_API_KEY")
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    try:
        response = httpx.post(f"{args.url.rstrip('/')}/v1/conductor/jobs/{args.job}/run",
                              json={"user": user}, headers=headers, timeout=None)
    except httpx.TransportError:
        print(f"tandem jobs: no server at {args.url}; starting an engine of its own",
              file=sys.stderr)
        record = asyncio.run(_run_on_own_engine(args.profile or default_profile(), home, user,
                                                args.job))
    else:
        if response.status_code != 200:
            try:
                message = response.json()["error"]["message"]
            except (ValueError, KeyError, TypeError):
                message = response.text[:200]
            return _fail(f"the server answered {response.status_code}: {message}")
        record = response.json()
    print(json.dumps(record, indent=1))
    return 0 if record.get("outcome") in ("changed", "unchanged") else 1


async def _run_on_own_engine(profile_name: str, home: Path, user: str, job: str) -> dict:
    from conductor.memory.services import MemoryServices
    from conductor.memory.settings import MemorySettings
    from engine.engine import Engine
    from engine.profiles import load_profile
    from server.idle.jobs import JobService

    profile = load_profile(profile_name)
    engine = await Engine.start(profile, home, progress=lambda m: print(f"[tandem] {m}",
                                                                        file=sys.stderr))
    try:
        service = JobService(MemoryServices(home, MemorySettings(user_name=user)), engine,
                             profile)
        return asdict(await service.run(user, job))
    finally:
        engine.shutdown()
