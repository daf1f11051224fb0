"""The HTML report of recordings and runs (``dsh-replay report``, ``pytest --dsh-report FILE``).

:mod:`.payload` declares what the page shows (``msgspec`` records), :mod:`.build` builds it from
recordings on disk and the items' reports (:class:`~..itemreport.ItemReport`), :mod:`.html` writes the
one self-contained page (the template inlined with the payload), :mod:`.run` is the pytest side:
the items the run reported, collected on the controller (so it works under ``-n``).
"""

from __future__ import annotations

from .build import read_recording, report_payload
from .html import render_html, write_report
from .payload import Report

__all__ = ["Report", "read_recording", "render_html", "report_payload", "write_report"]
