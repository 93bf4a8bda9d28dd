"""The plain part of TOML that config files and ``SCHED_*`` values are written in, read without
``tomllib``, whose import (with the ``re``, ``string`` and ``typing`` it loads) costs each
``sched`` call about 30 ms: several times what the rest of a ``sched submit`` takes to load.

Read here: comments and blank lines; ``[table]`` headers of bare keys (``[worker.resources]``);
``key = value`` lines of one bare key; values that are strings without escapes (``"..."``,
``'...'``), decimal integers, floats, booleans, and arrays of those on one line. For anything
else (escapes, multi-line strings or arrays, dotted or quoted keys, inline tables, dates,
underscores in numbers, hexadecimal, ``inf``, a table or key given twice, a carriage return or
a control character) ``loads`` and ``literal`` answer ``UNREAD``, and the caller asks
``tomllib``, which reads it or says what is wrong. What they read, they read as ``tomllib``
does (a test holds them to it).

Pure: no I/O.
"""

from __future__ import annotations

TYPE_CHECKING = False  # typing is for type checkers only (see ``protocol/ints.py``)
if TYPE_CHECKING:
    from typing import Any

#: Not read here: ask tomllib.
UNREAD = object()
#: Not a TOML value at all (``literal``): tomllib would refuse it too.
NOT_TOML = object()

_BARE = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_-")
_DIGITS = frozenset("0123456789")
_BLANK = " \t"


class _Unread(Exception):
    """The text holds something read only by tomllib."""


def loads(text: str) -> Any:
    """The document ``text`` as ``tomllib.loads`` gives it, or ``UNREAD``."""
    if _unusual(text):
        return UNREAD
    document: dict = {}
    tables = set()
    table = document
    try:
        for line in text.split("\n"):
            line = line.strip(_BLANK)
            if not line or line[0] == "#":
                continue
            if line[0] == "[":
                path = _header(line)
                if path in tables:
                    return UNREAD
                tables.add(path)
                table = document
                for key in path:
                    table = table.setdefault(key, {})
                    if not isinstance(table, dict):
                        return UNREAD
                continue
            key, equals, rest = line.partition("=")
            key = key.strip(_BLANK)
            if not equals or not _bare(key) or key in table:
                return UNREAD
            value, rest = _value(rest.lstrip(_BLANK))
            _end(rest)
            table[key] = value
    except _Unread:
        return UNREAD
    return document


def literal(text: str) -> Any:
    """``text`` as the value of ``v = text`` in TOML: the value, ``NOT_TOML`` where no TOML
    value is written so, or ``UNREAD``."""
    if _unusual(text) or "\n" in text:
        return UNREAD
    start = text.lstrip(_BLANK)
    first = start[:1]
    try:
        if first in ('"', "'", "+", "-") or first in _DIGITS:
            value, rest = _value(start)
            _end(rest)
            return value
    except _Unread:
        return NOT_TOML if first in _DIGITS and _surely_not_a_number(start) else UNREAD
    token = start.split("#", 1)[0].rstrip(_BLANK)
    if token in ("true", "false"):
        return token == "true"
    if first in ("[", "{") or token in ("inf", "nan"):
        return UNREAD
    return NOT_TOML  # no TOML value starts with any other character


# -- the parts ---------------------------------------------------------------------------


def _unusual(text: str) -> bool:
    """Whether ``text`` holds a character only tomllib is to judge: a control character other
    than tab and newline (a carriage return among them), or DEL."""
    return any(char < " " and char not in "\t\n" or char == "\x7f" for char in text)


def _bare(key: str) -> bool:
    return bool(key) and all(char in _BARE for char in key)


def _header(line: str) -> tuple[str, ...]:
    """The path of a ``[a.b]`` line."""
    name, bracket, rest = line[1:].partition("]")
    if not bracket or name.startswith("["):  # [[array of tables]]
        raise _Unread
    _end(rest)
    path = tuple(part.strip(_BLANK) for part in name.split("."))
    if not all(_bare(key) for key in path):
        raise _Unread
    return path


def _end(rest: str) -> None:
    """What follows a value or a header must be blank, or a comment."""
    rest = rest.lstrip(_BLANK)
    if rest and rest[0] != "#":
        raise _Unread


def _value(text: str) -> tuple[Any, str]:
    """The value that ``text`` starts with, and what follows it."""
    first = text[:1]
    if first in ('"', "'"):
        if text.startswith(first * 3):  # a multi-line string
            raise _Unread
        content, quote, rest = text[1:].partition(first)
        if not quote or first == '"' and "\\" in content:
            raise _Unread
        return content, rest
    if first == "[":
        return _array(text[1:])
    end = len(text)
    for stop in (",", "]", "#", " ", "\t"):
        at = text.find(stop)
        if at != -1:
            end = min(end, at)
    token, rest = text[:end], text[end:]
    if token in ("true", "false"):
        return token == "true", rest
    return _number(token), rest


def _array(text: str) -> tuple[list, str]:
    """The elements of an array whose ``[`` came just before ``text``."""
    items: list = []
    while True:
        text = text.lstrip(_BLANK)
        if text[:1] == "]":
            return items, text[1:]
        if text[:1] in ("[", "{", "#", ""):
            raise _Unread
        item, text = _value(text)
        items.append(item)
        text = text.lstrip(_BLANK)
        if text[:1] == ",":
            text = text[1:]
        elif text[:1] != "]":
            raise _Unread


def _number(token: str) -> int | float:
    """A decimal integer or float without underscores, as TOML writes them."""
    body = token[1:] if token[:1] in ("+", "-") else token
    whole, dot, fraction = body.partition(".")
    if dot:
        fraction, e, exponent = fraction.partition("e") if "e" in fraction else \
            fraction.partition("E")
    else:
        whole, e, exponent = whole.partition("e") if "e" in whole else whole.partition("E")
    if not _digits(whole) or whole[0] == "0" and whole != "0":
        raise _Unread
    if dot and not _digits(fraction):
        raise _Unread
    if e and not _digits(exponent[1:] if exponent[:1] in ("+", "-") else exponent):
        raise _Unread
    return float(token) if dot or e else int(token)


def _digits(text: str) -> bool:
    return bool(text) and all(char in _DIGITS for char in text)


def _surely_not_a_number(token: str) -> bool:
    """Whether a value that starts with a digit and was not read is no TOML value at all (not
    a date, a time, or a number tomllib reads and this does not): an address such as
    ``10.0.0.5:8786``."""
    token = token.split("#", 1)[0].rstrip(_BLANK)
    return not (token[2:3] == ":" or token[4:5] == "-" or "_" in token
                or token[:2] in ("0x", "0o", "0b"))
