"""The body of the ``dsh_endpoint`` pytest fixture (registered by ``plugin.py``).

The fixture starts an endpoint for the test, points the SDKs of every registered format (and any
subprocess the test starts) at it with their base-URL variables in their forms
(``llm/wire/registry.py``: ``OPENAI_BASE_URL`` and ``OPENAI_API_BASE`` ``http://127.0.0.1:PORT/v1``;
``ANTHROPIC_BASE_URL``, ``ANTHROPIC_API_BASE`` and ``GOOGLE_GEMINI_BASE_URL`` the same without ``/v1``)
and a dummy key in each key variable (``OPENAI_API_KEY``, ``ANTHROPIC_API_KEY``, ``GEMINI_API_KEY``,
``GOOGLE_API_KEY``), and fails the test with the endpoint's report, once: the test's call phase reports
a problem of the traffic (a request that did not match, in place of the SDK's error for the endpoint's
400) or a recorded call left unused (:func:`call_report`, run by ``own_agent``'s ``pytest_runtest_call``
wrapper), and the teardown only what came up after it (a recording that cannot be written). An endpoint
that cannot start (no upstream to record from, a recording ``validate`` flags) is the setup's one-line
error. A recording that went well says where it went in the run's summary (its notes, as
``user_properties`` of the teardown report). The recording directory is ``<test file
dir>/recordings/<module>/<test name>/`` unless ``@pytest.mark.dsh_recording("DIR")`` names one (relative
to the test file's directory); the marker's ``allow_unused=True`` lets recorded calls go unused, its
``mask=[REGEX, ...]`` masks volatile values in the request check (with ``--dsh-mask``, ini ``dsh_mask``
and ``pytest_dsh_masks``), its ``mcp={NAME: URL}`` records and replays streamable HTTP MCP servers under
``/mcp/NAME`` (``EndpointHandle.mcp_url``; docs/mcp.md), its ``allow_origin=[ORIGIN, ...]`` serves
requests of a browser app from those origins (with ``--dsh-allow-origin`` and ini ``dsh_allow_origin``;
docs/ endpoint-safety.md). Options: ``--dsh-record``, ``--dsh-upstream URL`` (ini ``dsh_upstream``),
``--dsh-backend``, ``--dsh-match-on``, ``--dsh-mask``, ``--dsh-allow-origin``; the upstream key of each
format is read from its provider's variable (``OPENAI_API_KEY``, ``ANTHROPIC_API_KEY``,
``GEMINI_API_KEY`` or ``GOOGLE_API_KEY``), or from ini ``dsh_api_key_env`` for every format, before the
dummies replace them."""

from __future__ import annotations

import os
import re
import shlex
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest
from msgspec import Struct, field

from ..errors import HarnessError
from ..itemreport import ItemReport, endpoint_note_properties, recording_properties
from ..llm.wire.registry import key_variables, sdk_environment
from ..modes import Backend, RecordMode
from .server import Endpoint, EndpointConfig, EndpointConfigError, EndpointOutcome, EndpointThread

#: The marker naming a test's recording directory.
MARKER = "dsh_recording"
#: How a ``dsh_endpoint`` test allows a browser app's origin, as a refusal names it.
ORIGIN_FLAG = (
    "--dsh-allow-origin ORIGIN, ini dsh_allow_origin or @pytest.mark.dsh_recording(allow_origin=[ORIGIN])"
)
#: What the test and its subprocesses get as the API key (the upstream key never leaves the endpoint).
DUMMY_KEY = "dsh-replay-endpoint-dummy-key"


class EndpointHandle(Struct):
    """What the ``dsh_endpoint`` fixture yields.

    Attributes:
        base_url: ``http://127.0.0.1:PORT/v1`` (also in ``OPENAI_BASE_URL``; without ``/v1`` in
            ``ANTHROPIC_BASE_URL``).
        directory: the test's recording directory.
        plan: ``replay``, ``record`` or ``episodes``.
        endpoint: the running :class:`~.server.Endpoint` (its ``binder`` holds the conversations).
    """

    base_url: str
    directory: Path
    plan: str
    endpoint: Endpoint

    def mcp_url(self, name: str) -> str:
        """The URL of the streamable HTTP MCP server ``name`` of the marker's ``mcp=`` (docs/mcp.md)."""
        return f"{self.base_url.removesuffix('/v1')}/mcp/{name}"


def check_marker(marker: pytest.Mark | None, nodeid: str) -> None:
    """Refuse a ``dsh_recording`` marker the fixture would misread: more than one positional argument,
    a directory that is not a string or path, a keyword other than ``allow_unused``, ``record_on_error``,
    ``mask``, ``mcp`` and ``allow_origin``, an ``allow_unused`` or ``record_on_error`` that is not
    ``True``/``False`` (``"no"`` would allow), a ``mask`` that is not a list (or tuple) of regex strings
    (a bare string would be read letter by letter), or an ``allow_origin`` that is not a list of
    origins (``scheme://host[:port]``).

    Raises:
        EndpointConfigError: naming the marker, the test and what is wrong.
    """
    if marker is None:
        return
    where = f"@pytest.mark.{MARKER} of {nodeid}"
    if len(marker.args) > 1:
        raise EndpointConfigError(
            f"{where}: takes one directory, got {len(marker.args)} positional arguments"
        )
    if marker.args and not isinstance(marker.args[0], str | os.PathLike):
        raise EndpointConfigError(
            f"{where}: the directory must be a string or a path, got {marker.args[0]!r}"
        )
    unknown = sorted(set(marker.kwargs) - {"allow_unused", "record_on_error", "mask", "mcp", "allow_origin"})
    if unknown:
        raise EndpointConfigError(
            f"{where}: unknown keyword {unknown[0]!r} (it takes allow_unused=True|False, "
            "record_on_error=True|False, mask=[REGEX, ...], mcp={NAME: URL}, allow_origin=[ORIGIN, ...])"
        )
    origins = marker.kwargs.get("allow_origin", [])
    if not isinstance(origins, list | tuple) or not all(isinstance(o, str) for o in origins):
        raise EndpointConfigError(
            f"{where}: allow_origin must be a list of origins (strings such as 'http://localhost:5173'), "
            f"got {origins!r}"
        )
    from .guard import normalize_origin

    for origin in origins:
        try:
            normalize_origin(origin)
        except HarnessError as exc:
            raise EndpointConfigError(f"{where}: allow_origin: {exc.message}") from None
    servers = marker.kwargs.get("mcp", {})
    if not isinstance(servers, dict) or not all(isinstance(u, str) for u in servers.values()):
        raise EndpointConfigError(f"{where}: mcp must be a dict of server names to URLs, got {servers!r}")
    from ..mcp.http import parse_mcp_option

    try:
        parse_mcp_option([f"{name}={url}" for name, url in servers.items()], option=f"{where}: mcp=")
    except HarnessError as exc:
        raise EndpointConfigError(exc.message) from None
    mask = marker.kwargs.get("mask", [])
    if not isinstance(mask, list | tuple) or not all(isinstance(m, str) for m in mask):
        raise EndpointConfigError(
            f"{where}: mask must be a list of regular expressions (strings), got {mask!r}"
        )
    for flag in ("allow_unused", "record_on_error"):
        if not isinstance(marker.kwargs.get(flag, False), bool):
            raise EndpointConfigError(f"{where}: {flag} must be True or False, got {marker.kwargs[flag]!r}")


def recording_dir(request: pytest.FixtureRequest) -> Path:
    """The test's recording directory (module doc)."""
    base = Path(str(request.node.path)).parent
    marker = request.node.get_closest_marker(MARKER)
    if marker is not None and marker.args:
        path = Path(str(marker.args[0]))
        return path if path.is_absolute() else base / path
    module = Path(str(request.node.path)).stem
    name = re.sub(r"[^A-Za-z0-9_.\-\[\]]+", "_", request.node.name)
    return base / "recordings" / module / name


def rerecord_command(config: pytest.Config, nodeid: str, *, upstream: bool = True) -> str:
    """The command that re-records the test ``nodeid`` (a node id, relative to the rootdir), to be run
    where pytest was invoked: the test's path relative to the invocation directory, as pytest's own
    report lines name it, shell-quoted. ``upstream``: whether the test calls a model (it uses
    ``dsh_endpoint``), so that a rewrite needs ``--dsh-upstream URL``; a test using only ``dsh_mcp``
    records without one.

    Computed here rather than by ``Config.cwd_relative_nodeid``, whose argument changed from a string
    to a node-id object in pytest 9.2.
    """
    path, sep, rest = nodeid.partition("::")
    where = os.path.relpath(config.rootpath / path, config.invocation_params.dir) if path else path
    test = shlex.quote(where + sep + rest)
    return f"pytest {test} --dsh-record=rewrite" + (" --dsh-upstream URL" if upstream else "")


def accept_unused(marker: pytest.Mark | None) -> str:
    """The marker that lets the test's recorded calls go unused, as the test would write it (its
    recording directory kept)."""
    args = [repr(a) for a in (marker.args[:1] if marker is not None else ())]
    return f"@pytest.mark.{MARKER}({', '.join([*args, 'allow_unused=True'])})"


def endpoint_fixture(
    request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch
) -> Iterator[EndpointHandle]:
    """Start the test's endpoint, patch the environment, yield the handle, fail at teardown on problems."""
    from ..options import match_on as _match_on
    from ..options import run_masks

    config = request.config
    mode = RecordMode(config.getoption("dsh_record"))
    upstream = config.getoption("dsh_upstream") or config.getini("dsh_upstream") or None
    key_env = config.getini("dsh_api_key_env") or None  # None: each format's provider variable
    backend_name = config.getoption("dsh_backend") or config.getini("dsh_backend") or Backend.JSONL
    backend = Backend.SQLITE if backend_name == Backend.SQLITE.value else Backend.JSONL
    marker = request.node.get_closest_marker(MARKER)
    try:
        check_marker(marker, request.node.nodeid)
    except EndpointConfigError as exc:
        pytest.fail(f"dsh_endpoint: error [{exc.code}]: {exc.message}", pytrace=False)
    options: dict[str, Any] = dict(marker.kwargs) if marker is not None else {}
    directory = recording_dir(request)
    try:
        masks = run_masks(
            config, request.node.ihook, options.get("mask", ()), where=f"@pytest.mark.{MARKER}(mask=...)"
        )
    except HarnessError as exc:  # a marker's or a hook's regex that does not compile
        pytest.fail(f"dsh_endpoint: error [{exc.code}]: {exc.message}", pytrace=False)
    request.node.user_properties += recording_properties(directory)  # the report's link to it
    endpoint_config = EndpointConfig(
        directory,
        record=mode,
        upstream=upstream,
        api_key_env=key_env,
        backend=backend,
        match_on=_match_on(config),
        allow_unused=bool(options.get("allow_unused", False)),
        record_on_error=bool(options.get("record_on_error", False)),
        accept_flag="@pytest.mark.dsh_recording(record_on_error=True)",
        masks=masks,
        mcp=dict(options.get("mcp", {})),
        allow_origins=(
            *config.getoption("dsh_allow_origin"),
            *(o for o in config.getini("dsh_allow_origin") if str(o).strip()),
            *options.get("allow_origin", ()),
        ),
        origin_flag=ORIGIN_FLAG,
        rerecord=rerecord_command(config, request.node.nodeid),
        subject="the test",
        cwd=str(config.rootpath),
        upstream_flag="--dsh-upstream URL or ini dsh_upstream",
    )
    thread = EndpointThread(endpoint_config, accept_unused=accept_unused(marker))
    try:
        url = thread.start()
    except HarnessError as exc:  # bad input or configuration: its message, not the fixture's traceback
        refused: HarnessError | None = exc
    else:
        refused = None
    if refused is not None:  # outside the except: no "during handling of the above exception" chain
        pytest.fail(f"dsh_endpoint: error [{refused.code}]: {refused.message}", pytrace=False)
    run = EndpointRun(thread, directory, bool(config.getoption("update_snapshots", default=False)))
    request.node.stash[RUN] = run
    # each SDK's base-URL variable in its form (the Anthropic and Gemini SDKs append the version
    # themselves), and a dummy key in every key variable: the agent's key is never forwarded
    for env, value in sdk_environment(url.removesuffix("/v1")).items():
        monkeypatch.setenv(env, value)
    for env in key_variables():
        monkeypatch.setenv(env, DUMMY_KEY)
    try:
        yield EndpointHandle(url, directory, thread.endpoint.plan.label, thread.endpoint)
    finally:
        try:
            outcome = thread.stop(failed=request.node.stash.get(FAILED, ""))
        except BaseException:
            if run.write_mcp is not None:
                run.write_mcp(None)  # nothing written: the locks go
            raise
        finally:
            del request.node.stash[RUN]
    if run.write_mcp is not None:  # the MCP sessions of the run, kept with its conversations or not
        outcome.notes += run.write_mcp(thread.endpoint.masks_keep_mcp(outcome) if outcome.ok else None)
    served = thread.endpoint.recorded_calls_served()
    if served or outcome.rerecorded:  # the report's "calls served" and --dsh-record=changed's marks
        request.node.user_properties += ItemReport(served=served, rerecorded=outcome.rerecorded).properties()
    if outcome.ok and thread.endpoint.recorder is not None:  # where the recording went, in the summary
        request.node.user_properties += endpoint_note_properties(outcome.notes)
        # the files the run wrote, for the report's page (the terminal summary says them in the notes:
        # it reads written files from the call phase's report, and this is the teardown's)
        wrote = ItemReport(written=list(map(str, outcome.written)), removed=list(map(str, outcome.removed)))
        request.node.user_properties += wrote.properties()
    fresh = [p for p in outcome.problems if p not in run.reported]
    if fresh:  # what the test's own report did not say: problems that came up at the end
        outcome.problems = fresh
        pytest.fail(run.report(outcome), pytrace=False)


class EndpointRun(Struct):
    """The fixture's endpoint while its test runs, the problems the test's report already said, and
    the write of the test's ``dsh_mcp`` sessions, done after the model's (:func:`join_run`)."""

    thread: EndpointThread
    directory: Path
    update: bool
    reported: set[str] = field(default_factory=set)
    write_mcp: Any = None

    def report(self, outcome: EndpointOutcome, raised: BaseException | None = None) -> str:
        """The endpoint's report (problems, notes); ``raised``: what the test raised, as one line."""
        report = outcome.report()
        if self.update:
            # syrupy's flag rewrites what the agent writes; an endpoint recording is what the model
            # answered, so an update could only pair the changed requests with the old answers
            report += (
                "\n--snapshot-update does not rewrite endpoint recordings (they hold the model's answers): "
                "re-record with --dsh-record=rewrite and an upstream"
            )
        if raised is not None:
            report += "\n" + stopped_at(raised, outcome.problems)
        return report


#: The running endpoint of a test that uses the fixture (``item.stash``).
RUN = pytest.StashKey[EndpointRun]()
#: What the test using ``dsh_endpoint`` or ``dsh_mcp`` raised, as one line (:func:`test_failed`).
FAILED = pytest.StashKey[str]()
#: The test failed before its end: it raised, or it was failed with the endpoint's problems
#: (:func:`unused_counts`).
STOPPED = pytest.StashKey[bool]()


def unused_counts(item: pytest.Item) -> bool:
    """Whether recorded calls (and recorded MCP requests and sessions) the test left unused fail it: the
    one rule of ``dsh_endpoint`` and ``dsh_mcp``. Only a test that ran to its end without failing is
    failed for them: a test that raised, or that was failed with a request the endpoint refused, stopped
    before it could make them, and its own failure stands alone (docs/endpoint.md)."""
    return not item.stash.get(STOPPED, False)


def join_run(item: pytest.Item, changed: bool, write: Callable[[bool | None], list[str]]) -> bool:
    """Record the test's MCP sessions with its model conversations as one run: masks keep the recorded
    bytes of both or of neither (docs/mcp.md, re-recording). ``dsh_mcp``'s teardown (which runs first)
    says whether its sessions differ beyond the masks (``changed``: then the conversations are compared
    without them) and hands its write over: ``write(masked)`` runs after the conversations are written,
    with the masks only when no conversation was rewritten (``None``: the endpoint's run had problems,
    nothing is written), and returns its notes. Returns ``False`` (nothing handed over) when the
    endpoint of the test does not record."""
    run = item.stash.get(RUN, None)
    if run is None or run.thread.endpoint.recorder is None:
        return False
    if changed:
        run.thread.endpoint.keep_by_masks = False
    run.write_mcp = write
    return True


def call_report(item: pytest.Item, raised: Exception | None, mcp: Sequence[str] = ()) -> str | None:
    """What the test's call phase reports for the endpoint and its MCP servers, or ``None`` to leave
    its outcome alone; the one rule of ``dsh_endpoint`` and ``dsh_mcp``.

    * problems of the traffic (a request that did not match, an exhausted script, an upstream
      refusal; ``mcp``: the ``dsh_mcp`` relays' so far, e.g. a tool call that did not match): the
      report, once, with a line naming what the test raised (most often the SDK raising the
      endpoint's HTTP 400 or the relay's JSON-RPC error for that same problem) instead of the SDK's
      traceback;
    * recorded calls left unused: the report when the test passed; when it raised, its own error
      stands alone (it stopped before it could make them);
    * either way the problems are marked as said, so the teardown does not repeat them (the caller
      marks ``mcp``'s: ``mcp.fixture.served_so_far``).
    """
    run = item.stash.get(RUN, None)
    served, unused = run.thread.problems_so_far() if run is not None else ([], [])
    mcp = list(mcp)
    if raised is not None or served or mcp:
        item.stash[STOPPED] = True
    if run is not None and not unused_counts(item):
        run.reported.update(unused)
        unused = []
    if raised is not None and not served and not mcp:
        return None
    problems = served or unused
    if not problems and not mcp:
        return None
    parts: list[str] = []
    if problems and run is not None:
        run.reported.update(problems)
        endpoint = run.thread.endpoint
        _report_diffs(item, endpoint)
        outcome = EndpointOutcome(endpoint.plan.label, list(problems))
        if endpoint.recorder is not None:
            outcome.notes.append(endpoint.nothing_written())
        parts.append(run.report(outcome, None if mcp else raised))
    if mcp:
        parts += [f"dsh_mcp: {len(mcp)} problem(s)", *mcp]
        if raised is not None:
            parts.append(stopped_at(raised, [*problems, *mcp]))
    return "\n".join(parts)


def stopped_at(raised: BaseException, problems: Sequence[str]) -> str:
    """The report's line naming what the test raised: the client's error for one of ``problems``
    (the SDK raising the endpoint's or the relay's own error answer: the report is its message), or
    the first line of something else. In an exception group (an async SDK's task group), the error
    of its own that holds one of ``problems`` is named."""
    for leaf in [raised, *_leaves(raised)]:
        text = str(leaf)
        if any(p.splitlines()[0][:80] in text for p in problems if p):
            name = f"{type(leaf).__module__.split('.')[0]}.{type(leaf).__qualname__}"
            return f"(the test stopped at {name}: the client's error for the answer above)"
    name = f"{type(raised).__module__.split('.')[0]}.{type(raised).__qualname__}"
    text = str(raised)
    first = next(iter(text.splitlines()), "")
    first = first if len(first) <= 200 else first[:197] + "..."
    return f"(the test stopped at {name}: {first})"


def test_failed(item: pytest.Item, raised: BaseException) -> None:
    """Note (in ``item.stash[FAILED]``) that the test using ``dsh_endpoint`` or ``dsh_mcp`` failed with
    ``raised`` (not for the endpoint's own problems: :func:`call_report` says those). Its run is then
    not written into the recording directory unless ``record_on_error=True``: the endpoint keeps it in
    ``.dsh-kept`` (:meth:`~.server.Endpoint.stop`), ``dsh_mcp`` writes nothing. A skip or an
    ``xfail()`` call is no failure."""
    if isinstance(raised, pytest.skip.Exception | pytest.xfail.Exception):
        return
    item.stash[STOPPED] = True
    name = type(raised).__qualname__
    first = next(iter(str(raised).splitlines()), "")
    first = first if len(first) <= 120 else first[:117] + "..."
    item.stash[FAILED] = f"{name}: {first}" if first else name


def _leaves(raised: BaseException) -> list[BaseException]:
    """The exceptions an exception group holds, at every depth (``[]`` for another exception)."""
    if not isinstance(raised, BaseExceptionGroup):
        return []
    return [leaf for inner in raised.exceptions for leaf in [inner, *_leaves(inner)]]


def _report_diffs(item: pytest.Item, endpoint: Any) -> None:
    """The requests that differed from the recording, as the item's report (``--dsh-report`` shows
    them side by side), with the command that re-records."""
    replay = endpoint.replay
    if replay is None:
        return
    from ..replay.errors import RequestMismatchError
    from ..replay.model import rerecord_commands
    from ..replay.requests import request_diffs

    # a first request that matched no recorded conversation is a failure, not a (bound) mismatch
    found = [*replay.mismatches, *(e for e in replay.failures if isinstance(e, RequestMismatchError))]
    mismatches = list({id(m): m for m in found}.values())
    if not mismatches:
        return

    report = ItemReport(
        diffs=[d for m in mismatches for d in request_diffs(m)],
        commands=rerecord_commands(m.rerecord for m in mismatches if m.rerecord),
    )
    item.user_properties += report.properties()


__all__ = [
    "DUMMY_KEY",
    "FAILED",
    "MARKER",
    "RUN",
    "STOPPED",
    "EndpointHandle",
    "EndpointRun",
    "accept_unused",
    "call_report",
    "endpoint_fixture",
    "join_run",
    "recording_dir",
    "rerecord_command",
    "stopped_at",
    "test_failed",
    "unused_counts",
]
