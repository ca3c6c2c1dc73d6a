"""Secret-pattern check for note titles and bodies.

Each pattern belongs to a *family* (``openai``, ``aws``, ``jwt``...). Where a pattern has a
``value`` group only that group is a secret (``password=hunter2`` keeps ``password=``);
otherwise the whole match is. Findings never overlap: earlier, more specific patterns win.

Redaction writes ``[redacted:<family>]``; values that already are a marker are skipped, so
checking a redacted text again finds nothing.

Every repetition is bounded (a name part of at most 40 characters, a value of at most 512,
a key block of at most 16 KiB): Python's regex engine backtracks, and one unbounded lazy
run before a keyword made a 6,000-character body of `-` take seconds (quadratic). Bounded,
each start position costs at most a bound, so a text costs time linear in its length
(`tests/conductor/test_secret_time.py` measures the worst case per KB).
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass, field

MARKER = "[redacted:{family}]"
MARKER_TEXT = re.compile(r"\[redacted:[a-z_]+\]")
# A value that is a reference, not a secret: $VAR, ${VAR}, <placeholder>, {{ tmpl }}, ***.
_NOT_A_VALUE = r"(?!\[redacted:|\$|<|\{\{|\*{3}|%\()"

_SECRET_WORD = (r"(?:password|passwd|passphrase|pass[ _-]?code|pwd|secret|api[ _-]?key|apikey"
                r"|token|bearer|private[ _-]?key|signing[_-]?key|encryption[_-]?key"
                r"|credentials?)")
# What stands where a value would and is none: a placeholder ("password: TBD"), or an
# instruction that goes on as a sentence ("Password: check the vault").
_PLACEHOLDER = r"tbd|tba|tbc|todo|fixme|n/?a|none|null|nil|unset|pending|unknown"
_INSTRUCTION = (r"use|see|ask|check|call|contact|email|text|find|look|get|read|talk|go|"
                r"in|on|at|from|stored|kept|sent|given|shared")
_NO_PLACEHOLDER = (rf"(?![\"']?(?i:{_PLACEHOLDER})[\"']?(?:[\s,;.!?)]|$))"
                   rf"(?!(?i:{_INSTRUCTION})\s)")
# A value someone made, not an English word: 8+ characters without spaces that mix
# letters with digits, or upper with lower case (10+), or carry signs.
_MADE_VALUE = (r"(?=\S{0,512}[A-Za-z])(?:(?=\S{0,512}\d)\S{8,512}"
               r"|(?=\S{0,512}[A-Z])(?=\S{0,512}[a-z])[A-Za-z]{10,512}"
               r"|(?=\S{0,512}[!@#$%^&*+/])\S{8,512})")

# A password stated in words (issue 68): "my bank PIN is 4417", "the password for the
# router is sunshine", "my passphrase is correct horse battery staple": whatever its shape
# (a plain word is a password too once it is said to be one). What only talks about one
# ("the password is long", "... is stored in the vault", "... is 12 characters", "the pin
# is bent") says no value: a word that describes (a participle, an adverb, a word of these
# lists) or a count. A PIN is digits; a passphrase is a run of words with no little word
# of a sentence among them ("long and hard to type" describes one).
_LITTLE_WORDS = (r"a|an|the|my|your|our|his|her|their|its|this|that|these|those|it|mine|"
                 r"yours|ours|not|no|never|too|very|quite|so|also|still|now|just|only|"
                 r"always|usually|probably|and|or|but|in|on|at|under|inside|behind|with|"
                 r"from|for|of|to|by|as|is|are|was|be|been|being|going|getting|what|where|"
                 r"how|which|there|here|see|ask|check|something|nothing|whatever|one|none")
# A verb's irregular participle ("is sent by email", "was given at the desk"): the regular
# ones end in -ed (_PARTICIPLE).
_IRREGULAR = (r"sent|given|shown|told|made|done|taken|chosen|found|held|sold|lent|built|"
              r"put|left|bought|got|gotten|seen|spoken|stolen|broken|frozen|drawn|thrown|"
              r"known|meant|read|kept|set|hidden|written|forgotten|lost|shared|emailed")
# A count describes ("the passphrase is three random words", "... is more than 12
# characters"): a number or quantity word counts only when a count noun follows within a
# few words; "the passphrase is all good things come" states one.
_QUANTITY = r"several|few|many|some|multiple|more|less|fewer|most|both|each|every|all"
_NUMBER_WORDS = (r"two|three|four|five|six|seven|eight|nine|ten|eleven|twelve|twenty|"
                 + _QUANTITY)
_COUNT_NOUN = (r"characters?|chars?|digits?|letters?|symbols?|words?|numbers?|numerals?|"
               r"emojis?|syllables?|parts?|pieces?")
_A_COUNT = (rf"(?:{_NUMBER_WORDS})(?:\s{{1,4}}[^\s.,;:!?]{{1,40}}){{0,3}}?"
            rf"\s{{1,4}}(?:{_COUNT_NOUN})\b")
_DESCRIBING = (r"same|different|written|kept|set|hidden|unknown|long|short|strong|weak|"
               r"wrong|right|correct|incorrect|invalid|valid|empty|blank|missing|new|old|"
               r"secret|private|safe|secure|insecure|easy|hard|simple|complex|fine|ok|okay|"
               r"good|bad|great|case|due|about|like|similar|identical|shorter|longer|"
               r"easier|harder|weaker|stronger|obvious|unique|random|optional|mandatory|"
               r"visible|public|known|reset|lost|forgotten|lowercase|uppercase|numeric|"
               r"alphanumeric")
_PARTICIPLE = r"[A-Za-z]{2,40}(?:ed|ly|ing|able|ible)\b"
# One word alone: a quantity word before a word that describes or compares ("the password
# is more secure", "... all lowercase", "... most likely") describes too.
_QUANTIFIED = (rf"(?:{_QUANTITY})\s{{1,4}}(?:(?:{_LITTLE_WORDS}|{_DESCRIBING}|{_IRREGULAR}|"
               rf"than)\b|{_PARTICIPLE}|[A-Za-z]{{2,40}}er\b)")
_NOT_A_PASSWORD = (rf"(?!(?:{_LITTLE_WORDS}|{_DESCRIBING}|{_IRREGULAR}|{_PLACEHOLDER})\b)"
                   rf"(?!{_PARTICIPLE})(?!{_A_COUNT})(?!{_QUANTIFIED})")
_VALUE_END = r"(?=[\s\"'”’,;!?.)]|$)"
_COUNTED = (r"(?!\s{0,4}(?:characters?|chars?|digits?|letters?|symbols?|words?|numbers?|"
            r"long|or (?:more|fewer|less)|min(?:imum)?|max(?:imum)?)\b)")
# "the PIN for my bank card is ...", "the password to the wifi was ...", "PIN: ..."
_FOR_SOME = r"\s{1,4}(?:for|to|of|on|at)(?:\s{1,4}[^\s.,;:!?=]{1,40}){1,6}?"
_FOR_WHAT = rf"(?:{_FOR_SOME})?"
# A pin of a release or a version is no PIN ("the pin for the release is 2024", "... for
# the base image is 20240101"): the last word of what it is for, its head noun, says so;
# "the PIN for the build server", "... to my docker host" are PINs. "the build" alone may
# be a CI job or a building: a PIN.
_VERSIONED = (r"releases?|versions?|builds|packages?|dependency|dependencies|deps?|images?|"
              r"tags?|branch(?:es)?|commits?|librar(?:y|ies)|libs?|modules?|sdk|toolchain|"
              r"python|node|npm|pip|docker|charts?|plugins?|runtime|compiler|crates?|gems?|"
              r"schema|lockfile|requirements?|wheels?|distro|kernel|firmware")
_FOR_A_PIN = (r"(?:\s{1,4}(?:for|to|of|on|at)(?:\s{1,4}[^\s.,;:!?=]{1,40}){0,5}?"
              r"\s{1,4}(?!(?i:" + _VERSIONED + r")\b)[^\s.,;:!?=]{1,40})?")
_QUOTE = r"[\"'“‘]?"
_SAID_IS = r"\s{1,4}(?:is|was)(?:\s{0,4}:)?\s{1,4}" + _NOT_A_VALUE + _QUOTE
_SAID_SET = r"\s{0,4}[:=]\s{0,4}" + _NOT_A_VALUE + _QUOTE
# "password: x" and "pwd=x" are password_assignment's (a name it knows, then ":" or "=");
# stated, a password is "is/was" one, or ": x" after what it is for, where no name is.
_STATED_AS = rf"(?:{_FOR_WHAT}{_SAID_IS}|{_FOR_SOME}{_SAID_SET})"
# A PIN has no name password_assignment knows: "PIN: 4417" is stated too.
_PIN_STATED_AS = rf"{_FOR_A_PIN}(?:{_SAID_IS}|{_SAID_SET})"
_PASSWORD_WORD = r"(?i)\b(?:password|passwd|passcode|pass\s{1,4}code|pwd|pw)"
_PASSPHRASE_WORD = r"(?i)\b(?:passphrase|pass\s{1,4}phrase)"
_FOREIGN_PASSWORD = (r"(?i)\b(?:contraseña|contrasena|passwort|kennwort|mot\s{1,4}de\s{1,4}passe"
                     r"|senha|wachtwoord)")
# What describes a password rather than states it, in those languages ("ist sicher
# gespeichert", "es larga", "est dans le coffre")
_FOREIGN_DESCRIBES = (r"(?!(?i:sicher|geheim|lang|kurz|stark|schwach|im|in|auf|seguro|segura"
                      r"|largo|larga|corto|corta|fuerte|débil|en|el|la|un|una|long|longue"
                      r"|court|courte|fort|forte|faible|dans|sur|le|un|une|ein|eine|der|die"
                      r"|das)\b)")
_PHRASE_WORD = rf"(?!(?:{_LITTLE_WORDS})\b)(?!{_PARTICIPLE})[A-Za-z]{{1,40}}"
_STATED: list[tuple[str, str]] = [
    ("password_stated", r"(?i)\b(?:pin|pin\s{1,4}(?:code|number)|passcode|pass\s{1,4}code)"
     + _PIN_STATED_AS + r"(?P<value>\d{4,12})(?![\d.,]\d)" + _COUNTED),
    ("password_stated", _PASSPHRASE_WORD + _STATED_AS + rf"(?!{_A_COUNT})"
     rf"(?P<value>{_PHRASE_WORD}(?:\s{{1,4}}{_PHRASE_WORD}){{2,9}}){_VALUE_END}"),
    *[("password_stated", word + _STATED_AS + _NOT_A_PASSWORD
       + r"(?P<value>[^\s\"'”’,;!?]{0,63}[^\s\"'”’,;!?.])" + _VALUE_END + _COUNTED)
      for word in (_PASSWORD_WORD, _PASSPHRASE_WORD)],
    # "password: abc": a value too short for password_assignment (4+) is still one, unless
    # it is a placeholder, a word that describes, or a setting ("Remember password: yes").
    *[("password_stated", word + r"\s{0,4}[:=]\s{0,4}" + _NOT_A_VALUE + _NO_PLACEHOLDER
       + _QUOTE + r"(?!(?:yes|off)\b)" + _NOT_A_PASSWORD
       + r"(?P<value>(?=[^\s\"'”’,;!?()]{0,2}\w)[^\s\"'”’,;!?()]{1,3})" + _VALUE_END)
      for word in (_PASSWORD_WORD, _PASSPHRASE_WORD)],
    # The languages the memory commands take (conductor/writing/commands): "mi contraseña
    # es dragon96", "mon mot de passe est hunter4", "mein Passwort ist x" and, verb last,
    # "dass mein Passwort dragon95 ist", "mot de passe: x".
    ("password_stated", _FOREIGN_PASSWORD + r"\s{1,4}(?:es|era|ist|war|est|était|é|era)"
     r"(?:\s{0,4}:)?\s{1,4}" + _NOT_A_VALUE + _QUOTE + _FOREIGN_DESCRIBES
     + r"(?P<value>[^\s\"'”’,;!?]{0,63}[^\s\"'”’,;!?.])"),
    ("password_stated", r"(?i)\b(?:passwort|kennwort)\s{1,4}" + _NOT_A_VALUE + _QUOTE
     + _FOREIGN_DESCRIBES + r"(?P<value>[^\s\"'”’,;!?]{1,63})[\"'”’]?\s{1,4}(?:ist|war)\b"),
    ("password_stated", _FOREIGN_PASSWORD + r"\s{0,4}[:=]\s{0,4}" + _NOT_A_VALUE
     + _NO_PLACEHOLDER + _QUOTE + r"(?P<value>[^\s\"'”’,;!?()]{1,512})"),
    # "pw: hunter2" (not a name password_assignment takes: PWM_DUTY=8000 is none)
    ("password_stated", r"(?i)\bpw\s{0,4}[:=]\s{0,4}" + _NOT_A_VALUE + _NO_PLACEHOLDER
     + _QUOTE + r"(?P<value>[^\s\"'”’,;!?()]{1,512})"),
    # A US social security number, named so: 078-05-1120
    ("ssn", r"(?i)\b(?:ssn|social\s{1,4}security(?:\s{1,4}(?:number|no\.?|#))?)\D{0,24}?"
     r"(?P<value>(?<!\d)\d{3}-?\d{2}-?\d{4})(?!\d)"),
]

# (family, pattern). Order matters: specific provider formats before generic ones.
_PATTERNS: list[tuple[str, str]] = [
    (
        "private_key",
        r"-----BEGIN (?:[A-Z0-9]{1,20} ){0,4}PRIVATE KEY(?: BLOCK)?-----"
        r"(?:[\s\S]{0,16384}?-----END (?:[A-Z0-9]{1,20} ){0,4}PRIVATE KEY(?: BLOCK)?-----"
        r"|[\s\S]{0,16384})",
    ),
    ("tandem", r"\btdm-[0-9a-f]{8}-[A-Za-z0-9_-]{20,64}"),
    ("anthropic", r"\bsk-ant-[A-Za-z0-9_-]{20,512}"),
    ("openai", r"\bsk-(?!ant-)(?:proj-|svcacct-|admin-)?[A-Za-z0-9_-]{20,512}"),
    ("stripe", r"\b(?:sk|rk|pk)_(?:live|test)_[A-Za-z0-9]{16,512}"),
    ("github", r"\b(?:ghp|gho|ghu|ghs|ghr)_[A-Za-z0-9]{30,512}|\bgithub_pat_[A-Za-z0-9_]{22,512}"),
    ("gitlab", r"\bglpat-[A-Za-z0-9_-]{20,512}"),
    ("huggingface", r"\bhf_[A-Za-z0-9]{30,512}"),
    ("aws", r"\b(?:AKIA|ASIA|ABIA|ACCA)[A-Z0-9]{16}\b"),
    (
        "aws",
        r"(?i)\baws_?secret_?access_?key\b[\"']?\s{0,8}[:=]\s{0,8}[\"']?"
        r"(?P<value>[A-Za-z0-9/+=]{40})",
    ),
    ("google", r"\bAIza[0-9A-Za-z_-]{35}"),
    ("google", r"\bya29\.[0-9A-Za-z_-]{20,2048}"),
    ("azure", r"(?i)\b(?:AccountKey|SharedAccessKey)=(?P<value>[A-Za-z0-9+/=]{32,512})"),
    ("slack", r"\bxox[abposr]-[A-Za-z0-9-]{10,512}"),
    ("slack", r"https://hooks\.slack\.com/services/[A-Za-z0-9/_-]{20,512}"),
    ("discord", r"https://(?:discord|discordapp)\.com/api/webhooks/\d{1,30}/[A-Za-z0-9_-]{30,512}"),
    ("discord", r"\b[A-Za-z0-9_-]{24,28}\.[A-Za-z0-9_-]{6}\.[A-Za-z0-9_-]{27,38}\b"),
    ("telegram", r"(?<!\d)\d{8,10}:AA[A-Za-z0-9_-]{30,512}"),
    ("sendgrid", r"\bSG\.[A-Za-z0-9_-]{20,512}\.[A-Za-z0-9_-]{20,512}"),
    ("npm", r"\bnpm_[A-Za-z0-9]{36}\b"),
    ("pypi", r"\bpypi-AgE[A-Za-z0-9_-]{40,2048}"),
    ("digitalocean", r"\bdo[por]_v1_[a-f0-9]{64}\b"),
    ("grafana", r"\bglsa_[A-Za-z0-9]{32}_[a-f0-9]{8}\b"),
    ("shopify", r"\bshp(?:at|ca|pa|ss)_[a-f0-9]{32}\b"),
    ("square", r"\bsq0(?:atp|csp)-[A-Za-z0-9_-]{22,512}"),
    ("twilio", r"\b(?:AC|SK)[a-f0-9]{32}\b"),
    ("mailgun", r"\bkey-[a-f0-9]{32}\b"),
    ("putty", r"Private-Lines:\s{0,8}\d{1,6}\s{1,8}(?P<value>[A-Za-z0-9+/=]{20,4096})"),
    (
        "jwt",
        r"\beyJ[A-Za-z0-9_-]{5,4096}\.eyJ[A-Za-z0-9_-]{5,4096}\.[A-Za-z0-9_-]{5,4096}",
    ),
    (
        "bearer",
        r"(?i)\b(?:bearer|basic|token)\s{1,8}" + _NOT_A_VALUE
        + r"(?P<value>(?=[A-Za-z0-9._~+/=-]{0,512}\d)[A-Za-z0-9._~+/=-]{16,512})",
    ),
    (
        "url_password",
        r"\b[A-Za-z][A-Za-z0-9+.-]{0,31}://[^\s/:@]{0,256}:" + _NOT_A_VALUE
        + r"(?P<value>[^\s/@]{1,512})@",
    ),
    ("cli_password", r"(?:\s-u|--user)\s{1,8}[^\s:]{1,256}:" + _NOT_A_VALUE
     + r"(?P<value>[^\s@]{4,512})"),
    ("login_password", r"(?i)\blogin(?:\s{0,4}:)?\s{1,8}\S{1,256}?\s{0,8}/\s{0,8}" + _NOT_A_VALUE
     + r"(?P<value>\S{6,512})"),
    (
        # KEY=value, key: value, "key": "value", for every name that says secret
        # (DB_PASSWORD, SecretAccessKey, JWT_SECRET, signing_key...).
        "password_assignment",
        # A name is tried from its first character only (not after another name
        # character) and runs at most 64 characters before the word: a run of name
        # characters costs one bounded try, not one a position.
        r"(?i)(?<![\w.-])(?:\w[\w.-]{0,63}?)?" + _SECRET_WORD
        + r"[\w.-]{0,40}[\"']?\s{0,8}"
        r"[:=]\s{0,8}" + _NOT_A_VALUE + _NO_PLACEHOLDER
        + r"(?P<value>\"[^\"\s]{4,512}\"|'[^'\s]{4,512}'|[^\s\"',;]{4,512})",
    ),
    # A payment card number: 13 to 19 digits, in groups or not, that pass the Luhn check.
    ("card", r"(?<![\d-])\d(?:[ -]?\d){12,18}(?![\d-])"),
    # A long hex run: a token (GitHub's classic ones, many APIs', `openssl rand -hex`),
    # unless the words before it say it is a commit, a hash or a digest.
    ("hex_token", r"(?<![0-9A-Fa-f])[0-9a-f]{40,128}(?![0-9A-Fa-f])"),
    # "password hunter2": after the word password itself, a shorter value with a digit.
    ("password_phrase", r"(?i)\b(?:password|passwd|passphrase|pwd)(?:\s{1,8}is)?\s{1,8}"
     + _NOT_A_VALUE + r"(?-i:(?P<value>(?=\S{0,64}\d)(?=\S{0,64}[A-Za-z])[^\s.,;]{6,64}))"),
    (
        # "password hunter22", "the secret is wJalr...": a keyword, a space (or "is"), and
        # a value that looks made, not a word: digits and letters, or mixed case, or signs.
        "password_phrase",
        r"(?i)\b(?:password|passwd|passphrase|pass|pwd"
        r"|secret(?:\s{1,8}(?:access\s{1,8})?key)?|token|bearer|api\s{0,8}key"
        r"|access\s{1,8}token|auth\s{1,8}token|client\s{1,8}secret|private\s{1,8}key)"
        r"(?:\s{1,8}is)?\s{1,8}" + _NOT_A_VALUE + r"(?-i:(?P<value>" + _MADE_VALUE + r"))",
    ),
    *_STATED,
]

PATTERNS: list[tuple[str, re.Pattern[str]]] = [(f, re.compile(p)) for f, p in _PATTERNS]

_NOT_A_TOKEN = re.compile(r"(?i)\b(?:commit|sha(?:1|256|512)?|revision|rev|hash|checksum|digest"
                          r"|merge|cherry-pick|object|blob|tree)\b[^\n]{0,24}$")


_VALUE_CHARS = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789"
                         "_-+/=~.")


def _whole_value(text: str, end: int) -> int:
    """A value the patterns' bounds cut short (over 512 characters) is hidden whole: the
    run of value characters it was cut in goes on to its end (linear, once a finding)."""
    if end == 0 or text[end - 1] not in _VALUE_CHARS:
        return end
    while end < len(text) and text[end] in _VALUE_CHARS:
        end += 1
    return end


def _luhn(digits: str) -> bool:
    total = 0
    for n, ch in enumerate(reversed(digits)):
        d = int(ch) * (2 if n % 2 else 1)
        total += d - 9 if d > 9 else d
    return total % 10 == 0


def _is_secret(family: str, text: str, start: int, end: int) -> bool:
    """The checks a pattern alone cannot make."""
    if family == "card":
        digits = "".join(ch for ch in text[start:end] if ch.isdigit())
        return len(set(digits)) > 1 and _luhn(digits)
    if family == "hex_token":
        value = text[start:end]
        return (any(c.isdigit() for c in value) and any(c.isalpha() for c in value)
                and not _NOT_A_TOKEN.search(text[max(0, start - 48):start]))
    return True
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
            if not _is_secret(family, text, start, end):
                continue
            if family != "password_stated":  # its value ends at a word's end, not a stop's
                end = _whole_value(text, end)
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
