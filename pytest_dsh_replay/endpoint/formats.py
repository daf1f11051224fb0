"""The wire formats the endpoint serves: one table, path -> ``llm/wire`` module.

The server registers a route per entry (:mod:`.server`) and the manifest reader accepts exactly these
paths as a recording's ``formats`` (:mod:`.recording`), so a format added here is served and readable
at once.
"""

from __future__ import annotations

from typing import cast

from ..llm.wire import chat, messages, responses
from ..llm.wire.base import WireFormat

#: path -> wire format module (``llm/wire``); every served format is registered here.
FORMATS: dict[str, WireFormat] = {
    chat.PATH: cast(WireFormat, chat),
    messages.PATH: cast(WireFormat, messages),
    responses.PATH: cast(WireFormat, responses),
}

__all__ = ["FORMATS"]
