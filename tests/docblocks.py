"""The code blocks of the README and the documentation site (``docs/*.md``), for the tests that run them.

Every fenced block is preceded by a tag saying what becomes of it (``tests/test_doc_blocks.py`` holds
every block to it):

* ``<!-- run: NAME -->``: a test runs the block, or compares it with what a run prints; the test names
  the block as the string ``"NAME"`` (``block("NAME")``);
* ``<!-- illustrative: WHY -->``: the block is not run (a command that needs a real key, an excerpt of a
  report), and WHY says why;
* no tag, when the block is a ``pymdownx.snippets`` include (``--8<-- "tests/...py:section"``) of a test
  file: the test suite runs that file, so the page shows code that runs.

Shapes: :func:`blocks` -> ``list[Block]`` in file order (README first); :func:`block` -> one body (its
text with a final newline), the same wherever the name is used.
"""

from __future__ import annotations

import re
from functools import cache
from pathlib import Path
from typing import NamedTuple

REPO = Path(__file__).resolve().parents[1]
TAG = re.compile(r"<!-- (?P<kind>run|illustrative): (?P<value>.+?) -->")
FENCE = re.compile(r"^(?P<indent> *)```(?P<lang>[\w+-]*)\s*$")
SNIPPET = re.compile(r'^--8<-- "(?P<path>[^":]+)(?::(?P<section>[\w-]+)(?::\d+)?)?"$')


class Block(NamedTuple):
    """One fenced block: ``file`` (relative to the repository), ``line`` (1-based, of the opening fence),
    ``lang``, ``kind`` (``run``, ``illustrative``, ``snippet`` or ``""`` when untagged), ``name`` (the run
    name, the illustrative reason, or the snippet's ``path:section``) and ``body``."""

    file: str
    line: int
    lang: str
    kind: str
    name: str
    body: str


def pages() -> list[Path]:
    """README.md and every page of the site, README first."""
    return [REPO / "README.md", *sorted((REPO / "docs").rglob("*.md"))]


def _blocks_of(path: Path) -> list[Block]:
    lines = path.read_text(encoding="utf-8").splitlines()
    found: list[Block] = []
    i = 0
    while i < len(lines):
        opening = FENCE.match(lines[i])
        if opening is None:
            i += 1
            continue
        indent = opening["indent"]
        end = i + 1
        while end < len(lines) and lines[end].rstrip() != indent + "```":
            end += 1
        body = "\n".join(line[len(indent) :] for line in lines[i + 1 : end]) + "\n"
        before = next((lines[j].strip() for j in range(i - 1, -1, -1) if lines[j].strip()), "")
        tag = TAG.fullmatch(before)
        snippet = [SNIPPET.match(line) for line in body.splitlines()]
        if tag is not None:
            kind, name = tag["kind"], tag["value"]
        elif snippet and all(snippet):
            kind, name = "snippet", " ".join(m.group(0)[8:-1] for m in snippet if m)
        else:
            kind, name = "", ""
        rel = path.relative_to(REPO).as_posix()
        found.append(Block(rel, i + 1, opening["lang"], kind, name, body))
        i = end + 1
    return found


@cache
def blocks() -> tuple[Block, ...]:
    """Every fenced block of the README and the site (module doc)."""
    return tuple(b for page in pages() for b in _blocks_of(page))


def block(name: str) -> str:
    """The body of the ``<!-- run: NAME -->`` block ``name`` (every copy of it is the same text).

    Raises:
        KeyError: no block has that name.
    """
    bodies = {b.body for b in blocks() if b.kind == "run" and b.name == name}
    if not bodies:
        raise KeyError(f"no code block tagged <!-- run: {name} --> in README.md or docs/")
    assert len(bodies) == 1, f"the blocks named {name!r} differ"
    return bodies.pop()


def snippet_section(path: str, section: str) -> str:
    """The text between ``# --8<-- [start:SECTION]`` and ``# --8<-- [end:SECTION]`` of a repository file.

    Raises:
        KeyError: the file has no such section.
    """
    text = (REPO / path).read_text(encoding="utf-8")
    found = re.search(
        rf"^# --8<-- \[start:{re.escape(section)}\]\n(.*?)^# --8<-- \[end:{re.escape(section)}\]$",
        text,
        re.S | re.M,
    )
    if found is None:
        raise KeyError(f"{path} has no section {section!r}")
    return found.group(1)


def printed_pattern(line: str) -> str:
    """A line of a page's printed output as an ``fnmatch_lines`` pattern: ``...`` matches anything
    (what differs from run to run), every other character is literal."""
    literal = "".join({"[": "[[]", "]": "[]]", "*": "[*]", "?": "[?]"}.get(c, c) for c in line)
    return literal.replace("...", "*")
