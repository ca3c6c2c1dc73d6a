"""The synthetic coding conversation, the 50 notes a store starts with, and the prompts."""

from __future__ import annotations

from dataclasses import dataclass

from conductor.hidden.tail_notes import content_words
from conductor.notes import NoteStore


@dataclass(frozen=True)
class Turn:
    """One user message and the answer the scripted (tiny) profile forces."""

    user: str
    answer: str


BASE_SYSTEM = (
    "You are a coding assistant working in the user's repository, the quayside service: "
    "a Python 3.11 FastAPI app with Postgres, alembic migrations, a click CLI and pytest. "
    "Answer briefly and concretely; show commands and file paths when they help."
)

TURNS: tuple[Turn, ...] = (
    Turn("I'm picking up the quayside service again. The pytest suite fails on my laptop "
         "with a Postgres connection error. Where do the tests get their database from?",
         "The tests read DATABASE_URL from tests/conftest.py and expect the compose "
         "database on port 5433. Start it with `docker compose up -d db`, then run pytest."),
    Turn("Right, the docker compose database. How do I run only the migration tests, and "
         "what is the alembic revision naming rule?",
         "Run `pytest -m migrations`. Revisions are named `YYYYMMDD_short_slug` and each "
         "one needs a downgrade.\n"
         '<tandem_memory op="add" scope="session" kind="gotcha">\n'
         "title: tests need the compose database\n\n"
         "Start `docker compose up -d db` before pytest; the suite uses port 5433.\n"
         "</tandem_memory>"),
    Turn("Now the API: the /orders endpoint returns 500 when the currency field is missing. "
         "Where is request validation done for orders?",
         "Validation lives in quayside/api/schemas.py; OrderIn declares currency as "
         "optional, so the handler crashes later. Make it required and return 422."),
    Turn("Let's add a retry to the payment webhook client. Which HTTP client library do we "
         "use, and what are the timeout conventions?",
         "The webhook client uses httpx with a shared AsyncClient in quayside/http.py. "
         "Timeouts are explicit: 5 s connect, 10 s read. Wrap the send in tenacity."),
    Turn("How should I name the new feature flag for webhook retries, and where are "
         "feature flags registered?",
         "Flags are registered in quayside/flags.py as snake_case with the team prefix, "
         "so `payments_webhook_retries`. Default it to off and add it to flags.md."),
    Turn("The CI pipeline is slow. Which jobs run on every pull request and how is the "
         "pip cache keyed?",
         "Every pull request runs lint, unit and migrations. The pip cache is keyed on "
         "requirements.lock's hash; the migrations job has no cache, which is the slow part."),
    Turn("Write the changelog entry for the webhook retry change. What format does the "
         "changelog use?",
         "The changelog follows Keep a Changelog under Unreleased. Entry: `### Added` then "
         "`- Retries for payment webhooks behind payments_webhook_retries (#412)`."),
    Turn("Before I open the pull request: what are the release steps, and who reviews "
         "payment changes?",
         "Releases are tagged from main with `make release VERSION=x.y.z`; payment changes "
         "need a review from the payments team and a green staging deploy first."),
)

# The same project, a topic kept for two turns: each second message follows up on the
# first (as a developer does while working one thing through), so the notes it needs can
# be guessed from the turn before it. The prefetch is measured on both conversations.
THREADED_TURNS: tuple[Turn, ...] = (
    Turn("I'm picking up the quayside service again. The pytest suite fails on my laptop "
         "with a Postgres connection error. Where do the tests get their database from?",
         "The tests read DATABASE_URL from tests/conftest.py and expect the compose "
         "database on port 5433. Start it with `docker compose up -d db`, then run pytest."),
    Turn("That fixed it, but a few tests now fail with too many connections open. How is "
         "the database pool configured for the tests?",
         "The app's engine uses a pool of 10; tests swap in NullPool in conftest.py so "
         "nothing is held between tests. A test that builds its own engine skips that."),
    Turn("Let's add a retry to the payment webhook client. Which HTTP client library do we "
         "use, and what are the timeout conventions?",
         "The webhook client uses httpx with a shared AsyncClient in quayside/http.py. "
         "Timeouts are explicit: 5 s connect, 10 s read. Wrap the send in tenacity."),
    Turn("I wrapped the send in tenacity with retry on Exception. Shutdown now hangs "
         "sometimes. Could the retries be catching cancellation?",
         "Yes: retrying on Exception also retries CancelledError. Retry on "
         "httpx.TransportError only, and close the client in the lifespan handler."),
    Turn("How should I name the new feature flag for webhook retries, and where are "
         "feature flags registered?",
         "Flags are registered in quayside/flags.py as snake_case with the team prefix, "
         "so `payments_webhook_retries`. Default it to off and add it to flags.md."),
    Turn("There is also an old flag for the v1 checkout nobody uses. How do I remove a "
         "feature flag properly?",
         "Delete its checks and its declaration in quayside/flags.py, and note the removal "
         "in the changelog."),
    Turn("The CI pipeline is slow. Which jobs run on every pull request and how is the "
         "pip cache keyed?",
         "Every pull request runs lint, unit and migrations. The pip cache is keyed on "
         "requirements.lock's hash; the migrations job has no cache, which is the slow part."),
    Turn("Since yesterday every job misses the pip cache, though I only sorted the lock "
         "file. Why would that bust it?",
         "The key hashes requirements.lock, so reordering its lines changes the hash and "
         "every job starts cold once."),
)

RECALL_QUESTIONS: tuple[Turn, ...] = (
    Turn("What do you remember about the quayside project and how I like to work?",
         "I remember the compose database for tests, the alembic naming rule and your "
         "preference for short answers with commands."),
    Turn("Remind me what you know about my setup and this repository's conventions.",
         "Tests use the compose Postgres on 5433, flags live in quayside/flags.py and the "
         "changelog follows Keep a Changelog."),
)

# (kind, title, body): what a store holds after some weeks on the project.
NOTES: tuple[tuple[str, str, str], ...] = (
    ("rule", "answer briefly with commands", "The user wants short answers that show the "
     "exact command first and the explanation after."),
    ("rule", "never push to main directly", "The user asked that every change goes through "
     "a pull request, even one-line fixes."),
    ("rule", "use British spelling in docs", "Documentation and changelog entries use "
     "British spelling (behaviour, colour, licence)."),
    ("gotcha", "pytest needs the compose database", "The test suite connects to Postgres on "
     "port 5433 started by docker compose; a local Postgres on 5432 is ignored."),
    ("gotcha", "alembic autogenerate misses enum changes", "Autogenerate does not see new "
     "values of a Postgres enum; write ALTER TYPE by hand in the revision."),
    ("gotcha", "uvicorn reload breaks the worker pool", "With --reload the background "
     "worker pool starts twice; use the make dev target instead."),
    ("gotcha", "orders currency defaults silently", "Older clients omit currency on orders; "
     "the service used to default it to EUR, which hid bad requests."),
    ("gotcha", "httpx client must be closed on shutdown", "The shared AsyncClient in "
     "quayside/http.py leaks sockets unless the lifespan handler closes it."),
    ("gotcha", "tenacity retries swallow cancellation", "Retrying on Exception also retries "
     "CancelledError; retry on httpx.TransportError only."),
    ("gotcha", "ci cache misses on lockfile reorder", "The pip cache key hashes "
     "requirements.lock, so reordering lines busts the cache for every job."),
    ("gotcha", "timezone naive datetimes in reports", "Report queries compare naive "
     "datetimes; always pass UTC-aware values to the repository layer."),
    ("gotcha", "docker build context includes node_modules", "Without .dockerignore the "
     "image build uploads the admin UI's node_modules and takes minutes."),
    ("gotcha", "flaky test_refund_race on slow machines", "test_refund_race depends on a "
     "200 ms sleep; it fails under load and is marked flaky in CI."),
    ("runbook", "run only the migration tests", "pytest -m migrations runs the alembic "
     "upgrade and downgrade checks against a scratch schema."),
    ("runbook", "start the local stack", "docker compose up -d db redis, then make dev "
     "serves the API on port 8080 with the worker pool."),
    ("runbook", "release a new version", "make release VERSION=x.y.z tags main, builds the "
     "image and opens the deploy pull request in the infra repository."),
    ("runbook", "rotate the webhook signing secret", "Add the new secret as secondary, "
     "deploy, switch primary after a day, then remove the old one."),
    ("runbook", "restore the staging database", "make staging-restore pulls last night's "
     "snapshot; it takes about ten minutes and locks staging."),
    ("runbook", "regenerate the OpenAPI client", "make openapi regenerates the TypeScript "
     "client for the admin UI from the running app's schema."),
    ("runbook", "profile a slow endpoint", "Set QUAYSIDE_PROFILE=1 and hit the endpoint; "
     "pyinstrument writes an HTML report under .profiles."),
    ("reference", "request validation lives in schemas", "Pydantic models for every API "
     "body are in quayside/api/schemas.py; handlers never validate by hand."),
    ("reference", "feature flags registry", "Feature flags are declared in "
     "quayside/flags.py and documented in docs/flags.md with an owner."),
    ("reference", "http client conventions", "All outbound calls use the shared httpx "
     "AsyncClient with explicit connect and read timeouts."),
    ("reference", "changelog format", "CHANGELOG.md follows Keep a Changelog with an "
     "Unreleased section and the pull request number on each line."),
    ("reference", "ci jobs on pull requests", "Pull requests run lint, unit and "
     "migrations jobs; the e2e job runs nightly on main only."),
    ("reference", "payments team reviews payment code", "Anything under quayside/payments "
     "needs an approval from the payments team before merge."),
    ("reference", "alembic revision naming", "Revision files are named YYYYMMDD_slug and "
     "every revision must implement downgrade."),
    ("reference", "logging setup", "structlog is configured in quayside/logging.py; use "
     "log.bind for request ids instead of formatting them into messages."),
    ("reference", "settings come from environment", "pydantic-settings reads QUAYSIDE_ "
     "prefixed variables; .env is only loaded by make dev."),
    ("reference", "cli entry points", "The click CLI lives in quayside/cli.py; commands "
     "are grouped as db, users, orders and ops."),
    ("reference", "background worker queue", "Jobs go through arq on Redis; job functions "
     "live in quayside/jobs and must be idempotent."),
    ("reference", "api versioning", "Public routes are under /v2; /v1 is frozen and only "
     "receives security fixes until its sunset date."),
    ("reference", "money is stored in minor units", "Amounts are integers in minor units "
     "with a currency code; never use floats for money."),
    ("reference", "order states", "Orders move draft, placed, paid, shipped, closed; "
     "refunds create a separate refund record."),
    ("reference", "admin ui stack", "The admin UI is a Vite and React app under admin/, "
     "talking to the API through the generated client."),
    ("reference", "test fixtures layout", "Factories live in tests/factories.py; use them "
     "instead of raw inserts so constraints stay valid."),
    ("reference", "code style tools", "ruff handles lint and formatting with line length "
     "100; mypy runs in strict mode on quayside/."),
    ("reference", "webhook retry policy", "Payment providers retry webhooks for 24 hours; "
     "our handler must be idempotent on the event id."),
    ("registry", "staging url", "Staging runs at staging.quayside.internal behind the VPN."),
    ("registry", "grafana dashboards", "Service dashboards are in the Quayside folder of "
     "the team Grafana; the orders board shows error rates per route."),
    ("registry", "on-call rotation", "The payments on-call rotation is in PagerDuty under "
     "quayside-payments; handover is Monday at 10:00."),
    ("registry", "container registry", "Images are pushed to registry.internal/quayside "
     "with the git sha and the release tag."),
    ("registry", "sentry project", "Errors go to the quayside-api project in Sentry; the "
     "worker reports to quayside-worker."),
    ("registry", "design docs folder", "Design documents live in docs/design with one "
     "file per decision, numbered."),
    ("registry", "support channel", "Questions from support arrive in the orders-support "
     "channel; reply in threads."),
    ("gotcha", "redis eviction drops job results", "Redis in staging evicts keys under "
     "memory pressure, so arq job results can vanish; poll the database instead."),
    ("gotcha", "pydantic v2 serialises decimals as strings", "Decimal fields come out as "
     "strings in JSON; the admin UI parses them back."),
    ("runbook", "retire an old toggle", "Delete its checks and its declaration, and note "
     "the removal in the changelog; toggles live at most two releases."),
    ("runbook", "bump a dependency", "Edit requirements.in, run make lock, and commit "
     "requirements.lock in the same pull request."),
    ("reference", "database connection pool", "SQLAlchemy async engine with pool size 10; "
     "tests override it with NullPool to avoid leaks between tests."),
)


def system_prompt(nonce: str, lane: int) -> str:
    """The base system prompt; the lane tag keeps lanes from sharing prefix-cache blocks."""
    return f"[bench {nonce} lane {lane}]\n{BASE_SYSTEM}"


def naive_system_prompt(nonce: str, lane: int, message: str) -> str:
    """A bolt-on memory layer's prompt: all notes on top, most relevant to `message` first."""
    words = content_words(message)
    ranked = sorted(NOTES, key=lambda n: -len(words & content_words(f"{n[1]} {n[2]}")))
    lines = [f"- {title} ({kind}): {body}" for kind, title, body in ranked]
    return "\n".join([f"[bench {nonce} lane {lane}]", "What you remember about the user and "
                      "this project:", *lines, "", BASE_SYSTEM])


def fill_store(store: NoteStore) -> int:
    """Add the 50 notes (user scope); returns how many were stored as new notes."""
    added = 0
    for kind, title, body in NOTES:
        result = store.add(title=title, body=body, kind=kind, scope="user", source="cli",
                           has_user_message=True)
        if not result.ok:
            raise RuntimeError(f"note {title!r} refused: {result.reason}")
        added += not getattr(result, "revised_existing", False)
    return added
