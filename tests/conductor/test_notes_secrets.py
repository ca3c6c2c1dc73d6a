"""The secret-pattern check: each family refused in a title, redacted in a body."""

from __future__ import annotations

import pytest

from conductor.notes import NoteStore
from conductor.notes.secrets import FAMILIES, find_secrets, redact

# Built by concatenation so no scanner mistakes this file for a leak.
A20 = "aB3dE5gH7jK9mN1pQ3sT"
SAMPLES: dict[str, str] = {
    "openai": "sk-proj-" + A20 + A20,
    "anthropic": "sk-ant-api03-" + A20 + A20,
    "stripe": "sk_" + "live_" + A20 + "x1",
    "github": "ghp_" + A20 + A20[:16],
    "gitlab": "glpat-" + A20,
    "huggingface": "hf_" + A20 + A20[:12],
    "aws": "AKIA" + "IOSFODNN7EXAMPLE",
    "google": "AIza" + "SyA" + A20 + "abcdefghijkl",
    "azure": "AccountKey=" + "Zm9v" * 12 + "==",
    "slack": "xoxb-" + "1234567890-" + A20,
    "jwt": "eyJhbGciOiJIUzI1NiJ9" + ".eyJzdWIiOiIxMjM0NTY3ODkwIn0" + ".dozjgNryP4J3jVmNHl0w5N",
    "bearer": "Authorization: Bearer " + A20 + "xyz",
    "private_key": "-----BEGIN RSA PRIVATE KEY-----\nMIIEow"
    + A20
    + "\n-----END RSA PRIVATE KEY-----",
    "url_password": "postgres://app:" + "s3cr3tPass" + "@db.internal:5432/app",
    "password_assignment": "password = " + "hunter2hunter2",
    "discord": "https://discord.com/api/webhooks/" + "123456789012345678/" + A20 + A20,
    "telegram": "1234567890:" + "AA" + A20 + A20[:13],
    "sendgrid": "SG." + A20 + "ab." + A20 + A20,
    "npm": "npm_" + A20 + A20[:16],
    "pypi": "pypi-" + "AgEIcHlwaS5vcmc" + A20 + A20,
    "digitalocean": "dop_v1_" + "0123456789abcdef" * 4,
    "grafana": "glsa_" + A20 + A20[:12] + "_0123abcd",
    "shopify": "shpat_" + "0123456789abcdef" * 2,
    "square": "sq0atp-" + A20 + "ab",
    "twilio": "AC" + "0123456789abcdef" * 2,
    "mailgun": "key-" + "0123456789abcdef" * 2,
    "putty": "Private-Lines: 1 " + A20 + A20,
    "cli_password": "curl -u admin:" + "pa55word9 https://ci.example.com",
    "login_password": "login admin / " + "s3cretpw9",
    "password_phrase": "the secret is " + A20,
    "tandem": "tdm-" + "0a1b2c3d-" + A20 + "Ab_-12wxyz",
    "card": "4111 " + "1111 1111 1111",
    "hex_token": "0123456789abcdef" * 2 + "89abcdef",
    "password_stated": "the wifi password is " + "sunshine",
    "ssn": "my SSN is " + "078-05-1120",
}
EXTRA: list[tuple[str, str]] = [
    ("aws", "aws_secret_access_key = " + "wJalrXUtnFEMI/K7MDENG/bPxRfiCY" + "EXAMPLEKEY"),
    ("password_assignment", "passwd: " + "correct-horse-battery"),
    ("password_assignment", "API_KEY=" + "0123456789abcdef0123"),
    ("github", "github_pat_" + A20 + "_" + A20),
    ("private_key", "-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXktdjEAAAA"),
    ("password_phrase", "my password " + "hunter2"),
    ("password_assignment", "2FA_SECRET=" + "abcd1234xyz"),
    ("password_assignment", "MY_VERY_LONG_APPLICATION_SERVICE_NAME_PRODUCTION_DB_PASSWORD="
     + "hunter22abc"),
    ("tandem", "use the key tdm-" + "9f8e7d6c-" + A20 + "QRSTuvwx09 for the bot"),
    ("card", "card number 5555-" + "5555-5555-4444, expires 12/29"),
    ("hex_token", "the deploy token is now " + "9f8e7d6c5b4a3f2e" * 3),
    ("login_password", "login: alice / " + "hunter2"),
    ("ssn", "Social Security number: " + "078051120"),
]
# Like a secret, and not one: a commit named as one, a card number that fails the Luhn
# check, a run of one digit.
NOT_SECRETS = ["fixed in commit " + "0123456789abcdef" * 2 + "89abcdef",
               "the sha256 digest " + "ab12" * 16,
               "order number 4111 " + "1111 1111 1112", "0000 0000 0000 0000 00",
               "the password is long"]


@pytest.mark.parametrize("text", NOT_SECRETS)
def test_what_only_looks_like_a_secret_is_kept(text: str) -> None:
    assert find_secrets(text) == [], text


def test_every_family_has_a_sample() -> None:
    assert set(SAMPLES) == set(FAMILIES)


@pytest.mark.parametrize("family", sorted(SAMPLES))
def test_each_family_is_found(family: str) -> None:
    findings = find_secrets(f"note: {SAMPLES[family]} end")
    assert [f.family for f in findings] == [family]


@pytest.mark.parametrize(("family", "text"), EXTRA)
def test_other_forms_of_a_family_are_found(family: str, text: str) -> None:
    assert [f.family for f in find_secrets(text)] == [family]


@pytest.mark.parametrize("family", sorted(SAMPLES))
def test_secret_in_a_title_is_refused(store: NoteStore, family: str) -> None:
    secret = SAMPLES[family].replace("\n", " ")
    result = store.add(title=f"key {secret}"[:120], kind="reference", scope="user")
    assert (result.ok, result.reason) == (False, "secret")
    assert store.list() == []


def test_secret_in_a_tag_is_refused(store: NoteStore) -> None:
    result = store.add(title="t", kind="reference", scope="user", tags=[SAMPLES["github"]])
    assert result.reason == "secret"


@pytest.mark.parametrize("family", sorted(SAMPLES))
def test_secret_in_a_body_is_redacted_and_counted(store: NoteStore, family: str) -> None:
    secret = SAMPLES[family]
    body = (
        "Context for the deploy of the billing service next week with the team. "
        f"The credential is {secret} and it lives in the vault under the ops folder, "
        "rotate it every quarter and tell the team on the ops channel afterwards please."
    )
    result = store.add(title=f"Billing deploy {family}", body=body, kind="reference", scope="user")
    assert result.ok and result.note is not None
    assert result.redactions == 1
    assert result.redaction_counts == {family: 1}
    assert f"[redacted:{family}]" in result.note.body
    stored = result.note.path.read_text()  # type: ignore[union-attr]
    assert find_secrets(stored) == []
    assert A20 not in stored and "hunter2" not in stored and "s3cr3t" not in stored


def test_two_secrets_in_a_body_are_both_counted(store: NoteStore) -> None:
    body = (
        "The staging and production keys are kept here for the migration script run "
        f"later today: {SAMPLES['openai']} and {SAMPLES['aws']} with both rotated after."
    )
    result = store.add(title="Migration keys", body=body, kind="reference", scope="user")
    assert result.ok and result.redactions == 2
    assert result.redaction_counts == {"openai": 1, "aws": 1}


def test_body_that_is_mostly_secret_is_refused(store: NoteStore) -> None:
    result = store.add(
        title="OpenAI key", body=f"key: {SAMPLES['openai']}", kind="reference", scope="user"
    )
    assert (result.ok, result.reason) == (False, "secret")


def test_private_key_block_is_mostly_secret(store: NoteStore) -> None:
    block = "-----BEGIN PRIVATE KEY-----\n" + (A20 * 3 + "\n") * 10 + "-----END PRIVATE KEY-----"
    result = store.add(
        title="Server key", body=f"The key:\n{block}", kind="reference", scope="user"
    )
    assert result.reason == "secret"


def test_secret_in_an_update_is_redacted_too(store: NoteStore) -> None:
    note = store.add(
        title="DB access", body="Ask ops for access.", kind="runbook", scope="user"
    ).note
    assert note is not None
    body = (
        f"Connect with {SAMPLES['url_password']} from the bastion host, never from a "
        "laptop, and close the tunnel when the migration is done."
    )
    result = store.update(note.id, body=body)
    assert result.ok and result.redactions == 1
    assert "postgres://app:[redacted:url_password]@db.internal" in result.note.body  # type: ignore[union-attr]


def test_user_edit_with_a_secret_title_is_refused(store: NoteStore) -> None:
    note = store.add(title="DB access", kind="runbook", scope="user").note
    assert note is not None
    assert store.edit(note.id, title=f"token {SAMPLES['slack']}").reason == "secret"


@pytest.mark.parametrize(
    "text",
    [
        "password: ${DB_PASSWORD}",
        "password=<your password>",
        "the password is stored in the vault",
        "set api_key: $OPENAI_API_KEY before running",
        "https://example.com/path?x=1",
        "ssh://git@github.com/org/repo.git",
        "sk-short",
        "a JWT looks like eyJ... and is signed",
    ],
)
def test_references_and_prose_are_not_secrets(text: str) -> None:
    assert find_secrets(text) == []


def test_redacted_text_has_no_secret_left() -> None:
    text = " ".join(SAMPLES.values())
    once = redact(text)
    assert once.total == len(SAMPLES)
    assert find_secrets(once.text) == []
    assert redact(once.text).total == 0


def test_a_value_past_the_patterns_bounds_is_hidden_whole() -> None:
    text = "API_KEY=" + "a1" * 400 + " and the rest"
    assert redact(text).text == "API_KEY=[redacted:password_assignment] and the rest"


# Issue 68: a password, PIN or passphrase stated as one is a secret whatever its shape (a
# plain word, four digits); talk about passwords is not.
STATED = [
    ("my password is " + "sunshine", "sunshine"),
    ("my bank PIN is " + "4417", "4417"),
    ("online banking password is " + "correcthorsebatterystaple", "correcthorsebatterystaple"),
    ("the PIN for my debit card is " + "2580.", "2580"),
    ("The password to the router was " + "dragon.", "dragon"),
    ("my passphrase is " + "correct horse battery staple", "correct horse battery staple"),
    ("my phone passcode is " + "918273", "918273"),
    ("my password is: " + "sunshine!", "sunshine"),
    ("the wifi password is '" + "tulips" + "'", "tulips"),
    # the ": value" forms stay refused with password_stated narrowed to "is/was": a PIN or
    # passcode (no name password_assignment knows), and a password named "for" something
    ("PIN: " + "4417", "4417"),
    ("pin code = " + "2580", "2580"),
    ("passcode: " + "sunshine", "sunshine"),
    ("the password for the router: " + "dragon", "dragon"),
    ("password: " + "sunshine", "sunshine"),
    # a year-shaped PIN is a PIN unless it pins a release or a version
    ("the PIN for the front door is " + "2024", "2024"),
    # a version word in what a PIN is for is no release pin unless it is the head noun; a
    # number or quantity word counts only before a count noun; "password:" takes a short
    # value too (password_assignment wants 4+)
    ("the PIN for the build server is " + "4417", "4417"),
    ("the pin to my docker host is " + "8812", "8812"),
    ("the pin for the build is " + "2024", "2024"),
    ("the passphrase is " + "all good things come", "all good things come"),
    ("the passphrase is " + "more coffee please" + " now", "more coffee please"),
    ("the password is " + "seven", "seven"),
    ("password: " + "abc", "abc"),
    ("password: " + "ab", "ab"),
    ("pwd=" + "x9", "x9"),
    ('password: "' + "abc" + '"', "abc"),
    # an abbreviation, and the languages the memory commands take
    ("Remember that my pw is " + "dragon98.", "dragon98"),
    ("pw: " + "hunter2", "hunter2"),
    ("Recuerda que mi contraseña es " + "dragon96.", "dragon96"),
    ("Merk dir, dass mein Passwort " + "dragon95" + " ist.", "dragon95"),
    ("Mein Kennwort ist " + "sonnenschein", "sonnenschein"),
    ("Souviens-toi que mon mot de passe est " + "hunter4.", "hunter4"),
    ("mot de passe: " + "hunter2", "hunter2"),
    ("a senha é " + "girassol", "girassol"),
]
TALK_OF_PASSWORDS = [
    "Mein Passwort ist sicher gespeichert",
    "mi contraseña es larga",
    "mon mot de passe est dans le coffre",
    "mot de passe: TBD",
    "pw: TBD",
    "PWM_DUTY=8000",
    "the pwm signal is 50%",
    "I forgot my password yesterday",
    "password managers are useful",
    "the password is long",
    "the password is stored in the vault",
    "the password is 12 characters long",
    "my PIN is 4 digits",
    "my password is the name of my first dog",
    "the password is changed every month",
    "the password is case sensitive",
    "my password was reset yesterday",
    "the passphrase is long and hard to type",
    "pin the version to 1.2.3",
    "the pin is bent",
    "the PIN for the GPIO is 17",
    "reset the admin password from the console",
    # they talk about a password and state none: an instruction, a placeholder, a verb's
    # irregular participle, a release number, a count of words
    "Password: use the vault",
    "Password: check the vault",
    "Password for the wifi: ask the front desk",
    "the password is sent by email",
    "the password is given at the desk",
    "password: TBD",
    "password: N/A",
    "password: TODO",
    "the password is TBD",
    "the pin for the release is 2024",
    "the pin for the base image is 20240101",
    "the passphrase is three random words",
    "the passphrase is four words",
    "the passphrase is two or three words",
    "the password is more than 12 characters",
    "the password is more secure now",
    "the password is all lowercase",
    "the pin for the release server image is 2024",
    "password: none",
    "Password: no",
    "Remember password: yes",
    "password: ...",
]


@pytest.mark.parametrize(("text", "value"), STATED)
def test_a_stated_password_is_a_secret_whatever_its_shape(text: str, value: str) -> None:
    findings = find_secrets(text)
    assert [text[f.start:f.end] for f in findings] == [value], findings
    assert value not in redact(text).text


@pytest.mark.parametrize("text", TALK_OF_PASSWORDS)
def test_talk_of_passwords_is_not_a_secret(text: str) -> None:
    assert find_secrets(text) == [], text


@pytest.mark.parametrize("text", ["PIN is 4417.5", "the pin is 2024.1", "my PIN is 1.2.3",
                                  "the PIN for the lock is 4417,5", "version 1.2.3"])
def test_a_number_with_decimals_is_no_pin(text: str) -> None:
    assert find_secrets(text) == [], text


@pytest.mark.parametrize("source", ["inline", "writer", "route", "mcp", "command"])
def test_a_stated_password_is_refused_in_a_title_and_hidden_in_a_body(store: NoteStore,
                                                                       source: str) -> None:
    """The model's and the writer's writes, the HTTP and MCP note writes, a command: one
    check."""
    refused = store.add(title="My bank PIN is " + "4417", kind="reference", scope="user",
                        source=source)
    assert (refused.ok, refused.reason) == (False, "secret")
    kept = store.add(title="Home wifi", body="The wifi password is " + "sunshine" + ", on the "
                     "router in the hall; guests get the other network.", kind="reference",
                     scope="user", source=source)
    assert kept.ok and kept.note is not None
    assert "sunshine" not in kept.note.body and "[redacted:password_stated]" in kept.note.body
