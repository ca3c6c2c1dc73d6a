"""The explicit-command recogniser (issue 60) on the bench's labelled messages: recall at
least 0.95 and precision at least 0.99 over the commands that write on the sets it was tuned
on (dev; test since the second round; the third, messages-holdout.tsv, since the fourth),
and each rule's pattern, each way. A set not yet tuned on (messages-fourth.tsv) is measured
by the bench, not asserted here: it stays a measurement."""

from __future__ import annotations

import pytest

from bench.commands.run import WRITES, rows, score_messages
from bench.quality.facts import FACTS, Note, load_facts
from conductor.writing.commands import Command, recognise


@pytest.mark.parametrize("name", ["messages-dev.tsv", "messages-test.tsv",
                                  "messages-holdout.tsv"])
def test_the_labelled_messages_meet_the_goals(name):
    score = score_messages(rows(name), WRITES)
    assert score["labelled"] >= 60
    assert score["precision"] >= 0.99, score["false_positives"]
    assert score["recall"] >= 0.95, score["misses"]


@pytest.mark.parametrize(("message", "command"), [
    ("Remember that my locker code is 4417", Command("remember", "my locker code is 4417")),
    ("note that I'm vegetarian", Command("remember", "I'm vegetarian")),
    ("Don't forget that the demo is on Friday.", Command("remember", "the demo is on Friday.")),
    ("You can forget my old address", Command("forget", "my old address")),
    ("What do you remember about Ana?", Command("recall", "Ana")),
    ("Update: my locker code is now 5512", Command("update", "my locker code is now 5512")),
])
def test_the_issues_phrasings_are_commands(message, command):
    assert recognise(message) == command


@pytest.mark.parametrize("message", [
    "Do you remember when we met?", "I can't remember the name of that library.",
    "Remember to call me tomorrow.", "```\nremember that x = 1\n```",
    '"Remember that you are dust" - who said it?', "Forget it, let's move on.",
])
def test_what_only_looks_like_a_command_is_not_one(message):
    assert recognise(message) is None


@pytest.mark.parametrize(("message", "command"), [
    # "remember" misspelt by a letter
    ("rember that my mom's birthday is June 3rd",
     Command("remember", "my mom's birthday is June 3rd")),
    ("remeber that i'm gluten free", Command("remember", "i'm gluten free")),
    # after a sentence of thanks or a greeting, and after "yo", "plz"
    ("Thanks for the help earlier. Please remember that my office is in the garage.",
     Command("remember", "my office is in the garage.")),
    ("good morning! please remember that I'm on Python 3.11. does that version have match?",
     Command("remember", "I'm on Python 3.11.")),
    ("plz remember my kid's school is Lincoln Elementary",
     Command("remember", "my kid's school is Lincoln Elementary")),
    # without "that": a first-person statement
    ("Remember I take my coffee black, no sugar.",
     Command("remember", "I take my coffee black, no sugar.")),
    ("Keep in mind I work night shifts.", Command("remember", "I work night shifts.")),
    # a colon or a dash in place of "that"
    ("don't forget: my partner's name is Sam", Command("remember", "my partner's name is Sam")),
    ("make a note - I'm saving for a house", Command("remember", "I'm saving for a house")),
    # "note that" about the user, a question after it
    ("note that I use Neovim. what's a good plugin for Go?", Command("remember", "I use Neovim.")),
    ("Note that our API keys rotate every 90 days.",
     Command("remember", "our API keys rotate every 90 days.")),
    # other languages
    ("Ten en cuenta que trabajo desde casa.", Command("remember", "trabajo desde casa.")),
    ("N'oublie pas que je travaille de nuit.", Command("remember", "je travaille de nuit.")),
    ("Vergiss nicht, dass meine Frau Ärztin ist.", Command("remember", "meine Frau Ärztin ist.")),
    ("帮我记一下,我的车是白色的。", Command("remember", "我的车是白色的。")),
    ("Olvida mi antigua dirección, por favor.", Command("forget", "mi antigua dirección")),
    ("Vergiss bitte meine alte Telefonnummer.", Command("forget", "meine alte Telefonnummer.")),
    ("Oublie mon ancienne adresse.", Command("forget", "mon ancienne adresse.")),
    ("Was weißt du über mich?", Command("recall", "mich")),
    ("Actualiza tu memoria: ahora vivo en Valencia.",
     Command("update", "ahora vivo en Valencia.")),
    # what the user stored, by other words
    ("Erase what you have stored about my salary.", Command("forget", "my salary.")),
    ("You can forget about the Friday deploy freeze.",
     Command("forget", "the Friday deploy freeze.")),
    ("What have you got saved about my car?", Command("recall", "my car")),
    # an update with a dash, or naming its subject ("it" is the subject, kept in the words)
    ("correction - I'm allergic to amoxicillin", Command("update", "I'm allergic to amoxicillin")),
    ("update what you have on my job: I'm at Stripe now",
     Command("update", "my job: I'm at Stripe now")),
    ("Please update the note about the wifi: it's now Tandem-Staff.",
     Command("update", "the wifi: it's now Tandem-Staff.")),
    # round four (the holdout set's misses): a courtesy clause ending ", but", fillers
    ("Sorry to bother you, but please remember that I'm on night shifts this year.",
     Command("remember", "I'm on night shifts this year.")),
    ("yeah, remember that I'm lactose intolerant",
     Command("remember", "I'm lactose intolerant")),
    # "this for later:", "take note:", "for your records:", "store this:", "so you remember,"
    ("Remember this for later: my gym locker is 112.",
     Command("remember", "my gym locker is 112.")),
    ("take note: my flat is on the 4th floor", Command("remember", "my flat is on the 4th floor")),
    ("For your records: my employee ID is 88213.",
     Command("remember", "my employee ID is 88213.")),
    ("Store this: my bike's frame number is WTU-1123.",
     Command("remember", "my bike's frame number is WTU-1123.")),
    ("Just so you remember, my son is allergic to eggs.",
     Command("remember", "my son is allergic to eggs.")),
    # a first-person statement by more verbs than "is" and "has"
    ("remember my sister speaks Portuguese", Command("remember", "my sister speaks Portuguese")),
    # a named piece of the user's world is not the code at hand; "for the record" about them
    ("Remember that the config file lives in ~/.tandem.",
     Command("remember", "the config file lives in ~/.tandem.")),
    ("For the record, I'm vegan.", Command("remember", "I'm vegan.")),
    # a forget "from your memory", a German forget with its comma
    ("Please remove my old phone number from your memory.",
     Command("forget", "my old phone number")),
    ("Vergiss, dass ich Tee mag.", Command("forget", "dass ich Tee mag.")),
    # an update "to what you have on file" / "to your notes"
    ("Correction to your notes: my landlord is now Mr. Berg.",
     Command("update", "my landlord is now Mr. Berg.")),
    # a recall naming the store ("anything saved about"), or asked as "list what you ..."
    ("Do you have anything stored about my car?", Command("recall", "my car")),
    ("Could you list what you remember about me?", Command("recall", "me")),
])
def test_each_rules_phrasing_is_a_command(message, command):
    assert recognise(message) == command


@pytest.mark.parametrize("message", [
    # a forget of a thing in the chat, not of something of the user's
    "forget that approach, the regex is too brittle", "forget my previous question",
    "You can forget about the tests for now.",
    "delete the note in the README about the old v1 API, it's gone now",
    # the work at hand: a requirement on the code, words pointing into the chat, "these"
    "Keep in mind that the CSV has a header row when you write the parser below.",
    "Keep in mind that these numbers are rough estimates. Now what's the total?",
    "Don't forget that the handler must be async, otherwise the event loop blocks.",
    "Remember: the function should return None on failure, not raise. Can you fix it?",
    "Note that I haven't tested this on Windows.",
    # a task without "that": not a first-person statement
    "Don't forget the semicolon at the end of the line, the linter is strict.",
    # the conversation itself
    "Remember, you said earlier the function was pure, but it mutates the input list.",
    "correction: I meant the second test, not the first one",
    # a question first
    "Remember the bug from yesterday? It's back after the rebase.",
    # a bare "update:" that is news: the work's state, the user's doing, a day's news
    "Update: CI is now green on main.", "update: the build is green now, moving on",
    "Update: heading out for lunch, keep going with the refactor without me.",
    "Correction: the meeting is tomorrow, not today, so no rush on the slides.",
    # a recall about the world, or with a task after it
    "What do you remember about the French Revolution? I have an exam on Friday.",
    "What do you remember about how transformers work?",
    "What do you know about my options if my flight gets cancelled in the EU?",
    # round four's look-alikes, each beside the rule above it stands for
    "Sorry, but remember to call me tomorrow.", "yeah remember when we went to Porto?",
    "Remember this for later: the loop index starts at 1.",
    "Take note of the error message above.",
    "For the records table, add an index on user_id.",
    "Store this: a JSON list of the user ids in Redis.",
    "Just so you remember, the function must be pure.",
    "don't forget my cello lessons",
    "Remove the large arrays from memory before the next batch.",
    "Vergissmeinnicht ist eine Blume.",
    "Correction to the docs: the flag is --verbose.",
    "Do you have anything saved about how to bake bread?",
    "Can you list what you know about sorting algorithms?",
    # round four's false positives, by rule: a piece of code named by "the" alone, the
    # conversation ("I never said"), a problem solved after a bare "update:"
    "Remember that the array is sorted, so binary search works.",
    "Don't forget that the counter starts at 0 in this language.",
    "Correction: the function is parse_row, not read_row. Can you rename it?",
    "For the record, I didn't say that.",
    "Update: nvm, got it working.",
])
def test_each_rules_look_alike_is_not_a_command(message):
    assert recognise(message) is None


def test_every_command_the_quality_bench_tells_is_recognised_with_its_words():
    """The quality bench's `told` lane says each note as "Remember that ..." and each
    revision as "Update: ...": all of them must be carried out, with the note's words."""
    said = []
    for fact in load_facts(FACTS):
        for note in (Note(fact.kind, fact.scope, fact.title, fact.body), *fact.more):
            said.append(("remember", f"Remember that {note.body}", note.body))
        if fact.revised:
            said.append(("update", f"Update: {fact.revised}", fact.revised))
    assert len(said) >= 60
    for kind, message, words in said:
        assert recognise(message) == Command(kind, words), message
