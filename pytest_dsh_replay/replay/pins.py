"""Request pins: what a live model received that a session log cannot show (harness.md §4).

A log holds the messages of every call (they are derived from it), but not the system prompt, the
tool schemas or the model name the agent sent. Record modes write them next to the logs, per session:

=================================  ==========================================================
``system-prompt.expected.md``      the system prompt, verbatim (an empty file: none was sent)
``tool-schemas.expected.json``     the tool specs ``[{"name","description","parameters","strict"?}]``
``model.expected.json``            ``{"model": "<name>"}``
``request-params.expected.json``   the answer-shaping fields as the wire format named them
                                   (``{"temperature": 0.2, "response_format": {...}}``); written
                                   only for a recording whose requests carry ``params`` (the
                                   loopback endpoint's)
=================================  ==========================================================

A part a session sent with different values across its calls (AutoGen's reflection call sends no
``tools`` after a call that sent them) is pinned per call: the kind's JSON file
(``layout.PinKind.per_call_name``: ``tool-schemas.expected.json``, ``system-prompt.expected.json``)
holds ``{"perCall": [value, ...]}``, one value per call in call order, and each call is checked against
its own (:func:`pinned_value`). ``request-params.expected.json`` may hold the bare array instead.

The kinds and their file names are declared once, in :data:`~..layout.PIN_KINDS`; this module reads,
checks and renders their values. The unnumbered files pin the primary log ``session.jsonl``;
``system-prompt.<n>.expected.md`` etc. pin the child log ``session.<n>.jsonl``. A child without its own
file uses the unnumbered one (identical content is shared, as the reference does). Strings are written
with the run's cwd as ``{{cwd}}`` (like the logs) and go through the fixture writer's secret scrubbing. A
scenario without pins checks the messages only.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import orjson
from msgspec import Struct, field

from ..errors import MAX_INPUT_NESTING, nesting_exceeds, quote, read_regular_file
from ..layout import (
    PER_CALL,
    PIN_GLOB,
    PIN_KINDS,
    PIN_PARTS,
    PinKind,
    is_pin_like,
    pin_kind,
    pin_match,
    pin_name,
)
from ..session.codec import map_strings
from ..session.tokens import Tokenizer
from .errors import PinError
from .requests import same_json, sent_parts

#: part -> (file stem, extension), from :data:`~..layout.PIN_KINDS`
PIN_FILES: dict[str, tuple[str, str]] = {k.part: (k.stem, k.ext) for k in PIN_KINDS}
_TOOL_KEYS = frozenset({"name", "description", "parameters", "strict"})


class PerCall(Struct, frozen=True):
    """A part pinned per call: ``values[i]`` is call ``i``'s value (module doc)."""

    values: tuple[Any, ...]


class Pins(Struct, frozen=True):
    """The pinned parts of one session's requests (absent part = not pinned).

    Attributes:
        values: part (``system``, ``tools``, ``model``) -> the pinned value.
        files: part -> the pin file it came from.
    """

    values: Mapping[str, Any] = field(default_factory=dict)
    files: Mapping[str, Path] = field(default_factory=dict)


def _read(path: Path) -> bytes:
    try:
        return read_regular_file(path, "pin file", error=PinError, whole_limit=True)
    except OSError as exc:
        raise PinError(f"{path}: cannot read the pin file: {exc.strerror or exc}", "REPLAY_BAD_PIN") from None


def _parse(path: Path, part: str) -> Any:
    data = _read(path)
    kind = pin_kind(part)
    if kind.ext == "md" and path.suffix == ".md":
        try:
            return data.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise PinError(
                f"{path}: the {kind.label} pin is not UTF-8 text ({exc}); re-record", "REPLAY_BAD_PIN"
            ) from None
    try:
        value = orjson.loads(data)
    except orjson.JSONDecodeError as exc:
        raise PinError(
            f"{path}: not valid JSON ({exc}); fix it or re-record "
            "(--dsh-record=rewrite or --snapshot-update)",
            "REPLAY_BAD_PIN",
        ) from None
    if nesting_exceeds(value):
        # like the sidecars: no recursive walk of the pin (scrubbing, comparison) may exceed Python's
        # recursion limit and surface as some other error
        raise PinError(
            f"{path}: JSON nested deeper than {MAX_INPUT_NESTING} levels (the input nesting limit); fix it "
            "or re-record (--dsh-record=rewrite or --snapshot-update)",
            "REPLAY_BAD_PIN",
        )
    if isinstance(value, dict) and PER_CALL in value:
        return _per_call(path, kind, value)
    if kind.ext == "md":
        raise PinError(
            f'{path}: a {kind.label} pin in JSON holds {{"{PER_CALL}": ["<one call\'s value>", ...]}} '
            f"(one value: {kind.file_name()}), got {quote(value)}",
            "REPLAY_BAD_PIN",
        )
    if kind.wrap is not None:
        value = _unwrap(path, kind, value)
    check = _VALUE_CHECKS.get(part)
    if check is not None:
        check(path, value)
    if part == "params" and isinstance(value, list):
        return PerCall(tuple(value))
    return value


def _per_call(path: Path, kind: PinKind, value: dict[str, Any]) -> PerCall:
    """A per-call pin's values (module doc), each checked as the kind's one value is."""
    calls = value[PER_CALL]
    if set(value) != {PER_CALL} or not isinstance(calls, list):
        raise PinError(
            f'{path}: a per-call pin is {{"{PER_CALL}": [<one value per call>]}}, got {quote(value)}',
            "REPLAY_BAD_PIN",
        )
    check = _VALUE_CHECKS.get(kind.part)
    for number, call in enumerate(calls):
        if kind.ext == "md" and not isinstance(call, str):
            raise PinError(
                f"{path}: {PER_CALL}[{number}] must be a string, got {quote(call)}", "REPLAY_BAD_PIN"
            )
        if kind.wrap is not None:
            typ, placeholder = _WRAPPED.get(kind.part, (object, "<value>"))
            if not isinstance(call, typ):
                raise PinError(
                    f"{path}: {PER_CALL}[{number}] must be {placeholder}, got {quote(call)}", "REPLAY_BAD_PIN"
                )
        if check is not None and not (kind.part == "params" and isinstance(call, list)):
            check(path, call)
    return PerCall(tuple(calls))


#: the type and placeholder of a wrapped pin value, per kind (default: any JSON value)
_WRAPPED: dict[str, tuple[type, str]] = {"model": (str, '"<name>"')}


def _unwrap(path: Path, kind: PinKind, value: Any) -> Any:
    """The value of a ``{wrap: value}`` pin file (``model.expected.json``: ``{"model": "<name>"}``)."""
    key = kind.wrap
    typ, placeholder = _WRAPPED.get(kind.part, (object, "<value>"))
    if not isinstance(value, dict) or set(value) != {key} or not isinstance(value[key], typ):
        extra = sorted(set(value) - {key}) if isinstance(value, dict) else []
        raise PinError(
            f'{path}: expected {{"{key}": {placeholder}}}'
            + (f", unknown key(s) {extra}" if extra else f", got {quote(value)}"),
            "REPLAY_BAD_PIN",
        )
    return value[key]


def _check_tool_specs(path: Path, value: Any) -> None:
    if not isinstance(value, list):
        raise PinError(
            f"{path}: expected a JSON array of tool specs "
            '[{"name", "description", "parameters", "strict"?}], got ' + quote(value),
            "REPLAY_BAD_PIN",
        )
    for i, tool in enumerate(value):
        if not isinstance(tool, dict):
            raise PinError(
                f"{path}: [{i}] must be an object (a tool spec), got {quote(tool)}", "REPLAY_BAD_PIN"
            )
        unknown = sorted(set(tool) - _TOOL_KEYS)
        if unknown:
            raise PinError(
                f"{path}: [{i}] has unknown key(s) {unknown}; a tool spec has {sorted(_TOOL_KEYS)}",
                "REPLAY_BAD_PIN",
            )
        if not isinstance(tool.get("name"), str):
            raise PinError(f'{path}: [{i}] needs a string "name"', "REPLAY_BAD_PIN")


def _check_params(path: Path, value: Any) -> None:
    calls = value if isinstance(value, list) else [value]
    for i, params in enumerate(calls):
        if not isinstance(params, dict):
            where = f"[{i}] " if isinstance(value, list) else ""
            raise PinError(
                f"{path}: {where}expected a JSON object of request fields "
                '({"temperature": 0.2, ...}) or an array of them, one per call, got ' + quote(params),
                "REPLAY_BAD_PIN",
            )


#: the value check of a pin kind beyond its file format (raises ``PinError`` naming the file)
_VALUE_CHECKS: dict[str, Callable[[Path, Any], None]] = {"tools": _check_tool_specs, "params": _check_params}


def pin_files(scenario_dir: Path) -> dict[tuple[str, int], Path]:
    """Every pin file of a scenario: ``(part, log index) -> path``.

    Whatever sits under a pin name is listed, a directory or a dangling link too: reading it
    (:func:`load_pins`) refuses it with ``REPLAY_BAD_PIN`` naming the path (a pin that is not a
    file must not turn the check off silently).

    Raises:
        PinError: a ``*.expected.*`` file that is not a known pin name (names the file and the valid names);
            a text kind pinned by both its files (``system-prompt.expected.md`` and ``.json``).
    """
    found: dict[tuple[str, int], Path] = {}
    for path in sorted(scenario_dir.glob(PIN_GLOB)):
        m = pin_match(path.name)
        if not is_pin_like(path.name) or (m is None and not path.is_file()):
            continue  # (a directory, FIFO or dangling link under a pin's name is refused when read)
        if m is None or m[2] not in (m[0].ext, "json"):
            raise PinError(
                f"{path}: unknown pin file; pins are {', '.join(pin_name(p) for p in PIN_PARTS)} "
                "(and their .<n>. variants for child log session.<n>.jsonl)",
                "REPLAY_BAD_PIN",
            )
        key = (m[0].part, m[1])
        if key in found:  # a text kind's one-value and per-call files both: which one holds is unknown
            raise PinError(
                f"{path}: {found[key].name} pins the same {m[0].label} of the same log; keep one (re-record)",
                "REPLAY_BAD_PIN",
            )
        found[key] = path
    return found


def load_pins(scenario_dir: Path, log_count: int) -> list[Pins]:
    """The pins of each log of a scenario, index 0 = ``session.jsonl``, n = ``session.<n>.jsonl``.

    Args:
        scenario_dir: the scenario directory.
        log_count: 1 + the number of child logs.

    Raises:
        PinError: ``REPLAY_BAD_PIN``: not valid JSON / UTF-8, unknown keys, a wrong shape, an unknown
            ``*.expected.*`` name, a numbered pin whose child log does not exist, or a pin that is a
            directory, a dangling link, a FIFO or a device (names the file).
        LineTooLongError: a pin file larger than the line limit.
    """
    files = pin_files(scenario_dir)
    for (_part, index), path in files.items():
        if index >= log_count:
            raise PinError(
                f"{path}: pins child log session.{index}.jsonl, which does not exist in {scenario_dir} "
                f"({log_count - 1} child log(s)); delete the pin or re-record",
                "REPLAY_BAD_PIN",
            )
    parsed = {key: _parse(path, key[0]) for key, path in files.items()}
    out: list[Pins] = []
    for index in range(log_count):
        values: dict[str, Any] = {}
        origin: dict[str, Path] = {}
        for part in PIN_PARTS:
            key = (part, index) if (part, index) in files else (part, 0)
            if key in files:
                values[part] = parsed[key]
                origin[part] = files[key]
        out.append(Pins(values, origin))
    return out


def _session_value(requests: Sequence[Mapping[str, Any]], part: str) -> tuple[bool, Any]:
    """(consistent, value) of ``part`` over one session's calls; ``(True, None)`` when it made no call.
    A per-call kind (:attr:`~..layout.PinKind.per_call`) whose values differ is consistent, its value
    the list of every call's."""
    values = [sent_parts(r)[part] for r in requests]
    if not values:
        return True, None
    first = values[0]
    if all(same_json(v, first, exact_numbers=True) for v in values[1:]):
        return True, first
    return (True, PerCall(tuple(values))) if pin_kind(part).per_call else (False, first)


def pinned_value(pins: Pins, part: str, call: int) -> tuple[bool, Any]:
    """``(pinned, value)`` of ``part`` for call ``call`` (0-based) of the session ``pins`` belong to:
    a per-call pin's entry for that call (not pinned past its last entry), else the one value."""
    if part not in pins.values:
        return False, None
    value = pins.values[part]
    if isinstance(value, PerCall):
        return (True, value.values[call]) if call < len(value.values) else (False, None)
    return True, value


def render_pins(
    requests: Sequence[Sequence[Mapping[str, Any]]], cwd: str | None
) -> tuple[list[tuple[str, str]], list[str]]:
    """The pin files of a recording: ``([(file name, text), ...], notes)``.

    Args:
        requests: per harvested log (index 0 = the primary), the requests its session sent, in order.
        cwd: the run's cwd, written as ``{{cwd}}``.

    A part a session sent with different values across its calls is pinned per call (module doc; a kind
    not pinned per call would not be pinned at all, the note saying so). An optional kind no request
    carries is not pinned. Child files are written only where they
    differ from the unnumbered file. No call at all: no pins.
    """
    tokens = Tokenizer([], cwd)
    files: list[tuple[str, str]] = []
    notes: list[str] = []
    for part in PIN_PARTS:
        if pin_kind(part).optional and not any(part in r for calls in requests for r in calls):
            continue  # no call carried it (the bundled loop sends no params): nothing to pin
        per_log, varying = _part_per_log(requests, part, tokens)
        if varying:
            notes.append(
                f"{part} not pinned: session log(s) {', '.join(map(str, varying))} sent different {part} "
                "values across their calls (a pin holds one value per session)"
            )
        else:
            files += _part_files(part, requests, per_log)
    files.sort()
    return files, notes


def _part_per_log(
    requests: Sequence[Sequence[Mapping[str, Any]]], part: str, tokens: Tokenizer
) -> tuple[list[Any], list[int]]:
    """``part``'s value per log, its cwd tokenized (``None`` for a log without calls), and the logs
    whose calls sent different values."""
    per_log: list[Any] = []
    varying = []
    for index, calls in enumerate(requests):
        consistent, value = _session_value(calls, part)
        if not consistent:
            varying.append(index)
        if isinstance(value, PerCall):
            value = PerCall(tuple(map_strings(list(value.values), tokens.tokenize_cwd)))
        elif calls:
            value = map_strings(value, tokens.tokenize_cwd)
        per_log.append(value if calls else None)
    return per_log, varying


def _part_files(
    part: str, requests: Sequence[Sequence[Mapping[str, Any]]], per_log: list[Any]
) -> list[tuple[str, str]]:
    """``part``'s pin files: the unnumbered one (the primary's value, else the first log with calls)
    and a child's where its value differs from it."""
    with_calls = [i for i, calls in enumerate(requests) if calls]
    if not with_calls:
        return []
    files = []
    shared = per_log[0] if requests[0] else per_log[with_calls[0]]
    for index in with_calls:
        if index == 0 or not same_json(per_log[index], shared, exact_numbers=True):
            value = per_log[index] if index else shared
            files.append(_render(part, index, value))
    if not requests[0]:
        files.append(_render(part, 0, shared))
    return files


def _render(part: str, rank: int, value: Any) -> tuple[str, str]:
    """``(file name, text)`` of ``part``'s pin of log ``rank`` holding ``value`` (a :class:`PerCall`:
    the per-call file)."""
    kind = pin_kind(part)
    if isinstance(value, PerCall):
        body: Any = {PER_CALL: list(value.values)}
        name = kind.per_call_name(rank)
    elif kind.ext == "md":
        return pin_name(part, rank), str(value)
    else:
        body = {kind.wrap: value} if kind.wrap is not None else value
        name = pin_name(part, rank)
    return name, orjson.dumps(body, option=orjson.OPT_INDENT_2).decode() + "\n"


def stale_pins(scenario_dir: Path, keep: Sequence[str]) -> list[Path]:
    """The pin files of ``scenario_dir`` not named in ``keep`` (a rewrite/update removes them)."""
    kept = set(keep)
    return [
        p for p in sorted(scenario_dir.glob(PIN_GLOB)) if pin_match(p.name) is not None and p.name not in kept
    ]


__all__ = [
    "PIN_FILES",
    "PIN_PARTS",
    "PerCall",
    "Pins",
    "load_pins",
    "pin_files",
    "pin_name",
    "pinned_value",
    "render_pins",
    "stale_pins",
]
