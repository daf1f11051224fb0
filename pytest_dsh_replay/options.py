"""The plugin's options and their checks (harness.md §3-4): what ``pytest --help`` lists under dsh-replay.

Every choice comes from :mod:`.modes`; a malformed value is a ``pytest.UsageError`` before anything
runs, never one failure per item. Imports only pytest and the leaves; the machinery a check needs
is imported when it runs.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from .layout import PIN_PARTS

if TYPE_CHECKING:
    from .llm.secrets import SecretScrubber
    from .session.masks import Masks
from .modes import Backend, RecordMode

__all__ = [
    "add_options",
    "check_model_spec",
    "match_on",
    "record_mode",
    "report_option",
    "run_masks",
    "run_scrubber",
    "warn_inert_options",
]

#: every record mode, as the inert-option warnings offer them ("--dsh-record=once, ... or changed")
*_EARLIER_MODES, _LAST_MODE = (m.value for m in RecordMode if m.records)
_RECORDING_MODES = f"--dsh-record={', '.join(_EARLIER_MODES)} or {_LAST_MODE}"


def add_options(parser: pytest.Parser) -> None:
    """Declare the ``--dsh-*`` options and ``dsh_*`` ini values."""
    group = parser.getgroup("dsh-replay", "record/replay of dsh agent session logs")
    group.addoption(
        "--dsh-scenario",
        action="append",
        default=[],
        metavar="PATH|NAME",
        help="run the scenario(s) at or under PATH (anywhere on disk), or select by <group>/<name> glob; "
        "repeatable",
    )
    group.addoption(
        "--dsh-backend",
        choices=Backend.choices(),
        default=None,
        help="persistence backend (default: jsonl)",
    )
    group.addoption(
        "--dsh-ignore-event",
        action="append",
        default=[],
        metavar="TYPE",
        help="drop events of TYPE on both sides before comparing (seqs renumbered); repeatable",
    )
    group.addoption(
        "--dsh-record",
        choices=RecordMode.choices(),
        default=RecordMode.NONE.value,
        help="record mode (default none: replay only)",
    )
    group.addoption("--dsh-model", default=None, help="live model for recording, e.g. openai:MODEL@BASE_URL")
    group.addoption(
        "--dsh-check-guards",
        action="store_true",
        default=False,
        help="red/green check: scenarios with fork children must FAIL with the seed slice disabled",
    )
    parser.addini("dsh_scenario_roots", "directories searched for scenarios", type="paths", default=[])
    parser.addini("dsh_model", "live model for recording (see --dsh-model)", default="")
    parser.addini("dsh_api_key_env", "environment variable holding the live model's API key", default="")
    parser.addini("dsh_backend", "default persistence backend: jsonl, sqlite or both", default="")
    group.addoption(
        "--dsh-match-on",
        action="append",
        default=[],
        metavar="PARTS",
        help="request parts checked before each recorded call is served: "
        + ", ".join(("messages", *PIN_PARTS))
        + " (comma-separated or repeated; default: all the recording has; none: off)",
    )
    parser.addini("dsh_match_on", "request parts checked before serving (see --dsh-match-on)", default="")
    group.addoption(
        "--dsh-mask",
        action="append",
        default=[],
        metavar="REGEX",
        help="a volatile value (timestamp, transaction id): what REGEX matches in a string value (or its "
        "groups) is replaced by {{mask:N}} on both sides of every comparison, never in what is written; "
        "repeatable",
    )
    parser.addini(
        "dsh_mask",
        "volatile-value masks, one regular expression a line (see --dsh-mask)",
        type="linelist",
        default=[],
    )
    group.addoption(
        "--dsh-allow-origin",
        action="append",
        default=[],
        metavar="ORIGIN",
        help="the dsh_endpoint fixture serves requests carrying this Origin header (scheme://host[:port], "
        "a browser app under test); others are refused; repeatable",
    )
    parser.addini(
        "dsh_allow_origin",
        "origins the dsh_endpoint fixture serves, one a line (see --dsh-allow-origin)",
        type="linelist",
        default=[],
    )
    group.addoption(
        "--dsh-accept-changed-requests",
        action="store_true",
        default=False,
        help="with --snapshot-update: serve and write the recorded answers even after a changed request or "
        "tool result (an update refuses such a scenario otherwise); every such call is listed",
    )
    group.addoption(
        "--dsh-upstream",
        default=None,
        metavar="URL",
        help="base URL the dsh_endpoint fixture records from (e.g. https://api.openai.com/v1)",
    )
    parser.addini(
        "dsh_upstream", "base URL the dsh_endpoint fixture records from (see --dsh-upstream)", default=""
    )
    group.addoption(
        "--dsh-report",
        default=None,
        metavar="FILE",
        help="write one self-contained HTML report of the run's scenario items and dsh_endpoint tests "
        "(failures first, with their recordings and request differences) to FILE",
    )
    parser.addini(
        "dsh_secret_patterns",
        "extra regular expressions of secret-shaped text scrubbed from every written file and report",
        type="linelist",
        default=[],
    )


def warn_inert_options(config: pytest.Config) -> None:
    """Warn about options that would silently do nothing in this run: an unknown ``--dsh-ignore-event``
    type, ``--dsh-model`` or ``--dsh-upstream`` without a record mode (the ini keys are project
    defaults, never warned about), ``--dsh-accept-changed-requests`` without ``--snapshot-update``,
    ``--snapshot-update`` with ``--dsh-record=rewrite``, ``new_episodes`` or ``changed`` (their plans win:
    :func:`~.recording.plan.plan_for`)."""
    ignored = config.getoption("dsh_ignore_event")
    if ignored:  # imported only then: a run without dsh options must not pay for the session package
        from .session.types import unknown_event_type
    for etype in ignored:
        problem = unknown_event_type("--dsh-ignore-event", etype)
        if problem is not None:
            config.issue_config_time_warning(pytest.PytestConfigWarning(problem), stacklevel=2)
    if config.getoption("dsh_model") and not record_mode(config).records:
        config.issue_config_time_warning(
            pytest.PytestConfigWarning(
                f"--dsh-model {config.getoption('dsh_model')} has no effect without a record mode: replay "
                f"never calls a live model; add {_RECORDING_MODES} to record"
            ),
            stacklevel=2,
        )
    if config.getoption("dsh_upstream") and not record_mode(config).records:
        config.issue_config_time_warning(
            pytest.PytestConfigWarning(
                f"--dsh-upstream {config.getoption('dsh_upstream')} has no effect without a record mode: the "
                f"dsh_endpoint fixture replays and never calls the upstream; add {_RECORDING_MODES} to record"
            ),
            stacklevel=2,
        )
    mode = record_mode(config)
    plans = {
        RecordMode.REWRITE: "rewrite records every scenario again",
        RecordMode.NEW_EPISODES: "new_episodes replays the recorded calls and appends the new ones",
        RecordMode.CHANGED: "changed records each session again from its first changed call",
    }
    if config.getoption("update_snapshots", default=False) and mode in plans:
        config.issue_config_time_warning(
            pytest.PytestConfigWarning(
                f"--snapshot-update has no effect with --dsh-record={mode.value}: "
                + plans[mode]
                + "; drop one of the two"
            ),
            stacklevel=2,
        )
    if config.getoption("dsh_accept_changed_requests") and not config.getoption(
        "update_snapshots", default=False
    ):
        config.issue_config_time_warning(
            pytest.PytestConfigWarning(
                "--dsh-accept-changed-requests has no effect without --snapshot-update: only an update "
                "writes a scenario whose requests changed (a replay still fails on them); add "
                "--snapshot-update"
            ),
            stacklevel=2,
        )


def record_mode(config: pytest.Config) -> RecordMode:
    """``--dsh-record`` as the enum (its choices are the enum's values)."""
    return RecordMode(config.getoption("dsh_record"))


def backend_option(config: pytest.Config) -> str | None:
    """``--dsh-backend`` (or ini ``dsh_backend``): ``jsonl``, ``sqlite`` or ``both``; ``None`` when
    neither is set (the scenario's own ``backend``, else JSONL).

    Raises:
        pytest.UsageError: an ini value that is none of those (the option's choices are checked by
            argparse).
    """
    value = config.getoption("dsh_backend") or str(config.getini("dsh_backend")).strip()
    if not value:
        return None
    if value not in Backend.choices():
        raise pytest.UsageError(
            f"ini dsh_backend: {value!r} is no backend: use {', '.join(Backend.choices()[:-1])} or both"
        )
    return str(value)


def report_option(config: pytest.Config) -> Path | None:
    """``--dsh-report FILE`` as the file to write (``None``: not given).

    Raises:
        pytest.UsageError: an empty value (``Path`` would read it as the current directory) or an
            existing directory: the report is one file (``serve --report`` refuses the same values).
    """
    value = config.getoption("dsh_report")
    if value is None:
        return None
    if not str(value).strip():
        raise pytest.UsageError(f"--dsh-report {value!r} names no file: give the HTML file to write")
    path = Path(value)
    if path.is_dir():
        raise pytest.UsageError(f"--dsh-report {value}: is a directory: give the HTML file to write")
    return path.resolve()


def check_model_spec(config: pytest.Config) -> None:
    """Reject a malformed ``--dsh-model`` before any scenario runs (a usage error, not N test failures)."""
    spec = config.getoption("dsh_model") or config.getini("dsh_model")
    if spec:  # imported only then: a run without dsh options must not pay for the scenario package
        from .recording.models import model_spec_problem

        problem = model_spec_problem(spec, recording=record_mode(config).records)
        if problem is not None:
            raise pytest.UsageError(problem)


def match_on(config: pytest.Config) -> frozenset[str] | None:
    """``--dsh-match-on`` (or ini ``dsh_match_on``) parsed; an unknown part, or a value naming none
    (``--dsh-match-on ,``), is a usage error (a blank ini value is the default)."""
    values, option = config.getoption("dsh_match_on"), "--dsh-match-on"
    if not values:
        values, option = [config.getini("dsh_match_on")], "ini dsh_match_on"
        if not str(values[0]).strip():
            return None  # the default; importing the replay machinery here would tax unrelated runs
    from .replay.requests import MatchOnError, parse_match_on

    try:
        return parse_match_on(values, option=option)
    except MatchOnError as exc:
        raise pytest.UsageError(str(exc)) from None


def run_scrubber(config: pytest.Config) -> SecretScrubber:
    """Build THE secret set of this run once; bad secret config is a usage error before anything runs."""
    from .llm.secrets import DEFAULT_KEY_ENV, SecretConfigError, run_scrubber

    key_env = config.getini("dsh_api_key_env")
    try:
        return run_scrubber(
            key_env=key_env or DEFAULT_KEY_ENV,
            patterns=config.getini("dsh_secret_patterns"),
            require_key_value=bool(key_env) or record_mode(config).records,
        )
    except SecretConfigError as exc:
        raise pytest.UsageError(str(exc)) from None


def run_masks(
    config: pytest.Config, hook: Any = None, extra: Iterable[Any] = (), *, where: str = ""
) -> Masks | None:
    """The masks of one comparison context: ``--dsh-mask`` values, ini ``dsh_mask`` lines, what the
    ``pytest_dsh_masks`` hook returns through ``hook`` (an item's ``ihook``, so a conftest's masks apply
    at or under its directory), then ``extra`` (the ``dsh_recording`` marker's ``mask=``, as ``where``
    names it); ``None`` when there are none.

    A string is a regex; a hook may also return :class:`~pytest_dsh_replay.session.masks.Mask` objects
    (with a ``when`` predicate).

    Raises:
        pytest.UsageError: a ``--dsh-mask``/``dsh_mask`` regex that does not compile.
        MaskError: a hook's or ``extra``'s mask that does not compile, or is neither a string nor a
            ``Mask`` (the caller says where).
    """
    given = list(config.getoption("dsh_mask"))  # a blank one is refused: it matches the empty string
    lines = [v for v in config.getini("dsh_mask") if str(v).strip()]
    hooked: list[Any] = []
    if hook is not None:
        for result in hook.pytest_dsh_masks(config=config):
            hooked.extend(result or ())
    extra = list(extra)
    if not (given or lines or hooked or extra):
        return None  # the default; importing the session package here would tax unrelated runs
    from .session.masks import Mask, MaskError, Masks

    def as_masks(values: Iterable[Any], source: str) -> list[Mask]:
        out = []
        for value in values:
            if isinstance(value, Mask):
                out.append(value if value.source else Mask(value.pattern, source, value.when))
            elif isinstance(value, str):
                out.append(Mask(value.strip(), source))
            else:
                raise MaskError(f"{source}: a mask is a regex string or a Mask, got {value!r}")
        return out

    try:
        Masks([*as_masks(given, "--dsh-mask"), *as_masks(lines, "ini dsh_mask")])
    except MaskError as exc:
        raise pytest.UsageError(str(exc)) from None
    return Masks(
        [
            *as_masks(given, "--dsh-mask"),
            *as_masks(lines, "ini dsh_mask"),
            *as_masks(hooked, "pytest_dsh_masks"),
            *as_masks(extra, where or "marker mask="),
        ]
    )
