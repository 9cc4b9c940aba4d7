"""Validation of everything a user types that ends up near SQL.

Table and column names are only ever looked up as bound parameters and then
used in their catalogue spelling, double-quoted. Tags and action letters are
checked against small alphabets. A ``--when`` condition is SQL by design: it
is checked here so that it cannot leave its parentheses, and then compiled
by the database inside the generated trigger.
"""

from __future__ import annotations

import re
from collections.abc import Callable

from subscriptions.db.settings import MAX_NAME_CHARS
from subscriptions.errors import SubsError

ACTIONS = "IUD"
ACTION_NAMES = {"I": "insert", "U": "update", "D": "delete"}
TAG_PATTERN = re.compile(r"[A-Za-z][A-Za-z0-9_.-]{0,39}")
TAG_RULE = "a letter followed by up to 39 letters, digits, '_', '.' or '-'"
_UNQUOTED = re.compile(r"[A-Za-z][A-Za-z0-9_$]*")
_WORD_CHARS = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_$")
# q'<d>...<d>': these open delimiters close with their pair, any other with itself.
_CLOSING_DELIMITERS = {"(": ")", "[": "]", "{": "}", "<": ">"}
# EVENT_SUBSCRIBER.WHEN_CONDITION, WATCH_COLUMNS and EVENT_BACKFILL.WHERE_CONDITION hold this many.
MAX_STORED_CHARS = 4000


def lookup_names(typed: str) -> list[str]:
    """Catalogue names that ``typed`` may mean, most likely first.

    ``"Mixed"`` means exactly Mixed; ``languages`` means LANGUAGES as in SQL,
    or a table created quoted as "languages"; anything else (non-ASCII, spaces)
    means exactly what was typed.
    """
    text = typed.strip()
    if len(text) >= 2 and text.startswith('"') and text.endswith('"'):
        inner = text[1:-1]
        if '"' not in inner.replace('""', ""):
            return _nameable([inner.replace('""', '"')])
    if _UNQUOTED.fullmatch(text):
        return _nameable([text.upper()] if text == text.upper() else [text.upper(), text])
    return _nameable([text])


def _nameable(candidates: list[str]) -> list[str]:
    """Those a catalogue name can be: a longer one names nothing (and bound
    to a query of the catalogue failed it with a string truncation)."""
    return [candidate for candidate in candidates if len(candidate) <= MAX_NAME_CHARS]


def split_names(text: str) -> list[str]:
    """Split ``C1,"a,b",C3`` on commas outside double quotes."""
    names: list[str] = []
    current: list[str] = []
    quoted = False
    for char in text:
        if char == '"':
            quoted = not quoted
        if char == "," and not quoted:
            names.append("".join(current).strip())
            current = []
        else:
            current.append(char)
    names.append("".join(current).strip())
    if quoted or any(not name for name in names):
        raise SubsError(f"--columns {text!r} is not a comma-separated list of column names")
    return names


def parse_actions(text: str) -> str:
    """``IUD``-style action letters, each at most once, in canonical order."""
    if not text or any(char not in ACTIONS for char in text) or len(set(text)) != len(text):
        raise SubsError(
            f"ACTIONS must be one or more of the upper-case letters I, U, D, each once "
            f"(I=insert, U=update, D=delete), e.g. IUD; got {text!r}"
        )
    return "".join(char for char in ACTIONS if char in text)


def check_tag(tag: str) -> str:
    if not TAG_PATTERN.fullmatch(tag):
        raise SubsError(f"tag {tag!r} is not valid: use {TAG_RULE}")
    return tag


def check_condition(condition: str, option: str = "--when", over: str = "NEW/OLD") -> str:
    """Refuse a condition (``--when``, ``--where``) that could end the
    generated statement's condition early: statement separators, comments,
    unbalanced parentheses or quotes."""
    depth = 0
    index = 0
    length = len(condition)

    def refuse(reason: str) -> SubsError:
        return SubsError(f"{option} condition refused: {reason}; give one SQL condition on {over}")

    if not condition.strip():
        raise refuse("it is empty")
    if len(condition.strip()) > MAX_STORED_CHARS:
        raise refuse(
            f"it is {len(condition.strip()):,} characters long and subs stores {MAX_STORED_CHARS:,} "
            "(a stored function can hold the logic)"
        )
    while index < length:
        char = condition[index]
        if char in "qQ" and condition[index + 1 : index + 2] == "'":
            index = _after_q_string(condition, index, refuse)
            continue
        if char in "'\"":
            end = index + 1
            while True:
                end = condition.find(char, end)
                if end == -1:
                    raise refuse(f"unterminated {char} quote")
                if condition[end + 1 : end + 2] == char:
                    end += 2
                    continue
                break
            index = end + 1
            continue
        if char == ";":
            raise refuse("';' is not allowed")
        if condition.startswith("--", index) or condition.startswith("/*", index):
            raise refuse("comments are not allowed")
        if char == "(":
            depth += 1
        elif char == ")":
            depth -= 1
            if depth < 0:
                raise refuse("unbalanced ')'")
        elif ord(char) < 32 and char not in "\t\r\n":
            raise refuse("control characters are not allowed")
        index += 1
    if depth:
        raise refuse("unbalanced '('")
    return condition.strip()


def _after_q_string(condition: str, index: int, refuse: Callable[[str], SubsError]) -> int:
    """The index after the ``q'<d>...<d>'`` literal whose ``q`` is at ``index``,
    read as Firebird's lexer reads it: its text ends at the first closing
    delimiter followed by a quote, quotes inside are data. Read as a plain
    literal instead, ``q'{'}' ; DELETE ...'`` would hide a statement from
    the checks above. A ``q`` right after a name or number is refused: what
    the engine makes of it depends on how it splits that word."""
    if index and condition[index - 1] in _WORD_CHARS:
        raise refuse(f"put a space before {condition[index]}'...' (it touches the word before it)")
    delimiter = condition[index + 2 : index + 3]
    if not delimiter or delimiter == "'" or not delimiter.isascii():
        raise refuse("a q'...' literal needs an ASCII delimiter other than a quote, e.g. q'{it's}'")
    closing = _CLOSING_DELIMITERS.get(delimiter, delimiter) + "'"
    end = condition.find(closing, index + 3)
    if end == -1:
        raise refuse(f"unterminated q'{delimiter}...{closing}")
    return end + 2
