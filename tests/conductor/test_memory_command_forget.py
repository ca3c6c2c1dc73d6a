"""A forget names its note strongly or names none, and a message is carried out once
(issue 68, item 2), on the real note store: "forget that I am allergic to penicillin" sent
again must not archive the nuts note, nor "forget my gym locker code" the work locker's."""

from __future__ import annotations

import subprocess
import sys
import threading
from pathlib import Path

from conductor.ledger.records import VisibleMessage
from conductor.notes import NoteStore
from conductor.writing.command_repeats import FILE_NAME, REPEAT_WINDOW
from conductor.writing.command_writes import CommandOutcome, carry_out
from conductor.writing.commands import recognise


def say(store: NoteStore, message: str, said: tuple[VisibleMessage, ...] = (),
        session: str = "s1") -> CommandOutcome:
    command = recognise(message)
    assert command is not None, message
    return carry_out(store, command, session=session, project=None, said=said)


def live(store: NoteStore) -> list[str]:
    return sorted(n.body for n in store.list())


def conversation(*messages: str) -> tuple[VisibleMessage, ...]:
    return tuple(VisibleMessage.of("user" if n % 2 == 0 else "assistant", text)
                 for n, text in enumerate(messages))


def test_a_forget_whose_note_is_gone_archives_nothing_and_says_so(store):
    say(store, "Remember that I am allergic to nuts")
    say(store, "Remember that I am allergic to penicillin")
    first = say(store, "forget that I am allergic to penicillin")
    assert first.status == (("archived", "I am allergic to penicillin"),)
    again = say(store, "forget that I am allergic to penicillin")  # a new message, same words
    assert again.status == (("nothing to forget", "I am allergic to penicillin"),)
    assert again.note_ids == () and live(store) == ["I am allergic to nuts."]


def test_a_forget_names_the_note_holding_every_word_not_the_nearest(store):
    say(store, "Remember that my gym locker code is 4417")
    say(store, "Remember that my locker code is 9981")  # which locker: not said
    assert say(store, "forget my gym locker code").status == (
        ("archived", "My gym locker code is 4417"),)
    assert say(store, "forget my gym locker code").status[0][0] == "nothing to forget"
    assert live(store) == ["My locker code is 9981."]


def test_a_forget_allows_plurals_spellings_and_the_filler_around_it(store):
    say(store, "Remember that my favourite colors are teal and orange")
    say(store, "Remember that I am allergic to penicillin")
    say(store, "Remember that Ana leads the payments team")
    assert say(store, "Please forget my favourite colour").status[0][0] == "archived"
    assert say(store, "Forget what I told you about my allergies").status[0][0] == "archived"
    assert say(store, "forget my bicycle's colour").status[0][0] == "nothing to forget"
    assert live(store) == ["Ana leads the payments team."]


def test_a_message_sent_again_is_not_carried_out_again(store):
    say(store, "Remember that I am allergic to nuts")
    say(store, "Remember that I am allergic to penicillin")
    said = conversation("forget that I am allergic to penicillin")
    first = say(store, "forget that I am allergic to penicillin", said)
    assert first.status == (("archived", "I am allergic to penicillin"),)
    # the note said again in another conversation; the retry of the first must not touch it
    say(store, "Remember that I am allergic to penicillin", session="s2")
    retry = say(store, "forget that I am allergic to penicillin", said)
    assert retry.status == (("already archived", "I am allergic to penicillin"),)
    assert retry.note_ids == first.note_ids
    assert live(store) == ["I am allergic to nuts.", "I am allergic to penicillin."]


def test_the_same_words_later_in_the_conversation_are_a_new_command(store):
    say(store, "Remember that my gym locker code is 4417")
    opening = conversation("forget my gym locker code")
    assert say(store, "forget my gym locker code", opening).status[0][0] == "archived"
    say(store, "Remember that my gym locker code is 5512")
    later = conversation("forget my gym locker code", "Done.", "Remember that my gym locker "
                         "code is 5512", "Noted.", "forget my gym locker code")
    assert say(store, "forget my gym locker code", later).status == (
        ("archived", "My gym locker code is 5512"),)
    assert live(store) == []


def test_a_handled_message_is_kept_for_a_while_and_by_digest_only(store, clock):
    said = conversation("Remember that my locker code is 4417")
    assert say(store, "Remember that my locker code is 4417", said).status[0][0] == "remembered"
    assert say(store, "Remember that my locker code is 4417", said).status[0][0] == (
        "already remembered")
    kept = (store.layout.user_dir / FILE_NAME).read_text()
    assert "4417" not in kept and "locker" not in kept
    clock.advance(seconds=REPEAT_WINDOW.total_seconds() + 1)
    # past the window it is carried out again: a restatement, the same note
    assert say(store, "Remember that my locker code is 4417", said).status[0][0] == "updated"
    assert live(store) == ["My locker code is 4417."]


def test_a_message_sent_again_after_its_note_was_deleted_says_nothing_of_it(store):
    said = conversation("Remember that my bike lock code is 3381")
    first = say(store, "Remember that my bike lock code is 3381", said)
    (note_id,) = first.note_ids
    assert store.delete(note_id).ok
    again = say(store, "Remember that my bike lock code is 3381", said)  # the retry
    assert again.note_ids == () and again.status == () and store.list() == []


def test_a_command_waits_for_the_users_command_lock_held_by_another_process(store):
    """The check, the carrying out and the record are one step across processes too: the
    lock is an flock on commands.lock, not a lock of this process."""
    lock = store.layout.user_dir / "commands.lock"
    lock.parent.mkdir(parents=True, exist_ok=True)
    holder = subprocess.Popen(
        [sys.executable, "-c", "import fcntl, os, sys\n"
         f"fd = os.open({str(lock)!r}, os.O_RDWR | os.O_CREAT)\n"
         "fcntl.flock(fd, fcntl.LOCK_EX)\nprint('held', flush=True)\nsys.stdin.readline()"],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
        said = conversation("Remember that my bike lock code is 3381")
        done: list[CommandOutcome] = []
        worker = threading.Thread(target=lambda: done.append(
            say(store, "Remember that my bike lock code is 3381", said)))
        worker.start()
        worker.join(timeout=1.0)
        assert worker.is_alive() and done == [], "carried out while another process held it"
    finally:
        holder.communicate("go\n", timeout=10)
    worker.join(timeout=10)
    assert done and done[0].status[0][0] == "remembered"


def test_a_command_reads_its_users_record_once(store, monkeypatch):
    reads: list[Path] = []
    read_text = Path.read_text

    def counted(self: Path, *args: object, **kwargs: object) -> str:
        if self.name == FILE_NAME:
            reads.append(self)
        return read_text(self, *args, **kwargs)

    say(store, "Remember that I am allergic to nuts")
    monkeypatch.setattr(Path, "read_text", counted)
    said = conversation("forget that I am allergic to nuts")
    assert say(store, "forget that I am allergic to nuts", said).status[0][0] == "archived"
    assert len(reads) == 1, reads  # looked up, then recorded from what was read
    assert say(store, "forget that I am allergic to nuts", said).status[0][0] == (
        "already archived")
    assert len(reads) == 2, reads


def test_a_forget_allows_another_form_of_one_stem_but_not_a_shared_opening(store):
    """STEM: "vaccination" names "vaccine" (a six-letter opening, most of the shorter word;
    no spelling ratio reaches them); "internship" does not name "international"."""
    say(store, "Remember that I had my flu vaccine in October")
    say(store, "Remember that my international travel insurance is with Allianz")
    assert say(store, "forget my internship").status[0][0] == "nothing to forget"
    assert say(store, "forget my vaccination").status == (
        ("archived", "I had my flu vaccine in October"),)
    assert live(store) == ["My international travel insurance is with Allianz."]


OFFSITE = "Remember that our team offsite is in Porto at the riverside hotel on May 20"


def test_a_long_target_may_miss_one_plain_word(store):
    say(store, OFFSITE)
    outcome = say(store, "forget that our team offsite is in Porto at the riverside venue "
                  "on May 20")  # eight content words, "venue" not in the note
    assert outcome.status[0][0] == "archived" and live(store) == []


def test_a_long_target_may_not_miss_a_number(store):
    say(store, OFFSITE)
    outcome = say(store, "forget that our team offsite is in Porto at the riverside hotel "
                  "on May 21")
    assert outcome.status[0][0] == "nothing to forget" and len(live(store)) == 1


def test_a_long_target_may_not_miss_a_name(store):
    """Another city is another fact: a name is said exactly, however long the target."""
    say(store, OFFSITE)
    outcome = say(store, "forget that our team offsite is in Lisbon at the riverside hotel "
                  "on May 20")
    assert outcome.status[0][0] == "nothing to forget" and len(live(store)) == 1


def test_a_short_target_may_miss_no_word(store):
    say(store, "Remember that my gym locker code is 4417")
    assert say(store, "forget my gym locker key").status[0][0] == "nothing to forget"


def test_the_note_covering_most_of_the_target_wins_over_a_newer_one(store, clock):
    # the project's note (in a scope apart, so no dedupe merges the two) says every word
    assert store.add(title="Team offsite", body="Our team offsite is in Porto at the "
                     "riverside hotel on May 20, with the budget approved by finance and the "
                     "agenda shared on the wiki.", kind="reference", scope="project",
                     project="/work/app").ok
    clock.advance(seconds=60)
    # newer, and more of its words named, but it never says "riverside"
    say(store, "Remember that the team offsite is at the hotel in Porto on May 20")
    command = recognise("forget that our team offsite is in Porto at the riverside hotel "
                        "on May 20")
    assert command is not None
    outcome = carry_out(store, command, session="s1", project="/work/app")
    assert outcome.status == (("archived", "Team offsite"),)
    assert live(store) == ["The team offsite is at the hotel in Porto on May 20."]


def test_of_notes_named_alike_the_newest_is_forgotten(store, clock):
    say(store, "Remember that my gym locker code is 4417")
    clock.advance(seconds=60)
    say(store, "Remember that my gym locker code is 5512")
    assert say(store, "forget my gym locker code").status == (
        ("archived", "My gym locker code is 5512"),)


def test_the_newest_wins_across_the_users_and_the_projects_notes(store, clock):
    say(store, "Remember that my gym locker code is 4417")
    clock.advance(seconds=60)
    assert store.add(title="My gym locker code is 5512", kind="reference", scope="project",
                     project="/work/app").ok
    command = recognise("forget my gym locker code")
    assert command is not None
    outcome = carry_out(store, command, session="s1", project="/work/app")
    assert outcome.status == (("archived", "My gym locker code is 5512"),)


def test_a_number_with_decimals_is_remembered_and_a_pin_is_refused(store):
    """A PIN is whole digits: "the PIN is 4417.5" (a measure, a version) is no secret;
    "my bank PIN is 4417" is, and is not remembered."""
    assert say(store, "Remember that the PIN of my hinge is 4417.5 mm long").status[0][0] == (
        "remembered")
    assert say(store, "Remember that the pin for the release is 2024").status[0][0] == (
        "remembered")
    assert say(store, "Remember that my bank PIN is 4417").status[0][0] == "not remembered"
    assert say(store, "forget my hinge PIN").status[0][0] == "archived"
    assert live(store) == ["The pin for the release is 2024."]
