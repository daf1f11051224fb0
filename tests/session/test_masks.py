"""``session.masks.Masks``: what a mask replaces, and its screen of a JSON text never says "unchanged"
for a value a mask would change (the comparison skips the values of events the screen passes)."""

from __future__ import annotations

import random
import re

import orjson
import pytest

from pytest_dsh_replay.session.maskhint import differing_values, propose_masks, suggest_masks
from pytest_dsh_replay.session.masks import Mask, MaskEngineError, MaskError, Masks, engine_pattern
from pytest_dsh_replay.session.tokens import Tokenizer


def test_a_match_or_its_groups_become_the_masks_token() -> None:
    masks = Masks.parse([r"deployed at (\S+)", r"tx=[0-9a-f]+"], source="test")
    assert (
        masks.apply("deployed at 2026-01-01T10:00:00Z tx=9f3c ok") == "deployed at {{mask:1}} {{mask:2}} ok"
    )
    assert masks.apply("nothing here") == "nothing here"
    assert masks.hits == {0: 1, 1: 1}
    assert masks.apply_value({"tx=1": ["tx=ab", 3]}) == {"tx=1": ["{{mask:2}}", 3]}  # keys untouched


def test_an_empty_group_and_a_declined_match_mask_nothing() -> None:
    assert Masks.parse([r"a(x*)b"], source="t").apply("abc axb") == "abc a{{mask:1}}b"
    masks = Masks([Mask(r"\b\d{10}\b", "hook", when=lambda m: int(m[0]) > 1_600_000_000)])
    assert masks.apply("at 1700000000, code 1234567890") == "at {{mask:1}}, code 1234567890"


@pytest.mark.parametrize("pattern", ["", "   ", ".*", "x*", "^$", "(tx=1)?", "a|"])
def test_a_pattern_that_matches_the_empty_string_is_refused_naming_it(pattern: str) -> None:
    """Regression: ``--dsh-mask ''`` was skipped silently and ``--dsh-mask '.*'`` accepted (it masks
    whole values, an empty match nothing)."""
    with pytest.raises(MaskError, match=r"\(--dsh-mask\): matches the empty string") as info:
        Masks.parse(["tx=[0-9a-f]+", pattern], source="--dsh-mask")
    assert info.value.code == "MASK_BAD_REGEX"
    assert f"'{pattern.strip()}'" in info.value.message


def test_a_regex_that_does_not_compile_names_itself_and_its_source() -> None:
    with pytest.raises(MaskError, match=r"mask 'tx=\(' \(--dsh-mask\): not a regular expression") as info:
        Masks.parse(["tx=("], source="--dsh-mask")
    assert info.value.code == "MASK_BAD_REGEX"


@pytest.mark.parametrize(
    ("pattern", "relaxed"),
    [
        (r"tx=[0-9a-f]+", r"tx=[0-9a-f]+"),
        (r"\bfoo\b", r"\bfoo\b"),
        (r"^x", "x"),
        (r"x$", "x"),
        (r"\Ax\Z", "x"),
        (r"(?:a|(?:b$))", "(?:a|(?:b))"),
        (r"[^$]^", "[^$]"),
        (r"[]^]$", "[]^]"),
        (r"a\$\^", r"a\$\^"),
    ],
)
def test_the_screen_searches_a_pattern_without_its_anchors(pattern: str, relaxed: str) -> None:
    assert engine_pattern(pattern)[1] == relaxed


@pytest.mark.parametrize(
    "pattern",
    [r"(a)\1", r"(?<=at )\S+", r"(a|b(?=c))+", r"(?<!a)b", r"a(?!b)", r"a++", r"(?>a)", r"(?x) a b"],
)
def test_a_pattern_that_needs_backtracking_is_refused_naming_it(pattern: str) -> None:
    """Regression: masks ran on ``re``, so ``serve --mask '(a+)+$'`` and a request holding 40 ``a`` and
    a ``!`` stalled serve's event loop (no answer, SIGTERM ignored); now the engine is linear-time and a
    pattern it cannot run is a typed error naming the mask and where it came from."""
    with pytest.raises(MaskEngineError, match=r"\(ini dsh_mask\): masks run on a linear-time") as info:
        Masks.parse(["tx=[0-9a-f]+", pattern], source="ini dsh_mask")
    assert info.value.code == "MASK_UNSUPPORTED_REGEX"
    assert pattern in info.value.message


def test_a_pattern_that_backtracks_exponentially_in_re_takes_linear_time() -> None:
    masks = Masks.parse([r"(a+)+$", r"(x+x+)+y"], source="--dsh-mask")
    assert masks.apply("a" * 5000 + "!" + "x" * 5000) == "a" * 5000 + "!" + "x" * 5000
    assert masks.apply("ok aaa") == "ok {{mask:1}}"
    assert masks.screen(orjson.dumps({"k": "a" * 5000 + "!"})) is False  # the anchor-free form matches


@pytest.mark.parametrize(
    ("pattern", "text", "masked"),
    [
        (r"n=\d+", "n=\u0663\u0664 n=12", "{{mask:1}} {{mask:1}}"),  # Arabic-Indic digits, as re's \d
        (r"\w+=", "caf\u00e9= x", "{{mask:1}} x"),
        (r"a\sb", "a\u00a0b a\x0bb", "{{mask:1}} {{mask:1}}"),
        (r"[\d.]+", "v\u0663.2", "v{{mask:1}}"),
        (r"at \S+\Z", "at 10:00", "{{mask:1}}"),
        (r"(?i)TX=([0-9A-F]+)", "tx=9f3c", "tx={{mask:1}}"),
    ],
)
def test_pythons_classes_mean_what_they_mean_in_re(pattern: str, text: str, masked: str) -> None:
    assert Masks.parse([pattern], source="t").apply(text) == masked
    if "(" not in pattern:
        assert re.sub(pattern, "{{mask:1}}", text) == masked  # what re does


def test_the_tokenizer_masks_both_sides_alike() -> None:
    masks = Masks.parse([r"tx=[0-9a-f]+"], source="t")
    recorded = Tokenizer(["s1"], "/rec", masks=masks)
    live = Tokenizer(["s2"], "/live", masks=masks)
    value = {"text": "ran in /rec: tx=aa11"}
    assert recorded.scrub_value(value) == live.scrub_value({"text": "ran in /live: tx=bb22"})
    assert recorded.scrub_value(value) != live.scrub_value({"text": "ran in /live: tx=bb22!"})
    assert not recorded.leaves_unchanged(orjson.dumps({"a": "tx=ff"}))
    assert recorded.leaves_unchanged(orjson.dumps({"a": "no token"}).decode())
    assert Tokenizer(["s1"], "/rec").leaves_unchanged('{"a":"tx=ff"}')  # no masks: no mask screen


def test_a_mask_that_can_match_inside_an_id_leaves_the_id_numbered() -> None:
    """Session ids and UUIDs are numbered before the masks apply, so a mask never takes part of an id:
    a recorded UUID whose last group is 12 digits and a live one whose is not are the same token under
    a mask for 12-digit numbers (docs/masks.md).

    Regression: masks applied first took the recorded UUID's last group (``...-{{mask:1}}``), the UUID
    was no longer numbered, and the same session compared unequal on about one run in 280."""
    masks = Masks.parse([r"\b\d{12}\b"], source="t")
    recorded_id, live_id = "0b3c6a1e-4f2d-4c1b-9e8a-123456789012", "7d9e2f10-aa3b-4c5d-8e6f-0a1b2c3d4e5f"
    other_recorded, other_live = (
        "11111111-2222-4333-8444-555555555555",
        "aaaaaaaa-bbbb-4ccc-8ddd-eeeeeeeeeeee",
    )
    recorded = Tokenizer([recorded_id], None, ids_by_appearance=True, masks=masks)
    live = Tokenizer([live_id], None, ids_by_appearance=True, masks=masks)
    said = "session {} ran call {} at {}"
    assert recorded.scrub(said.format(recorded_id, other_recorded, "170000000012")) == live.scrub(
        said.format(live_id, other_live, "170000000099")
    )
    assert recorded.fresh().scrub(said.format(recorded_id, other_recorded, "1")) == (
        "session {{session:1}} ran call {{uuid:1}} at 1"
    )


ALPHABET = 'ab"\\\n\t/x-=0 é\x01'
PATTERNS = [
    r"a+b",
    r"\bab\b",
    r'b"a',
    r"\\",
    r"\n",
    r"a\s+b",
    r"[^a]b",
    r".b",
    r'x"?=',
    r"(ab)+",
]
#: searched relaxed by the screen (their anchors left out)
PATTERNS += [r"^a", r"b$", r"\Ax", r"(?m)^b", r"^(a|x$)", r"b\Z", r"[^a]$"]


def test_the_screen_never_passes_a_value_a_mask_changes() -> None:
    """Seeded fuzz over strings holding what JSON escapes (quotes, backslashes, controls), anchored
    patterns included."""
    rng = random.Random(30)
    for _ in range(3000):
        masks = Masks.parse(rng.sample(PATTERNS, 2), source="fuzz")
        value = {
            "k": ["".join(rng.choice(ALPHABET) for _ in range(rng.randint(0, 12))) for _ in range(3)],
            "n": 1,
        }
        for text in (orjson.dumps(value), orjson.dumps(value).decode()):
            if masks.screen(text):
                assert masks.apply_value(value) == value, (masks.masks, value)


def test_a_mask_without_a_hit_is_reported_as_so_far() -> None:
    """A report of a first request lists every mask before the value a mask is for can have appeared
    (the tool that prints it has not run): the line says what is true at that point.

    Regression: it said "matched nothing", which masks.md calls a likely typo."""
    masks = Masks.parse([r"server time is (\S+)"], source="test")
    masks.apply("what time is it?")
    assert masks.applied() == ["{{mask:1}} 'server time is (\\S+)' (test): matched no value compared so far"]
    masks.apply("server time is 18:02")
    assert masks.applied() == ["{{mask:1}} 'server time is (\\S+)' (test): masked 1 value(s)"]


@pytest.mark.parametrize(
    ("recorded", "sent", "kinds"),
    [
        (
            '{"t": "2026-12-03T21:59:03.1", "txn": "742376edd59f"}',
            '{"t": "2026-12-03T21:59:09.2", "txn": "a92fa294a774"}',
            ["timestamp", "hex id"],
        ),
        ("at 2026-12-03 19:27:35 ok", "at 2026-12-04 08:01:02 ok", ["timestamp"]),  # date and time, one value
        (
            "ts=1733262543 at 10:00:01, ts=1733262543",
            "ts=1733262549 at 10:00:07, ts=1733262549",
            ["number", "time of day"],
        ),
        ("3 files: a.txt", "4 files: a.txt", None),  # a bare short number: a count
        ("at 1733262543 ok", "at 1733262549 ok", ["number"]),  # epoch seconds: \d{10,}, not every number
        ('{"at": 1733262543123}', '{"at": 1733262549456}', ["number"]),  # epoch milliseconds
        # Regression: a labelled number of any length was proposed, a count or an amount too
        ("qty=3 items", "qty=30 items", None),
        ("order total=100 EUR", "order total=250 EUR", None),
        ("account 123456789", "account 987654321", None),  # 9 digits: a short id, not an epoch
        ("run=41 passed", "run=42 passed", None),
        ('{"balance": 1500}', '{"balance": 9900}', None),
        ("at 10:00", "at 14:30", None),  # a time of day without seconds: a schedule, not a clock reading
        ("tx=19f7296cc757 region=eu", "tx=a0c41b9e2d33 region=us", None),  # a real change beside an id
        ("tx=19f7296cc757 ok", "tx=a0c41b9e2d33 ok done", None),  # a word added
        ("deployed to eu", "deployed to us", None),
    ],
)
def test_the_proposal_covers_every_volatile_value_or_none(
    recorded: str, sent: str, kinds: list | None
) -> None:
    found = suggest_masks(recorded, sent)
    assert (None if found is None else [kind for kind, _regex in found]) == kinds
    assert (r"\d+", "number") not in [(r, k) for k, r in found or []]  # never every number
    if found is not None:  # what is proposed makes the two equal, as a comparison applies it
        masks = Masks.parse([regex for _kind, regex in found], source="t")
        assert Tokenizer((), None, masks=masks).scrub(recorded) == Tokenizer((), None, masks=masks).scrub(
            sent
        )


def test_a_proposal_covers_differences_a_first_comparison_did_not_show() -> None:
    """The comparison reports one difference at a time (the request check: the first of a part): the
    proposal compares again with what it proposed until nothing differs."""
    recorded = {"a": "at 10:00:01", "b": "tx=19f7296cc757"}
    sent = {"a": "at 10:00:07", "b": "tx=a0c41b9e2d33"}

    def first_only(extra: Masks) -> list:
        tokens = Tokenizer((), None, masks=extra)
        return differing_values(tokens.scrub_value(recorded), tokens.fresh().scrub_value(sent))[:1]

    assert [k for k, _r in propose_masks(first_only) or []] == ["time of day", "hex id"]
    assert propose_masks(lambda _extra: [("x", 1)]) is None  # not two strings
    assert differing_values({"a": [1, 2]}, {"a": [1], "b": 0}) == [(2, None), (None, 0)]


def test_a_value_holding_a_lone_surrogate_is_masked_around_it() -> None:
    """A JSON string may hold a lone surrogate (``"\\ud800"``), which the engine's UTF-8 cannot carry."""
    masks = Masks.parse([r"tx=[0-9a-f]+"], source="t")
    assert masks.apply("\ud800 tx=9f3c \udc00") == "\ud800 {{mask:1}} \udc00"
    assert not masks.screen(orjson.dumps({"k": "tx=1"}).decode().replace("k", "\\ud800"))
