"""What an endpoint is given (:class:`EndpointConfig`) and what follows from it before anything is
served: the plan of its record mode for what the directory holds (:func:`plan_for`), the upstream key of
each format (:func:`upstream_keys`, :func:`unset_keys`), and the directory checks of the start.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

from msgspec import Struct, field

from ..errors import HarnessError
from ..layout import EMBEDDINGS_LOG, OVERRIDE_FILE, PRIMARY_FILE
from ..modes import Backend, RecordMode
from ..recording.plan import Plan
from ..recording.plan import plan_for as scenario_plan
from ..session.masks import Masks
from .formats import FORMATS


class EndpointConfigError(HarnessError):
    """The endpoint cannot start as configured (a record mode without an upstream, no recording...)."""

    code = "ENDPOINT_CONFIG"


class ListenError(EndpointConfigError):
    """The endpoint cannot listen where it is told: the port is taken, no port is free, or the address
    is not ours (the system's reason). ``host``, ``port``: where (``0``: any free port)."""

    def __init__(self, host: str, port: int, reason: str) -> None:
        where = f"{host}:{port}" if port else f"{host} (on any free port)"
        super().__init__(f"cannot listen on {where}: {reason}")
        self.host, self.port = host, port


class EndpointConfig(Struct):
    """How an endpoint serves.

    Attributes:
        directory: the recording directory (``session.jsonl``, ``session.N.jsonl``, sidecars, pins).
        record: the record mode.
        upstream: the upstream base URL (``https://api.openai.com/v1``) for the record modes.
        api_key: the upstream API key of every format (sent upstream only, scrubbed from everything
            written and from the errors a client gets); ``None``: read from the environment.
        api_key_env: the environment variable the key of every format is read from (or ``api_key``
            was read from: named when the upstream refuses the credentials); ``None``: each format's
            provider variable (``KEY_ENV`` of its wire module: ``OPENAI_API_KEY`` for Chat Completions
            and Responses, ``ANTHROPIC_API_KEY`` for Messages). Read at start, by record plans only.
        backend: the persistence backend of a recording.
        match_on: the request parts checked (``None``: all the recording has; empty: off).
        allow_unused: recorded calls or conversations left unused do not fail the run.
        masks: volatile-value masks applied to both sides of the request check (``--dsh-mask``, the
            marker's ``mask=``, ``serve --mask``); ``None``: none.
        rerecord: the command the reports show to re-record.
        subject: what the reports tell the user to re-record (``re-record <subject>: <command>``):
            ``the recording`` (``serve``, a caller of its own), ``the test`` (``dsh_endpoint``).
        cwd: the sessions' cwd (default: the process cwd), tokenized on both sides.
        mcp: streamable HTTP MCP servers recorded and replayed beside the model, ``{name: URL}``,
            served under ``/mcp/NAME`` by the composer's mount (``pytest_dsh_replay.mcp.http.mcp_routes``;
            the URL is used when recording); their files are locked and set aside with the run's.
        record_flag, upstream_flag: how the caller's options are spelled in messages (pytest's
            ``--dsh-record``/``--dsh-upstream``, ``serve``'s ``--record``/``--upstream``).
        allow_origins: the ``Origin`` values a request may carry (:mod:`.guard`; none by default:
            a request from a web page is refused).
        origin_flag: how the caller allows an origin, as a refusal names it.
        record_on_error: a run with problems writes every conversation, failed calls included, into
            the directory even over a recording (vcrpy's ``record_on_exception``); otherwise its good
            conversations only, and beside a recording it would replace (:data:`KEPT_DIR`).
        accept_flag: how the caller spells ``record_on_error`` in messages.
        stopped_is_problem: a recorded conversation whose last answer asked for tool calls that no
            request answered (the agent stopped mid-turn) is a problem of the run, and the run is kept
            beside the directory like any run with problems (``serve``, which cannot see the agent's
            exit); ``False`` (the fixture, whose test's outcome says it): written, its turn
            ``interrupted``.
        set_aside_relays: a run whose conversations are not written moves the MCP sessions separate
            ``dsh-replay mcp`` relays recorded into the directory meanwhile out of it (``serve``;
            ``endpoint.aside.set_aside_relays``); the fixture joins its ``dsh_mcp`` relays' sessions itself.
        mask_flag: the one option a red report's mask proposal is spelled with (``serve``'s ``--mask``);
            ``None``: every spelling, pytest's first.
        key_holder: the process whose environment the upstream key is read from, as messages name it
            (the agent's own key is never sent upstream).
    """

    directory: Path
    record: RecordMode = RecordMode.NONE
    upstream: str | None = None
    api_key: str | None = None
    api_key_env: str | None = None
    backend: Backend = Backend.JSONL
    match_on: frozenset[str] | None = None
    allow_unused: bool = False
    masks: Masks | None = None
    rerecord: str | None = None
    subject: str = "the recording"
    cwd: str | None = None
    host: str = "127.0.0.1"
    port: int = 0
    mcp: dict[str, str] = field(default_factory=dict)
    record_flag: str = "--dsh-record"
    upstream_flag: str = "--dsh-upstream URL or ini dsh_upstream"
    allow_origins: tuple[str, ...] = ()
    origin_flag: str = "dsh-replay serve --allow-origin ORIGIN"
    record_on_error: bool = False
    accept_flag: str = "EndpointConfig(record_on_error=True)"
    stopped_is_problem: bool = False
    set_aside_relays: bool = False
    key_holder: str = "the test process"
    mask_flag: str | None = None


#: how a caller of the endpoint's core lets recorded calls go unused (``serve`` and the fixture say theirs)
ACCEPT_UNUSED = "EndpointConfig(allow_unused=True)"


def check_directory(directory: Path) -> None:
    """A recording directory that cannot be one is a usage error at start (not a traceback at the write):
    a dangling symlink, a file.

    Raises:
        EndpointConfigError: names the directory and what it is.
    """
    if directory.is_symlink() and not directory.exists():
        raise EndpointConfigError(
            f"{directory}: the recording directory is a symlink to {os.readlink(directory)}, which does not "
            "exist: create the target directory, or remove the link"
        )
    if directory.exists() and not directory.is_dir():
        raise EndpointConfigError(f"{directory}: the recording directory is not a directory")


def has_recording(directory: Path) -> bool:
    return (directory / PRIMARY_FILE).exists() or (directory / OVERRIDE_FILE).exists()


def has_any_recording(directory: Path) -> bool:
    """A recording of conversations, or of embedding calls only (a retrieval step's index)."""
    return has_recording(directory) or (directory / EMBEDDINGS_LOG).exists()


def rerecord_command(config: EndpointConfig) -> str:
    """The command a mismatch report names to re-record ``config``'s recording (the fixture's own, else
    ``serve``'s)."""
    return config.rerecord or f"dsh-replay serve {config.directory} --record rewrite --upstream URL"


def plan_for(config: EndpointConfig) -> Plan:
    """The scenario's plan for the mode and what the directory holds: ``REPLAY`` (``none``, or ``once``
    with a recording), ``EPISODES`` (``new_episodes`` with one), ``CHANGED`` (``changed`` with one) or
    ``RECORD`` (module doc). A recording of embedding calls alone is a recording."""
    return scenario_plan(config.record, recorded=has_any_recording(config.directory), update=False)


def upstream_keys(config: EndpointConfig) -> dict[str, tuple[str, str | None]]:
    """Format path -> ``(variable, key)``: the key sent upstream with a call of that format, and the
    variable it comes from (:class:`EndpointConfig`'s ``api_key``/``api_key_env``)."""
    out: dict[str, tuple[str, str | None]] = {}
    for path, fmt in FORMATS.items():
        # the first of the format's variables that is set (each SDK's order), else its first
        names = (config.api_key_env,) if config.api_key_env else fmt.key_envs
        env = next((n for n in names if os.environ.get(n)), names[0])
        key = config.api_key if config.api_key is not None else os.environ.get(env)
        out[path] = (env, key.strip() if key else None)
    return out


def unset_keys(config: EndpointConfig, keys: Mapping[str, tuple[str, str | None]]) -> str:
    """The warning of a recording with no upstream key at all (every variable it reads unset), else
    ``""``: its calls go upstream without credentials, which a local provider may take and a hosted one
    answers 401. A key set for one API only is not warned of (an agent speaks one API)."""
    if config.api_key is not None or any(key for _env, key in keys.values()):
        return ""
    apis: dict[str, list[str]] = {}
    for path, (env, _key) in keys.items():
        apis.setdefault(env, []).append(path)
    names = "; ".join(f"${env} ({', '.join(paths)})" for env, paths in apis.items())
    return (
        f"warning: recording with no upstream key: {names} not set in {config.key_holder}'s "
        "environment, so every call goes upstream without one (a local provider may need none). The key "
        f"belongs in {config.key_holder}'s environment: the agent's own key is never forwarded"
    )


__all__ = [
    "ACCEPT_UNUSED",
    "EndpointConfig",
    "EndpointConfigError",
    "ListenError",
    "check_directory",
    "has_any_recording",
    "has_recording",
    "plan_for",
    "rerecord_command",
    "unset_keys",
    "upstream_keys",
]
