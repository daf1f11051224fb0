"""Reading a report page's payload back (what its script reads), for tests without a browser."""

from __future__ import annotations

import re
from typing import Any

import msgspec


def payload_of(html: str) -> dict[str, Any]:
    """The JSON payload inlined in a report page (what its script reads)."""
    found = re.search(r'<script type="application/json" id="payload">(.*?)</script>', html, re.S)
    assert found is not None
    value: dict[str, Any] = msgspec.json.decode(found.group(1))
    return value
