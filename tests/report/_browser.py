"""The real browser of the report's page tests: Debian's Chromium driven by Playwright.

One browser per test module (a module-scoped fixture calls :func:`launch`). Without Chromium or
Playwright the tests are skipped, saying what to install, except in CI (``CI`` or ``DSH_REQUIRE_BROWSER``
set; ``.ci/run`` sets the latter and installs Chromium), where a missing browser is a failure.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

#: what works in a closed network: without the background-networking flags Chromium's own connections
#: are refused and it waits on them
FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


def chromium_path() -> str | None:
    return shutil.which("chromium") or next(
        (p for p in ("/usr/bin/chromium", "/usr/bin/chromium-browser") if os.path.exists(p)), None
    )


def _missing(what: str) -> None:
    if os.environ.get("CI") or os.environ.get("DSH_REQUIRE_BROWSER"):
        pytest.fail(f"{what}: CI must have it (.ci/run installs it)")
    pytest.skip(f"{what}: the report's page tests need a real browser")


@contextmanager
def launch() -> Iterator[Any]:
    """A headless Chromium (a fresh profile: Playwright's ``launch`` makes a temporary one)."""
    path = chromium_path()
    if path is None:
        _missing("no Chromium (apt-get install chromium)")
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        _missing(
            "no Playwright (pip install playwright; never `playwright install`: it uses /usr/bin/chromium)"
        )
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=path, args=FLAGS)
        try:
            yield browser
        finally:
            browser.close()


#: resolved when the tests are imported: pytester's runs change the working directory
_SHOTS = os.environ.get("DSH_REPORT_SCREENSHOTS")
SHOTS = Path(_SHOTS).resolve() if _SHOTS else None


def screenshot_dir(tmp: Path) -> Path:
    """Where the tests' screenshots go: ``$DSH_REPORT_SCREENSHOTS`` (``docs/img`` to refresh the
    documentation's), else a temporary directory."""
    path = SHOTS or tmp
    path.mkdir(parents=True, exist_ok=True)
    return path
