"""Secret-pattern check for note titles and bodies.

Each pattern belongs to a *family* (``openai``, ``aws``, ``jwt``...). Where a pattern has a
``value`` group only that group is a secret (``password=hunter2`` keeps ``password=``);
otherwise the whole match is. Findings never overlap: earlier, more specific patterns win.

Redaction writes ``[redacted:<family>]``; values that already are a marker are skipped, so
checking a redacted text again finds nothing.
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass, field

MARKER = "[redacted:{family}]"
MARKER_TEXT = re.compile(r"\[redacted:[a-z_]+\]")
# A value that is a reference, not a secret: $VAR, ${VAR}, <placeholder>, {{ tmpl }}, ***.
_NOT_A_VALUE = r"(?!\[redacted:|\$|<|\{\{|\*{3}|%\()"

_SECRET_WORD = (r"(?:password|passwd|passphrase|pwd|secret|api[ _-]?key|apikey|token|bearer"
                r"|private[ _-]?key|signing[_-]?key|encryption[_-]?key|credentials?)")
# A value someone made, not an English word: 8+ characters without spaces that mix
# letters with digits, or upper with lower case (10+), or carry signs.
_MADE_VALUE = (r"(?=\S*[A-Za-z])(?:(?=\S*\d)\S{8,}|(?=\S*[A-Z])(?=\S*[a-z])[A-Za-z]{10,}"
               r"|(?=\S*[!@#$%^&*+/])\S{8,})")

# (family, pattern). Order matters: specific provider formats before generic ones.
_PATTERNS: list[tuple[str, str]] = [
    (
        "private_key",
        r"-----BEGIN (?:[A-Z0-9]+ )*PRIVATE KEY(?: BLOCK)?-----"
        r"[\s\S]*?(?:-----END (?:[A-Z0-9]+ )*PRIVATE KEY(?: BLOCK)?-----|\Z)",
    ),
    ("anthropic", r"\bsk-ant-[A-Za-z0-9_-]{20,}"),
    ("openai", r"\bsk-(?!ant-)(?:proj-|svcacct-|admin-)?[A-Za-z0-9_-]{20,}"),
    ("stripe", r"\b(?:sk|rk|pk)_(?:live|test)_[A-Za-z0-9]{16,}"),
    ("github", r"\b(?:ghp|gho|ghu|ghs|ghr)_[A-Za-z0-9]{30,}|\bgithub_pat_[A-Za-z0-9_]{22,}"),
    ("gitlab", r"\bglpat-[A-Za-z0-9_-]{20,}"),
    ("huggingface", r"\bhf_[A-Za-z0-9]{30,}"),
    ("aws", r"\b(?:AKIA|ASIA|ABIA|ACCA)[A-Z0-9]{16}\b"),
    (
        "aws",
        r"(?i)\baws_?secret_?access_?key\b[\"']?\s*[:=]\s*[\"']?"
        r"(?P<value>[A-Za-z0-9/+=]{40})",
    ),
    ("google", r"\bAIza[0-9A-Za-z_-]{35}"),
    ("google", r"\bya29\.[0-9A-Za-z_-]{20,}"),
    ("azure", r"(?i)\b(?:AccountKey|SharedAccessKey)=(?P<value>[A-Za-z0-9+/=]{32,})"),
    ("slack", r"\bxox[abposr]-[A-Za-z0-9-]{10,}"),
    ("slack", r"https://hooks\.slack\.com/services/[A-Za-z0-9/_-]{20,}"),
    ("discord", r"https://(?:discord|discordapp)\.com/api/webhooks/\d+/[A-Za-z0-9_-]{30,}"),
    ("discord", r"\b[A-Za-z0-9_-]{24,28}\.[A-Za-z0-9_-]{6}\.[A-Za-z0-9_-]{27,38}\b"),
    ("telegram", r"(?<!\d)\d{8,10}:AA[A-Za-z0-9_-]{30,}"),
    ("sendgrid", r"\bSG\.[A-Za-z0-9_-]{20,}\.[A-Za-z0-9_-]{20,}"),
    ("npm", r"\bnpm_[A-Za-z0-9]{36}\b"),
    ("pypi", r"\bpypi-AgE[A-Za-z0-9_-]{40,}"),
    ("digitalocean", r"\bdo[por]_v1_[a-f0-9]{64}\b"),
    ("grafana", r"\bglsa_[A-Za-z0-9]{32}_[a-f0-9]{8}\b"),
    ("shopify", r"\bshp(?:at|ca|pa|ss)_[a-f0-9]{32}\b"),
    ("square", r"\bsq0(?:atp|csp)-[A-Za-z0-9_-]{22,}"),
    ("twilio", r"\b(?:AC|SK)[a-f0-9]{32}\b"),
    ("mailgun", r"\bkey-[a-f0-9]{32}\b"),
    ("putty", r"Private-Lines:\s*\d+\s+(?P<value>[A-Za-z0-9+/=]{20,})"),
    (
        "jwt",
        r"\beyJ[A-Za-z0-9_-]{5,}\.eyJ[A-Za-z0-9_-]{5,}\.[A-Za-z0-9_-]{5,}",
    ),
    (
        "bearer",
        r"(?i)\b(?:bearer|basic|token)\s+" + _NOT_A_VALUE
        + r"(?P<value>(?=[A-Za-z0-9._~+/=-]*\d)[A-Za-z0-9._~+/=-]{16,})",
    ),
    (
        "url_password",
        r"\b[A-Za-z][A-Za-z0-9+.-]*://[^\s/:@]*:" + _NOT_A_VALUE + r"(?P<value>[^\s/@]+)@",
    ),
    ("cli_password", r"(?:\s-u|--user)\s+[^\s:]+:" + _NOT_A_VALUE + r"(?P<value>[^\s@]{4,})"),
    ("login_password", r"(?i)\blogin\s+\S+\s*/\s*" + _NOT_A_VALUE + r"(?P<value>\S{6,})"),
    (
        # KEY=value, key: value, "key": "value", for every name that says secret
        # (DB_PASSWORD, SecretAccessKey, JWT_SECRET, signing_key...).
        "password_assignment",
        r"(?i)(?<![A-Za-z0-9])[\w.-]*?" + _SECRET_WORD + r"[\w.-]*[\"']?\s*[:=]\s*"
        + _NOT_A_VALUE
        + r"(?P<value>\"[^\"\s]{4,}\"|'[^'\s]{4,}'|[^\s\"',;]{4,})",
    ),
    (
        # "password hunter22", "the secret is wJalr...": a keyword, a space (or "is"), and
        # a value that looks made, not a word: digits and letters, or mixed case, or signs.
        "password_phrase",
        r"(?i)\b(?:password|passwd|passphrase|pass|pwd|secret(?:\s+(?:access\s+)?key)?"
        r"|token|bearer|api\s*key|access\s+token|auth\s+token|client\s+secret|private\s+key)"
        r"(?:\s+is)?\s+" + _NOT_A_VALUE + r"(?-i:(?P<value>" + _MADE_VALUE + r"))",
    ),
]

PATTERNS: list[tuple[str, re.Pattern[str]]] = [(f, re.compile(p)) for f, p in _PATTERNS]
FAMILIES: tuple[str, ...] = tuple(dict.fromkeys(f for f, _ in _PATTERNS))


@dataclass(frozen=True)
class Finding:
    """One secret: its family and the span of ``text`` to hide."""

    family: str
    start: int
    end: int


@dataclass
class Redaction:
    """A redacted text, how many secrets of each family it held, and their share."""

    text: str
    counts: Counter[str] = field(default_factory=Counter)
    secret_fraction: float = 0.0

    @property
    def total(self) -> int:
        return sum(self.counts.values())


def find_secrets(text: str) -> list[Finding]:
    """All non-overlapping secrets in ``text``, in order of position."""
    taken: list[Finding] = []
    for family, pattern in PATTERNS:
        for match in pattern.finditer(text):
            has_value = "value" in pattern.groupindex and match.group("value") is not None
            start, end = match.span("value") if has_value else match.span()
            if start == end:
                continue
            if any(start < f.end and f.start < end for f in taken):
                continue
            taken.append(Finding(family, start, end))
    return sorted(taken, key=lambda f: f.start)


def has_secret(text: str) -> bool:
    return bool(find_secrets(text))


def redact(text: str) -> Redaction:
    """Replace each secret by its marker; count them and measure their share of the text.

    ``secret_fraction`` is the share of the text's non-whitespace characters that were
    secret, the measure of a body that is "mostly secret".
    """
    findings = find_secrets(text)
    visible = sum(1 for ch in text if not ch.isspace())
    secret_chars = sum(1 for f in findings for ch in text[f.start : f.end] if not ch.isspace())
    out = text
    for finding in reversed(findings):
        out = out[: finding.start] + MARKER.format(family=finding.family) + out[finding.end :]
    counts = Counter(f.family for f in findings)
    return Redaction(out, counts, secret_chars / visible if visible else 0.0)
