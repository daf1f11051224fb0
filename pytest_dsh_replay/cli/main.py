"""The ``dsh-replay`` command group; each command registers itself on it from its own module."""

from __future__ import annotations

from contextlib import contextmanager

import click

from .common import _scrubbed_output


@click.group()
@click.version_option(package_name="pytest-dsh-replay")
@click.pass_context
def main(ctx: click.Context) -> None:
    """Inspect, validate, derive, diff and record dsh session logs and scenarios."""
    ctx.with_resource(contextmanager(_scrubbed_output)())
