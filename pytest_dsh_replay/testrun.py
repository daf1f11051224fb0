"""The run of one test using ``dsh_endpoint``, ``dsh_mcp`` or both: what the two fixtures share, below
both (``endpoint.fixture``, ``mcp.fixture``), so neither imports the other.

* the ``@pytest.mark.dsh_recording`` marker: its one check (:func:`check_marker`), the recording
  directory it names (:func:`recording_dir`), and how a report spells it (:func:`accept_unused`) and the
  command that re-records the test (:func:`rerecord_command`);
* the test's outcome as both fixtures read it: what it raised (:data:`FAILED`, :func:`test_failed`,
  :func:`stopped_at`) and whether recorded calls it left unused fail it (:func:`unused_counts`);
* one run of both: ``dsh_mcp``'s sessions written after the endpoint's conversations (:func:`join_run`,
  the endpoint's run in :data:`RUN`).
"""

from __future__ import annotations

import os
import re
import shlex
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, TypeVar

import pytest

from .errors import HarnessError
from .loopback import normalize_origin, parse_mcp_option

T = TypeVar("T")

#: The marker naming a test's recording directory.
MARKER = "dsh_recording"
#: The marker's keywords, as its refusal lists them.
_KEYWORDS = (
    "allow_unused=True|False, record_on_error=True|False, mask=[REGEX, ...], mcp={NAME: URL}, "
    "allow_origin=[ORIGIN, ...]"
)


class MarkerError(HarnessError):
    """A ``dsh_recording`` marker the fixtures would misread (the endpoint's configuration code: the
    marker configures the test's endpoint and MCP servers)."""

    code = "ENDPOINT_CONFIG"


def _args_problem(args: Sequence[Any]) -> str | None:
    if len(args) > 1:
        return f"takes one directory, got {len(args)} positional arguments"
    if args and not isinstance(args[0], str | os.PathLike):
        return f"the directory must be a string or a path, got {args[0]!r}"
    if args and not str(args[0]):
        # Path("") is ".": the recording would be written among the test files
        return "the directory must not be empty (write '.' for the test file's own directory)"
    if args and "\0" in str(args[0]):
        return f"the directory must not hold a NUL byte, got {str(args[0])!r}"
    return None


def _origins_problem(origins: Any) -> str | None:
    if not isinstance(origins, list | tuple) or not all(isinstance(o, str) for o in origins):
        return (
            "allow_origin must be a list of origins (strings such as 'http://localhost:5173'), "
            f"got {origins!r}"
        )
    for origin in origins:
        try:
            normalize_origin(origin)
        except HarnessError as exc:
            return f"allow_origin: {exc.message}"
    return None


def _mask_problem(mask: Any) -> str | None:
    if not isinstance(mask, list | tuple) or not all(isinstance(m, str) for m in mask):
        return f"mask must be a list of regular expressions (strings), got {mask!r}"
    return None


def _flag_problem(name: str) -> Callable[[Any], str | None]:
    def problem(value: Any) -> str | None:
        return None if isinstance(value, bool) else f"{name} must be True or False, got {value!r}"

    return problem


def _mcp_problem(servers: Any) -> str | None:
    if not isinstance(servers, dict) or not all(isinstance(u, str) for u in servers.values()):
        return f"mcp must be a dict of server names to URLs, got {servers!r}"
    try:
        parse_mcp_option([f"{name}={url}" for name, url in servers.items()], option="mcp=")
    except HarnessError as exc:
        return exc.message
    return None


#: keyword -> why its value is refused (``None``: taken), in the order the check reports them
_VALUE_CHECKS: dict[str, Callable[[Any], str | None]] = {
    "allow_origin": _origins_problem,
    "mcp": _mcp_problem,
    "mask": _mask_problem,
    "allow_unused": _flag_problem("allow_unused"),
    "record_on_error": _flag_problem("record_on_error"),
}


def check_marker(marker: pytest.Mark | None, nodeid: str) -> None:
    """Refuse a ``dsh_recording`` marker the fixtures would misread: more than one positional argument,
    a directory that is not a string or path, is empty or holds a NUL byte, a keyword other than
    ``allow_unused``, ``record_on_error``, ``mask``, ``mcp`` and ``allow_origin``, an ``allow_unused``
    or ``record_on_error`` that is not ``True``/``False`` (``"no"`` would allow), a ``mask`` that is not
    a list (or tuple) of regex strings (a bare string would be read letter by letter), an ``mcp`` that
    is not ``{NAME: URL}`` of server names, or an ``allow_origin`` that is not a list of origins
    (``scheme://host[:port]``).

    Raises:
        MarkerError: ``ENDPOINT_CONFIG``, naming the marker, the test and what is wrong.
    """
    if marker is None:
        return
    problem = _args_problem(marker.args)
    unknown = sorted(set(marker.kwargs) - set(_VALUE_CHECKS))
    if problem is None and unknown:
        problem = f"unknown keyword {unknown[0]!r} (it takes {_KEYWORDS})"
    for key, check in _VALUE_CHECKS.items():
        if problem is None and key in marker.kwargs:
            problem = check(marker.kwargs[key])
    if problem is not None:
        raise MarkerError(f"@pytest.mark.{MARKER} of {nodeid}: {problem}")


def refused_setup(fixture: str, call: Callable[[], T]) -> T:
    """``call()``'s value; a :class:`~pytest_dsh_replay.errors.HarnessError` it raises (bad input or
    configuration) fails the setup of ``fixture`` with the error's one line, ``FIXTURE: error [CODE]:
    message``: no traceback, and raised outside the ``except``, so no "During handling of the above
    exception, another exception occurred" shows the message twice."""
    try:
        return call()
    except HarnessError as exc:
        refused = exc
    pytest.fail(f"{fixture}: error [{refused.code}]: {refused.message}", pytrace=False)


def checked_marker(request: pytest.FixtureRequest, fixture: str) -> pytest.Mark | None:
    """The test's ``dsh_recording`` marker, checked (:func:`check_marker`): a bad one fails the setup
    of ``fixture`` with its one-line error (:func:`refused_setup`)."""
    marker: pytest.Mark | None = request.node.get_closest_marker(MARKER)
    refused_setup(fixture, lambda: check_marker(marker, request.node.nodeid))
    return marker


def marker_masks(request: pytest.FixtureRequest, marker: pytest.Mark | None, fixture: str) -> Any:
    """The run's masks (``options.run_masks``: ``--dsh-mask``, ini ``dsh_mask``, ``pytest_dsh_masks`` and
    the marker's ``mask=``); a regex that does not compile fails the setup of ``fixture``."""
    from .options import run_masks

    mask = marker.kwargs.get("mask", ()) if marker is not None else ()
    where = f"@pytest.mark.{MARKER}(mask=...)"
    return refused_setup(fixture, lambda: run_masks(request.config, request.node.ihook, mask, where=where))


def recording_dir(request: pytest.FixtureRequest) -> Path:
    """The test's recording directory: the marker's (relative to the test file's directory), else
    ``<test file dir>/recordings/<module>/<test name>/``."""
    return _item_recording_dir(request.node)


def _item_recording_dir(item: pytest.Item) -> Path:
    """:func:`recording_dir` of ``item``."""
    base = Path(str(item.path)).parent
    marker = item.get_closest_marker(MARKER)
    if marker is not None and marker.args:
        path = Path(str(marker.args[0]))
        return path if path.is_absolute() else base / path
    module = Path(str(item.path)).stem
    name = re.sub(r"[^A-Za-z0-9_.\-\[\]]+", "_", item.name)
    return base / "recordings" / module / name


def sharing_tests(item: pytest.Item) -> list[str]:
    """The node ids of the other collected tests whose recording directory is ``item``'s (two tests
    given one ``@pytest.mark.dsh_recording`` directory), among those using :data:`_RECORDING_FIXTURES`;
    in collection order. A re-record of one of them replaces the recording the others replay."""
    by_dir = item.session.stash.get(_BY_DIR, None)
    if by_dir is None or by_dir[0] != len(item.session.items):  # once per run: a test per fixture setup
        tests: dict[Path, list[str]] = {}
        for other in item.session.items:
            if any(name in getattr(other, "fixturenames", ()) for name in _RECORDING_FIXTURES):
                tests.setdefault(_item_recording_dir(other), []).append(other.nodeid)
        by_dir = (len(item.session.items), tests)
        item.session.stash[_BY_DIR] = by_dir
    return [nodeid for nodeid in by_dir[1].get(_item_recording_dir(item), []) if nodeid != item.nodeid]


#: the fixtures that record into the test's recording directory
_RECORDING_FIXTURES = ("dsh_endpoint", "dsh_mcp")
#: the collected tests using a recording fixture, by recording directory (:func:`sharing_tests`), with
#: the count of collected items they were listed from
_BY_DIR = pytest.StashKey[tuple[int, dict[Path, list[str]]]]()


def rerecord_command(
    config: pytest.Config, nodeid: str, *, upstream: bool = True, sharing: Sequence[str] = ()
) -> str:
    """The command that re-records the test ``nodeid`` (a node id, relative to the rootdir), to be run
    where pytest was invoked: the test's path relative to the invocation directory, as pytest's own
    report lines name it, shell-quoted. ``upstream``: whether the test calls a model (it uses
    ``dsh_endpoint``), so that a rewrite needs ``--dsh-upstream URL`` unless the ini's ``dsh_upstream``
    gives it (the command then records from there, as pasted); a test using only ``dsh_mcp`` records
    without one. ``sharing``: the other tests of the same recording directory (:func:`sharing_tests`),
    re-recorded in the same command (and said so): a re-record of the test alone would replace the
    recording they replay.

    Computed here rather than by ``Config.cwd_relative_nodeid``, whose argument changed from a string
    to a node-id object in pytest 9.2.
    """

    def where(test: str) -> str:
        path, sep, rest = test.partition("::")
        relative = os.path.relpath(config.rootpath / path, config.invocation_params.dir) if path else path
        return shlex.quote(relative + sep + rest)

    flag = upstream and not config.getini("dsh_upstream")
    tests = " ".join(where(test) for test in (nodeid, *sharing))
    command = f"pytest {tests} --dsh-record=rewrite" + (" --dsh-upstream URL" if flag else "")
    if sharing:
        command += (
            f" (the recording directory is also {', '.join(where(test) for test in sharing)}'s: the "
            "tests are re-recorded together, each rewriting it in turn; the last one run writes what "
            "they all replay)"
        )
    return command


def accept_unused(marker: pytest.Mark | None) -> str:
    """The marker that lets the test's recorded calls go unused, as the test would write it (its
    recording directory kept)."""
    args = [repr(a) for a in (marker.args[:1] if marker is not None else ())]
    return f"@pytest.mark.{MARKER}({', '.join([*args, 'allow_unused=True'])})"


#: The running endpoint of a test that uses ``dsh_endpoint`` (``item.stash``; an
#: ``endpoint.fixture.EndpointRun``).
RUN = pytest.StashKey[Any]()
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


def test_failed(item: pytest.Item, raised: BaseException) -> None:
    """Note (in ``item.stash[FAILED]``) that the test using ``dsh_endpoint`` or ``dsh_mcp`` failed with
    ``raised`` (not for the endpoint's own problems: ``endpoint.fixture.call_report`` says those). Its
    run is then not written into the recording directory unless ``record_on_error=True``: the endpoint
    keeps it in ``.dsh-kept`` (``Endpoint.stop``), ``dsh_mcp`` writes nothing. A skip or an ``xfail()``
    call is no failure."""
    if isinstance(raised, pytest.skip.Exception | pytest.xfail.Exception):
        return
    item.stash[STOPPED] = True
    name = exception_name(type(raised))
    first = next(iter(str(raised).splitlines()), "")
    first = first if len(first) <= 120 else first[:117] + "..."
    item.stash[FAILED] = f"{name}: {first}" if first else name


def failed_by_problems(item: pytest.Item) -> None:
    """Note (as :func:`test_failed` does) that the call phase failed the test using ``dsh_endpoint`` or
    ``dsh_mcp`` with their problems (a request the endpoint refused, which the test caught): a failed
    test's run is not written as the recording either."""
    item.stash[STOPPED] = True
    item.stash.setdefault(FAILED, "failed with the problems of its requests, above")


def stopped_at(raised: BaseException, problems: Sequence[str]) -> str:
    """The report's line naming what the test raised: the client's error for one of ``problems``
    (the SDK raising the endpoint's or the relay's own error answer: the report is its message), or
    the first line of something else. In an exception group (an async SDK's task group), the error
    of its own that holds one of ``problems`` is named."""
    for leaf in [raised, *_leaves(raised)]:
        text = str(leaf)
        if any(p.splitlines()[0][:80] in text for p in problems if p):
            return (
                f"(the test stopped at {exception_name(type(leaf))}: the client's error for the answer above)"
            )
    name = exception_name(type(raised))
    text = str(raised)
    first = next(iter(text.splitlines()), "")
    first = first if len(first) <= 200 else first[:197] + "..."
    return f"(the test stopped at {name}: {first})"


def exception_name(kind: type[BaseException]) -> str:
    """The name a report gives an exception class: as the user imports it, the shortest of its module's
    packages that holds it under its name (``openai.BadRequestError``, ``google.genai.errors.ClientError``,
    ``aiohttp.ClientResponseError`` though defined in ``aiohttp.client_exceptions``), else its module's
    whole path; a builtin by its name alone (``ValueError``). Only modules already imported are looked
    in, through their ``__dict__`` (no lazy export is triggered)."""
    module, name = kind.__module__, kind.__qualname__
    if module == "builtins":
        return name
    parts = module.split(".")
    for end in range(1, len(parts) + 1):
        prefix = ".".join(parts[:end])
        found: object = sys.modules.get(prefix)
        for attr in name.split("."):
            found = vars(found).get(attr) if hasattr(found, "__dict__") else None
        if found is kind:
            return f"{prefix}.{name}"
    return f"{module}.{name}"


def _leaves(raised: BaseException) -> list[BaseException]:
    """The exceptions an exception group holds, at every depth (``[]`` for another exception)."""
    if not isinstance(raised, BaseExceptionGroup):
        return []
    return [leaf for inner in raised.exceptions for leaf in [inner, *_leaves(inner)]]


__all__ = [
    "FAILED",
    "MARKER",
    "RUN",
    "STOPPED",
    "MarkerError",
    "accept_unused",
    "check_marker",
    "checked_marker",
    "exception_name",
    "failed_by_problems",
    "join_run",
    "marker_masks",
    "recording_dir",
    "refused_setup",
    "rerecord_command",
    "sharing_tests",
    "stopped_at",
    "test_failed",
    "unused_counts",
]
