"""Secret scrubbing and leak detection for everything the harness writes.

A :class:`SecretScrubber` knows two kinds of secrets:

* *configured secrets*: exact strings (e.g. the API key read from the environment), matched
  verbatim and in their JSON-escaped spelling;
* *patterns*: regular expressions for secret-shaped text (``sk-...`` keys, ``Bearer`` tokens,
  ``Authorization`` header values). When a pattern has a capturing group, only group 1 is
  the secret (so ``Authorization: Bearer x`` keeps its header name); otherwise the whole match.

The recorder runs :meth:`SecretScrubber.assert_clean` over every file it writes; a hit raises
:class:`SecretLeakError` (code ``SECRET_LEAK``) naming the file and line but never the secret.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterable, Iterator
from pathlib import Path

from ..errors import HarnessError

__all__ = [
    "DEFAULT_PATTERNS",
    "MIN_SECRET_LENGTH",
    "REDACTED",
    "SecretLeakError",
    "SecretScrubber",
    "assert_clean",
]

#: Replacement text for every scrubbed secret.
REDACTED = "[REDACTED]"

#: Configured secrets shorter than this are rejected (they would scrub ordinary words).
MIN_SECRET_LENGTH = 6

#: Secret-shaped text. Group 1 (when present) is the secret part of the match.
DEFAULT_PATTERNS: tuple[str, ...] = (
    # OpenAI / DeepSeek style keys; not preceded by a word character ("task-..." is no key).
    r"(?<![A-Za-z0-9_-])sk-[A-Za-z0-9_-]{16,}",
    # Bearer tokens (token-shaped values only, so prose like "Bearer tokens" is not a hit).
    r"\bBearer\s+([A-Za-z0-9\-._~+/]{16,}=*)",
    # Authorization header values in any common spelling: `Authorization: Basic xyz`,
    # `"authorization": "Token xyz"`, `authorization=xyz...`.
    r"(?i)\bauthorization[\"']?\s*[:=]\s*[\"']?"
    r"((?:bearer|basic|token|bot|digest)\s+[^\s\"',;}]+|[A-Za-z0-9\-._~+/]{16,}=*)",
)


class SecretLeakError(HarnessError):
    """A secret was found in text or a file that must be clean.

    Attributes:
        path: the offending file (``None`` when plain text was checked).
        line: 1-based line number of the first hit.
        kind: what matched: ``"configured secret #N"`` or ``"pattern <regex>"`` (never the value).
    """

    def __init__(self, message: str, *, path: Path | None, line: int, kind: str) -> None:
        super().__init__(message, "SECRET_LEAK")
        self.path = path
        self.line = line
        self.kind = kind


class SecretScrubber:
    """Finds and removes secrets from text.

    Args:
        secrets: exact secret strings (e.g. API keys). Empty strings and ``None``-like blanks are
            ignored; a non-empty secret shorter than :data:`MIN_SECRET_LENGTH` raises
            ``HarnessError`` code ``SECRET_INVALID`` (it would match ordinary text).
        patterns: regular expressions for secret-shaped text (default :data:`DEFAULT_PATTERNS`).
    """

    def __init__(self, secrets: Iterable[str] = (), patterns: Iterable[str] = DEFAULT_PATTERNS) -> None:
        literal: list[str] = []
        for index, secret in enumerate(secrets, start=1):
            if not secret:
                continue
            if len(secret) < MIN_SECRET_LENGTH:
                raise HarnessError(
                    f"configured secret #{index} is shorter than {MIN_SECRET_LENGTH} characters; "
                    "refusing to scrub it (it would match ordinary text)",
                    "SECRET_INVALID",
                )
            literal.append(secret)
        self._secrets: tuple[str, ...] = tuple(literal)
        # (kind, compiled regex) pairs; literal secrets also match their JSON-escaped spelling.
        matchers: list[tuple[str, re.Pattern[str]]] = []
        for index, secret in enumerate(self._secrets, start=1):
            spellings = {secret, json.dumps(secret, ensure_ascii=False)[1:-1], json.dumps(secret)[1:-1]}
            alternation = "|".join(re.escape(s) for s in sorted(spellings, key=len, reverse=True))
            matchers.append((f"configured secret #{index}", re.compile(alternation)))
        self._patterns: tuple[str, ...] = tuple(patterns)
        for pattern in self._patterns:
            try:
                matchers.append((f"pattern {pattern!r}", re.compile(pattern)))
            except re.error as exc:
                raise HarnessError(f"invalid secret pattern {pattern!r}: {exc}", "SECRET_INVALID") from exc
        self._matchers = tuple(matchers)

    @property
    def secrets(self) -> tuple[str, ...]:
        """The configured literal secrets (non-empty ones, in the given order)."""
        return self._secrets

    @property
    def patterns(self) -> tuple[str, ...]:
        """The regular expressions in use."""
        return self._patterns

    def _spans(self, text: str) -> Iterator[tuple[int, int, str]]:
        """Yield ``(start, end, kind)`` of every secret occurrence (may overlap)."""
        for kind, regex in self._matchers:
            group = 1 if regex.groups >= 1 else 0
            for match in regex.finditer(text):
                start, end = match.span(group)
                if start >= 0 and end > start:
                    yield start, end, kind

    def find(self, text: str) -> list[str]:
        """Return the distinct secret strings found in ``text``, in order of first appearance."""
        spans = sorted(self._spans(text))
        found: list[str] = []
        for start, end, _kind in spans:
            value = text[start:end]
            if value not in found:
                found.append(value)
        return found

    def scrub(self, text: str) -> str:
        """Return ``text`` with every secret occurrence replaced by :data:`REDACTED`.

        Overlapping hits are merged, so the result never contains a fragment of a secret.
        """
        spans = sorted((start, end) for start, end, _kind in self._spans(text))
        if not spans:
            return text
        merged: list[list[int]] = []
        for start, end in spans:
            if merged and start <= merged[-1][1]:
                merged[-1][1] = max(merged[-1][1], end)
            else:
                merged.append([start, end])
        parts: list[str] = []
        cursor = 0
        for start, end in merged:
            parts.append(text[cursor:start])
            parts.append(REDACTED)
            cursor = end
        parts.append(text[cursor:])
        return "".join(parts)

    def first_leak(self, text: str) -> tuple[int, str] | None:
        """Return ``(line, kind)`` of the earliest secret in ``text``, or ``None`` when clean."""
        best: tuple[int, str] | None = None
        best_start = -1
        for start, _end, kind in self._spans(text):
            if best is None or start < best_start:
                best_start = start
                best = (text.count("\n", 0, start) + 1, kind)
        return best

    def assert_clean(self, target: str | os.PathLike[str], *, label: str | None = None) -> None:
        """Raise :class:`SecretLeakError` if ``target`` contains a secret.

        Args:
            target: a ``str`` is checked as *text*; an ``os.PathLike`` (e.g. ``Path``) is read as a
                file, or, for a directory, every file below it is checked (sorted, recursive).
            label: how to name plain text in the error message (default ``"text"``).

        The error names the file (or label), the line and which secret kind matched, never the
        secret itself.
        """
        if isinstance(target, str):
            self._check_text(target, path=None, label=label or "text")
            return
        path = Path(target)
        if path.is_dir():
            for child in sorted(p for p in path.rglob("*") if p.is_file()):
                self._check_file(child)
        else:
            self._check_file(path)

    def _check_file(self, path: Path) -> None:
        try:
            data = path.read_bytes()
        except OSError as exc:
            raise HarnessError(f"cannot scan {path} for secrets: {exc}", "SECRET_SCAN_FAILED") from exc
        self._check_text(data.decode("utf-8", errors="replace"), path=path, label=str(path))

    def _check_text(self, text: str, *, path: Path | None, label: str) -> None:
        hit = self.first_leak(text)
        if hit is not None:
            line, kind = hit
            raise SecretLeakError(
                f"secret leak in {label} line {line}: matches {kind}", path=path, line=line, kind=kind
            )


def assert_clean(
    target: str | os.PathLike[str],
    secrets: Iterable[str] = (),
    patterns: Iterable[str] = DEFAULT_PATTERNS,
    *,
    label: str | None = None,
) -> None:
    """Shorthand for ``SecretScrubber(secrets, patterns).assert_clean(target, label=label)``."""
    SecretScrubber(secrets, patterns).assert_clean(target, label=label)
