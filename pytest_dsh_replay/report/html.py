"""The one writer of the report: the payload encoded once and inlined into the one template.

``template.html`` (hand-written HTML, CSS and JavaScript, shipped as package data) holds the marker
``__PAYLOAD__`` inside a ``<script type="application/json">`` element; the payload's JSON goes there
with every ``</`` written ``<\\/`` (the same JSON value, but no text inside it can close the script
element) and ``<!--`` likewise. The page fetches nothing: its content security policy allows no
network at all, so it opens the same from disk, from a CI artifact or from a mail attachment.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable
from importlib.resources import files
from pathlib import Path

import msgspec

from .payload import Report

__all__ = ["render_html", "write_report"]

_MARKER = "__PAYLOAD__"


def _template() -> str:
    return files(__package__).joinpath("template.html").read_text(encoding="utf-8")


def render_html(report: Report, scrub: Callable[[str], str] | None = None) -> str:
    """The self-contained HTML page of ``report`` (a ``str``; UTF-8 when written). ``scrub``: the
    run's scrubber (``SecretScrubber.scrub_fixed``), applied to the payload's JSON text as a last pass:
    a secret a recording still holds (a log not written by the harness) shows as ``[REDACTED]``; it
    sees a model call's text assembled, not split over chunks."""
    payload = msgspec.json.encode(report).decode("utf-8")
    if scrub is not None:
        payload = scrub(payload)
    payload = payload.replace("</", "<\\/").replace("<!--", "<\\u0021--")
    head, marker, tail = _template().partition(_MARKER)
    assert marker, "template.html lost its payload marker"
    return head + payload + tail


def write_report(report: Report, path: Path, scrub: Callable[[str], str] | None = None) -> int:
    """Write the page of ``report`` to ``path`` (replaced whole: written beside it, then renamed),
    ``scrub`` as :func:`render_html` takes it; returns its size in bytes.

    Raises:
        OSError: the directory cannot be written.
    """
    from ..recording.write import file_mode

    data = render_html(report, scrub).encode("utf-8")
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as out:
            out.write(data)
        os.chmod(tmp, file_mode())  # mkstemp creates 0600; the page is an ordinary file, as junitxml's
        os.replace(tmp, path)
    except BaseException:
        os.unlink(tmp)
        raise
    return len(data)
