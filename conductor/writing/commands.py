"""Explicit memory commands in the user's own words: "remember that ...", "forget ...",
"what do you remember about ...", "update: ...". Recognised by rule, never by a model, so
they work the same on a 135M model as on a 32B one.

A false positive (storing what the user never asked to keep) is worse than a miss, so a
command must *open* the message (after a greeting or a "please"), be said as an
instruction rather than a question about the past ("do you remember when ...", "I can't
remember ..."), and name a fact rather than a task: "remember to call me tomorrow" is a
reminder, and Tandem has no clock to remind anyone, so it stays an ordinary message.
Text that is quoted, code, or inside a tool's result or a document is never a command:
only the user's own message is read, and only its opening paragraph. The patterns here
say a command was opened; `command_facts.py` says whether what follows is a fact to keep
(not a requirement of the work at hand, the conversation itself, or a status report).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal

from conductor.writing.command_facts import (
    is_a_status_report,
    is_about_the_work_or_chat,
    opens_in_first_person,
    says_a_statement,
)

CommandKind = Literal["remember", "forget", "recall", "update"]
MAX_FACT_CHARS = 600  # one sentence or two; a longer text is not "a thing to remember"


@dataclass(frozen=True)
class Command:
    kind: CommandKind
    text: str  # the fact (remember, update) or what it is about (forget, recall)


# What may come before a command: a sentence (or a clause ending in ", but") of thanks, an
# apology or a greeting ("Thanks for the help earlier. Please remember that ...", "Sorry to
# bother you, but please remember ..."), then fillers and politeness.
_COURTESY = (r"(?:(?:thanks|thank you|thx|sorry|good (?:morning|afternoon|evening))\b"
             r"[^.!?\n]{0,80}?(?:[.!]+\s+|,\s*but\s+))?")
_OPENER = (_COURTESY + r"(?:(?:hey|hi|hello|yo|ok|okay|alright|so|also|oh|and|btw|yeah|"
           r"yes|yep|well|look|listen|anyway|anyways|um|uh|"
           r"by the way|fyi|one more thing|quick note|actually|please|pls|plz|kindly|just|"
           r"tandem|good (?:morning|afternoon|evening)|(?:hi|hey|hello) there)\b[\s,.!:;-]*)*")
_PLEASE = r"(?:(?:can|could|would|will) you\s+(?:please\s+)?|please\s+|i want you to\s+|" \
          r"i'd like you to\s+|make sure (?:to|you)\s+)?"
# "remember", and its common misspellings ("rember", "remeber", "remmber")
_REMEMBER_WORD = r"(?:rem+e?m*b+e?r|memori[sz]e)"
# After "remember": a reminder, a question about the past, or a wish: not a fact.
_NOT_A_FACT = (r"(?:to|when|how|what|who|whom|where|why|which|if|whether|the time|the day|"
               r"the night|the first|back|me|us|him|her|them|it|this one|that one|"
               r"anything|something|nothing|correctly|right|wrong|that (?:time|day|night|"
               r"one|place|song|movie|trip|guy|girl)|those)\b")
_LATER = r"(?: for (?:later|the future|future reference|next time))?"
_THAT = (r"(?:that\s+|(?:this|the following)" + _LATER + r"\s*:\s*|:\s*|,\s*|\s-\s*)?")
_FLAGS = re.I | re.S

# Each pattern with a `that` group: when it is empty (no "that", no colon), the words
# after the verb must make a first-person statement (`command_facts.says_a_statement`).
_REMEMBER = [
    re.compile(_OPENER + _PLEASE + _REMEMBER_WORD + r"(?:\s+|(?=[:,]))(?!" + _NOT_A_FACT
               + r")(?P<that>" + _THAT + r")(?P<fact>.+)", _FLAGS),
    re.compile(_OPENER + r"(?:please\s+)?(?:do not|don't|dont|never) forget(?:\s+|(?=[:,]))"
               r"(?!" + _NOT_A_FACT + r")(?P<that>" + _THAT + r")(?P<fact>.+)", _FLAGS),
    re.compile(_OPENER + _PLEASE + r"(?:keep|bear) in mind\s*(?P<that>that\s+|:\s*|,\s*)?"
               r"(?P<fact>.+)", _FLAGS),
    re.compile(_OPENER + _PLEASE + r"(?:make|take) (?:a )?note\s*(?:that\s+|of this\s*:\s*|:\s*|"
               r"-\s*)(?P<fact>.+)", _FLAGS),
    re.compile(_OPENER + _PLEASE + r"(?:note|write) down\s+(?:that\s+|:\s*)(?P<fact>.+)",
               _FLAGS),
    re.compile(_OPENER + _PLEASE + r"(?:save|store|add|put|keep) (?:this|that|the following)?"
               r"\s*(?:in|to|into) (?:your |the )?memory\s*(?:that\s+|:\s*|,\s*|-\s*)"
               r"(?P<fact>.+)", _FLAGS),
    re.compile(_OPENER + r"(?:for (?:future reference|the record|later)|(?:(?:a|one) )?(?:quick )?"
               r"(?:note )?for (?:your|the) (?:memory|records?|notes|files?))\s*[:,-]\s*"
               r"(?P<fact>.+)", _FLAGS),
    # "store this: ...", "save the following: ..." (also said of files and data: the
    # user's own only) and "just so you remember, ..." (a statement of the user's)
    re.compile(_OPENER + _PLEASE + r"(?:save|store|keep|file) (?:this|the following)" + _LATER
               + r"\s*:\s*(?P<mine>)(?P<fact>.+)", _FLAGS),
    re.compile(_OPENER + r"(?:just )?so (?:that )?you (?:remember|don't forget|won't forget)"
               r"(?: it)?\s*[,:-]\s*(?P<that>)(?P<fact>.+)", _FLAGS),
    re.compile(_OPENER + r"note to (?:self|memory)\s*[:,-]\s*(?P<fact>.+)", _FLAGS),
    # Chinese, Spanish, French, German: the models the profiles serve speak them
    # ("remembering how to spell it is hard", a question: not a fact to keep)
    re.compile(r"^(?:请|請|帮我|幫我)?(?:记住|記住|记一下|記一下)[，,:：\s]*"
               r"(?!.*(?:难|難|吗|嗎|呢|怎么|怎麼|？))(?P<fact>.+)", re.S),
    # ("recuerda que debes ...": a reminder of a duty)
    re.compile(_OPENER + r"(?:por favor,?\s*)?(?:recuerda|ten en cuenta|no olvides)\s+que\s+"
               r"(?!(?:debes|tienes que|hay que)\b)(?P<fact>.+)", _FLAGS),
    re.compile(_OPENER + r"(?:s'il te plaît,?\s*)?(?:souviens-toi|rappelle-toi|retiens|"
               r"n'oublie pas)\s+qu(?:e\s+|')(?P<fact>.+)", _FLAGS),
    re.compile(_OPENER + r"(?:bitte\s+)?(?:merk dir|merke dir|behalte|vergiss nicht)\s*"
               r"(?:bitte\s*)?,?\s*(?:dass\s+|:\s*)(?P<fact>.+)", _FLAGS),
    # "Note that ..." opens many explanations ("Note that the function returns None"): a
    # command only about the user (`mine`: the fact opens with "I", "my", "our", "we")
    re.compile(_OPENER + r"note that\s+(?P<mine>)(?P<fact>.+)", _FLAGS),
]
_ASKED_POLITELY = re.compile(_OPENER + r"(?:can|could|would|will) you\b", re.I)
_CJK = re.compile(r"[\u3040-\u30ff\u3400-\u9fff]")

# What a forget names must be the user's: "forget that I live in Lisbon", "forget my old
# address"; "forget that approach", "forget it", "forget the semicolons" are about the chat.
_FORGET = [
    re.compile(_OPENER + _PLEASE + r"forget\s+(?:that\s+(?=.*\b(?:i|i'm|i've|my|our|we)\b)|"
               r"what i (?:told|said to) you about\s+|(?:everything |anything )?"
               r"(?:you know |you remember )?about\s+(?=(?:my|our|the fact)\b)|"
               r"the fact that\s+|(?=(?:my|our)\b))(?P<what>.+)", _FLAGS),
    # "you can forget the semicolons" is about the code: only what the user told, or "you
    # can forget about the X" (a thing said before, let go), unless "for now" (the task)
    re.compile(_OPENER + r"you (?:can|may|should|could) (?:now )?forget\s+(?:about\s+(?=the\b)"
               r"(?!.*\bfor (?:now|the moment)\b)|(?:about\s+)?(?:that\s+|(?=(?:my|our|"
               r"what i told you|the fact|the note|everything about)\b)))(?P<what>.+)", _FLAGS),
    re.compile(_OPENER + _PLEASE + r"(?:stop remembering|unlearn)\s+(?P<what>.+)", _FLAGS),
    # "delete the note about my ex"; "delete the note in the README" is about a file
    re.compile(_OPENER + _PLEASE + r"(?:delete|remove|erase|drop) (?:(?:the|your) (?:note|"
               r"memory|memories)|what you (?:remember|know|have (?:stored|saved|noted|got)))"
               r"\s+(?:about|of|on|that says|that)\s+(?P<what>.+)", _FLAGS),
    re.compile(_OPENER + _PLEASE + r"(?:delete|remove|erase|drop) from (?:your )?memory\s*"
               r"[:,-]?\s*(?:the (?:thing|note|bit|part) (?:about|on)\s+)?(?P<what>.+)",
               _FLAGS),
    # "erase my old address from your memory": the user's own, from *your* memory ("remove
    # the arrays from memory" frees a program's)
    re.compile(_OPENER + _PLEASE + r"(?:delete|remove|erase|drop|clear|wipe)\s+(?P<what>(?:my|"
               r"our|the (?:note|fact|bit|part|thing)s?|what i (?:told|said))\b.+?)\s+from "
               r"your (?:memory|memories|notes|records|files)\b[\s.!]*$", _FLAGS),
    re.compile(r"^(?:请|請)?(?:忘记|忘記|忘掉)[，,:：\s]*(?P<what>.+)", re.S),
    # Spanish, German, French: a forget of something of the user's, or of a fact ("que")
    re.compile(_OPENER + r"(?:por favor,?\s*)?olvida\s+(?P<what>(?:mis?|nuestr[oa]s?|que)\b"
               r".+)", _FLAGS),
    re.compile(_OPENER + r"(?:bitte\s+)?vergiss\b\s*(?:bitte\b\s*)?,?\s*(?P<what>(?:meine?[nms]?|"
               r"unsere?[nms]?|dass)\b.+)", _FLAGS),
    re.compile(_OPENER + r"(?:s'il te plaît,?\s*)?oublie\s+(?P<what>(?:mon|ma|mes|notre|nos|"
               r"que|qu')\b.+)", _FLAGS),
]
_RECALL = [
    re.compile(_OPENER + r"what (?:do|did) you (?:remember|recall|have stored|have "
               r"in memory|keep) (?:about|of|on|regarding)\s+(?P<what>.+)", _FLAGS),
    re.compile(_OPENER + r"what (?:have|did) you (?:got |get )?(?:saved|stored|noted|kept) "
               r"(?:about|on|of|regarding)\s+(?P<what>.+)", _FLAGS),
    # "what do you know about black holes" asks the model: only about the user
    re.compile(_OPENER + r"what (?:do|did) you know about\s+(?P<what>(?:me|my|our|us)\b.*)",
               _FLAGS),
    re.compile(_OPENER + r"what(?:'s| is) in your memory (?:about|on|regarding)\s+"
               r"(?P<what>.+)", _FLAGS),
    re.compile(_OPENER + _PLEASE + r"(?:tell me|list|show(?: me)?|share|summari[sz]e|give me)"
               r"(?: everything| all)? (?:of )?what you (?:remember|know|have (?:saved|stored|"
               r"noted)) about\s+"
               r"(?P<what>(?:me|my|our|us)\b.*)", _FLAGS),
    re.compile(_OPENER + r"what (?:do|did) you remember\s*(?P<what>)\??\s*$", re.I),
    # "do you have anything saved about my allergies?": a store named, not "do you know"
    re.compile(_OPENER + r"(?:do|did) you have (?:anything|something|any notes?|a note|notes|"
               r"info(?:rmation)?) (?:saved|stored|noted|kept|on file|in (?:your )?memory) "
               r"(?:about|on|regarding|for)\s+(?P<what>.+)", _FLAGS),
    # Spanish, German, French, Chinese: what is known about the user
    re.compile(r"^¿?\s*qué (?:recuerdas|sabes) (?:sobre|de) (?P<what>(?:mí|mi|mis|nuestr)\b[^?]*)",
               _FLAGS),
    re.compile(r"^was (?:weißt|weisst) du (?:über|von) (?P<what>(?:mich|meine?[nms]?|uns)\b"
               r"[^?]*)",
               _FLAGS),
    re.compile(r"^qu'est-ce que tu (?:sais|te rappelles) (?:sur|de) (?P<what>(?:moi|mon|ma|"
               r"mes)\b[^?]*)", _FLAGS),
    re.compile(r"^你(?:都)?(?:记得|記得|知道)(?:关于|關於)?(?P<what>我(?:的)?(?:哪些|什么|什麼)"
               r"[^?？]*)", re.S),
]
_UPDATE_WORD = r"(?:update|correction|change|mise à jour|actualización|korrektur)"
_UPDATE = [
    # a bare "Update: ..." may also be news; `command_facts.is_a_status_report` tells
    re.compile(_OPENER + r"(?P<bare>)(?:memory )?" + _UPDATE_WORD + r"\s*(?::|\s-)\s*"
               r"(?P<fact>.+)", _FLAGS),
    re.compile(_OPENER + _PLEASE + r"update (?:your memory|the note|what you (?:remember|"
               r"know|have(?: stored| saved)?)|your note)\s*(?:(?:about|on) (?P<about>[^:,]+))?\s*"
               r"[:,-]\s*(?P<fact>.+)", _FLAGS),
    # "correction to what you have on file: ..."
    re.compile(_OPENER + _UPDATE_WORD + r"\s+(?:to|for|of|on)\s+(?:what you (?:have|know|"
               r"remember|stored|saved)(?: (?:on file|stored|saved|in memory|about me))?|your "
               r"(?:memory|notes?|records?|file))\s*[:,-]\s*(?P<fact>.+)", _FLAGS),
    re.compile(_OPENER + r"(?:actualiza tu memoria|aktualisiere dein gedächtnis|mets à jour "
               r"ta mémoire)\s*[:,-]\s*(?P<fact>.+)", _FLAGS),
]

# A forget target that names nothing ("forget it", "forget that.") or a piece of the chat
# ("forget my last message", "forget my previous question").
_EMPTY_TARGET = re.compile(r"^(?:(?:it|that|this|everything|all|about it|about that|the rest|"
                           r"the previous.*|what i (?:just )?said|me)[\s.!?]*$|(?:my|your|the) "
                           r"(?:(?:last|previous|earlier|first|second|other) )?(?:message|"
                           r"question|answer|request|prompt|comment|reply|response|"
                           r"instructions?)s?\b)", re.I)
_QUOTE_OR_CODE = re.compile(r"^\s*(?:```|`|>|\"|'|“|‘|#|//|/\*|\$ |[-*] \[)")
# A recall names a thing of the user's in a few words; "what do you remember about how
# transformers work" or "... my options if my flight is cancelled" asks about the world.
_RECALL_WORDS = 4
_RECALL_NOT_A_THING = re.compile(r"^(?:how|why|what|when|where|which|whether|if)\b", re.I)


def recognise(message: str) -> Command | None:
    """The command the user's message opens with, or None."""
    if not message or _QUOTE_OR_CODE.match(message):
        return None
    opening = _first_paragraph(message)
    for kind, patterns in (("update", _UPDATE), ("recall", _RECALL), ("forget", _FORGET),
                           ("remember", _REMEMBER)):
        for pattern in patterns:
            found = pattern.match(opening)
            if found is not None:
                return _command(kind, pattern, found, opening)
    return None


def _command(kind: CommandKind, pattern: re.Pattern[str], found: re.Match[str],
             opening: str) -> Command | None:
    groups = pattern.groupindex
    text = _clean(found.group("fact" if "fact" in groups else "what"))
    if _ASKED_POLITELY.match(opening):  # "could you remember that X?" asks to keep X
        text = text.rstrip("?").rstrip()
    if kind == "recall":
        return _recall(text)
    if kind == "forget":
        text = text.rstrip("?").rstrip()
        return None if not text or _EMPTY_TARGET.match(text) else Command(kind, text)
    if "that" in groups and not (found.group("that") or "").strip() and \
            not says_a_statement(text):
        return None
    if "mine" in groups and not opens_in_first_person(text):
        return None
    fact = _statements(text)
    if "about" in groups and found.group("about"):
        # "update the note about the wifi: it's now X": "it" is the wifi, kept in the words
        fact = f"{_clean(found.group('about'))}: {fact}"
    if is_about_the_work_or_chat(fact):
        return None
    if "bare" in groups and is_a_status_report(fact):
        return None
    return _fact(kind, fact)


def _recall(text: str) -> Command | None:
    """A recall is the question alone, about a thing named in a few words."""
    target, _, rest = text.partition("?")
    target = re.sub(r"\s+(?:so far|now|exactly)$", "", target.strip(), flags=re.I)
    if rest.strip() or _RECALL_NOT_A_THING.match(target) or \
            len(target.split()) > _RECALL_WORDS:
        return None
    return Command("recall", target)


def _fact(kind: CommandKind, text: str) -> Command | None:
    # A question is not a fact ("remember that time we ...?"), nor is code or a quote
    if not text or text.endswith("?") or _QUOTE_OR_CODE.match(text):
        return None
    too_short = len(text) < 4 if _CJK.search(text) else len(text.split()) < 2
    if len(text) > MAX_FACT_CHARS or too_short:
        return None
    return Command(kind, text)


_SENTENCE = re.compile(r"(?<=[.!?])\s+(?=\S)")
_ASKS = re.compile(r"^(?:what|how|why|when|where|who|which|can|could|would|will|please|do|"
                   r"does|did|is|are|should|tell|write|show|give|make|help|now)\b", re.I)


def _statements(text: str) -> str:
    """The fact's sentences up to the first that asks something ("Remember that X. What's
    the weather?" keeps X)."""
    kept: list[str] = []
    for sentence in _SENTENCE.split(text):
        if kept and (sentence.endswith("?") or _ASKS.match(sentence)):
            break
        kept.append(sentence)
        if sentence.endswith("?"):  # "remember the bug from yesterday? it's back": a question
            break
    return " ".join(kept).strip()


def _first_paragraph(message: str) -> str:
    text = message.strip()
    return text.split("\n\n", 1)[0].strip()


def _clean(text: str) -> str:
    """The words as the user wrote them: one line, no trailing filler or punctuation run."""
    text = " ".join(text.split())
    text = re.sub(r"\s*(?:,?\s*(?:please|thanks|thank you|ok|okay|por favor|gracias|"
                  r"bitte|danke|s'il te plaît|merci)[.!]*)+$", "", text, flags=re.I)
    return text.strip(" \t,;:-")
