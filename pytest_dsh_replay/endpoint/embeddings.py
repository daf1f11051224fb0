"""The endpoint's embedding calls (``llm/wire/embeddings.py``): recorded, checked and replayed beside the
conversations, in a log of their own, ``embeddings.jsonl``, whose format, reader, call rule and bytes
are the recording layer's (``recording/embeddings.py``).

Every call's body is first held to the API's types (``llm.wire.embeddings.request_problem``): a
``dimensions`` of ``"8"`` or an ``input`` of ``5`` is refused with a 400 in the API's shape, nothing
forwarded, a problem of the run (the log's reader refuses such a recorded call by the same rule).

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
is sent to the client as sent. A refusal (4xx, 5xx), an answer the log's rule refuses
(``recording.embeddings.call_problem``) or one whose line would pass the line limit is a problem of the
run and not recorded. The run's calls are the bytes :meth:`EmbeddingCalls.log_file` gives, which the
endpoint writes with its conversations in the same swap, into the directory or beside it in
``.dsh-kept`` as it writes them (scrubbed by the run's scrubber but the vectors; kept byte for byte when
the run's calls equal the recorded ones with the masks: stable re-recording).
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Mapping
from pathlib import Path
from typing import Any, NamedTuple

import orjson

from ..errors import MAX_INPUT_NESTING, HarnessError, nesting_exceeds
from ..layout import EMBEDDINGS_LOG, KEPT_DIR
from ..llm import LlmError
from ..llm.wire.base import WireRequestError
from ..recording.embeddings import (
    call_problem,
    call_summary,
    line_problem,
    log_bytes,
    read_calls,
    scrubbed,
    vectors_apart,
)
from ..session.masks import Masks
from .upstreams import format_url

#: how deep a call's request and answer sit in its line of the log (event, data, request): a value
#: nested deeper than the input limit less this would make a line every reader refuses
_CALL_DEPTH = 3


def _transient(status: int) -> bool:
    """Whether an upstream's HTTP error is one an SDK retries (408, 409, 429, 5xx: their rule)."""
    return status in (408, 409, 429) or status >= 500


class Served(NamedTuple):
    """What one embedding call is answered: ``status``, ``body`` (the answer's JSON bytes, encoded as a
    replay encodes the recorded answer, so a client gets the same bytes recording and replaying; an
    answer too deep to encode again, or no JSON at all, as it came), ``problem`` (why a live answer was
    not recorded, ``None``: it was, or it was replayed), ``headers`` (the upstream's retry headers) and
    ``content_type`` (the upstream's own for an answer that is no JSON)."""

    status: int
    body: bytes
    problem: str | None = None
    headers: Mapping[str, str] = {}
    content_type: str = "application/json"


class UpstreamAnswer(NamedTuple):
    """An upstream's answer to one embedding call: ``status``, ``raw`` (the body as sent), ``answer``
    (its JSON; when ``is_json`` is false, the body as text, undecodable bytes replaced), ``headers``
    (its retry headers: the client's SDK retries by them) and ``content_type``."""

    status: int
    raw: bytes
    answer: Any
    headers: dict[str, str]
    content_type: str
    is_json: bool = True


class EmbeddingRefused(HarnessError):
    """An embedding call the endpoint refused (a 400, nothing served or forwarded): it matches no
    recorded call (``ENDPOINT_EMBEDDING_MISMATCH``). A body not of the API's types is a
    :class:`~pytest_dsh_replay.llm.wire.base.WireRequestError` instead."""

    code = "ENDPOINT_EMBEDDING_MISMATCH"


class EmbeddingCalls:
    """The embedding calls of one endpoint run (module doc).

    ``recorded``: the calls of the recording (replay and ``new_episodes``), ``live``: whether unmatched
    calls go upstream, ``masks``: the run's masks, ``cwd``: the run's cwd (a token of the check),
    ``scrub``: the run's scrubber (``str -> str``), applied to a request before it is compared, as the
    recording holds it scrubbed; ``rerecord``: the command a mismatch names.
    """

    def __init__(
        self,
        directory: Path,
        recorded: bool,
        live: bool,
        masks: Masks | None,
        cwd: str,
        scrub: Any = None,
        rerecord: str = "",
    ) -> None:
        self.directory = directory
        self.recorded = read_calls(directory / EMBEDDINGS_LOG) if recorded else []
        #: whether :attr:`recorded` is the log as it is on disk (else it is read when the run is written)
        self._read = recorded
        self.served = [False] * len(self.recorded)
        self.live = live
        self.masks = masks
        self.calls: list[dict[str, Any]] = []
        #: calls sent to the upstream (the run's summary counts them beside the model's)
        self.forwarded = 0
        #: calls asked of the endpoint so far (a problem names its call by this number)
        self.asked = 0
        self._cwd = cwd
        self._tokenizer: Any = None  # made at the first key (most endpoints serve no embedding call)
        self.scrub = scrub if scrub is not None else (lambda text: text)
        self.rerecord = rerecord
        #: (route, request key) -> the unserved recorded calls of that request, in order: a call is
        #: matched in one lookup whatever the recording's size and the calls' order
        self._waiting: dict[tuple[str, bytes], deque[int]] = {}
        for i, call in enumerate(self.recorded):
            self._waiting.setdefault((call["route"], self._key(call["request"])), deque()).append(i)
        #: the request key -> the problem of its last transient upstream failure (a 429, a 5xx), which
        #: a client's retry that is answered takes back, as a model call's retried failure is dropped
        self._transient: dict[bytes, str] = {}

    @property
    def _tokens(self) -> Any:
        """The tokenizing context of requests' keys (the run's cwd, no session ids)."""
        if self._tokenizer is None:
            from ..session.tokens import Tokenizer

            self._tokenizer = Tokenizer([], self._cwd, masks=self.masks)
        return self._tokenizer

    def _key(self, value: Any) -> bytes:
        value = scrubbed(value, self.scrub)
        return orjson.dumps(self._tokens.fresh().scrub_value(value), option=orjson.OPT_SORT_KEYS)

    def _call_key(self, call: Mapping[str, Any]) -> bytes:
        """What a re-record compares of a call to keep the recorded bytes: request and answer with the
        masks, the answer's vectors exactly (a mask matching base64 text must not keep old vectors)."""
        rest, vectors = vectors_apart(call["response"])
        return self._key(call["request"]) + self._key(rest) + orjson.dumps(vectors)

    def match(self, route: str, checked: Mapping[str, Any], key: bytes) -> tuple[int | None, str]:
        """``(index, "")`` of the recorded call ``checked`` (its request key ``key``) is served from, or
        ``(None, why)``."""
        waiting = self._waiting.get((route, key))
        if waiting:
            return waiting.popleft(), ""
        return None, self._mismatch(route, checked)

    def _mismatch(self, route: str, checked: Mapping[str, Any]) -> str:
        """Why no recorded call serves ``checked``: the first difference from the nearest unserved
        recorded call of ``route``, or that none is left; with the command to re-record."""
        from ..replay.mismatch import changed_command
        from ..replay.requests import Difference, first_difference

        changed = changed_command(self.rerecord) if self.rerecord else None
        again = (f"; to re-record only the calls that changed: {changed}" if changed else "") + (
            f"; if the change is intended, re-record: {self.rerecord}" if self.rerecord else ""
        )
        nearest = next(
            (i for i, c in enumerate(self.recorded) if not self.served[i] and c["route"] == route), None
        )
        if nearest is None:
            left = sum(1 for c in self.recorded if c["route"] == route)
            return f"no recorded {route} call left to serve ({left} recorded, all served){again}"
        recorded = self._tokens.fresh().scrub_value(self.recorded[nearest]["request"])
        sent = self._tokens.fresh().scrub_value(scrubbed(dict(checked), self.scrub))
        found = first_difference(recorded, sent, "")
        where = "the request"
        if found is not None:  # the client's own path in its body: input[3], not .input[3]
            where = Difference("request", found[0].lstrip("."), found[1], found[2]).render()
        return (
            f"embedding call ({route}) matches no recorded one; the nearest unserved recorded call "
            f"(seq {self.recorded[nearest].get('seq')} of {EMBEDDINGS_LOG}) differs: {where}{again}"
        )

    async def serve(self, wire: Any, body: Mapping[str, Any], upstream: Any) -> Served:
        """What one call is answered (:class:`Served`): a recorded answer, else (live) the upstream's
        as sent with its retry headers (``problem``: why it was not recorded, an answer the log cannot
        hold, which the endpoint adds to the run's problems; a transient upstream refusal is one of
        :meth:`problems` instead, unless the client's retry is answered).

        Raises:
            WireRequestError: the body is not of the API's types (``llm.wire.embeddings.request_problem``),
                or nested too deep for its line of the log.
            EmbeddingRefused: no recorded call matches and the plan forwards nothing.
            LlmError: the upstream could not be reached (:meth:`EmbeddingUpstream.forward`).
        """
        self.asked += 1
        found = wire.problem(body)
        if found is None and nesting_exceeds(body, MAX_INPUT_NESTING - _CALL_DEPTH):
            found = (
                f"nested deeper than {MAX_INPUT_NESTING - _CALL_DEPTH} levels (its line in the log holds it "
                f"{_CALL_DEPTH} levels down)",
                "$",
            )
        if found is not None:
            raise WireRequestError(f"{found[0]}: refused, nothing forwarded", found[1])
        checked = wire.checked(body)
        key = self._key(checked)
        index, why = self.match(wire.route, checked, key)
        if index is not None:
            self.served[index] = True
            call = self.recorded[index]
            self.calls.append(call)
            return Served(call["status"], orjson.dumps(call["response"]))
        if not self.live:
            raise EmbeddingRefused(why)
        self.forwarded += 1
        got = await upstream.forward(wire, body)
        status, raw, answer = got.status, got.raw, got.answer
        name = f"embedding call #{self.asked} ({wire.route})"
        if not got.is_json:
            # no JSON (a gateway's page, an empty 503): nothing of ours to encode, so it goes as it came,
            # a key it quotes scrubbed, and is never recorded (a recorded call holds a JSON answer)
            raw = self.scrub(raw.decode("utf-8", "surrogateescape")).encode("utf-8", "surrogateescape")
            problem = self._record(wire, body, checked, key, status, answer or "(an empty body)", False)
            said = None if problem is None else f"{name}: {problem}"
            return Served(status, raw, said, got.headers, got.content_type)
        deep = nesting_exceeds(answer, MAX_INPUT_NESTING - _CALL_DEPTH)
        if not deep:
            # sent as a replay sends it (the same bytes either way), a key it quotes scrubbed (the
            # vectors never are); an answer nested too deep to encode again goes as it came
            answer = scrubbed(answer, self.scrub)
            raw = orjson.dumps(answer)
        problem = self._record(wire, body, checked, key, status, answer, deep)
        return Served(status, raw, None if problem is None else f"{name}: {problem}", got.headers)

    def _record(
        self,
        wire: Any,
        body: Mapping[str, Any],
        checked: Any,
        key: bytes,
        status: int,
        answer: Any,
        deep: bool,
    ) -> str | None:
        """Record the upstream's answer to ``checked``; returns why it was not (``None``: it was, or it
        is a transient refusal kept for :meth:`problems` until a retry is answered)."""
        if status >= 400:  # the upstream's refusal reaches the client; a recording of it is none
            error = answer.get("error") if isinstance(answer, dict) else None
            said = error.get("message") if isinstance(error, dict) else None
            refusal = f"upstream answered HTTP {status}: {said or answer}"
            if not _transient(status):
                return refusal
            self._transient[key] = f"embedding call #{self.asked} ({wire.route}): {refusal}"
            return None
        self._transient.pop(key, None)  # a retry answered: its failed attempts are not the run's problem
        if deep:
            return f"the answer is nested deeper than {MAX_INPUT_NESTING - _CALL_DEPTH} levels: not recorded"
        call = {
            "route": wire.route,
            "model": wire.model_of(body),
            "request": checked,
            "status": status,
            "response": answer,
        }
        problem = call_problem(call) or line_problem(len(self.calls), call, self.scrub)
        if problem is None:
            self.calls.append(call)
        return problem

    def problems(self) -> list[str]:
        """The run's transient upstream failures no answered retry took back (the client gave up)."""
        return list(self._transient.values())

    def unused(self) -> list[str]:
        """The problem of the recorded calls no request was served from (``[]``: none)."""
        left = [
            (n, c)
            for n, (c, served) in enumerate(zip(self.recorded, self.served, strict=True), 1)
            if not served
        ]
        if not left:
            return []
        listed = "; ".join(call_summary(c, c.get("seq"), n) for n, c in left[:5]) + (
            " ..." if len(left) > 5 else ""
        )
        return [f"{len(left)} recorded embedding call(s) left unused: {listed}"]

    def log_file(self, target: Path, scrub: Any) -> list[tuple[Path, bytes]]:
        """``[(target / embeddings.jsonl, bytes)]`` of the run's calls for the writer's swap, ``[]`` when
        the run made none. When they equal the recorded log's calls with the masks, its bytes are kept
        (stable re-recording).

        Raises:
            EmbeddingsLogError, LogReadError, ReplayParseError: the recorded log does not read.
        """
        if not self.calls:
            return []
        previous_path = self.directory / EMBEDDINGS_LOG
        previous = self.recorded if self._read else read_calls(previous_path)
        keys = [self._call_key(c) for c in self.calls]
        if previous and [self._call_key(c) for c in previous] == keys:
            return [(target / EMBEDDINGS_LOG, previous_path.read_bytes())]
        return [(target / EMBEDDINGS_LOG, log_bytes(self.calls, scrub))]

    def note(self, written: list[Path]) -> str:
        """What the run did with its calls (``""``: it made none): the log written or kept, and, when
        the run replayed part of them (``new_episodes``, ``changed``), what was served from the
        recording, not paid again (its recorded usage), and what was sent upstream."""
        if not self.calls:
            return ""
        logs = [p for p in written if p.name == EMBEDDINGS_LOG]
        what = "kept (the same calls)"
        if logs:  # into the directory, or with the run kept aside
            what = (
                f"written with the run kept in {logs[0].parent}"
                if logs[0].parent.name == KEPT_DIR
                else "written"
            )
        note = f"{len(self.calls)} embedding call(s): {EMBEDDINGS_LOG} {what}"
        kept = sum(self.served)
        left = len(self.recorded) - kept
        if left and self.live:  # new_episodes, changed: the log is this run's calls
            note += f"; {left} recorded call(s) this run did not make were dropped from it"
        if kept and self.live:
            tokens = sum(
                _input_tokens(c["response"]) for c, s in zip(self.recorded, self.served, strict=True) if s
            )
            note += (
                f"; {kept} served from the recording (not paid again: {tokens} input tokens, their recorded "
                f"usage), {self.forwarded} sent upstream"
            )
        return note


def _input_tokens(response: Any) -> int:
    """The input tokens an embedding answer's usage says (OpenAI's ``usage.prompt_tokens``; 0 when it
    says none, as Gemini's answers do)."""
    usage = response.get("usage") if isinstance(response, dict) else None
    tokens = usage.get("prompt_tokens") if isinstance(usage, dict) else None
    return tokens if isinstance(tokens, int) and not isinstance(tokens, bool) else 0


class EmbeddingUpstream:
    """Forwards embedding calls to the upstream base URL with the endpoint's keys (by format key);
    ``timeout``: seconds a call may take in all (the model calls' upstream timeout)."""

    def __init__(self, base_url: str, keys: Mapping[str, str | None], timeout: float = 600.0) -> None:
        self.base_url = base_url
        self.keys = keys
        self.timeout = timeout
        self._session: Any = None
        #: the calls in flight, each with the reason it was cancelled (``""``: not cancelled)
        self._in_flight: dict[asyncio.Future[tuple[int, bytes, dict[str, str], str]], str] = {}

    async def forward(self, wire: Any, body: Mapping[str, Any]) -> UpstreamAnswer:
        """The upstream's answer (:class:`UpstreamAnswer`), whatever its status and body: one that is no
        JSON is the upstream's word too, passed on as sent.

        Raises:
            LlmError: ``CONNECTION`` (unreachable, cut off, timed out), ``CANCELLED`` (:meth:`cancel`: a
                stop whose grace ran out).
        """
        url = format_url(self.base_url, wire.upstream_path)
        headers = {"Content-Type": "application/json", **wire.upstream_headers(self.keys.get(wire.PATH))}
        call = asyncio.ensure_future(self._post(url, orjson.dumps(dict(body)), headers))
        self._in_flight[call] = ""
        try:
            status, data, retry, content_type = await asyncio.shield(call)
        except asyncio.CancelledError:
            reason = self._in_flight.get(call, "")
            current = asyncio.current_task()
            if not reason or (current is not None and current.cancelling()):
                call.cancel()
                raise
            raise LlmError(f"upstream {url}: {reason}", "CANCELLED", 503) from None
        finally:
            self._in_flight.pop(call, None)
        try:
            return UpstreamAnswer(status, data, orjson.loads(data), retry, content_type)
        except orjson.JSONDecodeError:
            text = data.decode("utf-8", "replace")
            return UpstreamAnswer(status, data, text, retry, content_type, is_json=False)

    async def _post(
        self, url: str, data: bytes, headers: Mapping[str, str]
    ) -> tuple[int, bytes, dict[str, str], str]:
        import aiohttp

        from .record import RETRY_HEADERS

        if self._session is None:
            self._session = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=self.timeout))
        try:
            async with self._session.post(url, data=data, headers=headers) as response:
                retry = {k: v for k in RETRY_HEADERS if (v := response.headers.get(k)) is not None}
                content_type = response.headers.get("Content-Type", "application/octet-stream")
                return response.status, await response.read(), retry, content_type
        except (aiohttp.ClientError, TimeoutError) as exc:
            said = str(exc) or type(exc).__name__
            raise LlmError(f"upstream {url} could not be reached: {said}", "CONNECTION", 502) from exc

    def cancel(self, reason: str) -> int:
        """End the calls in flight now, each failing with ``reason`` (``CANCELLED``, HTTP 503); returns
        how many were cancelled."""
        for call in self._in_flight:
            self._in_flight[call] = reason
            call.cancel()
        return len(self._in_flight)

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None


__all__ = ["EmbeddingCalls", "EmbeddingRefused", "EmbeddingUpstream", "Served"]
