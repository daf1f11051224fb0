"""Integrity checks of recorded session logs (harness.md §7, ``dsh-replay validate``).

Each finding is one line naming the file, the seq and what is wrong. Checks: header shape; seq
contiguity; turn/step balance and numbering; tool call/result pairing; lineage (``parentSession``
names a log of the set) and ``seedLength`` within bounds and equal to the parent's prefix; surface
replace validity (``surfaceOp`` folded as events.md §5 says); no secret in any string value or in the
joined deltas of any block (harness.md §4, ``scenario.secrets.secret_findings``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ..session import SURFACE_TYPES
from .normalize import SessionLog
from .secrets import secret_findings

SURFACE = SURFACE_TYPES


def _header_findings(log: SessionLog) -> list[str]:
    h, where = log.header, log.source
    out = []
    if h.get("type") != "session":
        out.append(f'{where}: header line: "type" must be "session"')
    if h.get("version") != 0:
        out.append(f"{where}: header: unsupported version {h.get('version')!r} (expected 0)")
    if not isinstance(h.get("id"), str) or not h.get("id"):
        out.append(f'{where}: header: "id" must be a non-empty string')
    if not isinstance(h.get("createdAt"), int):
        out.append(f'{where}: header: "createdAt" must be an integer (ms)')
    seed = h.get("seedLength", 0)
    if not isinstance(seed, int) or isinstance(seed, bool) or seed < 0 or seed > len(log.events):
        out.append(
            f"{where}: header: seedLength {seed!r} must be an integer in 0..{len(log.events)} (log length)"
        )
    return out


def _call_id(d: dict[str, Any]) -> Any:
    """The call id of a ``tool/call``/``tool/result``: ``data.callId`` (baseline layout) or, in the
    newer layout, ``data.message.source.callId`` / the ``toolCallId`` of its tool-result block."""
    if "callId" in d:
        return d["callId"]
    message = d.get("message")
    if isinstance(message, dict):
        source = message.get("source")
        if isinstance(source, dict) and "callId" in source:
            return source["callId"]
        for block in message.get("content") or []:
            if isinstance(block, dict) and "toolCallId" in block:
                return block["toolCallId"]
    return None


def _event_findings(log: SessionLog) -> list[str]:
    where = log.source
    out: list[str] = []
    open_turn: Any = None
    open_step: Any = None
    pending: dict[str, int] = {}
    surface: list[int] = []
    last_turn = 0
    for i, e in enumerate(log.events):
        seq, t, d = e.get("seq"), e.get("type"), e.get("data")
        at = f"{where}: seq {seq} ({t})"
        if seq != i:
            out.append(
                f"{where}: line {i + 2}: seq {seq!r} where {i} was expected (seqs must be contiguous from 0)"
            )
        if not isinstance(d, dict):
            out.append(f'{at}: "data" must be an object')
            continue
        if t == "turn/start":
            if open_turn is not None:
                out.append(f"{at}: turn {d.get('turn')} starts while turn {open_turn} is still open")
            if isinstance(d.get("turn"), int) and d["turn"] != last_turn + 1:
                out.append(f"{at}: turn number {d['turn']} does not follow {last_turn}")
            open_turn, open_step, pending = d.get("turn"), None, {}
            turn_number = d.get("turn")
            if isinstance(turn_number, int):
                last_turn = turn_number
        elif t == "turn/end":
            if open_turn is None:
                out.append(f"{at}: turn/end without an open turn")
            elif d.get("turn") != open_turn:
                out.append(f"{at}: ends turn {d.get('turn')} but turn {open_turn} is open")
            if open_step is not None:
                out.append(f"{at}: turn ends while step {open_step} is open")
            for call_id in pending:
                out.append(f"{at}: tool call {call_id!r} never got a tool/result")
            open_turn, open_step, pending = None, None, {}
        elif t == "step/start":
            if open_turn is None:
                out.append(f"{at}: step outside a turn")
            if open_step is not None:
                out.append(f"{at}: step {d.get('step')} starts while step {open_step} is open")
            open_step = d.get("step")
        elif t == "step/end":
            if open_step is None or d.get("step") != open_step:
                out.append(f"{at}: step/end for step {d.get('step')} but open step is {open_step}")
            open_step = None
        elif t == "tool/call":
            call_id = _call_id(d)
            if not isinstance(call_id, str):
                out.append(f"{at}: callId must be a string")
            else:
                pending[call_id] = seq if isinstance(seq, int) else i
        elif t == "tool/result":
            call_id = _call_id(d)
            if call_id not in pending:
                out.append(f"{at}: tool/result for {call_id!r} has no pending tool/call")
            else:
                del pending[call_id]
        elif t == "assistant/chunk" and open_turn is None:
            out.append(f"{at}: outside a turn")
        op = e.get("surfaceOp")
        if t in SURFACE and op is None:
            out.append(f"{at}: surface-eligible event without surfaceOp")
        if op is not None and t not in SURFACE:
            out.append(f"{at}: surfaceOp on a non-surface event type")
        if op == "append":
            surface.append(i)
        elif isinstance(op, dict) and op.get("op") == "replace":
            start, end = op.get("start"), op.get("end")
            if start not in surface or end not in surface:
                out.append(f"{at}: replace bounds {start}..{end} are not both on the surface")
            else:
                a, b = surface.index(start), surface.index(end)
                if a > b:
                    out.append(f"{at}: replace bounds {start}..{end} are reversed on the surface")
                else:
                    surface[a : b + 1] = [i]
        elif op is not None:
            out.append(f"{at}: unknown surfaceOp {op!r}")
    if open_turn is not None:
        out.append(f"{where}: turn {open_turn} is never closed (crash? a load would repair it)")
    return out


def validate_logs(logs: Sequence[SessionLog]) -> list[str]:
    """All findings for a set of logs (a scenario's logs, or one log)."""
    findings: list[str] = []
    by_id = {log.id: log for log in logs}
    seen: dict[str, str] = {}
    for log in logs:
        if log.id in seen:
            findings.append(
                f"{log.source}: session id {log.id!r} is also the id of {seen[log.id]} (a copied log?)"
            )
        seen.setdefault(log.id, log.source)
        findings += _header_findings(log)
        findings += _event_findings(log)
        parent_id = log.header.get("parentSession")
        if isinstance(parent_id, str) and len(logs) > 1:
            parent = by_id.get(parent_id)
            if parent is None:
                findings.append(f"{log.source}: parentSession {parent_id!r} is not among these logs")
            elif log.seed_length:
                prefix = log.events[: log.seed_length]
                if prefix != parent.events[: log.seed_length]:
                    findings.append(
                        f"{log.source}: the first {log.seed_length} events (seedLength) "
                        "are not the parent's prefix"
                    )
    findings += secret_findings(logs)  # secrets in a string or in the joined deltas of a block
    return findings
