"""The endpoint's embedding calls (``llm/wire/embeddings.py``): recorded, checked and replayed beside the
conversations, in a log of their own, ``embeddings.jsonl`` (:data:`~pytest_dsh_replay.layout.EMBEDDINGS_LOG`).

The log is a session log (events.md: the header, then events with ``seq``/``time``/``data``, so
``validate``, ``show`` and ``diff`` read it as they read any log; the event type is the open
vocabulary's): the header ``{"type": "session", "version": 0, "id": "dsh-replay-embeddings", "createdAt": 0}``
then one event per call, in the order the calls were made::

    {"type": "embeddings/call", "seq": 0, "time": 0, "data": {"route": "/v1/embeddings",
     "model": "text-embedding-3-small", "request": {<the client's body as sent>}, "status": 200,
     "response": {<the answer as sent>}}}

``route`` is the format's key (``/v1/embeddings``, ``/v1beta/models/{model}:embedContent``); Gemini's
``request`` holds the route's ``model`` first. The answer is kept as the provider sent it: base64 vectors
stay base64 text, so a recording is about as large as the answers were on the wire
(``benchmarks/embeddings_size.py``).

Replay (:meth:`EmbeddingCalls.serve`): a call is served the answer of the first recorded call of the
same route not served yet whose request is the same (the request check's primitives: each side
tokenized with the run's masks, ``replay.requests.first_difference``); calls may come in any order (an
index built concurrently). A call no recorded one matches is refused (HTTP 400 in the API's error shape,
``x-should-retry: false``) naming the first difference from the nearest unserved call of its route
(``input[3]``), and is a problem of the run; recorded calls left unserved are problems at the end, as
unused model calls are (``allow_unused`` lets them go). ``new_episodes`` serves the recorded calls and
forwards the rest.

Recording: each call is forwarded to the upstream (the format's path under the base URL, the endpoint's
key in the format's header; the client's key is never forwarded) and its answer, whatever its status,
is sent to the client and recorded. The log is written by :meth:`EmbeddingCalls.write` under the
recording's lock, scrubbed by the run's scrubber (every string but the vectors), and kept byte for byte
when the run's calls equal the recorded ones with the masks (stable re-recording).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import orjson

from ..errors import HarnessError, read_regular_file
from ..layout import EMBEDDINGS_LOG
from ..llm import LlmError
from ..recording.write import write_files
from ..session.masks import Masks
from .upstreams import format_url

#: the log's header line (a session header: events.md)
HEADER = {"type": "session", "version": 0, "id": "dsh-replay-embeddings", "createdAt": 0}
#: the ``type`` of a call's line
CALL = "embeddings/call"
#: the keys of an answer holding vectors: never scrubbed (a base64 vector is no secret, and rewriting
#: a piece of it would change the vector)
_VECTOR_KEYS = frozenset({"embedding", "values"})


class EmbeddingsLogError(HarnessError):
    """An embeddings log that does not read as one (names the file and line)."""

    code = "EMBEDDINGS_BAD_LOG"


def read_calls(path: Path) -> list[dict[str, Any]]:
    """The calls of the embeddings log ``path`` (module doc), in order; ``[]`` when there is none.

    Raises:
        EmbeddingsLogError: a line that is not JSON, a first line that is not the header, a call line
            without ``route``/``request``/``response``.
    """
    if not os.path.lexists(path):
        return []
    lines = read_regular_file(path).decode("utf-8", "replace").splitlines()
    calls: list[dict[str, Any]] = []
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            value = orjson.loads(line)
        except orjson.JSONDecodeError as exc:
            raise EmbeddingsLogError(f"{path}:{number}: not JSON ({exc})") from None
        if number == 1:
            if not isinstance(value, dict) or value.get("type") != "session":
                raise EmbeddingsLogError(f"{path}:1: not a session header: {line[:200]}")
            continue
        data = value.get("data") if isinstance(value, dict) else None
        if (
            not isinstance(data, dict)
            or value.get("type") != CALL
            or not isinstance(data.get("route"), str)
            or not isinstance(data.get("request"), dict)
            or "response" not in data
        ):
            raise EmbeddingsLogError(f"{path}:{number}: not an embeddings/call event: {line[:200]}")
        calls.append({**data, "seq": value.get("seq")})
    return calls


def log_problems(path: Path) -> list[str]:
    """What ``dsh-replay validate`` reports of the embeddings log ``path`` (``[]``: none)."""
    try:
        read_calls(path)
    except (EmbeddingsLogError, HarnessError) as exc:
        return [exc.message]
    return []


def call_summary(call: Mapping[str, Any]) -> str:
    """One line saying a recorded call: its route, model, inputs and vectors (``show``)."""
    request = call.get("request", {})
    value = request.get("input", request.get("requests", request.get("content")))
    inputs = len(value) if isinstance(value, list) else 1
    response = call.get("response")
    data = response.get("data", response.get("embeddings")) if isinstance(response, dict) else None
    vectors = len(data) if isinstance(data, list) else (1 if isinstance(response, dict) else 0)
    return (
        f"#{call.get('seq')} {call.get('route')} {call.get('model', '')}: {inputs} input(s), "
        f"{vectors} vector(s), HTTP {call.get('status', 200)}"
    )


def _scrub(value: Any, scrub: Any) -> Any:
    if isinstance(value, str):
        return scrub(value)
    if isinstance(value, list):
        return [_scrub(v, scrub) for v in value]
    if isinstance(value, dict):
        return {k: v if k in _VECTOR_KEYS else _scrub(v, scrub) for k, v in value.items()}
    return value


class EmbeddingCalls:
    """The embedding calls of one endpoint run (module doc).

    ``recorded``: the calls of the recording (replay and ``new_episodes``), ``live``: whether unmatched
    calls go upstream, ``masks``: the run's masks, ``cwd``: the run's cwd (a token of the check),
    ``scrub``: the run's scrubber (``str -> str``), applied to a request before it is compared, as the
    recording holds it scrubbed.
    """

    def __init__(
        self, directory: Path, recorded: bool, live: bool, masks: Masks | None, cwd: str, scrub: Any = None
    ) -> None:
        from ..session.tokens import Tokenizer

        self.directory = directory
        self.recorded = read_calls(directory / EMBEDDINGS_LOG) if recorded else []
        self.served = [False] * len(self.recorded)
        self.live = live
        self.masks = masks
        self.calls: list[dict[str, Any]] = []
        #: calls sent to the upstream (the run's summary counts them beside the model's)
        self.forwarded = 0
        self.problems: list[str] = []
        self._tokens = Tokenizer([], cwd, masks=masks)
        self.scrub = scrub if scrub is not None else (lambda text: text)

    def _key(self, value: Any) -> bytes:
        value = _scrub(value, self.scrub)
        return orjson.dumps(self._tokens.fresh().scrub_value(value), option=orjson.OPT_SORT_KEYS)

    def match(self, route: str, checked: Mapping[str, Any]) -> tuple[int | None, str]:
        """``(index, "")`` of the recorded call ``checked`` is served from, or ``(None, why)``."""
        from ..replay.requests import Difference, first_difference

        key = self._key(checked)
        nearest = None
        for i, call in enumerate(self.recorded):
            if self.served[i] or call["route"] != route:
                continue
            if nearest is None:
                nearest = i
            if self._key(call["request"]) == key:
                return i, ""
        if nearest is None:
            left = sum(1 for i, c in enumerate(self.recorded) if c["route"] == route)
            return None, (
                f"no recorded {route} call left to serve ({left} recorded, all served): re-record with the "
                "upstream"
            )
        recorded = self._tokens.fresh().scrub_value(self.recorded[nearest]["request"])
        sent = self._tokens.fresh().scrub_value(_scrub(dict(checked), self.scrub))
        found = first_difference(recorded, sent, "")
        where = "the request"
        if found is not None:  # the client's own path in its body: input[3], not .input[3]
            where = Difference("request", found[0].lstrip("."), found[1], found[2]).render()
        return None, (
            f"embedding call ({route}) matches no recorded one; the nearest unserved, recorded call "
            f"#{self.recorded[nearest].get('seq')}, differs: {where}"
        )

    async def serve(self, wire: Any, body: Mapping[str, Any], upstream: Any) -> tuple[int, Any]:
        """``(status, answer)`` of one call: a recorded answer, else (live) the upstream's, else a
        refusal (the API's 400 error body; the problem is the run's)."""
        checked = wire.checked(body)
        index, why = self.match(wire.PATH, checked)
        if index is not None:
            self.served[index] = True
            call = self.recorded[index]
            self.calls.append(call)
            return int(call.get("status", 200)), call["response"]
        if not self.live:
            if why not in self.problems:
                self.problems.append(why)
            return 400, wire.error_body(why, "ENDPOINT_EMBEDDING_MISMATCH", 400)
        self.forwarded += 1
        status, answer = await upstream.forward(wire, body)
        if status >= 400:  # the upstream's refusal reaches the client; a recording of it is none
            error = answer.get("error") if isinstance(answer, dict) else None
            said = error.get("message") if isinstance(error, dict) else None
            self.problems.append(
                f"embedding call ({wire.PATH}): upstream answered HTTP {status}: {said or answer}"
            )
            return status, answer
        self.calls.append(
            {
                "route": wire.PATH,
                "model": wire.model_of(body),
                "request": checked,
                "status": status,
                "response": answer,
            }
        )
        return status, answer

    def unused(self) -> list[str]:
        """The problem of the recorded calls no request was served from (``[]``: none)."""
        left = [c for c, served in zip(self.recorded, self.served, strict=True) if not served]
        if not left:
            return []
        listed = "; ".join(call_summary(c) for c in left[:5]) + (" ..." if len(left) > 5 else "")
        return [f"{len(left)} recorded embedding call(s) left unused: {listed}"]

    def write(self, scrub: Any) -> list[Path]:
        """Write the run's calls as the log (module doc); returns the files written (``[]``: the
        recorded log is kept, the run's calls being the same with the masks, or there were none)."""
        if not self.calls:
            return []
        path = self.directory / EMBEDDINGS_LOG
        previous = read_calls(path)
        keys = [self._key(c["request"]) + self._key(c["response"]) for c in self.calls]
        if [self._key(c["request"]) + self._key(c["response"]) for c in previous] == keys:
            return []
        lines = [orjson.dumps(HEADER)]
        for seq, call in enumerate(self.calls):
            data = {k: v for k, v in call.items() if k != "seq"}
            data["request"] = _scrub(call["request"], scrub)
            data["response"] = _scrub(call["response"], scrub)
            lines.append(orjson.dumps({"type": CALL, "seq": seq, "time": 0, "data": data}))
        return write_files(self.directory, [(path, b"\n".join(lines) + b"\n")])


class EmbeddingUpstream:
    """Forwards embedding calls to the upstream base URL with the endpoint's keys (by format key)."""

    def __init__(self, base_url: str, keys: Mapping[str, str | None], timeout: float = 600.0) -> None:
        self.base_url = base_url
        self.keys = keys
        self.timeout = timeout
        self._session: Any = None

    async def forward(self, wire: Any, body: Mapping[str, Any]) -> tuple[int, Any]:
        """``(status, JSON answer)`` of the upstream.

        Raises:
            LlmError: ``CONNECTION`` (unreachable, cut off), ``BAD_RESPONSE`` (an answer that is not JSON).
        """
        import aiohttp

        if self._session is None:
            self._session = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=self.timeout))
        url = format_url(self.base_url, wire.upstream_path)
        headers = {"Content-Type": "application/json", **wire.upstream_headers(self.keys.get(wire.PATH))}
        try:
            async with self._session.post(url, data=orjson.dumps(dict(body)), headers=headers) as response:
                data = await response.read()
                status = response.status
        except aiohttp.ClientError as exc:
            raise LlmError(f"upstream {url} could not be reached: {exc}", "CONNECTION", 502) from exc
        try:
            return status, orjson.loads(data)
        except orjson.JSONDecodeError as exc:
            raise LlmError(
                f"upstream {url} answered HTTP {status} that is not JSON: {exc}", "BAD_RESPONSE", 502
            ) from exc

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None


__all__ = [
    "CALL",
    "HEADER",
    "EmbeddingCalls",
    "EmbeddingUpstream",
    "EmbeddingsLogError",
    "call_summary",
    "log_problems",
    "read_calls",
]
