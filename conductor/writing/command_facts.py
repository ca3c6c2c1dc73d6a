"""Whether the words after "remember that" or "update:" are a fact to keep (issue 60).

A command's pattern only says the user *opened* with "remember" or "update"; these rules
say whether what follows is a fact about the user or their world, or something else that
only looks like one. Each rule is a kind of message a reader can name:

* **a task, not a fact**: "remember the milk", "don't forget the semicolon": without
  "that" or a colon, the words must make a statement about the user ("remember my code
  is 4417", "remember I take it black");
* **the work at hand**: a requirement on the code or text being worked on ("the handler
  must be async", "the CSV has a header row when you write the parser below", "these
  numbers are rough estimates"), or a piece of code named by "the" alone ("the list is
  sorted", "the file is config.toml"): true for this answer, not a thing to keep;
* **the conversation itself**: "you said earlier ...", "I meant the second test": about
  what was said in the chat, which the ledger already keeps;
* **a status report** (after a bare "update:" or "correction:" only): the state of the work
  ("CI is green", "the build is red"), what the user is doing ("heading out for lunch"),
  news pinned to a day ("the meeting is tomorrow"), or a problem solved ("never mind, I
  figured it out"): news, not a fact that lasts.
"""

from __future__ import annotations

import re

# Without "that" or a colon: a first-person statement ("my dog is called Biscuit",
# "I take my coffee black", "we use pnpm"), where "my ..." must hold a verb.
_FIRST_PERSON_SUBJECT = re.compile(
    r"^(?:i|i'm|im|i've|i'd|i'll|we|we're|we've|my|our|mine|ours)\b", re.I)
_POSSESSIVE_SUBJECT = re.compile(r"^(?:my|our)\b", re.I)
STATEMENT = re.compile(
    r"\b(?:is|are|was|were|am|has|have|had|will|won't|can't|don't|doesn't|isn't|aren't|"
    r"uses?|prefers?|likes?|loves?|hates?|lives?|works?|needs?|wants?|runs?|starts?|ends?|"
    r"leads?|keeps?|owns?|means?|goes|takes?|should|must|never|always|plays?|speaks?|"
    r"drives?|studies|study|teaches|teach|attends?|eats?|drinks?|wears?|rides?|knows?|"
    r"comes?|gets?|does|sleeps?|reads?|writes?|sings?|walks?|visits?|"
    r"\w+(?:'s|'re|'m|'ve))\b", re.I)
FIRST_PERSON = re.compile(r"\b(?:i|i'm|i've|i'd|my|me|mine|we|we're|our|us)\b", re.I)

# The work at hand: a demonstrative subject ("these numbers are", "this is for", "it's
# Python"), words that point into the conversation, or a requirement on a piece of code.
_DEICTIC_SUBJECT = re.compile(
    r"^(?:(?:these|those)\b|(?:this|it|that)\s+(?:is|are|was|has|needs|should|must|will|"
    r"won't|can't|isn't|doesn't)\b|it's\b)", re.I)
_POINTS_INTO_THE_CHAT = re.compile(
    r"\b(?:below|the above|as above|when you (?:write|draft|answer|reply|respond|code|"
    r"implement|generate|edit|fix|refactor|rewrite|test)|in your (?:answer|reply|code|"
    r"response))\b", re.I)
_CODE_REQUIREMENT = re.compile(
    r"\b(?:the|this|that|each|every|all) (?:\w+ )?(?:function|method|handler|class|"
    r"parser|loop|query|regex|script|tests?|variable|endpoint|csv|file|line|code|output|"
    r"input|list|array|string|column|field|table|argument|parameter|callback|component|"
    r"module|return value|answer|reply|response)s?\b[^.;]*?\b(?:must|should|has to|have to|"
    r"needs? to|can't|cannot|mustn't|shouldn't)\b", re.I)
_THE_CHAT = re.compile(
    r"\b(?:you (?:said|told|mentioned|suggested|wrote|promised|asked|gave|showed|claimed)|"
    r"i (?:just |only |already )?(?:meant|said|asked|wrote|mentioned|typed)|i (?:never|"
    r"didn't|did not) (?:meant?|said|say|asked?|wrote|write|mentioned|mention)|"
    r"i'm (?:asking|talking|referring))\b", re.I)
# A piece of code named by "the" alone ("the list is sorted", "the loop index starts at 1",
# "the file is config.toml"): the one in front of us. A named one is the user's world ("the
# build server is ...", "the config file lives in ...", "the tests in this repo are ...").
_UNNAMED_CODE = re.compile(
    r"^the (?:(?:loop|list|array|string|function|method|class|file|query|regex|test|dict|"
    r"map|column|row|field|variable|input|output|return) )?(?:function|method|handler|class|"
    r"parser|loop|index|counter|query|regex|variable|list|array|string|column|row|field|"
    r"argument|parameter|callback|file|script|output|input|return value|dict|map|test|"
    r"snippet)s? (?:is|are|was|were|has|have|needs?|starts?|ends?|"
    r"returns?|takes?|contains?|holds?|uses?|should|must|will|can|can't|isn't|aren't|"
    r"doesn't|don't)\b", re.I)
# "this" standing for the thing in the chat ("I haven't tested this on Windows", "we need
# it for this"), not for a thing of the user's ("this repo", "this fall")
_THIS_IN_THE_CHAT = re.compile(
    r"\bthis\b(?=\s*(?:[.,;:!?]|$)|\s+(?:on|in|at|for|with|by|to|from|yet|again|before|"
    r"after|works?|is|was|will|would|should|code|draft|answer|function|script|file|"
    r"one)\b)", re.I)

# A status report after a bare "update:" or "correction:".
_WORK_STATUS = re.compile(
    r"\b(?:build|builds|ci|pipeline|tests?|deploy|deployment|pr|pull request|branch|"
    r"release|ticket|bug|fix|job)\b[^.;]*?\b(?:green|red|passing|failing|broken|fixed|"
    r"merged|done|shipped|resolved|finished|flaky)\b", re.I)
# "heading out", "moving on", "running late": what the user is doing now
_DOING = re.compile(r"^[a-z]+ing\s+(?:out|off|on|to|for|home|back|in|up|down|over|late|away|"
                    r"now)\b", re.I)
# "never mind, I figured it out": the user's problem solved, nothing to keep
_RESOLVED = re.compile(
    r"\b(?:never ?mind|nvm|figured (?:it|that|this) out|got it (?:working|to work)|"
    r"(?:it|that|this) works now|(?:solved|sorted|fixed) it)\b", re.I)
_RELATIVE_DAY = re.compile(
    r"\b(?:today|tomorrow|tonight|yesterday|this (?:morning|afternoon|evening)|right now)\b",
    re.I)


def opens_in_first_person(text: str) -> bool:
    """The fact is the user's about themselves: "I ...", "my ...", "our ...", "we ..."."""
    return bool(_FIRST_PERSON_SUBJECT.match(text))


def says_a_statement(text: str) -> bool:
    """A fact said without "that" or a colon: a first-person statement."""
    if not opens_in_first_person(text):
        return False
    return not _POSSESSIVE_SUBJECT.match(text) or bool(STATEMENT.search(text))


def is_about_the_work_or_chat(text: str) -> bool:
    """The fact is a requirement of the task at hand or about what was said in the chat."""
    if _THE_CHAT.search(text) or _THIS_IN_THE_CHAT.search(text):
        return True
    if FIRST_PERSON.search(text):  # the user about themselves keeps to lasting things
        return False
    return bool(_DEICTIC_SUBJECT.match(text) or _POINTS_INTO_THE_CHAT.search(text)
                or _CODE_REQUIREMENT.search(text) or _UNNAMED_CODE.match(text))


def is_a_status_report(text: str) -> bool:
    """After a bare "update:": the work's state, the user's doing, or a day's news."""
    return bool(_WORK_STATUS.search(text) or _DOING.match(text)
                or _RELATIVE_DAY.search(text) or _RESOLVED.search(text))
