"""Every code block of the README and the documentation site runs, is compared with a run, or says why
not (``tests/docblocks.py`` has the tags), and the site's pages are all in its navigation. The README's
fresh-machine commands are the ones ``.ci/run`` runs."""

from __future__ import annotations

import re
from collections import defaultdict

import pytest
from docblocks import REPO, SNIPPET, block, blocks, snippet_section


def _test_sources() -> str:
    own = REPO / "tests" / "docblocks.py"
    return "\n".join(p.read_text(encoding="utf-8") for p in (REPO / "tests").rglob("*.py") if p != own)


def test_every_block_is_run_or_illustrative() -> None:
    untagged = [f"{b.file}:{b.line}" for b in blocks() if not b.kind]
    assert not untagged, (
        "code blocks without <!-- run: NAME --> or <!-- illustrative: WHY --> before them: "
        + ", ".join(untagged)
    )


def test_every_run_block_is_named_by_a_test() -> None:
    sources = _test_sources()
    names = {b.name for b in blocks() if b.kind == "run"}
    unused = sorted(n for n in names if f'"{n}"' not in sources)
    assert not unused, f"blocks tagged run that no test names: {unused}"


def test_blocks_sharing_a_name_are_the_same_text() -> None:
    bodies: dict[str, set[str]] = defaultdict(set)
    for b in blocks():
        if b.kind == "run":
            bodies[b.name].add(b.body)
    for name in bodies:
        block(name)  # asserts every copy is the same text


def test_every_illustrative_block_says_why() -> None:
    vague = [f"{b.file}:{b.line}" for b in blocks() if b.kind == "illustrative" and len(b.name.split()) < 3]
    assert not vague, f"illustrative blocks whose reason is too short to say why: {vague}"


def test_snippets_name_existing_files_and_sections() -> None:
    for b in blocks():
        if b.kind != "snippet":
            continue
        for line in b.body.splitlines():
            found = SNIPPET.match(line)
            assert found is not None, (b.file, b.line, line)
            path, section = found["path"], found["section"]
            assert (REPO / path).is_file(), f"{b.file}:{b.line}: {path} does not exist"
            if section and not section.isdigit():
                snippet_section(path, section)


def test_every_page_is_in_the_nav() -> None:
    config = (REPO / "mkdocs.yml").read_text(encoding="utf-8")
    listed = set(re.findall(r":\s*([\w./-]+\.md)\s*$", config, re.M))
    pages = {p.relative_to(REPO / "docs").as_posix() for p in (REPO / "docs").rglob("*.md")}
    assert pages <= listed, f"pages missing from mkdocs.yml's nav: {sorted(pages - listed)}"
    assert listed <= pages, f"nav entries without a page: {sorted(listed - pages)}"


@pytest.mark.parametrize("command", block("fresh-machine").splitlines())
def test_fresh_machine_commands_are_what_ci_runs(command: str) -> None:
    """Each command of the README's "fresh machine" block is run by ``.ci/run`` (which may add quiet or
    cache flags, and the guard check)."""
    ci = (REPO / ".ci" / "run").read_text(encoding="utf-8")
    quiet = {"-q", "-v", "-p", "no:cacheprovider", "--dsh-check-guards"}

    def words(line: str) -> list[str]:
        found = [w for w in line.split() if w not in quiet]
        return found[2:] if found[:2] == ["python", "-m"] else found

    lines = [words(line) for line in ci.splitlines()]
    for part in command.split(" && "):
        assert words(part) in lines, f"{part!r} is not a command of .ci/run"


def test_readme_is_short_and_its_links_resolve() -> None:
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    assert len(readme.splitlines()) <= 300
    for target in re.findall(r"\]\(((?!https?:)[^)#]+)(?:#[^)]*)?\)", readme):
        assert (REPO / target).exists(), f"README.md links to {target}, which does not exist"


def _section(text: str, heading: str) -> str:
    """The text under ``heading`` (a whole Markdown heading line) up to the next heading of its level
    or above."""
    level = heading.split(" ", 1)[0]
    start = text.index(heading + "\n") + len(heading) + 1
    above = re.compile(f"^#{{1,{len(level)}}} ", re.M)
    ends = [m.start() for m in above.finditer(text[start:])]
    return text[start : start + ends[0]] if ends else text[start:]


def test_readme_says_how_to_mask_a_value_that_differs_on_every_run() -> None:
    """Regression: new users met a red replay on a tool result's time and id; the README's "Test your
    agent" section named no mask, and its serve section no ``serve --mask``."""
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    agent = _section(readme, "## Test your agent")
    assert "timestamp" in agent and "(docs/masks.md)" in agent
    assert "dsh_recording(mask=[" in agent and "--dsh-mask" in agent and "dsh_mask" in agent
    assert "dsh-replay serve recordings/trip --mask '" in _section(
        readme, "### Any language: `dsh-replay serve`"
    )
