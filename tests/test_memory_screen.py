"""The Memory screen in a real browser (Debian's chromium, driven by Playwright) against
the real app served as `tandem serve` serves it, on the session's engine.

Screenshots of each step are kept under `$TANDEM_TEST_ARTIFACTS` (default
`test-artifacts/`) as `memory-screen/*.png`. Skipped, with the reason, where Playwright or
a chromium binary is missing (`make setup` installs both where it can)."""

from __future__ import annotations

import dataclasses
import os
import shutil
from pathlib import Path
from zoneinfo import ZoneInfo

import pytest

from server.access.admin_password import AdminPassword

PASSWORD = "correct horse battery"
USER = "tester"
JOSE = "josé"  # files under jose--<hash>
ZONE = "Asia/Tokyo"
ARTIFACTS = Path(os.environ.get("TANDEM_TEST_ARTIFACTS")
                 or Path(__file__).resolve().parents[1] / "test-artifacts") / "memory-screen"


def chromium_binary() -> str | None:
    for name in (os.environ.get("TANDEM_CHROMIUM"), "chromium", "chromium-browser",
                 "google-chrome"):
        found = shutil.which(name) if name else None
        if found:
            return found
    return None


@pytest.fixture(scope="module")
def browser():
    # The page's CSP has no 'unsafe-eval': waits use locators, never wait_for_function.
    sync_api = pytest.importorskip("playwright.sync_api",
                                   reason="Playwright is not installed (make setup)")
    binary = chromium_binary()
    if binary is None:
        pytest.skip("no chromium binary (make setup installs Debian's chromium as root; "
                    "or set TANDEM_CHROMIUM)")
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    with sync_api.sync_playwright() as playwright:
        launched = playwright.chromium.launch(executable_path=binary, args=["--no-sandbox"])
        yield launched
        launched.close()


@pytest.fixture
def screen(served, tmp_path):
    """A fresh home served over HTTP as `tandem serve` serves it (memory on, user tester)."""
    yield from serving(served, tmp_path, USER)


@pytest.fixture
def jose_screen(served, tmp_path):
    """As `screen`, with `tandem serve --user josé`: a name filed under a hashed folder."""
    yield from serving(served, tmp_path, JOSE)


def serving(served, tmp_path, user_name: str):
    from conductor.memory.settings import MemorySettings
    from server.app import create_app
    from server.cli.main import server_config
    from tests.inprocess import InProcessApp
    from tests.served import AppOnLoop

    engine = served.app.state.tandem.engine
    profile = dataclasses.replace(engine.profile, memory=dataclasses.replace(
        engine.profile.memory, mode="on"))
    app = create_app(profile, tmp_path, engine=engine,
                     memory_settings=MemorySettings(user_name=user_name))
    server = AppOnLoop(served, app, config=server_config)
    server.start()
    yield server, InProcessApp.over(served, app)  # the test's own requests: the same app
    server.stop()


def expect(locator):
    from playwright.sync_api import expect as playwright_expect

    return playwright_expect(locator)


def page_of(browser, width: int = 1280, height: int = 800):
    context = browser.new_context(viewport={"width": width, "height": height},
                                  timezone_id=ZONE, locale="en-GB")
    page = context.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda error: errors.append(str(error)))
    return page, errors


def shot(page, name: str) -> None:
    page.screenshot(path=str(ARTIFACTS / f"{name}.png"), full_page=True)


def add(client, title: str, body: str, kind: str = "reference") -> str:
    result = client.memory.store(USER).add(title=title, body=body, kind=kind, scope="user",
                                           source="route", has_user_message=True)
    assert result.ok
    return result.note.id


def row(page, title: str):
    return page.locator("#notes-table tbody tr", has_text=title)


def test_a_user_searches_curates_and_deletes_their_memory_in_the_browser(browser, screen):
    server, client = screen
    rule = add(client, "Answer in English", "Always answer in English, even in French.",
               kind="rule")
    fact = add(client, "The garden gate code", "The gate opens with the blue fob.")
    client.chat([{"role": "user", "content": "how do I open the garden gate?"}],
                script="With the blue fob.", headers={"X-Tandem-Session": "garden"})
    page, errors = page_of(browser)
    page.add_init_script("""window.__shift = 0; new PerformanceObserver((list) => {
        for (const e of list.getEntries()) if (!e.hadRecentInput) window.__shift += e.value;
    }).observe({type: "layout-shift", buffered: true});""")
    page.goto(f"{server.base_url}/memory")
    page.wait_for_selector("#notes-table tbody tr[data-id]")
    assert row(page, "Answer in English").count() == 1
    updated = client.memory.store(USER).get(fact).updated.astimezone(ZoneInfo(ZONE))
    assert updated.strftime("%d/%m/%Y, %H:%M:%S") in row(page, "garden gate").inner_text()
    assert page.evaluate("window.__shift") < 0.1  # nothing moved when the data came
    shot(page, "01-notes")

    page.keyboard.press("/")  # the search has a key, and answers as you type
    page.keyboard.type("gate fob")
    expect(page.locator("#notes-table tbody tr")).to_have_count(1)
    assert "garden gate" in page.inner_text("#notes-table tbody")
    page.fill("#q", "")
    expect(page.locator("#notes-table tbody tr")).to_have_count(2)

    row(page, "Answer in English").locator("button").focus()
    page.keyboard.press("Enter")  # open a note with the keyboard
    page.wait_for_selector("#note h2:has-text('Answer in English')")
    page.click("#note button[data-action=edit]")
    page.fill("#edit-body", "Always answer in English, even when asked in French.")
    page.click("#edit-area button[type=submit]")
    page.wait_for_selector("#note summary:has-text('revision 1 → 2')")
    page.click("#note summary:has-text('revision 1 → 2')")
    assert "+Always answer in English, even when asked in French." in page.inner_text(
        "#note pre.diff")
    shot(page, "02-edited-note-history")
    assert client.memory.store(USER).get(rule).status == "ratified"  # the edit ratified it

    page.click("#note button[data-action=pin]")
    page.wait_for_selector("#note button[data-action=unpin]")
    assert client.memory.store(USER).get(rule).pinned

    row(page, "garden gate").locator("button").click()
    page.wait_for_selector("#note h2:has-text('garden gate')")
    page.click("#note button[data-action=ratify]")
    page.wait_for_selector("#note .meta:has-text('ratified')")
    page.click("#note button[data-action=archive]")
    expect(page.locator("#notes-table tbody tr[data-id]")).to_have_count(1)
    assert client.memory.store(USER).get(fact).archived

    row(page, "Answer in English").locator("button").click()
    page.wait_for_selector("#note h2:has-text('Answer in English')")
    page.click("#note button[data-action=delete]")
    page.wait_for_selector("#confirm[open]")
    shot(page, "03-delete-confirm")
    page.click("#confirm-ok")
    page.wait_for_selector("#notes-table tbody tr.empty")
    assert client.memory.store(USER).get(rule) is None

    add(client, "Tea with oat milk", "The user takes tea with oat milk.")
    page.reload()
    page.wait_for_selector("#notes-table tbody tr[data-id]")
    page.fill("#delete-user-confirm", "somebody")
    page.click("#delete-user-form button")
    page.wait_for_selector("#status.error")
    assert client.memory.store(USER).list()
    page.fill("#delete-user-confirm", USER)
    page.click("#delete-user-form button")
    page.wait_for_selector("#status:has-text('deleted 2 notes')")  # the archived one too
    assert not client.memory.store(USER).list(state="all")
    assert not errors, errors


def test_the_context_layers_jobs_and_bench_screens_show_the_engines_own_state(
        browser, screen):
    server, client = screen
    add(client, "Kettles boil at 100 degrees", "At sea level a kettle boils at 100.")
    client.chat([{"role": "system", "content": "You are terse."},
                 {"role": "user", "content": "when does my kettle boil?"}],
                script="At 100.", headers={"X-Tandem-Session": "kitchen"})
    page, errors = page_of(browser)
    page.goto(f"{server.base_url}/memory/context")
    page.click("#sessions button:has-text('kitchen')")
    page.wait_for_selector("#parts")
    parts = page.inner_text("#parts")
    for name in ("system prompt and tools", "shared context", "replayed turns",
                 "matched notes"):
        assert name in parts
    record = client.memory.latest_record(USER, "kitchen")
    assert f"{len(record.ids)} tokens" in page.inner_text("#context .meta")
    shot(page, "04-context")

    page.click("#tabs a[data-tab=layers]")
    page.wait_for_selector("#layer-files tbody tr")
    assert page.url.endswith("/memory/layers")
    page.click("#tabs a[data-tab=jobs]")
    page.wait_for_selector("#jobs button[data-job=verification_review]")
    page.click("#jobs button[data-job=verification_review]")
    page.wait_for_selector("#status:has-text('verification_review: ')", timeout=120_000)
    page.wait_for_selector("#job-runs tbody tr:has-text('verification_review')")
    shot(page, "05-jobs")
    page.go_back()  # the browser's history moves between screens
    page.wait_for_selector("#screen-layers:not([hidden])")

    page.click("#tabs a[data-tab=bench]")
    page.wait_for_selector("#bench .bench img")
    image = page.locator("#bench .bench img").first
    image.scroll_into_view_if_needed()
    expect(image).to_have_js_property("complete", True)
    assert image.evaluate("img => img.naturalWidth") > 0
    shot(page, "06-bench")

    phone, phone_errors = page_of(browser, 390, 844)
    phone.goto(f"{server.base_url}/memory/notes")
    phone.wait_for_selector("#notes-table tbody tr[data-id]")
    width = phone.evaluate("document.documentElement.scrollWidth")
    assert width <= 390  # nothing runs off a phone's screen
    shot(phone, "07-phone")
    assert not errors and not phone_errors, errors + phone_errors


def test_with_a_password_the_screen_signs_in_refuses_a_forged_write_and_signs_out(
        browser, screen, tmp_path):
    server, client = screen
    note_id = add(client, "The gate code", "The gate opens with the blue fob.")
    AdminPassword(tmp_path).set(PASSWORD)
    page, errors = page_of(browser)
    page.goto(f"{server.base_url}/memory")
    page.wait_for_selector("#login:not([hidden])")
    page.fill("#password", "not the password")
    page.click("#login-form button")
    page.wait_for_selector("#login-error:has-text('wrong admin password')")
    shot(page, "08-login-refused")
    page.fill("#password", PASSWORD)
    page.click("#login-form button")
    page.wait_for_selector("#notes-table tbody tr[data-id]")
    assert page.is_visible("#logout")
    forged = page.evaluate("""async (path) => (await fetch(path, {method: "PATCH",
        headers: {"Content-Type": "application/json"},
        body: JSON.stringify({body: "The gate opens with any fob at all."})})).status""",
                           f"/v1/conductor/memory/notes/{note_id}")
    assert forged == 403  # the cookie alone does not write: the CSRF token is missing
    assert "blue fob" in client.memory.store(USER).get(note_id).body
    page.click("#logout")
    page.wait_for_selector("#login:not([hidden])")
    after = page.evaluate("async () => (await fetch('/v1/conductor/memory/notes')).status")
    assert after == 401
    shot(page, "09-signed-out")
    assert not errors, errors


def test_a_hashed_folders_user_is_one_entry_named_and_deleted_by_their_name(
        browser, jose_screen):
    from conductor.memory.types import user_folder

    server, client = jose_screen
    folder = user_folder(JOSE)
    for who, title in ((JOSE, "José's bike lock"), ("o'brien", "O'Brien's bike lock")):
        client.memory.store(user_folder(who)).add(
            title=title, body=f"{title} is the red one.", kind="reference", scope="user",
            source="route", has_user_message=True)
    page, errors = page_of(browser)
    page.goto(f"{server.base_url}/memory")
    page.wait_for_selector("#notes-table tbody tr[data-id]")
    options = page.locator("#user option")
    expect(options).to_have_count(2)  # josé once (name and folder are one user), o'brien
    jose = page.locator(f"#user option[value='{folder}']")
    expect(jose).to_have_text(JOSE)
    assert page.input_value("#user") == folder
    assert "José's bike lock" in page.inner_text("#notes-table tbody")
    shot(page, "10-hashed-user-picker")

    page.fill("#delete-user-confirm", "o'brien")  # another user's name deletes nothing
    page.click("#delete-user-form button")
    page.wait_for_selector("#status.error")
    assert client.memory.store(folder).list()
    page.fill("#delete-user-confirm", JOSE)  # the name as the picker shows it
    page.click("#delete-user-form button")
    page.wait_for_selector(f"#status:has-text('deleted 1 notes of {JOSE}')")
    assert not client.memory.store(folder).list(state="all")
    assert client.memory.store(user_folder("o'brien")).list()
    assert not errors, errors
