# ruff: noqa: E501  (data: one note template a line)
"""Builds pairs.jsonl, the labelled set for dedupe (issue 24): run it after editing.

Each fact family has paraphrase templates (same fact, other words) and slots. A pair is
(first note, second note, label): `same` when the second says the first's fact again (a
paraphrase with every slot equal, or a corrected wording), `different` when one slot
differs (a number, a name, a path, a version, a person, a time, an environment...). The
first note is added, then the second; `same` should revise the first, `different` must
leave it live. Hand-written pairs follow the generated ones, the issue's five among them.
"""

from __future__ import annotations

import json
from pathlib import Path

# kind, [(title, body), ...paraphrases], {slot: [values...]}; slot values are strings.
FAMILIES: list[tuple[str, list[tuple[str, str]], dict[str, list[str]]]] = [
    ("registry", [
        ("{env} database port is {port}", "The {env} database listens on port {port}."),
        ("{env} db listens on port {port}", "Connect to the {env} Postgres on port {port}."),
        ("Port {port} for the {env} database", "Use port {port} when connecting to the {env} database."),
    ], {"env": ["staging", "prod", "dev"], "port": ["5433", "5432", "6543"]}),
    ("reference", [
        ("{thing} go through the {branch} branch", "All {thing} are merged through the {branch} branch."),
        ("{thing} are merged via {branch}", "We send {thing} through the {branch} branch."),
    ], {"thing": ["deploys", "hotfixes", "feature changes"], "branch": ["staging", "release", "main"]}),
    ("reference", [
        ("The user's {pet} is called {name}", "The user has a {pet} named {name}."),
        ("User has a {pet} named {name}", "The user's {pet}'s name is {name}."),
    ], {"pet": ["dog", "cat", "parrot"], "name": ["Biscuit", "Pepper", "Mango"]}),
    ("gotcha", [
        ("CI needs {amount} of memory", "The CI runners need {amount} of memory for the build."),
        ("The build on CI requires {amount} RAM", "Give the CI build {amount} of RAM or it fails."),
    ], {"amount": ["8 GB", "16 GB", "4 GB"]}),
    ("reference", [
        ("Use {tool} for {task}", "The project uses {tool} for {task}."),
        ("{task} is done with {tool}", "Run {tool} for {task} in this repository."),
    ], {"tool": ["ruff", "black", "mypy"], "task": ["linting", "formatting", "type checks"]}),
    ("reference", [
        ("The project needs {runtime} {version}", "Builds need {runtime} {version} installed."),
        ("{runtime} {version} is required", "Install {runtime} {version} before building the project."),
    ], {"runtime": ["node", "python", "go"], "version": ["20", "18", "3.11", "1.22"]}),
    ("runbook", [
        ("Config lives in {path}", "The service reads its configuration from {path}."),
        ("The service configuration file is {path}", "Edit {path} to change the service configuration."),
    ], {"path": ["config/app.yaml", "config/app.toml", "/etc/app/app.yaml", "settings/app.yaml"]}),
    ("registry", [
        ("{env} API host is {host}", "The {env} API is served from {host}."),
        ("The {env} API runs on {host}", "Point {env} clients at {host} for the API."),
    ], {"env": ["staging", "production"], "host": ["api.staging.example.com", "api.example.com", "api-2.example.com"]}),
    ("reference", [
        ("{person} reviews {area} changes", "Changes to {area} need a review from {person}."),
        ("{area} changes are reviewed by {person}", "Ask {person} to review anything touching {area}."),
    ], {"person": ["Alice", "Bob", "Priya"], "area": ["payments", "billing", "auth"]}),
    ("runbook", [
        ("The nightly {job} runs at {time}", "The {job} job starts every night at {time}."),
        ("{job} job scheduled for {time}", "Every night at {time} the {job} job runs."),
    ], {"job": ["backup", "export", "cleanup"], "time": ["02:00", "03:30", "23:00"]}),
    ("reference", [
        ("The API timeout is {secs} seconds", "Requests to the API time out after {secs} seconds."),
        ("API requests time out after {secs} s", "The API client gives up after {secs} seconds."),
    ], {"secs": ["30", "10", "60"]}),
    ("registry", [
        ("The {env} cluster is {cluster}", "{env} workloads run on the {cluster} cluster."),
        ("{env} runs on cluster {cluster}", "Deploy {env} to the {cluster} cluster."),
    ], {"env": ["staging", "prod"], "cluster": ["eu-west-1", "us-east-1", "ap-south-1"]}),
    ("reference", [
        ("The user prefers {style}", "When writing code the user prefers {style}."),
        ("User likes {style} in code", "Write code with {style}; the user asked for it."),
    ], {"style": ["tabs for indentation", "spaces for indentation", "single quotes", "double quotes"]}),
    ("reference", [
        ("Image tag is {tag}", "Deploy the container image tagged {tag}."),
        ("Deploy image {tag}", "The container to deploy is tagged {tag}."),
    ], {"tag": ["v1.4.2", "v1.4.3", "v2.0.0"]}),
    ("runbook", [
        ("Run migrations with {cmd}", "Database migrations are applied with `{cmd}`."),
        ("Apply database migrations using {cmd}", "Use `{cmd}` to run the migrations."),
    ], {"cmd": ["make migrate", "alembic upgrade head", "make db-upgrade"]}),
    ("reference", [
        ("The user's timezone is {tz}", "The user works in the {tz} timezone."),
        ("User is in {tz}", "Schedule things for the user in {tz} time."),
    ], {"tz": ["Europe/Berlin", "America/New_York", "Asia/Tokyo"]}),
    ("reference", [
        ("Max upload size is {size}", "Uploads larger than {size} are rejected by the API."),
        ("The API rejects uploads over {size}", "Keep uploads under {size}; the API refuses bigger ones."),
    ], {"size": ["10 MB", "25 MB", "100 MB"]}),
    ("registry", [
        ("The {env} bucket is {bucket}", "Files for {env} are stored in the {bucket} bucket."),
        ("{env} files live in bucket {bucket}", "Upload {env} files to {bucket}."),
    ], {"env": ["staging", "prod"], "bucket": ["acme-staging-files", "acme-prod-files", "acme-archive"]}),
    ("reference", [
        ("Retry {count} times on {error}", "The client retries {count} times when it sees {error}."),
        ("On {error} the client retries {count} times", "After {error} we retry up to {count} times."),
    ], {"count": ["3", "5"], "error": ["timeouts", "rate limits", "connection resets"]}),
    ("reference", [
        ("Call the user {nick}", "The user wants to be addressed as {nick}."),
        ("The user goes by {nick}", "Address the user as {nick}."),
    ], {"nick": ["Sam", "Alex", "Dr. Kim"]}),
]


def _fill(template: tuple[str, str], values: dict[str, str]) -> tuple[str, str]:
    return template[0].format(**values), template[1].format(**values)


def _pairs() -> list[dict]:
    pairs: list[dict] = []
    for kind, templates, slots in FAMILIES:
        names = list(slots)
        base = {n: slots[n][0] for n in names}
        first = _fill(templates[0], base)
        # Restatements: every other template with the same values, and each template with
        # the second value set (so restatements are not all of one value).
        second_values = {n: slots[n][1] if len(slots[n]) > 1 else slots[n][0] for n in names}
        for template in templates[1:]:
            pairs.append(_pair(kind, first, _fill(template, base), "same", "paraphrase"))
            pairs.append(_pair(kind, _fill(templates[0], second_values),
                               _fill(template, second_values), "same", "paraphrase"))
        # Near-misses: one slot changed, same template and a paraphrase template.
        for name in names:
            for value in slots[name][1:]:
                changed = {**base, name: value}
                pairs.append(_pair(kind, first, _fill(templates[0], changed), "different",
                                   f"{name} differs"))
                pairs.append(_pair(kind, first, _fill(templates[-1], changed), "different",
                                   f"{name} differs, reworded"))
    return pairs


def _pair(kind: str, first: tuple[str, str], second: tuple[str, str], label: str,
          why: str) -> dict:
    return {"kind": kind, "first": {"title": first[0], "body": first[1]},
            "second": {"title": second[0], "body": second[1]}, "label": label, "why": why}


# Hand-written: corrected wording, typos, added detail that restates; and the five.
HAND: list[tuple[str, tuple[str, str], tuple[str, str], str, str]] = [
    ("registry", ("staging db port is 5433", "The staging database listens on port 5433."),
     ("prod db port is 5432", "The prod database listens on port 5432."), "different", "issue"),
    ("reference", ("deploys go through the staging branch", "Deploys are merged via staging."),
     ("hotfixes go through the release branch", "Hotfixes are merged via release."),
     "different", "issue"),
    ("reference", ("the user's dog is called Biscuit", "The user has a dog, Biscuit."),
     ("the user's cat is called Pepper", "The user has a cat, Pepper."), "different", "issue"),
    ("gotcha", ("CI needs 8 GB of memory", "CI runners need 8 GB of memory."),
     ("CI needs node 20", "CI runners need node 20."), "different", "issue"),
    ("reference", ("use ruff for linting", "Lint with ruff."),
     ("use black for formatting", "Format with black."), "different", "issue"),
    ("gotcha", ("Staging databse port is 5433", "The staging databse listens on 5433."),
     ("Staging database port is 5433", "The staging database listens on port 5433."),
     "same", "typo corrected"),
    ("reference", ("Tests run with make test", "Run the suite with make test."),
     ("Run the tests with make test", "The test suite runs with `make test`, not pytest."),
     "same", "restated with detail"),
    ("reference", ("User wants short answers", "Keep answers short."),
     ("The user prefers brief answers", "Answers should be brief and to the point."),
     "same", "synonyms"),
    ("runbook", ("Restart the worker with make restart", "make restart restarts the worker."),
     ("Worker restart: make restart", "To restart the worker, run make restart."),
     "same", "reordered"),
    ("reference", ("Logs go to /var/log/app", "The app writes its logs to /var/log/app."),
     ("App logs are written to /var/log/app", "Look in /var/log/app for the app's logs."),
     "same", "paraphrase with path"),
    ("reference", ("Logs go to /var/log/app", "The app writes its logs to /var/log/app."),
     ("Logs go to /var/log/worker", "The worker writes its logs to /var/log/worker."),
     "different", "path differs"),
    ("registry", ("Grafana is at grafana.internal:3000", "Dashboards: grafana.internal:3000."),
     ("Grafana is at grafana.internal:3001", "Dashboards: grafana.internal:3001."),
     "different", "port in a host differs"),
    ("reference", ("The release is cut on Thursday", "We cut releases every Thursday."),
     ("The release is cut on Tuesday", "We cut releases every Tuesday."),
     "different", "day differs"),
    ("reference", ("The release is cut on Thursday", "We cut releases every Thursday."),
     ("Releases are cut every Thursday", "Thursday is release day."), "same", "paraphrase"),
    ("reference", ("The user is allergic to peanuts", "Never suggest recipes with peanuts."),
     ("The user is allergic to shellfish", "Never suggest recipes with shellfish."),
     "different", "thing differs"),
    ("reference", ("Sentry project is acme-api", "Errors go to the acme-api Sentry project."),
     ("Sentry project is acme-worker", "Errors go to the acme-worker Sentry project."),
     "different", "identifier differs"),
    ("reference", ("Use pnpm, not npm", "The frontend uses pnpm; npm breaks the lockfile."),
     ("Use pnpm instead of npm", "Install frontend packages with pnpm rather than npm."),
     "same", "paraphrase"),
    ("gotcha", ("Feature flag new_checkout is off in prod", "new_checkout stays off in prod."),
     ("Feature flag new_search is off in prod", "new_search stays off in prod."),
     "different", "identifier differs"),
]

# Twenty-two distinct facts of one session (the cap probe): every pair differs.
PROBES = [(f"cap probe {n:02d}", f"Probe number {n:02d} measured {100 + 7 * n} requests a "
           f"second on host node-{n:02d}.") for n in range(22)]


def build() -> list[dict]:
    pairs = _pairs()
    pairs += [_pair(kind, a, b, label, why) for kind, a, b, label, why in HAND]
    pairs += [_pair("reference", PROBES[n], PROBES[n + 1], "different", "cap probe")
              for n in range(len(PROBES) - 1)]
    return pairs


if __name__ == "__main__":
    out = Path(__file__).with_name("pairs.jsonl")
    rows = build()
    out.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows))
    same = sum(r["label"] == "same" for r in rows)
    print(f"{len(rows)} pairs ({same} same, {len(rows) - same} different) -> {out}")
