"""``{{fromRequest:<regex>}}`` placeholders in scripted strings (spec: head-format.md §4).

At stream time a placeholder is replaced with the LAST match of ``<regex>`` in the live
request text (every string leaf of ``request["messages"]``, depth-first in order, joined with
``"\\n"``): capture group 1 when the pattern has groups, else the whole match. The placeholder
ends at the last two braces of the first ``}`` run of length >= 2, so ``\\d{4}}}`` is the
pattern ``\\d{4}``. No match, a bad regex or an unterminated placeholder: an error.
"""

from __future__ import annotations

import re
from typing import Any

from ..errors import quote
from ..session.codec import copy_parsed_json, iter_strings, map_strings

TOKEN = "{{fromRequest:"


class PlaceholderSyntaxError(ValueError):
    """Unterminated placeholder or invalid regex (message says which)."""


def split_placeholders(text: str) -> list[str | re.Pattern[str]]:
    """Split ``text`` into literal parts and compiled placeholder patterns.

    Raises:
        PlaceholderSyntaxError: unterminated placeholder or a pattern ``re`` rejects.
    """
    parts: list[str | re.Pattern[str]] = []
    pos = 0
    while True:
        start = text.find(TOKEN, pos)
        if start == -1:
            parts.append(text[pos:])
            return parts
        parts.append(text[pos:start])
        body = start + len(TOKEN)
        k = body
        while True:
            k = text.find("}", k)
            if k == -1:
                raise PlaceholderSyntaxError(
                    f"unterminated placeholder {text[start : start + 60]!r}: close it with '}}}}'"
                )
            run_end = k
            while run_end < len(text) and text[run_end] == "}":
                run_end += 1
            if run_end - k >= 2:
                break
            k = run_end
        pattern = text[body : run_end - 2]
        try:
            parts.append(re.compile(pattern))
        except (re.error, RecursionError, OverflowError, ValueError) as exc:
            # (re's parser recurses per group level: a pathological pattern raises RecursionError)
            raise PlaceholderSyntaxError(
                f"bad regex {quote(pattern)} in placeholder: {quote(str(exc), 200)}"
            ) from exc
        pos = run_end


def has_placeholder(value: Any) -> bool:
    """True when any string leaf of ``value`` contains ``{{fromRequest:``."""
    return any(TOKEN in s for s in iter_strings(value))


def check_placeholders(value: Any) -> None:
    """Validate the syntax of every placeholder in ``value``'s string leaves (load time).

    Raises:
        PlaceholderSyntaxError: see :func:`split_placeholders`.
    """
    for text in iter_strings(value):
        if TOKEN in text:
            split_placeholders(text)


def request_text(messages: Any) -> str:
    """Every string leaf of ``messages`` (values, not keys) joined with ``"\\n"``."""
    return "\n".join(iter_strings(messages))


class PlaceholderNoMatch(LookupError):
    """A placeholder's pattern matched nothing in the request text."""

    def __init__(self, pattern: str) -> None:
        super().__init__(pattern)
        self.pattern = pattern


def resolve_string(text: str, request: str) -> str:
    """Replace every placeholder of ``text`` using ``request`` (see module doc).

    Raises:
        PlaceholderSyntaxError: bad placeholder.
        PlaceholderNoMatch: a pattern that never matches ``request``.
    """
    out: list[str] = []
    for part in split_placeholders(text):
        if isinstance(part, str):
            out.append(part)
            continue
        last: re.Match[str] | None = None
        for last in part.finditer(request):  # noqa: B007 - we want the last match
            pass
        if last is None:
            raise PlaceholderNoMatch(part.pattern)
        out.append((last.group(1) or "") if part.groups >= 1 else last.group(0))
    return "".join(out)


def resolve_copy(value: Any, request: str | None) -> Any:
    """Deep-copy ``value`` (dicts keep key order), resolving placeholders when ``request`` is given.

    ``value`` is a recorded or authored entry, parsed from JSON (``copy_parsed_json`` copies it).
    """
    if request is None:
        return copy_parsed_json(value)
    return map_strings(value, lambda text: resolve_string(text, request) if TOKEN in text else text)
