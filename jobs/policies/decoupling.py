"""Splitting a prompt into an object phrase and a background phrase: FlexCache's text extractor.

FlexCache (papers/flexcache-video-approximate-cache.txt 3.2 (1), 4.2.1, 5 "Text extractor") asks
Llama2-7B for "the object that usually shows the main character or the event" and "the background
that usually describes the general environment or settings", embeds both and looks each up in its
own index. Here the extractor is a deterministic, rule-based parser (the issue: "a deterministic
parser plus the embedder"): the same prompt splits the same way on every machine, in microseconds,
with no model to load. The caller embeds `object` and `background` with the embedder it embeds
whole prompts with. A prompt decouples only when both phrases are non-empty
(`PromptParts.decoupled`); otherwise it can hit on the whole prompt only.

Rules, in order (all vocabularies are the module constants below, ours, sized on DiffusionDB's
first 500 prompts and the quality lab's caption templates, lab/captions.py):

1. Normalise: lower case; brackets, quotes and emphasis marks become spaces; "8 k" -> "8k", "3 d"
   -> "3d"; the period of "mr." and of single initials ("john c. reilly") is dropped; whitespace
   collapses.
2. Clauses: split at , ; | ! ? : at a period that ends a word, and at a spaced dash (" - ").
3. Medium prefix: a clause opening "[up to 5 words] MEDIUM [by <name>] of|depicting|showing ..."
   (MEDIUMS: painting, portrait, photo, image, picture, render, ...) gives that prefix to the
   style: "a beautiful painting of pyramids" -> "pyramids", "an image of a red disk" -> "a red
   disk", "oil painting by george stubbs of a cow" -> "a cow".
4. Style: a clause is cut at its first TAIL_MARKERS phrase ("in the style of", "trending on",
   "artstation", "highly detailed", "octane", "8k", ...) or artist credit: "by" and a name, not
   "by the/a/..." (a place) and not after a past participle outside ART_VERBS ("controlled by
   hackers" stays). What is left of the clause is style when it is empty, made only of
   STYLE_WORDS, determiners and ART_VERBS ("epic 3d", "intricate", "painted"), or ends in a
   STYLE_HEADS noun ("digital painting", "cinematic lighting", "movie still"). Style clauses
   before the first content clause are skipped; the first style clause or cut after it ends the
   content (the "style tail"). Style belongs to neither phrase: object and background similarity
   should be about content (`PromptParts.style` keeps it, for inspection).
5. Background: content clauses are scanned left to right, each word by word; the first of these
   fires (its name is `PromptParts.rule`):
   - background-label: a clause that is only "background" or "backdrop" ("background: misty
     hills"): the next clause is the background.
   - in-the-background: "in [the] background": the background is what precedes it back to "with"
     or the clause start ("a field with trees in the background" -> "trees"), or else what
     follows it in the clause ("in the background a castle").
   - scene-preposition: a SCENE_PREPOSITIONS word ("in", "on", "at", "against", "near", "by the",
     "surrounded by", "next to", ...) whose noun phrase's head (its last word before a stop word)
     is a SETTING_NOUNS word ("moon", "forest", "beach", "space", "background", "night", ...;
     plurals too). A position head followed by "of" reads on ("in front of a wall", "at the
     bottom of a cave", "on top of a hill"); other heads do not qualify ("in a space suit", "on
     the left", "left of a blue square"). The background is the noun phrase, extended over
     chained prepositional phrases ("a classroom at night", "a forest covered in snow"), not
     over a verb ("a spaceship | looking out a window").
   - background-noun: a "background"/"backdrop" noun phrase not after a preposition: "white
     background" (a clause), "a portrait with a city background", or the lab's leading ground
     "plain white background with a small red disk ..." (the object follows "with").
   - no-background: none fired: background "" and the whole content is the object.
6. Object: the content clauses less the background span (and its preposition), joined by ", ",
   dangling connectors ("with", "and", ...) stripped. Only the first background span is taken.

Examples (tests/jobs/test_decoupling.py has more):
    "an astronaut flying in space"        -> "an astronaut flying" | "space"
    "a beautiful painting of pyramids on the moon by nekro, 4k"  -> "pyramids" | "the moon"
    "on the left, a big red disk against a striped grey backdrop"
                                          -> "on the left, a big red disk" | "a striped grey backdrop"
    "a renaissance portrait of dwayne johnson, art in the style of rembrandt"
                                          -> "dwayne johnson" | ""  (no-background)
Known limits: the parser knows no parts of speech, so a word meant otherwise takes the rules'
reading ("by moonlight" is cut as an artist credit, "a boy painting" as style); a setting outside
SETTING_NOUNS is missed ("in a quirky indie platformer"); a prompt naming two settings keeps the
first as background and the second in the object.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from enum import StrEnum
from typing import Final

from jobs.policies.decoupling_words import (
    ART_VERBS,
    BACKGROUND_NOUNS,
    CHAIN_WORDS,
    DETERMINERS,
    MEDIUMS,
    POSITION_WORDS,
    SCENE_PREPOSITIONS,
    SETTING_NOUNS,
    STOP_WORDS,
    STYLE_HEADS,
    STYLE_WORDS,
    TAIL_MARKERS,
)


class Rule(StrEnum):
    """Which rule found the background (or that none did)."""

    EMPTY = "empty"
    BACKGROUND_LABEL = "background-label"
    IN_THE_BACKGROUND = "in-the-background"
    SCENE_PREPOSITION = "scene-preposition"
    BACKGROUND_NOUN = "background-noun"
    NO_BACKGROUND = "no-background"


@dataclass(frozen=True, slots=True)
class PromptParts:
    """A prompt's object phrase, background phrase ("" when none), the rule that split them, and
    the style text neither phrase took (medium prefixes, the style tail)."""

    object: str
    background: str
    rule: Rule
    style: str = ""

    @property
    def decoupled(self) -> bool:
        """Whether the prompt can be looked up by object and background (both phrases found)."""
        return bool(self.object and self.background)


Words = list[str]
_DROPPED: Final = re.compile(r"[()\[\]{}<>\"*_~#^=+`\u201c\u201d]")
_JOINED_UNIT: Final = re.compile(r"\b(\d+) (k|d)\b")
_ABBREVIATION: Final = re.compile(r"\b(mr|mrs|ms|dr|st|jr|sr|vs|mt|[a-z])\.(?=\s|$)")
_MEDIUM_LINKS: Final = frozenset({"of", "depicting", "depicts", "showing"})
_PARTICLES: Final = frozenset({"out", "up", "down", "away", "off", "back"})
_BOUNDARY: Final = re.compile(r"[,;|!?:]|\.(?=\s|$)|\s[-\u2013\u2014]+\s")
_STYLE_TOKEN: Final = re.compile(r"^(\d+k|\d+mm|\d+p|ue\d|f/[\d.]+|\d+)$")
_LEADING_CONNECTORS: Final = frozenset({"with", "and", "or", "while", "-"})
_TRAILING_CONNECTORS: Final = _LEADING_CONNECTORS | {"of", "in", "on", "at", "by", "to"}


def split_prompt(prompt: str) -> PromptParts:
    """The object and background phrases of `prompt` (see the module doc for the rules)."""
    clauses = [clause.split() for clause in _BOUNDARY.split(_normalise(prompt))]
    content, style = _content_clauses([words for words in clauses if words])
    if not content:
        return PromptParts("", "", Rule.EMPTY, _style_text(style))
    found = _find_background(content)
    if found is None:
        return PromptParts(_joined(content), "", Rule.NO_BACKGROUND, _style_text(style))
    rule, background, rest = found
    return PromptParts(_joined(rest), " ".join(_trimmed(background)), rule, _style_text(style))


def _normalise(prompt: str) -> str:
    text = _DROPPED.sub(" ", prompt.lower().replace("\u2019", "'"))
    text = _ABBREVIATION.sub(r"\1", _JOINED_UNIT.sub(r"\1\2", " ".join(text.split())))
    return " ".join(text.split())


def _joined(clauses: list[Words]) -> str:
    return ", ".join(" ".join(words) for words in map(_trimmed, clauses) if words)


def _style_text(pieces: list[Words]) -> str:
    return ", ".join(" ".join(words) for words in pieces)


def _trimmed(words: Words) -> Words:
    start, end = 0, len(words)
    while start < end and words[start] in _LEADING_CONNECTORS:
        start += 1
    while end > start and words[end - 1] in _TRAILING_CONNECTORS:
        end -= 1
    return words[start:end]


# --- style (rules 3 and 4) ------------------------------------------------------------------


def _content_clauses(clauses: list[Words]) -> tuple[list[Words], list[Words]]:
    """(content clauses, style pieces): leading style clauses skipped, the tail cut off."""
    content: list[Words] = []
    style: list[Words] = []
    for index, words in enumerate(clauses):
        prefix, rest = _medium_prefix(words)
        style.append(prefix)
        cut = _tail_start(rest)
        head = rest[:cut]
        if _is_style(head):
            style.append(head)
            if content:
                style.extend([rest[cut:], *clauses[index + 1 :]])
                break
            style.append(rest[cut:])
            continue
        content.append(head)
        if cut < len(rest):
            style.extend([rest[cut:], *clauses[index + 1 :]])
            break
    return content, [piece for piece in style if piece]


def _medium_prefix(words: Words) -> tuple[Words, Words]:
    """Rule 3: ([<= 5 words] MEDIUM [by <= 4 words] of, the rest) or ([], words)."""
    for index in range(min(len(words) - 1, 6)):
        if words[index] not in MEDIUMS or any(word in STOP_WORDS for word in words[:index]):
            continue
        after = index + 1
        if words[after] == "by":  # "oil painting by george stubbs of a cow"
            credit = words[after + 1 : after + 6]
            after = after + 1 + credit.index("of") if "of" in credit else after
        if words[after] in _MEDIUM_LINKS:
            return words[: after + 1], words[after + 1 :]
    return [], words


def _tail_start(words: Words) -> int:
    """Rule 4: the index of the first tail marker or artist credit, len(words) when none."""
    for index, word in enumerate(words):
        if word == "by" and _is_credit(words, index):
            return index
        if _STYLE_TOKEN.match(word) and not word.isdigit():
            return index
        for marker in TAIL_MARKERS:
            if tuple(words[index : index + len(marker)]) == marker:
                return index
    return len(words)


def _is_credit(words: Words, index: int) -> bool:
    after = words[index + 1] if index + 1 < len(words) else ""
    before = words[index - 1] if index else ""
    if not after or after in DETERMINERS or before == "surrounded":
        return False
    return not (before.endswith("ed") and before not in ART_VERBS)


def _is_style(head: Words) -> bool:
    if not head or head[-1] in STYLE_HEADS:
        return True
    return all(_is_style_word(word) for word in head)


def _is_style_word(word: str) -> bool:
    """A word a clause of style is made of ("epic 3d", "a impressionist", "painted")."""
    return word in STYLE_WORDS or word in DETERMINERS or word in ART_VERBS or bool(_STYLE_TOKEN.match(word))


# --- background (rule 5) --------------------------------------------------------------------


def _find_background(content: list[Words]) -> tuple[Rule, Words, list[Words]] | None:
    """(rule, background words, content without the background span) or None."""
    for number, words in enumerate(content):
        if len(words) == 1 and words[0] in BACKGROUND_NOUNS and number + 1 < len(content):
            rest = content[:number] + content[number + 2 :]
            return Rule.BACKGROUND_LABEL, content[number + 1], rest
        found = _background_in_clause(words)
        if found is not None:
            rule, background, (start, end) = found
            rest = [*content[:number], words[:start], words[end:], *content[number + 1 :]]
            return rule, background, rest
    return None


def _background_in_clause(words: Words) -> tuple[Rule, Words, tuple[int, int]] | None:
    """The first background in one clause: (rule, background words, span removed from it)."""
    for index, word in enumerate(words):
        length = _preposition_at(words, index)
        if length:
            span = _setting_span(words, index + length)
            if span is None:
                continue
            start, end = span
            if words[index] == "in" and [w for w in words[start:end] if w != "the"] == ["background"]:
                found = _in_the_background(words, index, end)
                if found is None:
                    continue
                return found
            return Rule.SCENE_PREPOSITION, words[start:end], (index, end)
        if word in BACKGROUND_NOUNS:
            begin = _phrase_start(words, index)
            with_before = begin > 0 and words[begin - 1] == "with"
            end = _chain_end(words, index + 1, through_with=False)
            cut = begin - 1 if with_before else begin
            return Rule.BACKGROUND_NOUN, words[begin:end], (cut, end)
    return None


def _in_the_background(words: Words, index: int, end: int) -> tuple[Rule, Words, tuple[int, int]] | None:
    """ "X in the background" (X back to "with" or a stop word), else "in the background, X" (the
    rest of the clause); None when neither side has words."""
    begin = _phrase_start(words, index)
    if begin < index:
        cut = begin - 1 if begin and words[begin - 1] == "with" else begin
        return Rule.IN_THE_BACKGROUND, words[begin:index], (cut, end)
    if end < len(words):
        return Rule.IN_THE_BACKGROUND, words[end:], (index, len(words))
    return None


def _phrase_start(words: Words, index: int) -> int:
    """Where the noun phrase ending just before `index` starts (after a stop word or "with")."""
    begin = index
    while begin > 0 and words[begin - 1] not in STOP_WORDS and not _is_preposition_word(words[begin - 1]):
        begin -= 1
    return begin


def _preposition_at(words: Words, index: int) -> int:
    """The length of the scene preposition starting at `index`, 0 when none starts there."""
    for preposition in SCENE_PREPOSITIONS:
        if tuple(words[index : index + len(preposition)]) == preposition:
            if preposition == ("by",) and (index + 1 >= len(words) or words[index + 1] not in DETERMINERS):
                return 0
            return len(preposition)
    return 0


def _is_preposition_word(word: str) -> bool:
    return any(word == preposition[0] for preposition in SCENE_PREPOSITIONS)


def _setting_span(words: Words, start: int) -> tuple[int, int] | None:
    """(start, end) of the background phrase a preposition introduces at `start`, or None when
    its noun phrase's head is not a setting. A position head followed by "of" reads on."""
    while True:
        end = _noun_phrase_end(words, start)
        head = _head(words[start:end])
        if head in POSITION_WORDS and end < len(words) and words[end] == "of":
            start = end + 1
            continue
        break
    if head is None or not _is_setting(head):
        return None
    return start, _chain_end(words, end, through_with=True)


def _noun_phrase_end(words: Words, start: int) -> int:
    """The end of the noun phrase starting at `start`: before a stop word, a preposition, or, once
    past the phrase's first content word, a determiner (a new phrase) or a verb form."""
    end = start
    seen_content = False
    while end < len(words):
        word = words[end]
        if word in STOP_WORDS or _is_preposition_word(word):
            break
        if seen_content and (
            word in DETERMINERS or (word not in SETTING_NOUNS and _is_verb_form(words, end))
        ):
            break
        seen_content = seen_content or word not in DETERMINERS
        end += 1
    return end


def _is_verb_form(words: Words, index: int) -> bool:
    """An "-ing" word before a determiner, a particle, a stop word, a preposition or the clause
    end ("a spaceship looking out"), or an "-ed" word before a preposition ("covered in"); an
    "-ing" word before another word is an adjective ("small twinkling stars")."""
    word = words[index]
    following = words[index + 1] if index + 1 < len(words) else ""
    if word.endswith("ing") and len(word) > 4:
        return (
            not following
            or following in DETERMINERS
            or following in _PARTICLES
            or following in STOP_WORDS
            or _is_preposition_word(following)
        )
    return word.endswith("ed") and len(word) > 3 and following in CHAIN_WORDS


def _head(phrase: Words) -> str | None:
    """The last word of a noun phrase that is not a determiner or a number."""
    for word in reversed(phrase):
        if word not in DETERMINERS and not word.isdigit():
            return word
    return None


def _is_setting(word: str) -> bool:
    if word in SETTING_NOUNS:
        return True
    return (word.endswith("s") and word[:-1] in SETTING_NOUNS) or (
        word.endswith("es") and word[:-2] in SETTING_NOUNS
    )


def _chain_end(words: Words, end: int, *, through_with: bool) -> int:
    """Extend a background phrase over chained prepositional phrases ("at night", "of a city",
    "covered in snow"); not over "with" when the object follows it (the lab's leading ground)."""
    while end < len(words):
        index = end + 1 if words[end].endswith("ed") and len(words[end]) > 3 else end
        if index >= len(words) or words[index] not in CHAIN_WORDS:
            break
        if words[index] == "with" and not through_with:
            break
        following = _noun_phrase_end(words, index + 1)
        if following == index + 1 or _head(words[index + 1 : following]) is None:
            break
        end = following
    return end
