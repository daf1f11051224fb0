"""Fixtures of the MCP relay's tests."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from .http_server import HttpServer


@pytest.fixture
def server() -> Iterator[HttpServer]:
    """A streamable HTTP MCP server on 127.0.0.1 (``.http_server``), stopped after the test."""
    server = HttpServer()
    server.start()
    yield server
    server.stop()
