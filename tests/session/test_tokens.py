"""The tokenizing primitive (harness.md §5): session ids as whole tokens, the cwd at path boundaries."""

from __future__ import annotations

import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pytest_dsh_replay.session import tokens
from pytest_dsh_replay.session.tokens import Tokenizer

IDS = ["f2358dc0-75f8-4649-8440-ab94b8e10dc3", "906f1eac-a457-4eb9-828b-1ba537552524"]
_FRAGMENTS = [
    *IDS,
    IDS[0].upper(),
    IDS[1][:-1],
    "x",
    "-",
    "_",
    " ",
    "\n",
    "/",
    "11111111-2222-3333-4444-555555555555",
]


@settings(max_examples=300, deadline=None, derandomize=True)
@given(st.lists(st.lists(st.sampled_from(_FRAGMENTS), max_size=8).map("".join), max_size=4))
def test_uuid_session_ids_share_one_pattern_with_the_same_result(texts: list[str]) -> None:
    """UUID ids are found by one shared whole-token pattern (nothing compiled per run): every text is
    tokenized and respelled exactly as with the pattern of the ids themselves."""
    shared = Tokenizer(IDS, None)
    assert shared._ids_re is tokens._WHOLE_UUID_RE
    own = Tokenizer(IDS, None)
    own._ids_re = tokens._compiled_ids(tuple(sorted(IDS, key=lambda i: (-len(i), i))))
    assert [shared.scrub(t) for t in texts] == [own.scrub(t) for t in texts]
    ids = {IDS[0]: "aaaaaaaa-0000-0000-0000-000000000000"}
    assert [shared.respell(t, ids=ids, uuids={}, cwd="/c") for t in texts] == [
        own.respell(t, ids=ids, uuids={}, cwd="/c") for t in texts
    ]


def test_other_session_ids_keep_their_own_pattern() -> None:
    tok = Tokenizer(["session-1", IDS[0]], None)
    assert tok._ids_re is not tokens._WHOLE_UUID_RE
    assert tok.scrub(f"session-1 session-10 {IDS[0]}") == "{{session:1}} session-10 {{session:2}}"


MANY = [f"conversation-{i}" for i in range(tokens._SHARED_PATTERN_IDS + 1)] + [f"c-{IDS[0]}"]
_RUN_FRAGMENTS = [*MANY[:3], MANY[-1], "conversation-", "x", "-", "_", ".", " ", "/", "conversation-1x"]


@settings(max_examples=300, deadline=None, derandomize=True)
@given(st.lists(st.lists(st.sampled_from(_RUN_FRAGMENTS), max_size=8).map("".join), max_size=4))
def test_many_word_run_ids_share_one_pattern_with_the_same_result(texts: list[str]) -> None:
    """Many ids made of word characters and dashes (the endpoint's conversation ids) are found by one
    shared pattern, so a growing set is extended in place (``add_ids``) instead of compiled again;
    every text is tokenized exactly as with the pattern of the ids themselves."""
    shared = Tokenizer(MANY[:-1], None, ids_by_appearance=True)
    assert shared._ids_re is tokens._WORD_RUN_RE
    assert shared.add_ids([MANY[-1]])
    own = Tokenizer(MANY, None, ids_by_appearance=True)
    own._ids_re = tokens._compiled_ids(tuple(sorted(MANY, key=lambda i: (-len(i), i))))
    assert [shared.fresh().scrub(t) for t in texts] == [own.fresh().scrub(t) for t in texts]
    # the screen stays sound with ids that hold a UUID left to the UUID screen
    assert all(shared.fresh().scrub(t) == t for t in texts if shared.leaves_unchanged(t))


def test_an_id_needing_its_own_pattern_is_not_added_in_place() -> None:
    tok = Tokenizer(MANY, None, ids_by_appearance=True)
    assert not tok.add_ids(["has.dot"])  # not a word run: the caller builds a new tokenizer
    assert tok.scrub("has.dot") == "has.dot"


def test_a_growing_set_of_live_ids_compiles_no_pattern() -> None:
    """Regression: a tokenizer numbering ids by appearance (the run's live side, one more conversation id
    per first call) compiled an alternation of its ids for every new set of up to 16 ids: an endpoint
    replay's first 16 calls cost 1.2-2.5 ms of server CPU against 0.5-0.9 ms for later ones. Word-run
    ids share one pattern from the first id on, with the same tokens."""
    tokens._compiled_ids.cache_clear()
    live = Tokenizer(["conversation-1"], None, ids_by_appearance=True)
    assert live._ids_re is tokens._WORD_RUN_RE
    for i in range(2, 20):
        assert live.add_ids([f"conversation-{i}"])  # extended in place, never rebuilt
    assert tokens._compiled_ids.cache_info().misses == 0
    text = "conversation-3 x-conversation-1 conversation-10 conversation-1x conversation-3"
    assert live.scrub(text) == "{{session:1}} x-conversation-1 {{session:2}} conversation-1x {{session:1}}"
    fixed = Tokenizer(["conversation-1"], None)  # a fixed set (a recording's) keeps its own pattern
    assert fixed._ids_re is not tokens._WORD_RUN_RE


def test_a_shared_pattern_calls_back_only_where_a_few_known_ids_appear() -> None:
    """Regression: with the shared word-run pattern (a live side of a few ids, every scenario item's)
    each word of every string value went through a Python callback, about 30 us per string of a
    replayed request. A text holding none of the ids is now left as it is without one; one holding
    an id is tokenized as before."""
    live = Tokenizer(["conversation-1", "conversation-2"], None, ids_by_appearance=True)
    assert live._ids_re is tokens._WORD_RUN_RE
    calls: list[str] = []
    real = Tokenizer._id_token

    def counting(self: Tokenizer, match: re.Match[str]) -> str:
        calls.append(match.group(0))
        return real(self, match)

    with pytest.MonkeyPatch.context() as m:
        m.setattr(Tokenizer, "_id_token", counting)
        text = " ".join(f"word{i} is-here" for i in range(50))
        assert live.fresh().scrub(text) == text
        assert calls == []
        assert live.fresh().scrub("a conversation-2 b") == "a {{session:1}} b"
        assert "conversation-2" in calls


_SPELLINGS = ["{{", "}}", "{", "}", "!", "uuid:1", "mask:1", "cwd", " ", "x", IDS[0]]


@settings(max_examples=400, deadline=None, derandomize=True)
@given(
    st.lists(st.sampled_from(_SPELLINGS), max_size=10).map("".join),
    st.lists(st.sampled_from(_SPELLINGS), max_size=10).map("".join),
)
def test_token_spellings_are_escaped_one_to_one(a: str, b: str) -> None:
    """Escaping is one-to-one (two texts compare equal escaped exactly when they are equal), and no
    escaped text holds a token spelling: a literal ``{{uuid:1}}`` never equals the token a UUID becomes.

    Regression: text spelling a token compared equal to the token."""
    ea, eb = tokens.escape_token_spellings(a), tokens.escape_token_spellings(b)
    assert (ea == eb) == (a == b)
    assert all(m.group(1) for m in tokens._TOKEN_SPELLING.finditer(ea))


def test_a_literal_token_is_not_the_value_it_stands_for() -> None:
    recorded = Tokenizer([], "{{cwd}}", recorded=True)
    live = Tokenizer([], "/tmp/run")
    uuid = "3f1c2a4e-1111-2222-3333-444455556666"
    assert recorded.fresh().scrub("id {{uuid:1}}") != live.fresh().scrub(f"id {uuid}")
    assert recorded.fresh().scrub("id {{uuid:1}}") == live.fresh().scrub("id {{uuid:1}}")
    # a recording's {{cwd}} is its cwd; a literal one is written {{!cwd}} and read as itself
    assert recorded.fresh().scrub("at {{cwd}}/a") == live.fresh().scrub("at /tmp/run/a")
    assert live.tokenize_cwd("at {{cwd}}/a and /tmp/run/b") == "at {{!cwd}}/a and {{cwd}}/b"
    assert recorded.fresh().scrub("at {{!cwd}}/a") == live.fresh().scrub("at {{cwd}}/a")
    # a placeholder id of a fixture stays the id it stands for
    fixture = Tokenizer(["{{sessionId}}"], "{{cwd}}")
    assert fixture.fresh().scrub("of {{sessionId}}") == Tokenizer([IDS[0]], "/x").fresh().scrub(
        f"of {IDS[0]}"
    )


_CWD_FRAGMENTS = [
    "/tmp/w",
    "/private/tmp/w",
    "/tmp/w/",
    "/tmp/wx",
    "/",
    ".",
    "-",
    "_",
    "x",
    "é",
    "\u0663",
    " ",
    "\n",
]


@settings(max_examples=400, deadline=None, derandomize=True)
@given(st.lists(st.sampled_from(_CWD_FRAGMENTS), max_size=10).map("".join))
def test_the_cwd_is_found_where_its_whole_path_pattern_finds_it(text: str) -> None:
    """The cwd's aliases are found without compiling a pattern per cwd (a run's cwd is a fresh temporary
    directory; compiling cost each scenario 0.1-0.2 ms), exactly where the pattern
    ``(?<![\\w.\\-/])(?:ALIASES)(?![\\w.\\-])`` of the aliases, longest first, finds them: boundaries
    with ``\\w`` read as ``re`` reads it (non-ASCII letters and digits), the longest alias at the leftmost
    place."""
    aliases = tokens.cwd_aliases("/tmp/w")
    assert aliases == ["/private/tmp/w", "/tmp/w"]
    oracle = re.compile(rf"(?<![\w.\-/])(?:{'|'.join(map(re.escape, aliases))})(?![\w.\-])")
    tokenizer = Tokenizer([], "/tmp/w")
    assert tokenizer.tokenize_cwd(text) == oracle.sub("{{cwd}}", text)
    assert tokenizer.respell(text, ids={}, uuids={}, cwd="/c\\1") == oracle.sub(lambda _m: "/c\\1", text)
