"""JSON-value validation and the JSON.stringify-compatible codec (events.md §0, §7)."""

from __future__ import annotations

import enum
import json
import math
import uuid
from collections import OrderedDict
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pytest_dsh_replay.errors import HarnessError
from pytest_dsh_replay.session import (
    MAX_SAFE_INTEGER,
    JsonValueError,
    codec,
    copy_json_value,
    dumps_json,
    is_json_value,
    js_number,
    json_value_problem,
    loads_json,
)

# --------------------------------------------------------------------------- is_json_value


@pytest.mark.parametrize(
    "value",
    [
        None,
        True,
        False,
        0,
        -1,
        MAX_SAFE_INTEGER,
        -MAX_SAFE_INTEGER,
        1.5,
        -0.0,
        "",
        "é ✓",
        [],
        {},
        {"a": [1, {"b": None}], "c": "x"},
        [[[]]],
    ],
)
def test_accepts_json_values(value: Any) -> None:
    assert is_json_value(value) is True
    assert json_value_problem(value) is None


class Custom:
    pass


@pytest.mark.parametrize(
    "value",
    [
        float("nan"),
        float("inf"),
        float("-inf"),
        MAX_SAFE_INTEGER + 1,
        -MAX_SAFE_INTEGER - 1,
        2**64,
        (1, 2),
        {1, 2},
        frozenset(),
        b"bytes",
        bytearray(b"x"),
        {1: "non-str key"},
        {("t",): 1},
        Custom(),
        OrderedDict(a=1),  # dict subclass: not a plain object
        object(),
        print,
        1j,
        [1, float("nan")],
        {"a": {"b": [0, {"c": float("inf")}]}},
    ],
)
def test_rejects_non_json_values(value: Any) -> None:
    assert is_json_value(value) is False
    assert json_value_problem(value) is not None


def test_rejects_cycles_without_raising() -> None:
    a: list[Any] = []
    a.append(a)
    d: dict[str, Any] = {"x": {}}
    d["x"]["back"] = d
    assert is_json_value(a) is False
    assert is_json_value(d) is False
    assert "cycle" in (json_value_problem(d) or "")


def test_shared_acyclic_reference_is_accepted() -> None:
    shared = {"k": 1}
    assert is_json_value({"a": shared, "b": [shared, shared]}) is True


def test_nesting_beyond_recursion_limit_is_false_not_error() -> None:
    v: Any = []
    for _ in range(5000):
        v = [v]
    assert is_json_value(v) is False


def test_problem_names_the_path() -> None:
    problem = json_value_problem({"chunk": {"usage": {"inputTokens": float("nan")}}, "l": [0]})
    assert problem == "data.chunk.usage.inputTokens: non-finite number nan"
    assert json_value_problem({"l": [0, 1, (2,)]}) == "data.l[2]: unsupported value of type tuple"
    assert (
        json_value_problem({"n": 2**53})
        == "data.n: integer 9007199254740992 outside the safe range ±(2**53-1)"
    )


def test_copy_json_value_is_deep_and_keeps_key_order() -> None:
    original = {"z": [1, {"y": 2}], "a": {"b": [3]}}
    copy = copy_json_value(original)
    assert copy == original
    assert list(copy) == ["z", "a"]
    original["z"][1]["y"] = 99  # type: ignore[index]
    original["a"]["b"].append(4)  # type: ignore[index]
    assert copy == {"z": [1, {"y": 2}], "a": {"b": [3]}}


def test_copy_json_value_raises_typed_error() -> None:
    with pytest.raises(JsonValueError) as info:
        copy_json_value({"a": [float("inf")]})
    assert isinstance(info.value, HarnessError)
    assert info.value.code == "JSON_INVALID_VALUE"
    assert "data.a[0]" in str(info.value)


# --------------------------------------------------------------------------- dumps_json


def test_dumps_is_compact_unescaped_and_ordered() -> None:
    value = {"type": "x", "b": [1, "é✓ \u2028", None, True], "a": {"n": -3}}
    assert dumps_json(value) == '{"type":"x","b":[1,"é✓ \u2028",null,true],"a":{"n":-3}}'
    assert dumps_json(value) == json.dumps(value, separators=(",", ":"), ensure_ascii=False)


@pytest.mark.parametrize(
    ("number", "js"),
    [
        (1.0, "1"),
        (-2.0, "-2"),
        (0.0, "0"),
        (-0.0, "0"),
        (0.1, "0.1"),
        (123.456, "123.456"),
        (1e16, "10000000000000000"),
        (1e20, "100000000000000000000"),
        (1e21, "1e+21"),
        (1.5e300, "1.5e+300"),
        (0.000001, "0.000001"),
        (0.0000015, "0.0000015"),
        (1e-7, "1e-7"),
        (1.25e-8, "1.25e-8"),
        (5e-324, "5e-324"),
        (1.7976931348623157e308, "1.7976931348623157e+308"),
        (12345678.9, "12345678.9"),
    ],
)
def test_js_number_formatting(number: float, js: str) -> None:
    assert js_number(number) == js
    assert dumps_json({"v": number}) == '{"v":' + js + "}"
    assert float(js) == number


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), float("-inf")])
def test_dumps_rejects_non_finite(bad: float) -> None:
    with pytest.raises(JsonValueError):
        dumps_json({"a": [1, bad]})


@pytest.mark.parametrize("bad", [{1: 2}, [object()], {"a": (1,)}, {"s": {1}}])
def test_dumps_rejects_non_json(bad: Any) -> None:
    with pytest.raises(JsonValueError):
        dumps_json(bad)


def test_dumps_rejects_cycles() -> None:
    d: dict[str, Any] = {}
    d["d"] = d
    with pytest.raises(JsonValueError):
        dumps_json(d)


def test_dumps_deep_nesting_beyond_orjson_limit() -> None:
    v: Any = 1
    for _ in range(400):
        v = [v]
    assert dumps_json(v) == "[" * 400 + "1" + "]" * 400


def test_loads_json() -> None:
    assert loads_json(b'{"a":[1,2.5,"\xc3\xa9"]}') == {"a": [1, 2.5, "é"]}
    assert list(loads_json('{"b":1,"a":2}')) == ["b", "a"]
    with pytest.raises(ValueError):
        loads_json("{")


# --------------------------------------------------------------------------- properties

_scalars = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-MAX_SAFE_INTEGER, max_value=MAX_SAFE_INTEGER)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text()
)
json_values = st.recursive(
    _scalars,
    lambda children: (
        st.lists(children, max_size=5) | st.dictionaries(st.text(max_size=8), children, max_size=5)
    ),
    max_leaves=30,
)
_float_free = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-MAX_SAFE_INTEGER, max_value=MAX_SAFE_INTEGER)
    | st.text(),
    lambda children: (
        st.lists(children, max_size=5) | st.dictionaries(st.text(max_size=8), children, max_size=5)
    ),
    max_leaves=30,
)


def _same(a: Any, b: Any) -> bool:
    """Equality that also compares dict key order; -0.0 == 0 (JS writes both as 0)."""
    if isinstance(a, dict):
        return isinstance(b, dict) and list(a) == list(b) and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, list):
        return (
            isinstance(b, list) and len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b, strict=True))
        )
    if isinstance(a, float) or isinstance(b, float):
        return (
            not isinstance(a, bool) and not isinstance(b, bool) and math.isclose(a, b, rel_tol=0, abs_tol=0)
        )
    return type(a) is type(b) and a == b


@given(json_values)
def test_generated_values_are_json_values_and_round_trip(value: Any) -> None:
    assert is_json_value(value)
    text = dumps_json(value)
    assert _same(loads_json(text), value)
    # the text is also what the stdlib reads back identically
    assert _same(json.loads(text), value)


@given(_float_free)
def test_float_free_output_equals_stdlib_compact(value: Any) -> None:
    assert dumps_json(value) == json.dumps(value, separators=(",", ":"), ensure_ascii=False, allow_nan=False)


@given(st.floats(allow_nan=False, allow_infinity=False))
def test_js_number_round_trips_and_has_no_trailing_dot_zero(f: float) -> None:
    s = js_number(f)
    assert float(s) == f
    assert not s.endswith(".0")
    assert "e0" not in s and "e-0" not in s and "e+0" not in s


@given(json_values)
def test_copy_equals_and_is_independent(value: Any) -> None:
    copy = copy_json_value(value)
    assert _same(copy, value)
    if isinstance(value, (dict, list)) and value:
        assert copy is not value


def _identical(a: Any, b: Any) -> bool:
    """Equal, with the same types, dict key order and float bits (-0.0 is not 0)."""
    if type(a) is not type(b):
        return False
    if isinstance(a, dict):
        return list(a) == list(b) and all(_identical(a[k], b[k]) for k in a)
    if isinstance(a, list):
        return len(a) == len(b) and all(_identical(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, float):
        return a.hex() == b.hex()
    return bool(a == b)


@given(json_values)
def test_the_checked_copy_is_the_exact_copy(value: Any) -> None:
    copy = codec.copy_checked_json(value)
    assert _identical(copy, copy_json_value(value)) and _identical(copy, value)
    if isinstance(value, (dict, list)) and value:
        assert copy is not value


@pytest.mark.parametrize(
    "value",
    [
        {"text": "lone \ud800 surrogate"},  # orjson refuses it: the exact copy takes it
        {"x": [0.1, -0.0, 1e300, 5e-324, MAX_SAFE_INTEGER, -MAX_SAFE_INTEGER, True, None]},
        {"deep": json.loads("[" * 300 + "]" * 300)},  # past orjson's 255 levels
    ],
    ids=["lone-surrogate", "edge-numbers", "deep"],
)
def test_the_checked_copy_of_what_orjson_refuses_or_bounds_is_the_exact_copy(value: Any) -> None:
    copy = codec.copy_checked_json(value)
    assert _identical(copy, copy_json_value(value)) and _identical(copy, value)


def test_the_checked_copy_of_an_unsafe_integer_raises_the_exact_copys_error() -> None:
    with pytest.raises(JsonValueError, match=r"event\.n: integer"):
        codec.copy_checked_json({"n": MAX_SAFE_INTEGER + 1}, "event")


_parsed = st.recursive(
    _scalars | st.integers(min_value=-(2**70), max_value=2**70),
    lambda children: (
        st.lists(children, max_size=5) | st.dictionaries(st.text(max_size=8), children, max_size=5)
    ),
    max_leaves=30,
)


@given(_parsed)
def test_the_parsed_copy_is_the_walks_copy(value: Any) -> None:
    copy = codec.copy_parsed_json(value)
    assert _identical(copy, codec.map_strings(value, lambda text: text)) and _identical(copy, value)
    if isinstance(value, (dict, list)) and value:
        assert copy is not value


@pytest.mark.parametrize(
    "value",
    [
        {"text": "lone \ud800 surrogate"},
        {"usage": {"tokens": 2**63 - 1, "past": 2**64, "neg": -(2**63)}},
        {"deep": json.loads("[" * 300 + "]" * 300)},
    ],
    ids=["lone-surrogate", "wide-integers", "deep"],
)
def test_the_parsed_copy_of_what_orjson_refuses_is_the_walks_copy(value: Any) -> None:
    copy = codec.copy_parsed_json(value)
    assert _identical(copy, codec.map_strings(value, lambda text: text)) and _identical(copy, value)


# --------------------------------------------------------------------------- fast path == slow path


def _slow_dumps(value: Any) -> str:
    """The exact JS-compatible writer alone (no orjson fast path)."""
    out: list[str] = []
    codec._emit(value, out, set())
    return "".join(out)


class _Str(str):
    pass


class _Int(int):
    pass


class _Dict(dict):  # type: ignore[type-arg]
    pass


class _Color(enum.Enum):
    RED = 1


_not_plain: list[Any] = [
    {"a": (1, 2)},
    [1.0],
    {"a": [0.5]},
    {"x": float("nan")},
    [_Str("s")],
    {"k": _Int(3)},
    [_Dict(a=1)],
    {"e": _Color.RED},
    {"u": uuid.UUID(int=1)},
    [b"bytes"],
    [{1, 2}],
]


@pytest.mark.parametrize("value", _not_plain)
def test_census_rejects_everything_but_exact_float_free_json(value: Any) -> None:
    assert not codec.plain_types([value])
    assert codec.encode_plain([value]) is None


def test_census_sees_non_str_keys_and_str_subclass_keys() -> None:
    d: dict[Any, Any] = {"a": 1}
    d[_Str("b")] = 2
    assert not codec.plain_types([d])
    assert codec.plain_types([{"a": {3: 1}}])  # int keys are ints: the census lets them through,
    assert codec.encode_plain([{"a": {3: 1}}]) is None  # but orjson refuses them


def test_census_stops_on_cycles_and_deep_nesting() -> None:
    d: dict[str, Any] = {}
    d["d"] = d
    assert not codec.plain_types([d])
    v: Any = 1
    for _ in range(100):
        v = [v]
    assert not codec.plain_types([v])
    assert dumps_json(v) == "[" * 100 + "1" + "]" * 100


def test_encode_plain_integer_ranges() -> None:
    assert codec.encode_plain([MAX_SAFE_INTEGER, -MAX_SAFE_INTEGER], safe_integers=True) == [
        str(MAX_SAFE_INTEGER).encode(),
        str(-MAX_SAFE_INTEGER).encode(),
    ]
    assert codec.encode_plain([MAX_SAFE_INTEGER + 1], safe_integers=True) is None
    assert codec.encode_plain([2**63]) == [str(2**63).encode()]
    assert codec.encode_plain([2**64]) is None
    assert dumps_json([2**70]) == f"[{2**70}]"
    assert codec.encode_plain(["\ud800"]) is None  # lone surrogate: the exact path raises
    with pytest.raises(JsonValueError):
        dumps_json({"s": "\ud800"})


@given(json_values)
def test_fast_path_equals_slow_path(value: Any) -> None:
    slow = _slow_dumps(value)
    assert dumps_json(value) == slow
    assert dumps_json({"wrapped": [value, value]}) == '{"wrapped":[' + slow + "," + slow + "]}"
    lines = codec.encode_plain([value, {"v": value}], safe_integers=True)
    if lines is not None:  # taken exactly when the value is float-free
        assert lines == [slow.encode(), ('{"v":' + slow + "}").encode()]
    assert (lines is not None) == ("float" not in {type(x).__name__ for x in _nodes(value)})


def _nodes(value: Any) -> list[Any]:
    out = [value]
    if isinstance(value, dict):
        for v in value.values():
            out.extend(_nodes(v))
    elif isinstance(value, list):
        for v in value:
            out.extend(_nodes(v))
    return out


def test_encode_plain_lines_is_the_jsonl_of_dumps_json_and_checked_against_orjson() -> None:
    values: list[Any] = [{"a": [1, 'é\u2028\x1f"\\']}, "x", None, True, -(2**53) + 1]
    text = codec.encode_plain_lines(values, safe_integers=True)
    assert text == b"".join(dumps_json(v).encode() + b"\n" for v in values)
    assert codec.encode_plain_lines([]) == b""
    # census_done lets values through unchecked: where msgspec's bytes differ from orjson's (floats,
    # datetimes) or only msgspec accepts the value (bytes, int keys), the byte comparison refuses.
    import datetime

    for bad in (1e16, datetime.datetime(2020, 1, 1, tzinfo=datetime.UTC), b"ab", {1: 2}):
        assert codec.encode_plain_lines([{"v": bad}], census_done=True) is None
