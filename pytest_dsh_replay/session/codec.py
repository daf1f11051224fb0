"""JSON-value validation, deep copy and the compact JSON codec (spec: events.md §0 and §7).

* :func:`is_json_value` implements the Python mapping of events.md §7: ``None``, ``bool``,
  ``int`` with ``|x| <= 2**53 - 1``, finite ``float``, ``str``, ``list`` and ``dict`` with ``str``
  keys, exact built-in types only (no subclasses, tuples, sets, bytes, custom objects); a cycle
  (a container reachable from itself) is rejected by returning ``False``. Shared, acyclic
  references are accepted, as in JS.
* :func:`copy_json_value` validates and deep-copies in one linear pass (used by ``append``).
* :func:`dumps_json` writes exactly what ``JSON.stringify`` writes (compact, non-ASCII unescaped,
  JS number formatting: ``1.0`` -> ``1``, ``1e21`` -> ``1e+21``, ``1e-7`` -> ``1e-7``).
"""

from __future__ import annotations

import gc
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from functools import partial
from typing import Any, AnyStr

import msgspec
import orjson

from .errors import JsonValueError

#: Largest integer JS represents exactly (``Number.MAX_SAFE_INTEGER``).
MAX_SAFE_INTEGER = 2**53 - 1

# orjson raises "Recursion limit reached" beyond this nesting; deeper values take the slow path.
_ORJSON_SAFE_DEPTH = 200

#: Exact node types of a float-free JSON value, for which orjson writes what JSON.stringify writes.
_PLAIN_TYPES = frozenset((dict, list, str, int, bool, type(None)))
# Census limits: deeper / larger values (and cycles, which never end) take the exact slow paths.
_CENSUS_MAX_LEVELS = 64
_CENSUS_MAX_NODES = 1 << 22

_get_referents = gc.get_referents
_dumps = orjson.dumps
_dumps_strict = partial(orjson.dumps, option=orjson.OPT_STRICT_INTEGER)
_EncodeError = orjson.JSONEncodeError
_encode_lines = msgspec.json.Encoder().encode_lines


class _Invalid(Exception):
    """Internal: carries the reason and the (reversed) path of an invalid value."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason
        self.path: list[str | int] = []

    def where(self, root: str) -> str:
        out = root
        for part in reversed(self.path):
            out += f"[{part}]" if isinstance(part, int) else f".{part}"
        return out


def _describe(value: object) -> str:
    t = type(value)
    if t is int:
        return f"integer {value} outside the safe range ±(2**53-1)"
    if t is float:
        return f"non-finite number {value!r}"
    return f"unsupported value of type {t.__name__}"


def _copy(value: object, active: set[int]) -> Any:
    t = type(value)
    if t is str or t is bool or value is None:
        return value
    if t is int:
        if -MAX_SAFE_INTEGER <= value <= MAX_SAFE_INTEGER:  # type: ignore[operator]
            return value
        raise _Invalid(_describe(value))
    if t is float:
        if value - value == 0.0:  # type: ignore[operator]  # false for NaN and ±Inf
            return value
        raise _Invalid(_describe(value))
    if t is dict:
        key = id(value)
        if key in active:
            raise _Invalid("cycle (the object is reachable from itself)")
        active.add(key)
        out: dict[str, Any] = {}
        for k, v in value.items():  # type: ignore[attr-defined]
            if type(k) is not str:
                raise _Invalid(f"non-string key {k!r}")
            vt = type(v)
            if vt is str or vt is bool or v is None:
                out[k] = v
                continue
            try:
                out[k] = _copy(v, active)
            except _Invalid as exc:
                exc.path.append(k)
                raise
        active.discard(key)
        return out
    if t is list:
        key = id(value)
        if key in active:
            raise _Invalid("cycle (the list is reachable from itself)")
        active.add(key)
        lst: list[Any] = []
        append = lst.append
        for i, v in enumerate(value):  # type: ignore[arg-type]
            vt = type(v)
            if vt is str or vt is bool or v is None:
                append(v)
                continue
            try:
                append(_copy(v, active))
            except _Invalid as exc:
                exc.path.append(i)
                raise
        active.discard(key)
        return lst
    raise _Invalid(_describe(value))


def _check(value: object, active: set[int]) -> bool:
    t = type(value)
    if t is str or t is bool or value is None:
        return True
    if t is int:
        return -MAX_SAFE_INTEGER <= value <= MAX_SAFE_INTEGER  # type: ignore[operator]
    if t is float:
        return value - value == 0.0  # type: ignore[operator,no-any-return]
    if t is dict:
        key = id(value)
        if key in active:
            return False
        active.add(key)
        for k, v in value.items():  # type: ignore[attr-defined]
            if type(k) is not str:
                return False
            vt = type(v)
            if vt is str or vt is bool or v is None:
                continue
            if not _check(v, active):
                return False
        active.discard(key)
        return True
    if t is list:
        key = id(value)
        if key in active:
            return False
        active.add(key)
        for v in value:  # type: ignore[attr-defined]
            vt = type(v)
            if vt is str or vt is bool or v is None:
                continue
            if not _check(v, active):
                return False
        active.discard(key)
        return True
    return False


def is_json_value(value: object) -> bool:
    """Return True iff ``value`` is a JSON value per events.md §7 (Python mapping).

    Never raises: cycles and nesting too deep for the interpreter return ``False``.
    """
    try:
        return _check(value, set())
    except RecursionError:
        return False


def json_value_problem(value: object, root: str = "data") -> str | None:
    """Describe why ``value`` is not a JSON value (``"data.a[2]: non-finite number nan"``), or None."""
    try:
        copy_json_value(value, root)
    except JsonValueError as exc:
        return exc.message
    return None


def copy_json_value(value: Any, root: str = "data") -> Any:
    """Validate (events.md §7) and deep-copy ``value`` in one linear pass.

    Dict key order is preserved. Raises :class:`JsonValueError` naming the path of the first
    invalid leaf (e.g. ``data.chunk.usage.inputTokens: non-finite number nan``).
    """
    try:
        return _copy(value, set())
    except _Invalid as exc:
        raise JsonValueError(f"{exc.where(root)}: {exc.reason}") from None
    except RecursionError:
        raise JsonValueError(f"{root}: nesting too deep") from None


#: what the round trip of :func:`copy_checked_json` refuses instead of converting: integers past 53 bits,
#: subclasses, dataclasses and dates (the exact copy then decides)
_ROUND_TRIP = (
    orjson.OPT_STRICT_INTEGER
    | orjson.OPT_PASSTHROUGH_SUBCLASS
    | orjson.OPT_PASSTHROUGH_DATACLASS
    | orjson.OPT_PASSTHROUGH_DATETIME
)


def copy_checked_json(value: Any, root: str = "data") -> Any:
    """A deep copy of ``value``, a JSON value already checked (events.md §7): a session's event, which
    :meth:`~.session.Session.append` checked and copied. Equal to :func:`copy_json_value`'s copy, made
    by an ``orjson`` round trip, about twice as fast as the walk.

    Only for checked values: the round trip carries a float exactly, but would turn what the check
    refuses into JSON (a tuple into a list, NaN into ``null``, an enum or a UUID into its value). What the
    round trip refuses (a lone surrogate, nesting past orjson's 255 levels, an integer past 53 bits) is
    copied by :func:`copy_json_value`, which raises :class:`JsonValueError` as it always does.
    """
    try:
        return orjson.loads(_dumps(value, option=_ROUND_TRIP))
    except (TypeError, ValueError):  # orjson.JSONEncodeError is a TypeError
        return copy_json_value(value, root)


#: the same for values parsed from JSON: any 64-bit integer is carried (a recording may hold one)
_PARSED_ROUND_TRIP = _ROUND_TRIP & ~orjson.OPT_STRICT_INTEGER


def copy_parsed_json(value: Any) -> Any:
    """A deep copy of ``value``, a value a JSON parser made (a recorded call's entry): equal to
    ``map_strings(value, lambda s: s)``, made by an ``orjson`` round trip; what the round trip refuses
    (a lone surrogate, nesting past 255 levels, an integer past 64 bits) is copied by that walk.

    Only for parsed values: the round trip would turn a tuple into a list, NaN into ``null`` and an
    enum or a UUID into its value, none of which a JSON parser returns. Never raises for them.
    """
    try:
        return orjson.loads(_dumps(value, option=_PARSED_ROUND_TRIP))
    except (TypeError, ValueError):  # orjson.JSONEncodeError is a TypeError
        return map_strings(value, _same_string)


def _same_string(text: str) -> str:
    return text


# --------------------------------------------------------------------------------------------
# Serialization


def _orjson_ok(value: object, depth: int) -> bool:
    """True when orjson's output equals JSON.stringify's: no floats, 64-bit ints, shallow."""
    t = type(value)
    if t is str or t is bool or value is None:
        return True
    if t is int:
        return -(2**63) <= value < 2**64  # type: ignore[operator]
    if depth > _ORJSON_SAFE_DEPTH:
        return False
    if t is dict:
        for k, v in value.items():  # type: ignore[attr-defined]
            if type(k) is not str:
                return False
            vt = type(v)
            if vt is str or vt is bool or v is None:
                continue
            if not _orjson_ok(v, depth + 1):
                return False
        return True
    if t is list:
        for v in value:  # type: ignore[attr-defined]
            vt = type(v)
            if vt is str or vt is bool or v is None:
                continue
            if not _orjson_ok(v, depth + 1):
                return False
        return True
    return False


def plain_types(roots: Sequence[object]) -> bool:
    """True when every node reachable from ``roots`` has an exact type among ``dict``, ``list``,
    ``str``, ``int``, ``bool`` and ``None`` (no float, no subclass, no tuple/enum/UUID/...), within
    64 levels of nesting and 4M nodes. A conservative, exact "no" otherwise (cycles included).

    The walk is level by level in C: ``gc.get_referents`` yields the items of a list and the values
    of a dict; a dict's keys are yielded too unless they are all exact ``str`` (CPython keeps such
    dicts in its unicode-keys layout), so a key of any other type shows up in the census. Scalars
    have no referents, so the walk ends after the deepest level.
    """
    level: Sequence[object] | list[Any] = roots
    nodes = len(level)
    plain = _PLAIN_TYPES
    for _ in range(_CENSUS_MAX_LEVELS + 1):
        if not plain.issuperset(map(type, level)):
            return False
        level = _get_referents(*level)
        if not level:
            return True
        nodes += len(level)
        if nodes > _CENSUS_MAX_NODES:
            return False
    return False


def encode_plain_lines(
    values: Sequence[object], *, safe_integers: bool = False, census_done: bool = False
) -> bytes | None:
    """The JSONL text of ``values``: ``b"".join(dumps_json(v).encode() + b"\\n" for v in values)``,
    or ``None`` when any value needs the exact slow paths (as :func:`encode_plain`). Never raises
    for bad input.

    Two whole-batch C calls instead of one call per value (per-value ``orjson.dumps`` costs ~3 us
    each when the results are kept, 10x its cost per value in one call): msgspec writes the lines,
    ``orjson.dumps`` of the whole list checks them. orjson is the reference (it refuses non-str
    keys, integers beyond 64 bits or, with ``safe_integers``, beyond ``±(2**53-1)``, lone
    surrogates, too deep nesting); the lines are kept only when joining them with ``,`` gives
    orjson's array byte for byte. Compact JSON has no raw newline, so that comparison pins every
    line to orjson's bytes of its value, whatever msgspec escapes or accepts on its own.
    ``census_done``: as in :func:`encode_plain`.
    """
    if not census_done and not plain_types(values):
        return None
    if not values:
        return b""
    try:
        lines = _encode_lines(values)
        check = _dumps_strict(values) if safe_integers else _dumps(values)
    except (_EncodeError, TypeError, ValueError, OverflowError):  # UnicodeEncodeError is a ValueError
        return None
    if len(check) != len(lines) + 1 or lines.replace(b"\n", b",")[:-1] != check[1:-1]:
        return None
    return lines


def encode_plain(
    values: Sequence[object], *, safe_integers: bool = False, census_done: bool = False
) -> list[bytes] | None:
    """Compact JSON bytes of each value (UTF-8 of :func:`dumps_json`), or ``None`` when any value
    needs the exact slow paths (floats, non-JSON types, deep nesting, lone surrogates, integers
    beyond 64 bits or, with ``safe_integers``, beyond ``±(2**53-1)``).

    When it returns lines, every value is a float-free JSON value per events.md §7 (with
    ``safe_integers``: exactly what :func:`is_json_value` accepts, minus floats), and
    ``lines[i] == dumps_json(values[i]).encode()``. It never raises for bad input.
    ``census_done``: the caller already got ``True`` from :func:`plain_types` for these values (or
    for values containing them). The batch is encoded by :func:`encode_plain_lines`, then split.
    """
    text = encode_plain_lines(values, safe_integers=safe_integers, census_done=census_done)
    if text is None:
        return None
    lines = text.split(b"\n")
    lines.pop()  # the empty piece after the last newline
    return lines


def js_number(value: float) -> str:
    """Format a finite float exactly like ECMAScript ``Number::toString`` (``1.0`` -> ``"1"``).

    Raises :class:`JsonValueError` for NaN and ±Infinity (``JSON.stringify`` would write ``null``;
    we refuse instead, events.md §0 ``allow_nan=False``).
    """
    if value != value or value in (float("inf"), float("-inf")):
        raise JsonValueError(f"cannot write non-finite number {value!r} as JSON")
    if value == 0:
        return "0"  # also -0.0, like JS
    r = repr(value)
    sign = ""
    if r[0] == "-":
        sign, r = "-", r[1:]
    if "e" in r:
        mant, exp_s = r.split("e")
        exp = int(exp_s)
    else:
        mant, exp = r, 0
    ip, _, fp = mant.partition(".")
    digits = ip + fp
    point = len(ip) + exp  # value = 0.<digits> * 10**point
    stripped = digits.lstrip("0")
    point -= len(digits) - len(stripped)
    digits = stripped.rstrip("0")
    k, n = len(digits), point
    if k <= n <= 21:
        s = digits + "0" * (n - k)
    elif 0 < n <= 21:
        s = digits[:n] + "." + digits[n:]
    elif -6 < n <= 0:
        s = "0." + "0" * (-n) + digits
    else:
        e = n - 1
        es = ("+" if e >= 0 else "-") + str(abs(e))
        s = (digits if k == 1 else digits[0] + "." + digits[1:]) + "e" + es
    return sign + s


def _dump_str(s: str) -> str:
    try:
        return orjson.dumps(s).decode()
    except orjson.JSONEncodeError as exc:
        raise JsonValueError(f"cannot write string as JSON: {exc}") from None


def _emit(value: object, out: list[str], active: set[int]) -> None:
    t = type(value)
    if value is None:
        out.append("null")
    elif t is bool:
        out.append("true" if value else "false")
    elif t is str:
        out.append(_dump_str(value))  # type: ignore[arg-type]
    elif t is int:
        out.append(str(value))
    elif t is float:
        out.append(js_number(value))  # type: ignore[arg-type]
    elif t is dict or t is list:
        key = id(value)
        if key in active:
            raise JsonValueError("cannot write a cyclic value as JSON")
        active.add(key)
        if t is dict:
            out.append("{")
            first = True
            for k, v in value.items():  # type: ignore[attr-defined]
                if type(k) is not str:
                    raise JsonValueError(f"cannot write non-string key {k!r} as JSON")
                if not first:
                    out.append(",")
                first = False
                out.append(_dump_str(k))
                out.append(":")
                _emit(v, out, active)
            out.append("}")
        else:
            out.append("[")
            for i, v in enumerate(value):  # type: ignore[arg-type]
                if i:
                    out.append(",")
                _emit(v, out, active)
            out.append("]")
        active.discard(key)
    else:
        raise JsonValueError(f"cannot write a value of type {t.__name__} as JSON")


def dumps_json(value: object) -> str:
    """Serialize a JSON value exactly like ``JSON.stringify`` (events.md §0).

    Compact separators, non-ASCII unescaped, dict insertion order, JS number formatting (integral
    floats without ``.0``). Integers are written with all their digits. Raises
    :class:`JsonValueError` on NaN/±Infinity, non-str keys, cycles or non-JSON types.
    """
    if plain_types((value,)):  # float-free and exact JSON types: orjson's bytes are JS's bytes
        try:
            return _dumps(value).decode()
        except _EncodeError:
            pass  # the paths below give the exact error (or all digits of a >64-bit integer)
    try:
        fast = _orjson_ok(value, 0)
    except RecursionError:
        fast = False
    if fast:
        try:
            return orjson.dumps(value).decode()
        except orjson.JSONEncodeError as exc:  # e.g. lone surrogates
            raise JsonValueError(f"cannot write value as JSON: {exc}") from None
    out: list[str] = []
    try:
        _emit(value, out, set())
    except RecursionError:
        raise JsonValueError("cannot write value as JSON: nesting too deep") from None
    return "".join(out)


def loads_json(text: str | bytes) -> Any:
    """Parse one JSON document (orjson). Raises ``orjson.JSONDecodeError`` (a ``ValueError``)."""
    return orjson.loads(text)


@contextmanager
def gc_paused(promote_at: int | None = None) -> Iterator[None]:
    """Pause the cyclic garbage collector for a bulk parse or load; restores the previous state.

    Shared by replay (parse) and persistence (load).

    Parsed events are acyclic trees, so collection passes during a bulk parse only cost time.
    On exit from a bulk one (:data:`PROMOTE_AT` young objects or more), every tracked object is
    promoted to the oldest generation (``gc.freeze()`` then ``gc.unfreeze()``, both O(1) list splices
    that also reset the young-generation counter): otherwise the first allocation after re-enabling
    would run a young collection over all the millions of objects just parsed. A small parse (a
    test's recording) promotes nothing: the promotion moves every young object of the process, the
    caller's garbage in cycles too, where only a full collection finds it, and the collector does not
    count those objects towards starting one (``tests/session/test_gc_paused.py``).

    ``promote_at``: the young count from which to promote, when not :data:`PROMOTE_AT` (a caller whose
    objects outlive it, such as replay's loaded scripts, promotes from fewer).
    """
    threshold = PROMOTE_AT if promote_at is None else promote_at
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if gc.get_count()[0] >= threshold:
            gc.freeze()
            gc.unfreeze()
        if was_enabled:
            gc.enable()


#: Young objects (``gc.get_count()[0]``) from which :func:`gc_paused` promotes them all on exit: a
#: young collection over fewer costs less than what a promotion hides from the collector.
PROMOTE_AT = 100_000


def iter_strings(value: Any) -> Iterator[str]:
    """Every string leaf of a JSON-like value (dict values, list and tuple items; not keys), in order."""
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for v in value.values():
            yield from iter_strings(v)
    elif isinstance(value, list | tuple):
        for v in value:
            yield from iter_strings(v)


def map_strings(value: Any, fn: Callable[[str], str]) -> Any:
    """A copy of the JSON value ``value`` with ``fn`` applied to every string value (not keys).

    Dicts keep their key order; non-string scalars are returned as they are.
    """
    if isinstance(value, str):
        return fn(value)
    if isinstance(value, list):
        return [map_strings(v, fn) for v in value]
    if isinstance(value, dict):
        return {k: map_strings(v, fn) for k, v in value.items()}
    return value


def first_change(a: AnyStr, b: AnyStr) -> int:
    """The index of the first character (byte) where ``a`` and ``b`` differ (``min(len)`` when one is a
    prefix of the other, including when they are equal): a binary search of slice comparisons, O(n)
    characters compared at C speed in all, for a report's excerpt of two long strings (never a
    per-character loop in Python, nor ``difflib``)."""
    n = min(len(a), len(b))
    if a[:n] == b[:n]:
        return n
    lo, hi = 0, n  # a[:lo] == b[:lo]; a[:hi] != b[:hi]
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if a[lo:mid] == b[lo:mid]:
            lo = mid
        else:
            hi = mid
    return lo


def text_digest(text: str) -> str:
    """A short fingerprint of a string for a report that cannot show it whole: ``sha256:`` and the first
    12 hex digits of the SHA-256 of its UTF-8 bytes (lone surrogates kept, ``surrogatepass``)."""
    import hashlib

    return "sha256:" + hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:12]
