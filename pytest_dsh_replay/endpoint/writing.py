"""A recording run written, or kept beside the directory (:class:`RunWriter`), and what it comes to
(:class:`EndpointOutcome`).

At the end of a record plan the run's conversations are numbered by what each asked
(``content_keys``), then :meth:`RunWriter.write` says where they go (``_verdict``): into the
directory with the one writer (``recording.write.write_fixtures``: the sidecars of their calls, their
request pins, the manifest), or, for a run with problems, a failed test's run or upstream errors that
would replace recorded answers, beside it in :data:`~..layout.KEPT_DIR` for ``dsh-replay accept``
(docs/recording-safety.md), its failed conversations left out; a run not written moves aside what
separate MCP relays recorded into the directory meanwhile (:mod:`.aside`).
"""

from __future__ import annotations

import contextlib
from collections.abc import Sequence
from pathlib import Path
from typing import Any, cast

from msgspec import Struct, field

from ..layout import ENDPOINT_MANIFEST, KEPT_DIR, embeddings_log_files, log_name, log_rank
from ..recording.kept import kept_note, kept_run
from ..recording.manifest import manifest_text, unknown_parents
from ..recording.plan import Plan
from ..replay.model import CLIENT_CACHE_CAUSE
from .aside import set_aside_relays
from .config import has_any_recording, has_recording
from .record import RecordResult, content_keys
from .recording import parent_note


def _no_request_causes() -> str:
    """What usually keeps an agent's requests from a recording run (said when none arrived), naming the
    base-URL variables the fixture sets (every format's, ``llm/wire/registry.py``)."""
    from ..llm.wire.registry import sdk_environment

    *names, last = sdk_environment("")
    return (
        "what usually causes it: the client was built before the endpoint started (at import, or in a "
        "fixture that runs first) and kept the base URL of then; it reads a base-URL variable that is not "
        f"set (the dsh_endpoint fixture sets {', '.join(names)} and {last}; else pass the endpoint's URL "
        f"to the client as its base URL); or {CLIENT_CACHE_CAUSE}"
    )


#: What usually keeps an agent's requests from a recording run (said when none arrived).
NO_REQUEST_CAUSES = _no_request_causes()


class EndpointOutcome(Struct):
    """What a run of the endpoint came to: ``problems`` fail it; ``written``/``removed`` files; ``notes``."""

    plan: str
    problems: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    written: list[Path] = field(default_factory=list)
    removed: list[Path] = field(default_factory=list)
    calls: int = 0
    #: ``changed``: ``(log file, first re-recorded call)`` of each re-recorded conversation
    rerecorded: list[tuple[str, int]] = field(default_factory=list)
    #: a recording run no request reached: the note saying so (also in ``notes``), "" otherwise
    no_request: str = ""

    @property
    def ok(self) -> bool:
        return not self.problems

    def report(self) -> str:
        """The report a failed run prints (every problem, then the notes)."""
        lines = [f"dsh-replay endpoint ({self.plan}): {len(self.problems)} problem(s)", *self.problems]
        return "\n".join(lines + self.notes)


class _Verdict(Struct):
    """Where a recording run's conversations go (``Endpoint._verdict``)."""

    #: the conversations written (a failed run's good ones)
    result: RecordResult
    #: why the run is kept beside the directory instead of written into it ("": it is written)
    why: str = ""
    #: how the caller writes a run like this one into the directory after all
    instead: str = ""
    #: how many failed conversations (and their children) were left out
    left_out: int = 0
    #: what to say of a run written with failed conversations left out
    written_note: str = ""


class _Entries:
    """The ``entries`` view ``sidecars_for`` reads (live session id -> the calls as they happened)."""

    def __init__(self, entries: dict[str, list[dict[str, Any]]]) -> None:
        self.entries = entries


class RunWriter:
    """The write of a record plan's run by ``endpoint`` (an :class:`~.server.Endpoint` that recorded):
    its conversations into the directory or beside it, with what the outcome says of them (module doc)."""

    def __init__(self, endpoint: Any) -> None:
        self.endpoint = endpoint
        self.config = endpoint.config
        self.directory: Path = endpoint.config.directory
        #: ``new_episodes``: log id -> file name of the recorded logs the run did not use, written back
        self._kept: dict[str, str] = {}

    async def write(self, outcome: EndpointOutcome, failed: str = "") -> None:
        """Write the run (``failed``: what its test raised, as one line) and say so in ``outcome``."""
        endpoint = self.endpoint
        sources = self._request_sources()
        # numbered by what each conversation asked, not by when it arrived, the recorded ones a
        # new_episodes or changed run replayed keeping their files (stable files)
        pinned = self._recorded_ranks()
        keys = content_keys(*sources, masks=self.config.masks)
        result = await endpoint.recorder.finish(keys, pinned)
        result, kept = self._with_unused(result, keys, pinned)
        self._kept = kept
        if len(result.logs) == len(kept):
            result = RecordResult([], result.cwd)  # only what was recorded before: the run recorded nothing
        if not result.logs:
            await self._nothing_recorded(outcome, failed)
            return
        self._recorded_lineage(result.logs)
        replaces = has_recording(self.directory) and endpoint.plan is not Plan.REPLAY
        stopped = self._stopped_mid_turn(result.logs) if self.config.stopped_is_problem else []
        outcome.problems += stopped
        verdict = self._verdict(outcome, result, failed, replaces=replaces, stopped=bool(stopped))
        if verdict is None:  # every conversation failed: nothing to write
            outcome.notes.append(endpoint.nothing_written())
            outcome.notes += await self.set_aside(None)
            return
        target = self.directory / KEPT_DIR if verdict.why else self.directory
        self._write_files(target, verdict.result, sources, outcome)
        changes = self._changes(outcome, verdict.result)
        if verdict.why:
            aside = await self.set_aside(target)
            outcome.notes.append(
                kept_note(
                    self.directory,
                    verdict.why,
                    kept_run(target),
                    replaces=replaces,
                    left_out=verdict.left_out,
                    files=len(outcome.written),
                    instead=verdict.instead,
                )
            )
            outcome.notes += [*changes, *aside]
            return
        outcome.notes += [self._recorded_note(outcome, len(verdict.result.logs) - len(kept)), *changes]
        if kept:
            outcome.notes.append(
                f"kept {len(kept)} recorded conversation(s) this run did not use, each in its file "
                f"({', '.join(sorted(kept.values(), key=log_rank))}): {self.config.record_flag} "
                f"{self.config.record.value} adds to a recording and removes nothing"
            )
        if not self.config.stopped_is_problem:
            outcome.notes += self._written_interrupted(verdict.result.logs)
        if verdict.written_note:
            outcome.notes.append(verdict.written_note)
        self._supersede_kept(outcome)

    def _with_unused(
        self, result: RecordResult, keys: dict[str, bytes], pinned: dict[str, int] | None
    ) -> tuple[RecordResult, dict[str, str]]:
        """``new_episodes`` (vcrpy's: the recorded interactions kept, the new ones added): ``result``
        with every recorded log the run did not replay added at its own rank, so it is written back
        unchanged and a new conversation takes a number no recorded one holds; with ``{log id: file
        name}`` of those added. Other plans: ``result`` as it is (``changed`` and ``rewrite`` remove a
        recorded conversation the run no longer has, docs/record-modes.md)."""
        from ..recording.harvest import content_order
        from ..recording.write import current_fixtures

        replay = self.endpoint.replay
        if self.endpoint.plan is not Plan.EPISODES or replay is None:
            return result, {}
        used = {replay.scripts[index].file.name for index in replay.bound.values()}
        base = current_fixtures(self.directory.resolve())
        run_ids = {log.id for log in result.logs}
        unused = [
            (log, path.name)
            for log, path in zip(base.logs, base.paths, strict=True)
            if path.name not in used and log.id not in run_ids
        ]
        if not unused:
            return result, {}
        kept = {log.id: name for log, name in unused}
        ranks = {**(pinned or {}), **{log.id: log_rank(name) for log, name in unused}}
        logs = content_order([*result.logs, *(log for log, _name in unused)], keys, ranks)
        return RecordResult(logs, result.cwd), kept

    def _kept_requests(self, cwd: str) -> dict[str, list[dict[str, Any]]]:
        """The pinned parts of each recorded log written back as it is (:meth:`_with_unused`), as the
        requests its calls sent (a per-call pin's value for each call), in the run's spelling: its pins
        are rendered again with the run's (a log's pins are numbered by its rank, the unnumbered file
        the primary's), so they say what its recording's said."""
        from ..replay.pins import PerCall
        from ..session.codec import map_strings
        from ..session.tokens import CWD_TOKEN

        if not self._kept:
            return {}
        escaped = CWD_TOKEN.replace("{{", "{{!", 1)

        def unspelled(text: str) -> str:  # the pin file's cwd token, and its literal one, as sent
            return text.replace(CWD_TOKEN, cwd).replace(escaped, CWD_TOKEN)

        scripts = {script.file.name: script for script in self.endpoint.replay.scripts}
        out: dict[str, list[dict[str, Any]]] = {}
        for sid, name in self._kept.items():
            script = scripts.get(name)
            if script is None or not script.pins.values:
                continue
            values = {
                part: PerCall(tuple(map_strings(list(value.values), unspelled)))
                if isinstance(value, PerCall)
                else map_strings(value, unspelled)
                for part, value in script.pins.values.items()
            }
            calls = max(
                (len(v.values) for v in script.pins.values.values() if isinstance(v, PerCall)), default=1
            )
            out[sid] = [
                {
                    part: (
                        value.values[min(call, len(value.values) - 1)]
                        if isinstance(value, PerCall)
                        else value
                    )
                    for part, value in values.items()
                }
                for call in range(calls)
            ]
        return out

    def _recorded_ranks(self) -> dict[str, int] | None:
        """Live conversation id -> the rank of the recorded log file it replayed (``session.N.jsonl``:
        N), when the run replayed the recording (``new_episodes``, ``changed``); ``None`` otherwise. The
        rank is the file's, not the script's index: the replay orders its scripts by ``createdAt``
        (``replay.load.load_session_scripts``), which is not the files' order."""
        replay = self.endpoint.replay
        if replay is None:
            return None
        return {sid: log_rank(replay.scripts[index].file.name) for sid, index in replay.bound.items()}

    def _recorded_lineage(self, logs: Sequence[Any]) -> None:
        """Give each conversation the run replayed whole (bound to a recorded log, no call sent
        upstream) its recorded parent in its header, in the run's ids (``parentSession``: the live
        conversation bound to the recorded parent's log; none for a recorded root): which conversation
        the endpoint took for its parent is this run's arrival race (conversations.py rule 5), the
        recording's word stands. A recorded parent no live conversation replayed leaves the header as
        the run made it; a fork child (``seedLength``) is told by its seed, not by a race."""
        replay = self.endpoint.replay
        if replay is None:
            return
        holders = {index: sid for sid, index in replay.bound.items()}
        recorded = {script.recorded_id: i for i, script in enumerate(replay.scripts)}
        sent = self.endpoint.watched.requests
        for log in logs:
            index = replay.bound.get(log.id)
            if index is None or log.id in sent or "seedLength" in log.header:
                continue
            parent = replay.scripts[index].header.get("parentSession")
            if parent is None:
                log.header.pop("parentSession", None)
            elif (live := holders.get(recorded.get(str(parent), -1))) is not None:
                log.header["parentSession"] = live

    def _request_sources(self) -> list[Any]:
        """The requests each model of the run received, by conversation (the replayed ones first)."""
        sources = [self.endpoint.watched.requests]
        if self.endpoint.replay is not None:
            sources.insert(0, self.endpoint.replay.requests)
        return sources

    async def _nothing_recorded(self, outcome: EndpointOutcome, failed: str) -> None:
        if self.endpoint.embeddings.calls:  # a retrieval step's index alone is a recording too
            self._write_embeddings_only(outcome, failed)
        elif outcome.problems:
            outcome.notes.append(self.endpoint.nothing_written())
            outcome.notes += await self.set_aside(None)
        else:
            outcome.no_request = self._nothing_arrived()
            outcome.notes.append(outcome.no_request)

    async def set_aside(self, kept: Path | None) -> list[str]:
        """The MCP sessions separate relays recorded into the directory during this run, set aside
        (:func:`~.aside.set_aside_relays`) when ``set_aside_relays``; the notes."""
        if not self.config.set_aside_relays:
            return []
        own = self.config.mcp or ()
        return await set_aside_relays(self.directory, own, self.endpoint.mcp_before, kept)

    def _write_embeddings_only(self, outcome: EndpointOutcome, failed: str) -> None:
        """Write a run whose recorded traffic is embedding calls alone (a retrieval step's index): into
        the directory, or beside it in :data:`KEPT_DIR` as :meth:`_verdict` keeps conversations, when
        the test failed, or when the run had problems and would replace a recording."""
        from ..recording.write import remove_kept, write_files, write_fixtures

        directory, embeddings, scrub = self.directory, self.endpoint.embeddings, self.endpoint.scrubber.scrub
        failed_test = bool(failed) and not self.config.record_on_error
        replaces = has_any_recording(directory) and self.endpoint.plan is not Plan.REPLAY
        troubled = bool(outcome.problems) and not self.config.record_on_error
        if not failed_test and not (troubled and replaces):
            calls = embeddings.log_file(directory, scrub)
            if self.endpoint.plan.prunes_owned:  # a rewrite: the conversations it did not have go too
                manifest = [directory / ENDPOINT_MANIFEST] if (directory / ENDPOINT_MANIFEST).exists() else []
                outcome.written, outcome.removed = write_fixtures(
                    directory,
                    [],
                    self.endpoint.cwd,
                    self.endpoint.scrubber,
                    prune_owned=True,
                    remove=manifest,
                    beside=calls,
                )
            else:
                outcome.written += write_files(directory, calls)
            outcome.notes.append(embeddings.note(outcome.written))
            if troubled:
                outcome.notes.append(
                    f"the run had problems: its {len(embeddings.calls)} answered embedding call(s) were "
                    "written (as vcrpy writes a cassette when a test fails)"
                )
            self._supersede_kept(outcome)
            return
        target = directory / KEPT_DIR
        if target.exists() or target.is_symlink():
            remove_kept(target)
        target.mkdir(parents=True)
        written = write_files(target, embeddings.log_file(target, scrub))
        why = f"the test failed ({failed})" if failed_test else "the run had problems"
        outcome.notes.append(
            kept_note(
                directory,
                why,
                kept_run(target),
                replaces=replaces,
                left_out=0,
                files=len(written),
                instead=f"to write a failed run: {self.config.accept_flag}",
            )
        )

    def _write_files(
        self, target: Path, result: RecordResult, sources: Sequence[Any], outcome: EndpointOutcome
    ) -> None:
        """Write ``result``'s conversations into ``target`` with the one writer: logs, the sidecars of
        their calls, request pins and the manifest (a kept run there before is replaced)."""
        from ..recording.models import sidecar_files, sidecars_for
        from ..recording.normalize import Normalization
        from ..recording.pins import pin_extra
        from ..recording.write import current_fixtures, remove_kept, write_fixtures

        endpoint = self.endpoint
        if target != self.directory and (target.exists() or target.is_symlink()):
            remove_kept(target)
        target.mkdir(parents=True, exist_ok=True)
        where = target.resolve()
        sidecars = sidecars_for(cast(Any, _Entries(self._entries())), result.logs)
        pins, pin_notes = pin_extra(where, result.logs, result.cwd, *sources, self._kept_requests(result.cwd))
        outcome.notes += pin_notes
        unknown_parents = self._unknown_parents(result.logs)
        outcome.notes += [parent_note(log, candidates) for log, candidates in unknown_parents.items()]
        continued = self._continued(result.logs)
        pins.append(
            (target / ENDPOINT_MANIFEST, manifest_text(endpoint.formats_seen, unknown_parents, continued))
        )
        # the run's embedding calls go where its conversations go, in the same swap
        embeddings = endpoint.embeddings.log_file(where, endpoint.scrubber.scrub)
        stale = [] if embeddings or not endpoint.plan.prunes_owned else embeddings_log_files(where)
        # in the recording's spelling, a kept run too: accept then changes only what changed
        base = current_fixtures(self.directory.resolve())
        outcome.written, outcome.removed = write_fixtures(
            where,
            result.logs,
            result.cwd,
            endpoint.scrubber,
            [*sidecar_files(where, sidecars), *pins],
            base=base,
            paired=self._paired(result.logs, base.paths),
            as_recorded={i for i, log in enumerate(result.logs) if log.id in self._kept},
            # a conversation that differs only where a mask matched keeps its recorded bytes
            normalization=Normalization(masks=self.config.masks if endpoint.keep_by_masks else None),
            prune_owned=endpoint.plan.prunes_owned,
            remove=stale,
            beside=embeddings,
        )
        if endpoint.embeddings.calls:
            outcome.notes.append(endpoint.embeddings.note(outcome.written))

    def _paired(self, logs: Sequence[Any], recorded: Sequence[Path]) -> list[int | None] | None:
        """Each conversation's recorded log (its index in ``recorded``, the recording's logs), ``None``
        for a new one, when the run replayed the recording (``new_episodes``, ``changed``): the writer
        keeps a conversation's header (id, ``createdAt``) with it, whichever file it lands in; ``None``
        (the logs at the same place) for a run that replayed nothing."""
        replay = self.endpoint.replay
        if replay is None:
            return None
        where = {path.name: i for i, path in enumerate(recorded)}
        files = {sid: replay.scripts[index].file.name for sid, index in replay.bound.items()}
        files.update(self._kept)
        return [where.get(files.get(log.id, "")) for log in logs]

    def _changes(self, outcome: EndpointOutcome, result: RecordResult) -> list[str]:
        """``--record changed``: what each conversation kept and re-recorded
        (``recording.models.ChangedModel``), its first re-recorded call of each in ``outcome``."""
        endpoint = self.endpoint
        if endpoint.plan is not Plan.CHANGED:
            return []
        outcome.rerecorded = endpoint.model.rerecorded(
            {log.id: log_name(i) for i, log in enumerate(result.logs)}
        )
        return list(endpoint.model.summary())

    def _recorded_note(self, outcome: EndpointOutcome, conversations: int) -> str:
        upstream = sum(map(len, self.endpoint.watched.requests.values()))
        if self.endpoint.embeddings is not None:  # its calls are requests of the run too
            upstream += self.endpoint.embeddings.forwarded
        # a new_episodes run replays part of its requests: say which went to the provider
        sent = (
            f": {outcome.calls - upstream} replayed, {upstream} sent upstream"
            if upstream != outcome.calls
            else ""
        )
        return (
            f"recorded {conversations} conversation(s) from {outcome.calls} request(s){sent} into "
            f"{self.directory} ({len(outcome.written)} file(s) changed, {len(outcome.removed)} removed)"
        )

    def _supersede_kept(self, outcome: EndpointOutcome) -> None:
        """Remove the run an earlier failed run kept beside the directory: the recording just written
        supersedes it (docs/recording-safety.md), so a later ``accept`` cannot bring it back."""
        from ..recording.write import remove_kept

        kept = self.directory / KEPT_DIR
        if kept.is_dir():
            with contextlib.suppress(OSError):  # the recording is written; a kept run left is only noted
                remove_kept(kept)
            outcome.notes.append(f"removed {kept} (an earlier run kept there): superseded")

    def _verdict(
        self, outcome: EndpointOutcome, result: RecordResult, failed: str, *, replaces: bool, stopped: bool
    ) -> _Verdict | None:
        """Where the run's conversations go and which: into the directory, or beside it (``why``) when
        the run had problems, a failed test's run, or upstream errors would replace recorded answers;
        ``None`` when every conversation failed (nothing to write). Problems found here (upstream
        errors) are added to ``outcome``."""
        # a failed test's run goes beside the directory even when it holds no recording yet: a failed
        # test must not silently become the recording (as vcrpy users expect)
        failed_test = bool(failed) and not self.config.record_on_error
        if outcome.problems and not self.config.record_on_error:
            # a conversation stopped mid-turn is no recording to replay by default: the next
            # --record once records again rather than replaying it
            # a call cut off at the stop leaves a run the test did not end with: never the recording
            aside = replaces or failed_test or stopped or bool(self.endpoint.cut_off)
            return self._failed_run(result, failed, aside=aside)
        if self.endpoint.errored_conversations and replaces and not self.config.record_on_error:
            # an upstream's transient trouble must not replace a good recording with its error answers
            errored = self.endpoint.errored_conversations
            first = next(iter(errored.values()))
            outcome.problems.append(
                f"{len(errored)} conversation(s) ended in an upstream error (first: {first})"
            )
            # the problem above quotes the upstream's words; the kept run's summary only says why
            why = "its upstream errors would replace recorded answers"
            return _Verdict(result, why, f"to write them, errors included: {self.config.accept_flag}")
        if failed_test:
            why = f"the test failed ({failed})"
            return _Verdict(result, why, f"to write a failed test's run: {self.config.accept_flag}")
        return _Verdict(result)

    def _failed_run(self, result: RecordResult, failed: str, *, aside: bool) -> _Verdict | None:
        """The verdict of a run with problems: its failed conversations (and their children) are left
        out; the rest were answered and paid for, so they are written, beside the directory when
        ``aside`` (a recording they would replace, a failed test's run, a conversation stopped
        mid-turn); ``None`` when none is left."""
        good = self._good_conversations(result.logs)
        if not good:
            return None
        left_out = len(result.logs) - len(good)
        kept = RecordResult(good, result.cwd)
        if aside:
            why = f"the test failed ({failed})" if failed else "the run had problems"
            instead = f"to write every conversation, failed ones included: {self.config.accept_flag}"
            return _Verdict(kept, why, instead, left_out)
        written_note = (
            f"the run had problems: {left_out} failed conversation(s) left out of the recording, "
            f"its {len(good)} good one(s) written (as vcrpy writes a cassette when a test fails)"
        )
        return _Verdict(kept, left_out=left_out, written_note=written_note)

    def _good_conversations(self, logs: Sequence[Any]) -> list[Any]:
        """The logs of ``logs`` whose conversation did not fail, nor a parent of it."""
        bad = set(self.endpoint.failed_conversations)
        good = []
        for log in logs:
            if log.id in bad or log.header.get("parentSession") in bad:
                bad.add(log.id)
            else:
                good.append(log)
        return good

    def _entries(self) -> dict[str, list[Any]]:
        """The recorded entries of every conversation: the live calls', after, for a replayed call
        (new_episodes, changed), its recorded entry, in order."""
        entries = dict(self.endpoint.watched.entries)
        if self.endpoint.replay is not None:
            for key, index in self.endpoint.replay.bound.items():
                served = self.endpoint.replay.scripts[index].entries[
                    : self.endpoint.replay.cursors.get(key, 0)
                ]
                entries[key] = [*served, *entries.get(key, [])]
        return entries

    def _unanswered(self, logs: Sequence[Any]) -> list[tuple[int, str]]:
        """``(rank, tool call names)`` of each recorded conversation whose last answer asked for tool
        calls that no later request answered (:attr:`~.record.ConversationLog.unanswered`): the agent
        stopped mid-turn."""
        assert self.endpoint.recorder is not None
        out = []
        for rank, log in enumerate(logs):
            conv = self.endpoint.recorder.logs.get(log.id)
            if conv is not None and conv.unanswered:
                out.append((rank, ", ".join(conv.unanswered)))
        return out

    def _written_interrupted(self, logs: Sequence[Any]) -> list[str]:
        """The notes of a run written with conversations that stopped mid-turn (``stopped_is_problem``
        off: the fixture, whose test's outcome says whether the agent stopped by design): each is
        written with its turn ``interrupted``, and a replay stops there too."""
        return [
            f"conversation #{rank + 1} ({log_name(rank)}) written interrupted (stopped mid-turn): its last "
            f"answer asked for tool call(s) {names} and no request sent their result(s); written as it is "
            "(the test's outcome says whether the agent stopped by design): the recording ends there, and "
            "a test replaying more of it no longer can"
            for rank, names in self._unanswered(logs)
        ]

    def _stopped_mid_turn(self, logs: Sequence[Any]) -> list[str]:
        """One problem per recorded conversation that stopped mid-turn (:meth:`_unanswered`)."""
        out = []
        for rank, names in self._unanswered(logs):
            out.append(
                f"conversation #{rank + 1} ({log_name(rank)}) stopped mid-turn: its last answer asked for "
                f"tool call(s) {names} and no request sent their result(s) (the agent stopped there: did it "
                "fail? check its exit code and output); "
                + (
                    "written all the same (record on error), the run fails"
                    if self.config.record_on_error
                    else "an agent that asks only this by design: accept the kept run (below)"
                )
            )
        return out

    def _unknown_parents(self, logs: Sequence[Any]) -> dict[str, list[str]]:
        """Log file -> the log files of its parent candidates, for each recorded conversation whose
        parent could not be told (:attr:`~.conversations.Conversation.candidates`)."""
        names = {log.id: log_name(rank) for rank, log in enumerate(logs)}
        out = {
            names[conv.id]: [names[c] for c in conv.candidates if c in names]
            for conv in self.endpoint.binder.conversations
            if conv.candidates and conv.id in names
        }
        # a conversation replayed into its recorded file keeps the recording's word on its parent: which
        # conversations had calls open when it started is the arrival race of this run, not of the
        # recording, and a replay binds it by content and parents anyway
        replay = self.endpoint.replay
        if replay is None:
            return out
        recorded = dict(unknown_parents(self.directory))
        files = {sid: replay.scripts[index].file.name for sid, index in replay.bound.items()}
        written = set(names.values())
        for sid, name in names.items():
            if files.get(sid) != name:
                continue
            out.pop(name, None)
            if name in recorded:
                out[name] = [c for c in recorded[name] if c in written]
        order = [n for n in recorded if n in out] + sorted(
            (n for n in out if n not in recorded), key=log_rank
        )
        return {name: out[name] for name in order if out[name]}

    def _continued(self, logs: Sequence[Any]) -> list[str]:
        """The log files of the recorded conversations the client itself continued (conversations.py
        rule 3: :attr:`~.conversations.Conversation.kind` ``continued``)."""
        recorded = {log.id: log_name(rank) for rank, log in enumerate(logs)}
        return [
            recorded[conv.id]
            for conv in self.endpoint.binder.conversations
            if conv.kind == "continued" and conv.id in recorded
        ]

    def _nothing_arrived(self) -> str:
        """The note of a recording run no model request reached: the requests no route took, if any
        came (a client on an API the endpoint does not serve, a base URL with a path too many)."""
        directory = self.config.directory
        if not self.endpoint.unrouted_count and any(guest.recorded for guest in self.endpoint.guests):
            # the MCP servers' traffic is recorded on its own (said after this): no model request is
            # no mistake of the client's base URL then
            return f"no model request arrived: no conversation recorded into {directory}"
        if not self.endpoint.unrouted_count and self.endpoint.guest_requests:
            # requests reached the MCP routes and recorded nothing: each was answered (a refusal
            # says why to its client), so the client found the endpoint
            return (
                f"no model request arrived, {self.endpoint.guest_requests} MCP request(s) did and recorded "
                f"nothing (each answered as its client was told): nothing recorded into {directory}"
            )
        if not self.endpoint.unrouted_count:
            return f"no request arrived: nothing recorded into {directory}; {NO_REQUEST_CAUSES}"
        count, unrouted = self.endpoint.unrouted_count, self.endpoint.unrouted
        more = count - len(unrouted)
        return (
            f"no model request arrived, {count} request(s) to paths the endpoint does not "
            f"serve did ({', '.join(unrouted)}{f', and {more} more' if more > 0 else ''}; each was "
            f"answered 404/405 naming what it serves): nothing recorded into {directory}"
        )


def red_requests(replay: Any) -> tuple[list[Any], list[str]]:
    """The requests of a replay (a :class:`~..replay.model.ReplayModel`, or ``None``) that did not match
    their recording, as the reports show them side by side (``[RequestDiff]``, ``itemreport``), with
    the commands that re-record them: its mismatches and the failures that are mismatches (a first
    request that matched no recorded conversation), each once. The one rule of the ``dsh_endpoint``
    item's report and ``serve --report``'s page; ``([], [])`` when every request matched."""
    if replay is None:
        return [], []
    from ..replay.errors import RequestMismatchError
    from ..replay.model import rerecord_commands
    from ..replay.requests import request_diffs

    found = [*replay.mismatches, *(e for e in replay.failures if isinstance(e, RequestMismatchError))]
    mismatches = list({id(m): m for m in found}.values())
    diffs = [d for m in mismatches for d in request_diffs(m)]
    return diffs, rerecord_commands(m.rerecord for m in mismatches if m.rerecord)


__all__ = ["NO_REQUEST_CAUSES", "EndpointOutcome", "RunWriter", "red_requests"]
