"""The body of the ``dsh_endpoint`` pytest fixture (registered by ``plugin.py``).

The fixture starts an endpoint for the test, points the SDKs of every registered format (and any
subprocess the test starts) at it with their base-URL variables in their forms
(``llm/wire/registry.py``: ``OPENAI_BASE_URL`` and ``OPENAI_API_BASE`` ``http://127.0.0.1:PORT/dsh-TOKEN/v1``,
``/dsh-TOKEN`` the endpoint's path prefix (``loopserver``);
``ANTHROPIC_BASE_URL``, ``ANTHROPIC_API_BASE`` and ``GOOGLE_GEMINI_BASE_URL`` the same without ``/v1``)
and a dummy key in one key variable per API (``OPENAI_API_KEY``, ``ANTHROPIC_API_KEY``,
``GEMINI_API_KEY``; ``GOOGLE_API_KEY`` removed: ``registry.client_key_variables``), and fails the test
with the endpoint's report, once: the test's call phase reports a problem of the traffic (a request that
did not match, in place of the SDK's error for the endpoint's 400) or a recorded call left unused
(:func:`call_report`, run by ``own_agent``'s ``pytest_runtest_call`` wrapper), and the teardown only
what came up after it (a recording that cannot be written). An endpoint that cannot start (no upstream
to record from, a recording ``validate`` flags) is the setup's one-line error. A recording that went
well says where it went in the run's summary (its notes, as ``user_properties`` of the teardown report).
The recording directory is ``<test file dir>/recordings/<module>/<test name>/`` unless
``@pytest.mark.dsh_recording("DIR")`` names one (relative to the test file's directory); the marker's
``allow_unused=True`` lets recorded calls go unused, its ``mask=[REGEX, ...]`` masks volatile values in
the request check (with ``--dsh-mask``, ini ``dsh_mask`` and ``pytest_dsh_masks``), its ``mcp={NAME:
URL}`` records and replays streamable HTTP MCP servers under ``/mcp/NAME`` (``EndpointHandle.mcp_url``;
docs/mcp.md), its ``allow_origin=[ORIGIN, ...]`` serves requests of a browser app from those origins
(with ``--dsh-allow-origin`` and ini ``dsh_allow_origin``; docs/ endpoint-safety.md). Options:
``--dsh-record``, ``--dsh-upstream URL`` (ini ``dsh_upstream``), ``--dsh-backend``, ``--dsh-match-on``,
``--dsh-mask``, ``--dsh-allow-origin``; the upstream key of each format is read from its provider's
variable (``OPENAI_API_KEY``, ``ANTHROPIC_API_KEY``, ``GEMINI_API_KEY`` or ``GOOGLE_API_KEY``), or from
ini ``dsh_api_key_env`` for every format, before the dummies replace them."""

from __future__ import annotations

import warnings
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest
from msgspec import Struct, field

from ..itemreport import ItemReport, endpoint_note_properties, recording_properties
from ..llm.wire.registry import client_key_variables, sdk_environment
from ..modes import Backend, RecordMode
from ..testrun import (
    FAILED,
    MARKER,
    RUN,
    STOPPED,
    accept_unused,
    checked_marker,
    join_run,
    marker_masks,
    recording_dir,
    refused_setup,
    rerecord_command,
    sharing_tests,
    stopped_at,
    test_failed,
    unused_counts,
)
from .answer import ABANDONED, CLIENT_GONE
from .server import Endpoint, EndpointConfig, EndpointOutcome, EndpointThread, Mount
from .writing import red_requests

#: How a ``dsh_endpoint`` test allows a browser app's origin, as a refusal names it.
ORIGIN_FLAG = (
    "--dsh-allow-origin ORIGIN, ini dsh_allow_origin or @pytest.mark.dsh_recording(allow_origin=[ORIGIN])"
)
#: What the test and its subprocesses get as the API key (the upstream key never leaves the endpoint).
DUMMY_KEY = "dsh-replay-endpoint-dummy-key"


class DshEndpointWarning(UserWarning):
    """What the test's endpoint says at its start (its ``start_notes``, the lines ``dsh-replay serve``
    prints on stderr): a recording with no upstream key (``endpoint.config.unset_keys``), temporary
    stores of killed recording runs; and at its end, a recording run no request reached (nothing
    written, so the next replay cannot run: :func:`_report_run`). Filter it as any warning
    (``-W ignore::pytest_dsh_replay.endpoint.fixture.DshEndpointWarning``)."""


class EndpointHandle(Struct):
    """What the ``dsh_endpoint`` fixture yields.

    Attributes:
        base_url: ``http://127.0.0.1:PORT/dsh-TOKEN/v1`` (the endpoint's path prefix: ``loopserver``;
            also in ``OPENAI_BASE_URL``; without ``/v1`` in
            ``ANTHROPIC_BASE_URL``).
        directory: the test's recording directory.
        plan: ``replay``, ``record``, ``episodes`` or ``changed`` (the label of
            :class:`~pytest_dsh_replay.recording.plan.Plan`).
        endpoint: the running :class:`~.server.Endpoint` (its ``binder`` holds the conversations).
    """

    base_url: str
    directory: Path
    plan: str
    endpoint: Endpoint

    def mcp_url(self, name: str) -> str:
        """The URL of the streamable HTTP MCP server ``name`` of the marker's ``mcp=`` (docs/mcp.md)."""
        return f"{self.base_url.removesuffix('/v1')}/mcp/{name}"


def endpoint_fixture(
    request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch, mounts: Sequence[Mount] = ()
) -> Iterator[EndpointHandle]:
    """Start the test's endpoint, patch the environment, yield the handle, fail at teardown on problems.
    ``mounts``: the routes the composer serves beside the model's (:class:`~.server.Mount`: the MCP
    servers of the marker's ``mcp=``, ``mcp.http.mcp_routes``)."""
    marker = checked_marker(request, "dsh_endpoint")
    masks = marker_masks(request, marker, "dsh_endpoint")
    directory = recording_dir(request)
    request.node.user_properties += recording_properties(directory)  # the report's link to it
    endpoint_config = _endpoint_config(request, marker, masks, directory)
    thread = EndpointThread(endpoint_config, accept_unused=accept_unused(marker), mounts=mounts)
    url = refused_setup("dsh_endpoint", thread.start)
    for note in thread.endpoint.start_notes:  # serve's start-up lines, in pytest's warnings summary
        warnings.warn(DshEndpointWarning(f"dsh_endpoint: {note.removeprefix('warning: ')}"), stacklevel=2)
    run = EndpointRun(thread, directory, bool(request.config.getoption("update_snapshots", default=False)))
    request.node.stash[RUN] = run
    # each SDK's base-URL variable in its form (the Anthropic and Gemini SDKs append the version
    # themselves), and a dummy key in one key variable per API, the others removed: the agent's key is
    # never forwarded
    for env, value in sdk_environment(url.removesuffix("/v1")).items():
        monkeypatch.setenv(env, value)
    given, removed = client_key_variables()
    for env in given:
        monkeypatch.setenv(env, DUMMY_KEY)
    for env in removed:
        monkeypatch.delenv(env, raising=False)
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
    _report_run(request.node, run, outcome)


def _endpoint_config(
    request: pytest.FixtureRequest, marker: pytest.Mark | None, masks: Any, directory: Path
) -> EndpointConfig:
    """The test's endpoint as its options, ini values and marker configure it (module doc)."""
    from ..options import backend_option, match_on

    config = request.config
    options: dict[str, Any] = dict(marker.kwargs) if marker is not None else {}
    backend_name = backend_option(config)
    return EndpointConfig(
        directory,
        record=RecordMode(config.getoption("dsh_record")),
        upstream=config.getoption("dsh_upstream") or config.getini("dsh_upstream") or None,
        api_key_env=config.getini("dsh_api_key_env") or None,  # None: each format's provider variable
        backend=Backend.SQLITE if backend_name == Backend.SQLITE.value else Backend.JSONL,
        match_on=match_on(config),
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
        rerecord=rerecord_command(config, request.node.nodeid, sharing=sharing_tests(request.node)),
        subject="the test",
        cwd=str(config.rootpath),
        upstream_flag="--dsh-upstream URL or ini dsh_upstream",
    )


def _report_run(item: pytest.Item, run: EndpointRun, outcome: EndpointOutcome) -> None:
    """Teardown's report of the endpoint's run: the ``dsh_mcp`` sessions written with it, what the
    item's report shows (calls served, files written, the summary's notes), and the problems the test's
    own report did not say, as the teardown's failure."""
    endpoint = run.thread.endpoint
    if run.write_mcp is not None:  # the MCP sessions of the run, kept with its conversations or not
        outcome.notes += run.write_mcp(endpoint.masks_keep_mcp(outcome) if outcome.ok else None)
    served = endpoint.recorded_calls_served()
    if served or outcome.rerecorded:  # the report's "calls served" and --dsh-record=changed's marks
        item.user_properties += ItemReport(served=served, rerecorded=outcome.rerecorded).properties()
    if outcome.ok and endpoint.recorder is not None:  # where the recording went, in the summary
        item.user_properties += endpoint_note_properties(outcome.notes)
        # the files the run wrote, for the report's page (the terminal summary says them in the notes:
        # it reads written files from the call phase's report, and this is the teardown's)
        wrote = ItemReport(written=list(map(str, outcome.written)), removed=list(map(str, outcome.removed)))
        item.user_properties += wrote.properties()
    if outcome.no_request:
        # a warning, not the test's failure: as vcrpy's record mode "once" with no request, the test's
        # outcome is its own (a test may pass for reasons of its own), but a recording run that wrote
        # nothing leaves a test its next replay cannot run, so pytest's warnings summary says why
        warnings.warn(DshEndpointWarning(f"dsh_endpoint: {outcome.no_request}"), stacklevel=2)
    fresh = [p for p in outcome.problems if p not in run.reported]
    if item.stash.get(FAILED, ""):
        # a call whose client left because the test raised (an SDK's timeout, an exception mid-stream)
        # is the test's failure, already reported: its own error stands alone, as for unused calls
        fresh = [p for p in fresh if not p.endswith((ABANDONED, CLIENT_GONE))]
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
    mcp = list(mcp)
    problems = _call_problems(item, run, raised, mcp)
    if problems is None:
        return None
    parts: list[str] = []
    if problems and run is not None:
        parts.append(_endpoint_report(item, run, problems, None if mcp else raised))
    if mcp:
        parts += [f"dsh_mcp: {len(mcp)} problem(s)", *mcp]
        if raised is not None:
            parts.append(stopped_at(raised, [*problems, *mcp]))
    return "\n".join(parts)


def _call_problems(item: pytest.Item, run: Any, raised: Exception | None, mcp: list[str]) -> list[str] | None:
    """The endpoint's problems the call phase reports: those of the traffic, else the recorded calls
    left unused when they count (:func:`~..testrun.unused_counts`; else marked as said); ``None``: the
    outcome is left alone (the test's own failure, or nothing to say). A test that raised or met
    problems is marked stopped."""
    served, unused = run.thread.problems_so_far() if run is not None else ([], [])
    said = bool(served or mcp)
    if raised is not None or said:
        item.stash[STOPPED] = True
    unused = _counted(item, run, unused)
    if raised is not None and not said:
        return None
    problems: list[str] = served or unused
    return problems if problems or mcp else None


def _counted(item: pytest.Item, run: Any, unused: list[str]) -> list[str]:
    """The recorded calls left ``unused`` when they fail the test (:func:`~..testrun.unused_counts`);
    otherwise none, and they are marked as said (the teardown does not repeat them)."""
    if run is not None and not unused_counts(item):
        run.reported.update(unused)
        return []
    return unused


def _endpoint_report(
    item: pytest.Item, run: EndpointRun, problems: list[str], raised: Exception | None
) -> str:
    """The endpoint's part of the call phase's report, its problems marked as said and its requests
    that differed in the item's report."""
    run.reported.update(problems)
    endpoint = run.thread.endpoint
    _report_diffs(item, endpoint)
    outcome = EndpointOutcome(endpoint.plan.label, list(problems))
    if endpoint.recorder is not None:
        outcome.notes.append(endpoint.nothing_written())
    return run.report(outcome, raised)


def _report_diffs(item: pytest.Item, endpoint: Any) -> None:
    """The requests that differed from the recording, as the item's report (``--dsh-report`` shows
    them side by side), with the command that re-records (``writing.red_requests``)."""
    diffs, commands = red_requests(endpoint.replay)
    if diffs or commands:
        item.user_properties += ItemReport(diffs=diffs, commands=commands).properties()


__all__ = [
    "DUMMY_KEY",
    "FAILED",
    "MARKER",
    "RUN",
    "STOPPED",
    "DshEndpointWarning",
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
