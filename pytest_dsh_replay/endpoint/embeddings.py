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

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import orjson

from ..errors import HarnessError
from ..layout import EMBEDDINGS_LOG
from ..llm import LlmError
from ..llm.wire.base import WireRequestError
from ..recording.embeddings import (
    call_problem,
    call_summary,
    line_problem,
    log_bytes,
    read_calls,
    scrubbed,
)
from ..session.masks import Masks
from .upstreams import format_url


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
    recording holds it scrubbed.
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
        from ..session.tokens import Tokenizer

        self.directory = directory
        self.recorded = read_calls(directory / EMBEDDINGS_LOG) if recorded else []
        self.served = [False] * len(self.recorded)
        self.live = live
        self.masks = masks
        self.calls: list[dict[str, Any]] = []
        #: calls sent to the upstream (the run's summary counts them beside the model's)
        self.forwarded = 0
        self._tokens = Tokenizer([], cwd, masks=masks)
        self.scrub = scrub if scrub is not None else (lambda text: text)
        #: the command a mismatch names to re-record the recording (the model calls' one)
        self.rerecord = rerecord

    def _key(self, value: Any) -> bytes:
        value = scrubbed(value, self.scrub)
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
        sent = self._tokens.fresh().scrub_value(scrubbed(dict(checked), self.scrub))
        found = first_difference(recorded, sent, "")
        where = "the request"
        if found is not None:  # the client's own path in its body: input[3], not .input[3]
            where = Difference("request", found[0].lstrip("."), found[1], found[2]).render()
        why = (
            f"embedding call ({route}) matches no recorded one; the nearest unserved, recorded call "
            f"#{self.recorded[nearest].get('seq')}, differs: {where}"
        )
        return None, f"{why}; if the change is intended, re-record: {self.rerecord}" if self.rerecord else why

    async def serve(self, wire: Any, body: Mapping[str, Any], upstream: Any) -> tuple[int, Any, str | None]:
        """``(status, answer, problem)`` of one call: a recorded answer, else (live) the upstream's as
        sent (``problem``: why it was not recorded, a refusal or an answer the log cannot hold), which
        the endpoint adds to the run's problems.

        Raises:
            WireRequestError: the body is not of the API's types (``llm.wire.embeddings.request_problem``).
            EmbeddingRefused: no recorded call matches and the plan forwards nothing.
            LlmError: the upstream could not be reached or answered no JSON
                (:meth:`EmbeddingUpstream.forward`).
        """
        found = wire.problem(body)
        if found is not None:
            raise WireRequestError(f"{found[0]}: refused, nothing forwarded", found[1])
        checked = wire.checked(body)
        index, why = self.match(wire.PATH, checked)
        if index is not None:
            self.served[index] = True
            call = self.recorded[index]
            self.calls.append(call)
            return call["status"], call["response"], None
        if not self.live:
            raise EmbeddingRefused(why)
        self.forwarded += 1
        status, answer = await upstream.forward(wire, body)
        if status >= 400:  # the upstream's refusal reaches the client; a recording of it is none
            error = answer.get("error") if isinstance(answer, dict) else None
            said = error.get("message") if isinstance(error, dict) else None
            return (
                status,
                answer,
                f"embedding call ({wire.PATH}): upstream answered HTTP {status}: {said or answer}",
            )
        call = {
            "route": wire.PATH,
            "model": wire.model_of(body),
            "request": checked,
            "status": status,
            "response": answer,
        }
        problem = call_problem(call) or line_problem(len(self.calls), call, self.scrub)
        if problem is not None:
            return status, answer, f"embedding call ({wire.PATH}) #{len(self.calls)}: {problem}"
        self.calls.append(call)
        return status, answer, None

    def unused(self) -> list[str]:
        """The problem of the recorded calls no request was served from (``[]``: none)."""
        left = [c for c, served in zip(self.recorded, self.served, strict=True) if not served]
        if not left:
            return []
        listed = "; ".join(call_summary(c, c.get("seq")) for c in left[:5]) + (
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
        previous = read_calls(previous_path)
        keys = [self._key(c["request"]) + self._key(c["response"]) for c in self.calls]
        if previous and [self._key(c["request"]) + self._key(c["response"]) for c in previous] == keys:
            return [(target / EMBEDDINGS_LOG, previous_path.read_bytes())]
        return [(target / EMBEDDINGS_LOG, log_bytes(self.calls, scrub))]

    def note(self, written: list[Path]) -> str:
        """What the run did with its calls (``""``: it made none): the log written or kept, and, when
        the run replayed part of them (``new_episodes``, ``changed``), what was served from the
        recording, not paid again (its recorded usage), and what was sent upstream."""
        if not self.calls:
            return ""
        what = "written" if any(p.name == EMBEDDINGS_LOG for p in written) else "kept (the same calls)"
        note = f"{len(self.calls)} embedding call(s): {EMBEDDINGS_LOG} {what}"
        kept = sum(self.served)
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


__all__ = ["EmbeddingCalls", "EmbeddingRefused", "EmbeddingUpstream"]
