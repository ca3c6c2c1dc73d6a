"""Explicit memory commands in the user's own words: "remember that ...", "forget ...",
"what do you remember about ...", "update: ...". Recognised by rule, never by a model, so
they work the same on a 135M model as on a 32B one.

A false positive (storing what the user never asked to keep) is worse than a miss, so a
command must *open* the message (after a greeting or a "please"), be said as an
instruction rather than a question about the past ("do you remember when ...", "I can't
remember ..."), and name a fact rather than a task: "remember to call me tomorrow" is a
reminder, and Tandem has no clock to remind anyone, so it stays an ordinary message.
Text that is quoted, code, or inside a tool's result or a document is never a command:
only the user's own message is read, and only its opening sentence.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal

CommandKind = Literal["remember", "forget", "recall", "update"]
MAX_FACT_CHARS = 600  # one sentence or two; a longer text is not "a thing to remember"


@dataclass(frozen=True)
class Command:
    kind: CommandKind
    text: str  # the fact (remember, update) or what it is about (forget, recall)


# What may come before a command: greetings, fillers and politeness.
_OPENER = (r"^(?:(?:hey|hi|hello|ok|okay|so|also|oh|and|btw|by the way|fyi|one more thing|"
           r"quick note|actually|please|pls|kindly|just|tandem)\b[\s,.!:;-]*)*")
_PLEASE = r"(?:(?:can|could|would|will) you\s+(?:please\s+)?|please\s+|i want you to\s+|" \
          r"i'd like you to\s+|make sure (?:to|you)\s+)?"
# After "remember": a reminder, a question about the past, or a wish: not a fact.
_NOT_A_FACT = (r"(?:to|when|how|what|who|whom|where|why|which|if|whether|the time|the day|"
               r"the night|the first|back|me|us|him|her|them|it|this one|that one|"
               r"anything|something|nothing|correctly|right|wrong|that (?:time|day|night|"
               r"one|place|song|movie|trip|guy|girl)|those)\b")
_THAT = r"(?:that\s+|this\s*:\s*|the following\s*:\s*|:\s*|,\s*|-\s*)?"

_REMEMBER = [
    re.compile(_OPENER + _PLEASE + r"(?:remember|memori[sz]e)(?:\s+|(?=[:,]))(?!"
               + _NOT_A_FACT + r")(?P<that>" + _THAT + r")(?P<fact>.+)", re.I | re.S),
    re.compile(_OPENER + r"(?:please\s+)?(?:do not|don't|dont|never) forget\s+(?!"
               + _NOT_A_FACT + r")" + _THAT + r"(?P<fact>.+)", re.I | re.S),
    re.compile(_OPENER + _PLEASE + r"(?:keep|bear) in mind\s+(?:that\s+|:\s*)(?P<fact>.+)",
               re.I | re.S),
    re.compile(_OPENER + _PLEASE + r"(?:make|take) a note\s*(?:that\s+|of this\s*:\s*|:\s*)"
               r"(?P<fact>.+)", re.I | re.S),
    re.compile(_OPENER + _PLEASE + r"(?:note|write) down\s+(?:that\s+|:\s*)(?P<fact>.+)",
               re.I | re.S),
    re.compile(_OPENER + _PLEASE + r"(?:save|store|add|put|keep) (?:this|that|the following)?"
               r"\s*(?:in|to|into) (?:your |the )?memory\s*(?:that\s+|:\s*|,\s*|-\s*)"
               r"(?P<fact>.+)", re.I | re.S),
    re.compile(_OPENER + r"for (?:future reference|the record|later)\s*[:,-]\s*(?P<fact>.+)",
               re.I | re.S),
    re.compile(_OPENER + r"note to (?:self|memory)\s*[:,-]\s*(?P<fact>.+)", re.I | re.S),
    # Chinese, Spanish, French, German: the models the profiles serve speak them
    # ("remembering how to spell it is hard", a question: not a fact to keep)
    re.compile(r"^(?:请|請)?(?:记住|記住|记一下|記一下)[，,:：\s]*(?!.*(?:难|難|吗|嗎|呢|怎么|怎麼|？))"
               r"(?P<fact>.+)", re.S),
    # ("recuerda que debes ...": a reminder of a duty)
    re.compile(_OPENER + r"(?:por favor,?\s*)?recuerda\s+que\s+(?!(?:debes|tienes que|hay que)"
               r"\b)(?P<fact>.+)", re.I | re.S),
    re.compile(_OPENER + r"(?:s'il te plaît,?\s*)?(?:souviens-toi|rappelle-toi|retiens)\s+"
               r"que\s+(?P<fact>.+)", re.I | re.S),
    re.compile(_OPENER + r"(?:bitte\s+)?(?:merk dir|merke dir|behalte)\s*(?:bitte\s*)?,?\s*"
               r"(?:dass\s+|:\s*)(?P<fact>.+)", re.I | re.S),
]
_NOTE_THAT = re.compile(_OPENER + r"note that\s+(?P<fact>[^\n?]+?)[.!]?\s*$", re.I)
_FIRST_PERSON = re.compile(r"\b(?:i|i'm|i've|i'd|my|me|mine|we|we're|our|us)\b", re.I)
# "Remember my code is 4417" says a fact; "remember the milk" says a task: without "that"
# or a colon, the words after "remember" must make a statement.
_STATEMENT = re.compile(
    r"\b(?:is|are|was|were|am|has|have|had|will|won't|can't|don't|doesn't|isn't|aren't|"
    r"uses?|prefers?|likes?|loves?|hates?|lives?|works?|needs?|wants?|runs?|starts?|ends?|"
    r"leads?|keeps?|owns?|means?|should|must|never|always|\w+(?:'s|'re|'m|'ve))\b", re.I)
_ASKED_POLITELY = re.compile(_OPENER + r"(?:can|could|would|will) you\b", re.I)
_CJK = re.compile(r"[\u3040-\u30ff\u3400-\u9fff]")

_FORGET = [
    re.compile(_OPENER + _PLEASE + r"forget\s+(?:that\s+|what i (?:told|said to) you about\s+|"
               r"(?:everything |anything )?(?:you know |you remember )?about\s+"
               r"(?=(?:my|our|the fact)\b)|the fact that\s+|(?=(?:my|our)\b))(?P<what>.+)",
               re.I | re.S),
    # "you can forget the semicolons" is about the code: only what the user told
    re.compile(_OPENER + r"you (?:can|may|should|could) (?:now )?forget\s+(?:about\s+)?"
               r"(?:that\s+|(?=(?:my|our|what i|the fact|the note|everything about)\b))"
               r"(?P<what>.+)", re.I | re.S),
    re.compile(_OPENER + _PLEASE + r"(?:stop remembering|unlearn)\s+(?P<what>.+)", re.I | re.S),
    re.compile(_OPENER + _PLEASE + r"(?:delete|remove|erase|drop) (?:the note|your note|"
               r"what you remember|what you know|your memory|the memory|from (?:your )?memory)"
               r"\s+(?:about|of|on|that says|that)?\s*(?P<what>.+)", re.I | re.S),
    re.compile(r"^(?:请|請)?(?:忘记|忘記|忘掉)[，,:：\s]*(?P<what>.+)", re.S),
]
_RECALL = [
    re.compile(_OPENER + r"what (?:do|did) you (?:remember|recall|have stored|have "
               r"in memory|keep) (?:about|of|on|regarding)\s+(?P<what>.+)", re.I | re.S),
    # "what do you know about black holes" asks the model: only about the user
    re.compile(_OPENER + r"what (?:do|did) you know about\s+(?P<what>(?:me|my|our|us)\b.*)",
               re.I | re.S),
    re.compile(_OPENER + r"what(?:'s| is) in your memory (?:about|on|regarding)\s+"
               r"(?P<what>.+)", re.I | re.S),
    re.compile(_OPENER + _PLEASE + r"tell me what you (?:remember|know) about\s+"
               r"(?P<what>(?:me|my|our|us)\b.*)", re.I | re.S),
    re.compile(_OPENER + r"what (?:do|did) you remember\s*(?P<what>)\??\s*$", re.I),
]
_UPDATE = [
    re.compile(_OPENER + r"(?:memory )?(?:update|correction|change)\s*:\s*(?P<fact>.+)",
               re.I | re.S),
    re.compile(_OPENER + _PLEASE + r"update (?:your memory|the note|what you remember|"
               r"your note)\s*(?:about [^:,]+)?\s*[:,-]\s*(?P<fact>.+)", re.I | re.S),
]

# A forget or recall target that names nothing ("forget it", "forget that.").
_EMPTY_TARGET = re.compile(r"^(?:it|that|this|everything|all|about it|about that|"
                           r"the rest|the previous.*|what i said|my last message|me)[\s.!?]*$",
                           re.I)
_QUOTE_OR_CODE = re.compile(r"^\s*(?:```|`|>|\"|'|“|‘|#|//|/\*|\$ |[-*] \[)")


def recognise(message: str) -> Command | None:
    """The command the user's message opens with, or None."""
    if not message or _QUOTE_OR_CODE.match(message):
        return None
    opening = _first_paragraph(message)
    for kind, patterns in (("update", _UPDATE), ("recall", _RECALL), ("forget", _FORGET),
                           ("remember", _REMEMBER)):
        for pattern in patterns:
            found = pattern.match(opening)
            if found is None:
                continue
            text = _clean(found.group("fact" if "fact" in pattern.groupindex else "what"))
            if _ASKED_POLITELY.match(opening):  # "could you remember that X?" asks to keep X
                text = text.rstrip("?").rstrip()
            if kind in ("forget", "recall"):
                text = text.rstrip("?").rstrip()
                if kind == "forget" and (not text or _EMPTY_TARGET.match(text)):
                    return None
                return Command(kind, text)
            if "that" in pattern.groupindex and not found.group("that").strip() and \
                    not _STATEMENT.search(text):
                return None
            return _fact(kind, text)
    # "Note that ..." opens many explanations ("Note that the function returns None"): a
    # command only when it is all the message says, and about the user.
    found = _NOTE_THAT.match(opening)
    if found is not None and "\n" not in message.strip() and _FIRST_PERSON.search(
            found.group("fact")):
        return _fact("remember", _clean(found.group("fact")))
    return None


def _fact(kind: CommandKind, text: str) -> Command | None:
    text = _statements(text)
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
    return " ".join(kept).strip()


def _first_paragraph(message: str) -> str:
    text = message.strip()
    return text.split("\n\n", 1)[0].strip()


def _clean(text: str) -> str:
    """The words as the user wrote them: one line, no trailing filler or punctuation run."""
    text = " ".join(text.split())
    text = re.sub(r"\s*(?:,?\s*(?:please|thanks|thank you|ok|okay)[.!]*)+$", "", text, flags=re.I)
    return text.strip(" \t,;:-")
