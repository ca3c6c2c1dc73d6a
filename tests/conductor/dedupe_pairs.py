"""Labelled set for choosing the BM25 dedupe threshold (see conductor/notes/dedupe.py).

``BASE`` holds stored notes on distinct topics. Each probe is a new note written later in
the same scope, labelled ``dup`` (the same fact said again, differently worded: it should
become a revision of the base note) or ``new`` (another fact on the same topic, sharing
words with the base note: it should be stored as a note of its own). Titles of probes
never equal a base title after normalisation, so only BM25 can decide.
"""

from __future__ import annotations

# (title, body, tags)
BASE: list[tuple[str, str, list[str]]] = [
    (
        "Run the test suite with make test",
        "The project's tests run with `make test`, which calls pytest -q with the tiny "
        "profile. Do not call pytest directly: the Makefile sets TANDEM_HOME to a temp dir.",
        ["tests", "make"],
    ),
    (
        "User prefers tabs for indentation in Go files",
        "When editing Go code, the user wants tabs, never spaces, as gofmt does.",
        ["style", "go"],
    ),
    (
        "Staging database runs PostgreSQL 15 on port 5433",
        "The staging database is PostgreSQL 15 listening on port 5433 on host db-staging; "
        "production stays on the default port.",
        ["database", "staging"],
    ),
    (
        "Answer in British English spelling",
        "The user asked for British spelling in every answer: colour, organise, behaviour.",
        ["language"],
    ),
    (
        "CI fails when the lockfile is out of date",
        "CI runs `uv lock --check`; a changed pyproject without `uv lock` makes the build "
        "fail at the first step.",
        ["ci", "uv"],
    ),
    (
        "Release checklist lives in docs/RELEASE.md",
        "Before tagging a release, follow docs/RELEASE.md: bump the version, update the "
        "changelog, run the smoke tests, then tag.",
        ["release"],
    ),
    (
        "The user's laptop has 16 GB of RAM and no GPU",
        "Model choices must fit a laptop with 16 GB of RAM and no GPU; prefer the CPU "
        "build and small quantised models.",
        ["hardware"],
    ),
    (
        "Frontend is built with Vite and served from dist/",
        "The web frontend builds with `npm run build` (Vite) into dist/, which the FastAPI "
        "app serves as static files.",
        ["frontend", "vite"],
    ),
    (
        "Never push directly to main",
        "The user wants every change to go through a pull request; direct pushes to the "
        "main branch are not allowed.",
        ["git"],
    ),
    (
        "Migration 0042 is half applied on staging",
        "The 0042 migration added the orders.currency column on staging but the backfill "
        "did not run; rerun the backfill before the next deploy.",
        ["migration", "staging"],
    ),
    (
        "Logs rotate daily and keep 14 days",
        "Application logs in /var/log/app rotate every day via logrotate and keep fourteen "
        "days of history, compressed with gzip.",
        ["logging", "ops"],
    ),
    (
        "The user likes short answers without preamble",
        "Keep answers short and go straight to the point; no introduction paragraph, no "
        "summary at the end unless asked.",
        ["style"],
    ),
    (
        "API rate limit is 100 requests per minute per key",
        "The public API allows 100 requests per minute for each API key and answers 429 "
        "with a Retry-After header beyond that.",
        ["api", "limits"],
    ),
    (
        "Docker images are pushed to the internal registry",
        "Images are tagged registry.internal/team/app:<sha> and pushed by the deploy job; "
        "never push latest by hand.",
        ["docker", "deploy"],
    ),
    (
        "Timezone for scheduling meetings is Europe/Berlin",
        "When proposing meeting times, the user works in the Europe/Berlin time zone and "
        "prefers mornings.",
        ["calendar"],
    ),
    (
        "Feature flags are read from flags.yaml at startup",
        "Feature flags come from config/flags.yaml, read once at startup; changing a flag "
        "needs a restart of the service.",
        ["config", "flags"],
    ),
]

# (base index, label, title, body, tags)
PROBES: list[tuple[int, str, str, str, list[str]]] = [
    (
        0,
        "dup",
        "How to run the tests",
        "Run the project's tests with make test; it calls pytest -q with the tiny profile "
        "and sets TANDEM_HOME to a temp dir, so do not call pytest directly.",
        ["tests"],
    ),
    (
        0,
        "new",
        "Slow tests are marked with pytest.mark.slow",
        "Tests that need the engine are marked slow; pytest -m 'not slow' skips them.",
        ["tests"],
    ),
    (
        1,
        "dup",
        "Go indentation: tabs not spaces",
        "The user wants tabs for indentation in Go code, like gofmt, never spaces.",
        ["go"],
    ),
    (
        1,
        "new",
        "User wants Go errors wrapped with fmt.Errorf",
        "In Go code the user wants errors wrapped with fmt.Errorf and %w.",
        ["go"],
    ),
    (
        2,
        "dup",
        "Staging Postgres listens on 5433",
        "The staging PostgreSQL 15 database on db-staging listens on port 5433, not the "
        "default port.",
        ["database"],
    ),
    (
        2,
        "new",
        "Staging database is reset every Sunday",
        "The staging database on db-staging is restored from a snapshot every Sunday night.",
        ["staging"],
    ),
    (
        3,
        "dup",
        "Use British spelling in answers",
        "Every answer should use British English spelling (colour, organise, behaviour).",
        ["language"],
    ),
    (
        3,
        "new",
        "Answer in German when the user writes German",
        "If the user writes in German, answer in German.",
        ["language"],
    ),
    (
        4,
        "dup",
        "Out-of-date uv lockfile breaks CI",
        "CI checks the lockfile with uv lock --check, so changing pyproject without running "
        "uv lock makes the build fail.",
        ["ci"],
    ),
    (
        4,
        "new",
        "CI caches the uv download folder",
        "The CI job caches ~/.cache/uv between runs to save time.",
        ["ci", "uv"],
    ),
    (
        5,
        "dup",
        "Follow docs/RELEASE.md before tagging",
        "The release checklist is docs/RELEASE.md: bump the version, update the changelog, "
        "run smoke tests, tag.",
        ["release"],
    ),
    (
        5,
        "new",
        "Releases are published on Tuesdays",
        "The team publishes a release every second Tuesday.",
        ["release"],
    ),
    (
        6,
        "dup",
        "Laptop: 16 GB RAM, no GPU",
        "The user's laptop has no GPU and 16 GB of RAM, so models must be small quantised "
        "CPU models.",
        ["hardware"],
    ),
    (
        6,
        "new",
        "The user also has a desktop with an RTX 4090",
        "For bigger models the user can use a desktop with an RTX 4090 GPU.",
        ["hardware"],
    ),
    (
        7,
        "dup",
        "Vite builds the frontend into dist",
        "npm run build runs Vite and writes the web frontend to dist/, served as static files "
        "by the FastAPI app.",
        ["frontend"],
    ),
    (
        7,
        "new",
        "Frontend tests use Vitest",
        "Run the frontend unit tests with npm test, which runs Vitest.",
        ["frontend"],
    ),
    (
        8,
        "dup",
        "No direct pushes to main",
        "Every change goes through a pull request; the user never wants direct pushes to main.",
        ["git"],
    ),
    (
        8,
        "new",
        "Squash merge pull requests",
        "The user merges pull requests with squash merge and a conventional commit title.",
        ["git"],
    ),
    (
        9,
        "dup",
        "Backfill for migration 0042 still pending on staging",
        "On staging, migration 0042 added orders.currency but its backfill never ran; run the "
        "backfill before deploying.",
        ["migration"],
    ),
    (
        9,
        "new",
        "Migration 0043 adds an index on orders.created_at",
        "The next migration, 0043, creates an index on orders.created_at.",
        ["migration"],
    ),
    (
        10,
        "dup",
        "Log rotation: daily, 14 days kept",
        "logrotate rotates /var/log/app daily and keeps 14 days of gzip-compressed logs.",
        ["logging"],
    ),
    (
        10,
        "new",
        "Logs are shipped to Loki",
        "Promtail ships the application logs to the Loki instance on the ops host.",
        ["logging"],
    ),
    (
        11,
        "dup",
        "Short answers, no preamble",
        "The user likes short, to-the-point answers with no introduction and no summary "
        "unless asked.",
        ["style"],
    ),
    (
        11,
        "new",
        "The user likes code examples in answers",
        "When explaining an API, include a small runnable code example.",
        ["style"],
    ),
    (
        12,
        "dup",
        "Public API: 100 requests/minute per key",
        "Each API key may make 100 requests per minute; beyond that the API answers 429 with "
        "Retry-After.",
        ["api"],
    ),
    (
        12,
        "new",
        "API keys expire after 90 days",
        "API keys of the public API expire 90 days after creation and must be rotated.",
        ["api"],
    ),
    (
        13,
        "dup",
        "Deploy job pushes images to registry.internal",
        "The deploy job tags images registry.internal/team/app:<sha> and pushes them; do not "
        "push latest by hand.",
        ["docker"],
    ),
    (
        13,
        "new",
        "Docker builds use BuildKit cache mounts",
        "The Dockerfile uses BuildKit cache mounts for pip; set DOCKER_BUILDKIT=1.",
        ["docker"],
    ),
    (
        14,
        "dup",
        "User schedules meetings in Berlin time",
        "Propose meeting times in the Europe/Berlin time zone; the user prefers mornings.",
        ["calendar"],
    ),
    (14, "new", "No meetings on Fridays", "The user keeps Fridays free of meetings.", ["calendar"]),
    (
        15,
        "dup",
        "flags.yaml is only read at startup",
        "config/flags.yaml holds the feature flags and is read once at startup, so a flag "
        "change needs a service restart.",
        ["flags"],
    ),
    (
        15,
        "new",
        "Feature flag new_checkout is on for 10% of users",
        "The new_checkout flag is rolled out to ten percent of users.",
        ["flags"],
    ),
]
