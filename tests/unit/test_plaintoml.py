"""Plain TOML is read without tomllib, exactly as tomllib reads it: whatever ``plaintoml``
reads, tomllib reads to the same values and types; whatever tomllib refuses, plaintoml leaves
to it; and a value plaintoml says is no TOML at all, tomllib refuses too."""

from __future__ import annotations

import math
import tomllib

from hypothesis import example, given, settings
from hypothesis import strategies as st

from dsched import config, plaintoml
from dsched.plaintoml import NOT_TOML, UNREAD

REFUSED = object()


def typed(value):
    """``value`` with the type of every part beside it: True is not 1, nor 1.0."""
    if isinstance(value, dict):
        return {key: typed(item) for key, item in value.items()}
    if isinstance(value, list):
        return [typed(item) for item in value]
    if isinstance(value, float) and math.isnan(value):
        return ("float", "nan")
    return (type(value).__name__, value)


def tomllib_document(text):
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError:
        return REFUSED


def tomllib_value(text):
    document = tomllib_document(f"v = {text}")
    return REFUSED if document is REFUSED or list(document) != ["v"] else document["v"]


#: Values written plainly, as a config file has them.
SCALAR = st.one_of(
    st.integers(-10**20, 10**20).map(str),
    st.integers(0, 10**6).map(lambda n: f"+{n}"),
    st.floats(allow_nan=False, allow_infinity=False).map(repr),
    st.sampled_from(["true", "false"]),
    st.text(st.characters(blacklist_characters='"\\', blacklist_categories=("Cc", "Cs")),
            max_size=8).map(lambda text: f'"{text}"'),
    st.text(st.characters(blacklist_characters="'", blacklist_categories=("Cc", "Cs")),
            max_size=8).map(lambda text: f"'{text}'"),
)
PLAIN = st.one_of(SCALAR, st.builds(
    lambda items, comma, space: "[" + space + f",{space}".join(items) + comma + "]",
    st.lists(SCALAR, max_size=4), st.sampled_from(["", ","]), st.sampled_from(["", " ", "\t"])))
#: What values are made of: digits and number signs, quotes, brackets, separators, letters
#: of the words TOML knows, spaces, comments, escapes and a control character.
VALUE = st.one_of(
    PLAIN,
    PLAIN.map(lambda text: text + " # a comment"),
    st.text(st.sampled_from("0123456789.eE+-_:xob tfinrueals\"'[],#\\\t\x01é"), max_size=14),
    st.sampled_from(["8786", "-3", "+0", "0.5", "1e5", "1.5E-3", "true", "false", '"a b"',
                     "'c:\\\\d'", "[1, 2,]", "[ ]", '["x", 1, true, 2.5]', "10.0.0.5:8786",
                     "tcp://h:1", "07:32:00", "1979-05-27", "1_000", "0x1f", "inf", "nan",
                     '"""x"""', "{a = 1}", "00", "1.", ".5", "1e", "[[1]]", "9" * 25]),
)
KEY = st.one_of(st.text("abcdefgh_-0123", min_size=1, max_size=3), st.sampled_from(["a", "b", "port", "GPU", "x-y_1", "1", '"q"', "a.b", " a ",
                                 "", "é"]), st.text("abc.=[] ", max_size=5))
BARE = st.text("abcdefgh_-0123", min_size=1, max_size=3)
PLAIN_LINE = st.one_of(
    st.builds(lambda k, v: f"{k} = {v}", BARE, PLAIN),
    st.builds(lambda ks: "[" + ".".join(ks) + "] # t", st.lists(BARE, min_size=1, max_size=2)),
    st.sampled_from(["", "# a comment", "  \t"]),
)
LINE = st.one_of(
    PLAIN_LINE,
    st.builds(lambda k, v: f"{k} = {v}", KEY, VALUE),
    st.builds(lambda k, v: f"{k}={v}", KEY, VALUE),
    st.builds(lambda ks: "[" + ".".join(ks) + "]", st.lists(KEY, min_size=1, max_size=3)),
    st.builds(lambda ks: "[[" + ".".join(ks) + "]]", st.lists(KEY, min_size=1, max_size=2)),
    st.sampled_from(["", "# a comment", "  \t", "[a] # c", "a = 1 # c", "#\x01", "x = 1\r"]),
)


@settings(max_examples=1000, deadline=None)
@given(VALUE)
@example("10.0.0.5:8786")
@example("sched-head:8786")
@example(" 2 ")
@example("true # on")
@example('"quoted" x')
@example("")
def test_a_value_reads_as_tomllib_reads_it(text):
    ours, theirs = plaintoml.literal(text), tomllib_value(text)
    if ours is NOT_TOML:
        assert theirs is REFUSED
    elif ours is not UNREAD:
        assert theirs is not REFUSED and typed(ours) == typed(theirs)
    assert typed(config.parse_literal(text)) == typed(text if theirs is REFUSED else theirs)


@settings(max_examples=1000, deadline=None)
@given(st.one_of(st.lists(LINE, max_size=8), st.lists(PLAIN_LINE, max_size=8)))
def test_a_document_reads_as_tomllib_reads_it(lines):
    text = "\n".join(lines)
    ours, theirs = plaintoml.loads(text), tomllib_document(text)
    if ours is not UNREAD:
        assert theirs is not REFUSED and typed(ours) == typed(theirs)


def test_the_config_files_we_ship_and_document_are_plain():
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    shipped = (root / "deploy" / "config.toml").read_text()
    documented = '[client]\nscheduler_address = "sched-head:8786"\ntoken_file = "~/sched-token"\n'
    for text in (shipped, documented):
        assert typed(plaintoml.loads(text)) == typed(tomllib.loads(text))


def test_a_table_or_key_given_twice_is_left_to_tomllib():
    for text in ("[a]\n[a]", "a = 1\na = 2", "a = 1\n[a]", "[a]\nb = 1\n[a.b]"):
        assert plaintoml.loads(text) is UNREAD and tomllib_document(text) is REFUSED
    assert plaintoml.loads("[a.b]\n[a]\nc = 1") == {"a": {"b": {}, "c": 1}}
