"""The embeddings log, ``embeddings.jsonl`` (:data:`~pytest_dsh_replay.layout.EMBEDDINGS_LOG`): the
endpoint's embedding calls (``endpoint/embeddings.py``), recorded beside the conversations. Its one
reader (:func:`read_calls`), its one rule of what a recorded call is (:func:`call_problem`), which the
endpoint's replay, ``dsh-replay validate`` and ``show`` all apply, and its one writer's bytes
(:func:`log_bytes`).

The log is a session log (events.md: the header, then events with ``seq``/``time``/``data``, read
through :class:`~pytest_dsh_replay.recording.logstream.LogStream` as every log is, with the line
limit; the event type is the open vocabulary's): the header
``{"type": "session", "version": 0, "id": "dsh-replay-embeddings", "createdAt": 0}`` then one event per
call, in the order the calls were made::

    {"type": "embeddings/call", "seq": 0, "time": 0, "data": {"route": "/v1/embeddings",
     "model": "text-embedding-3-small", "request": {<the client's body as sent>}, "status": 200,
     "response": {<the answer as sent>}}}

``route`` is the format's key (``/v1/embeddings``, ``/v1beta/models/{model}:embedContent``); Gemini's
``request`` holds the route's ``model`` first. Only answered calls are recorded (``status`` 200-299; a
refusal reaches the client and is a problem of the run). The answer is kept as the provider sent it:
base64 vectors stay base64 text (``benchmarks/embeddings_size.py``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

import orjson

from ..errors import HarnessError, max_line_bytes, quote
from ..llm.wire.embeddings import ROUTES, request_problem, response_problem

#: the log's header line (a session header: events.md)
HEADER = {"type": "session", "version": 0, "id": "dsh-replay-embeddings", "createdAt": 0}
#: the ``type`` of a call's line
CALL = "embeddings/call"
#: the keys of an answer holding vectors: never scrubbed (a base64 vector is no secret, and rewriting
#: a piece of it would change the vector)
_VECTOR_KEYS = frozenset({"embedding", "values"})


class EmbeddingsLogError(HarnessError):
    """An embeddings log that does not read as one: names the file and line, and what is wrong."""

    code = "EMBEDDINGS_BAD_LOG"


def call_problem(data: Any) -> str | None:
    """Why ``data`` (a call event's ``data``) is no recorded embedding call (module doc), or ``None``:
    ``route`` not an embedding route; ``model`` not a string; ``request`` not an embedding request of
    the route (``llm.wire.embeddings.request_problem``: the rule the endpoint refuses a live request
    by); ``status`` not an integer 200-299; ``response`` not an answer to it (``response_problem``).
    """
    if not isinstance(data, dict):
        return f"its data must be a JSON object, got {quote(data, 60)}"
    route = data.get("route")
    if route not in ROUTES:
        return f"route must be one of {', '.join(ROUTES)}, got {quote(route, 60)}"
    if not isinstance(data.get("model", ""), str):
        return f"model must be a string, got {quote(data.get('model'), 60)}"
    request = data.get("request")
    if not isinstance(request, dict):
        return f"request must be a JSON object (the client's body), got {quote(request, 60)}"
    found = request_problem(route, request)
    if found is not None:
        return f"request.{found[1]} {found[0]}"
    status = data.get("status")
    if type(status) is not int or not 200 <= status <= 299:
        return (
            "status must be an HTTP success status (an integer 200-299: only answered calls are "
            f"recorded), got {quote(status, 60)}"
        )
    if "response" not in data:
        return "response is missing (the answer served on replay)"
    found = response_problem(route, request, data["response"])
    if found is not None:
        return f"{found[1]} {found[0]}"
    return None


def read_calls(path: Path) -> list[dict[str, Any]]:
    """The calls of the embeddings log ``path`` (module doc), in order, each its ``data`` with the
    event's ``seq``; ``[]`` when there is none. The one reader: the endpoint serves what it returns, and
    ``validate`` reports what it refuses (:func:`call_problem` per event, on the log stream's lines).

    Raises:
        EmbeddingsLogError: an event that is not an ``embeddings/call`` or whose call
            :func:`call_problem` refuses (``path:line: ...``).
        LogReadError, ReplayParseError, LineTooLongError: the file cannot be read, a line is not JSON,
            the header is missing or invalid, a line is over the line limit (as for every log).
    """
    from .logstream import LogStream

    if not path.exists() and not path.is_symlink():
        return []
    calls: list[dict[str, Any]] = []
    for line_no, _raw, event in LogStream(path).events():
        problem = event_problem(event)
        if problem is not None:
            raise EmbeddingsLogError(f"{path}:{line_no}: {problem}")
        assert event is not None  # LogStream raises instead of yielding a lost line
        calls.append({**event["data"], "seq": event.get("seq")})
    return calls


def event_problem(event: Mapping[str, Any] | None) -> str | None:
    """Why one event of the log is no recorded call (its type, then :func:`call_problem`), or ``None``."""
    if event is None:
        return None
    if event.get("type") != CALL:
        return f"not an {CALL} event (type {quote(event.get('type'), 60)})"
    problem = call_problem(event.get("data"))
    return None if problem is None else f"{CALL} #{event.get('seq')}: {problem}"


def call_summary(data: Any, seq: Any, number: int) -> str:
    """One line saying the recorded call ``data``, the log's ``number``-th (from 1) at ``seq`` (``show``,
    as a session's turns: ``call #1 (seq 0): ...``): its route, model, inputs and vectors, and status,
    or what is wrong with it when :func:`call_problem` refuses it."""
    where = f"call #{number} (seq {seq})"
    problem = call_problem(data)
    if problem is not None:
        return f"{where}: not a recorded embedding call: {problem}"
    request, response = data["request"], data["response"]
    value = request.get("input", request.get("requests", request.get("content")))
    inputs = len(value) if isinstance(value, list) else 1
    vectors = response.get("data", response.get("embeddings"))
    count = len(vectors) if isinstance(vectors, list) else 1
    said = f"{data['route']} {data.get('model', '')}: {inputs} input(s), {count} vector(s)"
    return f"{where}: {said}, HTTP {data['status']}"


def scrubbed(value: Any, scrub: Callable[[str], str]) -> Any:
    """``value`` with every string scrubbed by ``scrub`` but the vectors (``embedding``, ``values``)."""
    if isinstance(value, str):
        return scrub(value)
    if isinstance(value, list):
        return [scrubbed(v, scrub) for v in value]
    if isinstance(value, dict):
        return {k: v if k in _VECTOR_KEYS else scrubbed(v, scrub) for k, v in value.items()}
    return value


def vectors_apart(value: Any) -> tuple[Any, list[Any]]:
    """``(value with each vector replaced by None, the vectors in order)``: what masks may apply to,
    and what is compared exactly (a mask never matches inside a vector)."""
    vectors: list[Any] = []

    def walk(v: Any) -> Any:
        if isinstance(v, list):
            return [walk(x) for x in v]
        if isinstance(v, dict):
            out: dict[str, Any] = {}
            for k, x in v.items():
                if k in _VECTOR_KEYS:
                    vectors.append(x)
                    out[k] = None
                else:
                    out[k] = walk(x)
            return out
        return v

    return walk(value), vectors


def call_line(seq: int, call: Mapping[str, Any], scrub: Callable[[str], str]) -> bytes:
    """The log line of ``call`` (``route``, ``model``, ``request``, ``status``, ``response``) as the
    writer writes it at ``seq``: request and answer scrubbed (:func:`scrubbed`), no newline."""
    data = {k: v for k, v in call.items() if k != "seq"}
    data["request"] = scrubbed(call["request"], scrub)
    data["response"] = scrubbed(call["response"], scrub)
    return orjson.dumps({"type": CALL, "seq": seq, "time": 0, "data": data})


def line_problem(seq: int, call: Mapping[str, Any], scrub: Callable[[str], str]) -> str | None:
    """Why ``call`` cannot be recorded at ``seq``: its line would be longer than the line limit every
    reader holds a log to (``errors.max_line_bytes``), or ``None``."""
    size = len(call_line(seq, call, scrub)) + 1
    limit = max_line_bytes()
    if size <= limit:
        return None
    return (
        f"its line in the embeddings log would be {size} bytes, over the line limit of {limit} "
        "($DSH_REPLAY_MAX_LINE_BYTES): it was answered but cannot be recorded; send smaller batches or "
        "raise the limit"
    )


def log_bytes(calls: Iterable[Mapping[str, Any]], scrub: Callable[[str], str]) -> bytes:
    """The log of ``calls`` as the one writer writes it (module doc), ``seq`` numbered from 0."""
    lines = [orjson.dumps(HEADER), *(call_line(seq, call, scrub) for seq, call in enumerate(calls))]
    return b"\n".join(lines) + b"\n"


__all__ = [
    "CALL",
    "HEADER",
    "ROUTES",
    "EmbeddingsLogError",
    "call_line",
    "call_problem",
    "call_summary",
    "event_problem",
    "line_problem",
    "log_bytes",
    "read_calls",
    "scrubbed",
    "vectors_apart",
]
