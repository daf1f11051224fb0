"""The ``dsh-replay`` command group. Each command registers itself on it from its own module, imported
when the command is asked for (:data:`COMMANDS`): ``dsh-replay serve`` imports ``serve``'s module and
what it needs, not the renderers of ``show`` or ``diff``; ``--help`` imports them all for their lines."""

from __future__ import annotations

import importlib
from contextlib import contextmanager

import click

from .common import _scrubbed_output
from .process import interrupt_as_before

#: the command modules of this package, each registering its command (of the same name) on :data:`main`
COMMANDS = ("accept", "derive", "diff", "mcp", "record", "recover", "report", "serve", "show", "validate")


class _Commands(click.Group):
    """A group whose commands are the modules of :data:`COMMANDS`, each imported on first use."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted({*COMMANDS, *self.commands})

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name in COMMANDS and cmd_name not in self.commands:
            importlib.import_module(f"{__package__}.{cmd_name}")
        return super().get_command(ctx, cmd_name)


@click.group(cls=_Commands)
@click.version_option(package_name="pytest-dsh-replay")
@click.pass_context
def main(ctx: click.Context) -> None:
    """Inspect, validate, derive, diff and record dsh session logs and scenarios."""
    interrupt_as_before(ctx.invoked_subcommand)
    ctx.with_resource(contextmanager(_scrubbed_output)())
