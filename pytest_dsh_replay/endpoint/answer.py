"""One model call answered (:class:`Answer`): the model's chunks sent to the client in the call's wire
format, whole or as a stream, the conversation's log fed as they come, and a failure told to the run.

The endpoint (:mod:`.server`) reads and binds the request and makes the call's
:class:`~..llm.ModelRequest`; an :class:`Answer` takes it from the model's first chunk to the client's
last byte:

* **whole** (a request that does not ask for a stream): every chunk, then one JSON body;
* **stream**: server-sent events; a live answer (record plans) reaches the client chunk by chunk as the
  upstream sends it, scrubbed on its way (:class:`~..llm.secrets.StreamScrubber`: a secret split over
  two chunks is found whole), a replayed one is whole at once (one write). A client that stops reading
  mid-stream leaves the upstream's answer to be read to its end (it is paid for) and recorded whole;
* **abandoned** (recording): a client gone before its answer was sent (a whole answer: before it is
  written; a stream: before its first byte), as an SDK leaves a call that outlasted its timeout, to
  retry it. Its conversation fails and its log is held (:meth:`~.record.ConversationLog.hold`), as
  for a transient failure: the same request again (the SDK's retry) takes its place, and is recorded
  alone; with no retry, the conversation is left out of the recording, a problem of the run. A retry
  that comes while the abandoned attempt still waits for the upstream finds it in :class:`Attempts`,
  abandons it then and ends its upstream call;
* **failure** (:meth:`Answer.failed`): the status the client gets, the run's problem it is (an upstream
  refusing the credentials, a wrong upstream route, a defect), what becomes of the conversation (left
  out of the recording, or recorded as it happened until a retry is answered) and of its log (held for
  a retry of a transient failure, else failed).
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Mapping
from typing import Any

import orjson

from ..agent.assembler import BlockAssembler
from ..errors import HarnessError
from ..llm import LlmError, ModelRequest, StreamChunk
from ..llm.errors import ErrorAnswer, StreamError
from ..llm.secrets import StreamScrubber
from ..llm.wire.base import WireFormat
from ..recording.kept import DEFECT_CODE
from .conversations import Binding
from .record import (
    NOT_THE_CLIENTS,
    ConversationLog,
    UnreadableAnswer,
    UpstreamError,
    answer_content,
    transient,
)

CLIENT_GONE = "the client closed the connection before the answer ended"
#: why an abandoned attempt's conversation failed (no retry of it came)
ABANDONED = "the client closed the connection before its answer was sent, and no retry of the request came"
#: the header of an error answer its SDK must raise at once, not retry
NO_RETRY = {"x-should-retry": "false"}
#: the headers of a streamed answer
_STREAM_HEADERS = {"Content-Type": "text/event-stream", "Cache-Control": "no-cache"}


class Answer:
    """The answer to one model call of ``binding``'s conversation (module doc).

    Args:
        endpoint: the endpoint serving it (its plan, scrubber, binder, the run's problems).
        fmt: the call's wire format; ``request``: the aiohttp request; ``body``: its JSON body.
        log: the conversation's log while recording (``None``: replaying).
        call: the model request made of it.
    """

    def __init__(
        self,
        endpoint: Any,
        fmt: WireFormat,
        request: Any,
        body: Mapping[str, Any],
        binding: Binding,
        log: ConversationLog | None,
        call: ModelRequest,
    ) -> None:
        self.endpoint = endpoint
        self.fmt = fmt
        self.request = request
        self.body = body
        self.binding = binding
        self.conv = binding.conversation
        self.log = log
        self.live = endpoint.plan.needs_live_model
        self.assembler = BlockAssembler()
        self.response_id = f"dsh-{uuid.uuid4().hex[:24]}"
        self.model_name = call["model"] or "dsh-replay"
        #: what the model gave before a failure (none: nobody answered)
        self.received: list[StreamChunk] = []
        #: the retry headers of a transient failure, once it happened
        self.retry: list[Mapping[str, str]] = []
        #: the client stopped reading (it left after the first chunks)
        self.gone = False
        #: the client left before its answer was sent (:meth:`abandon`)
        self.abandoned = False
        #: the call handed its conversation back (answered, failed or abandoned): ``_call_ended`` of
        #: the endpoint leaves it alone (a retry may have bound it since)
        self.ended = False
        #: the handler's task (the upstream call :meth:`Attempts.take_over` ends runs in it)
        self.task = asyncio.current_task()
        #: the conversation's state once the request is bound: the key a retry finds it by
        self.state = self.conv.hashes[-1] if self.conv.hashes else 0
        #: recording: an answer not started yet is an attempt a retry can take the place of
        self.attempts: Attempts | None = endpoint.attempts if self.live and log is not None else None
        # while recording, what the client is sent is scrubbed as it goes (a model may quote the key):
        # a secret split over two chunks is found whole, a chunk holding none is sent at once
        self.client = StreamScrubber(endpoint.scrubber) if self.live else None

    async def send(self, stream: Any) -> Any:
        """The client's response to the model's ``stream`` of chunks."""
        if self.attempts is not None:
            self.attempts.add(self)
            if (
                self.binding.kind == "retry"
                and self.endpoint.failed_conversations.get(self.conv.id) == ABANDONED
            ):
                del self.endpoint.failed_conversations[self.conv.id]  # the retry takes the attempt's place
        try:
            if not self.fmt.wants_stream(self.body):
                return await self._whole(stream)
            return await self._stream(stream)
        finally:
            self._answer_starts()

    def _answer_starts(self) -> None:
        """Its answer is on its way (or the call ended): no retry takes its place from now on."""
        if self.attempts is not None:
            self.attempts.discard(self)
            self.attempts = None

    def _sent_retry_headers(self, headers: Mapping[str, str]) -> None:
        """The recording's entry of this failed call keeps the retry headers its client is sent
        (``retryHeaders``, replay/override.py), which a replay sends again: a client's retries are
        decided by them, and each retry is a call of the recording of its own."""
        watched = self.endpoint.watched
        entries = watched.entries.get(self.conv.id) if watched is not None else None
        if entries and entries[-1].get("kind") == "throw":
            entries[-1]["retryHeaders"] = dict(headers)

    # -- a client gone before its answer ---------------------------------------------------------

    def client_left(self) -> bool:
        """Whether the client of a recording's call closed its connection (a replay's never counts)."""
        if not self.live or self.log is None:
            return False
        transport = self.request.transport
        return transport is None or transport.is_closing()

    def abandon(self) -> None:
        """The client left before its answer was sent (module doc, *abandoned*): the conversation fails
        and its log is held, so that the same request again binds as this call's retry and replaces it;
        the answer still to come is nobody's (:attr:`abandoned`: it feeds nothing)."""
        self._answer_starts()
        self.abandoned = self.ended = True
        endpoint, conv = self.endpoint, self.conv
        endpoint.failed_conversations[conv.id] = ABANDONED
        if self.log is not None:
            self.log.hold(ABANDONED, "ABORTED", answered=False)
        endpoint.binder.failed(conv)

    def _left(self) -> Any:
        """The response of a call whose client left before its answer: abandoned (nobody reads it)."""
        if not self.abandoned:
            self.abandon()
        return error_response(self.fmt, ABANDONED, "ABORTED", 499)

    # -- the model's chunks ----------------------------------------------------------------------

    def _took(self, chunk: StreamChunk) -> None:
        self.received.append(chunk)
        self.assembler.feed(chunk)
        if self.log is not None:
            self.log.chunk(chunk)

    def _to_client(self, chunk: StreamChunk | None) -> list[Any]:
        """What the client is sent of ``chunk`` (``None``: the end, what the scrubber held back)."""
        if self.client is None:
            return [chunk] if chunk is not None else []
        return self.client.feed(chunk) if chunk is not None else self.client.close()

    def error(self, exc: BaseException) -> Any:
        """The client's error response to ``exc``, which ended the call (:meth:`failed`), in its API's
        error shape; a client that left before it gets none (:meth:`abandon`)."""
        if self.abandoned or self.client_left():  # nobody to tell: the attempt's retry will be told
            return self._left()
        failure = self.failed(exc)
        if isinstance(exc, ErrorAnswer) and exc.status not in NOT_THE_CLIENTS:
            # the provider's word on the client's request (its code, type, param): passed on as said
            return answer_response(exc, self.endpoint.scrubber, *self.retry)
        return error_response(self.fmt, *failure, *self.retry)

    async def _whole(self, stream: Any) -> Any:
        from aiohttp import web

        chunks: list[Any] = []
        try:
            async for chunk in stream:
                if self.abandoned:  # a retry took its place: the rest is nobody's
                    break
                chunks += self._to_client(chunk)
                self._took(chunk)
            if self.abandoned or self.client_left():
                return self._left()
            chunks += self._to_client(None)
            whole = self.fmt.encode_whole(
                chunks, model=self.model_name, response_id=self.response_id, body=self.body
            )
        except Exception as exc:
            return self.error(exc)
        self.finished()
        return web.json_response(whole, dumps=lambda v: orjson.dumps(v).decode())

    async def _stream(self, stream: Any) -> Any:
        from aiohttp import web

        early: StreamError | None = None
        try:
            first = await stream.__anext__()
        except StopAsyncIteration:
            first = None
        except StreamError as exc:
            # the provider's error event before any part of its answer: a stream holding that event,
            # as the provider sent one (never an HTTP error of ours)
            first, early = None, exc
        except Exception as exc:
            return self.error(exc)
        if self.abandoned or self.client_left():
            return self._left()
        encoder = self.fmt.stream_encoder(self.model_name, self.response_id, body=self.body)
        response = None
        if self.live:  # a live answer reaches the client chunk by chunk, as the upstream sends it
            self._answer_starts()
            response = web.StreamResponse(headers=_STREAM_HEADERS)
            try:
                await response.prepare(self.request)
            except ConnectionError:  # it left between the look above and the headers' write
                return self._left()
        pending: list[bytes] = []
        try:
            if early is not None:
                raise early
            await self._relay(stream, first, encoder, response, pending)
        except Exception as exc:
            message, code, _status = self.failed(exc)
            if isinstance(exc, ConnectionError) or self.gone:
                return response  # nobody to send the rest to
            pending += self._encoded(None, encoder)
            pending += encoder.error(message, code)
        else:
            pending += self._encoded(None, encoder)
            self.finished()
            if self.gone:
                return response
        pending += encoder.close()
        if response is None:  # a replayed answer is whole at once: one write, no chunked encoding
            return web.Response(body=b"".join(pending), headers=_STREAM_HEADERS)
        try:
            await response.write(b"".join(pending))
            await response.write_eof()
        except ConnectionError:
            # the client read what it wanted and left at the very end: the call stands as recorded,
            # as for one that left earlier (``_relay``)
            self.gone = True
        return response

    def _encoded(self, chunk: StreamChunk | None, encoder: Any) -> list[bytes]:
        """The events of ``chunk`` as the client is sent it (``None``: the end of the chunks)."""
        return [event for sent in self._to_client(chunk) for event in encoder.feed(sent)]

    async def _relay(
        self, stream: Any, first: StreamChunk | None, encoder: Any, response: Any, pending: list[bytes]
    ) -> None:
        """Feed the model's chunks, ``first`` then the rest, to ``pending``; a live ``response`` is written
        as they come, until its client stops reading (:attr:`gone`)."""
        if first is None:
            return
        self._took(first)
        pending += self._encoded(first, encoder)
        async for chunk in stream:
            self._took(chunk)
            pending += self._encoded(chunk, encoder)
            if response is not None and pending and not self.gone:
                try:
                    await response.write(b"".join(pending))
                except ConnectionError:
                    # a client that read what it wanted and left: the upstream's answer is read to its
                    # end (it is paid for) and recorded whole, so a replay serves it and the client
                    # leaves at the same place again
                    self.gone = True
                pending.clear()

    # -- the end of the call -----------------------------------------------------------------------

    def finished(self) -> None:
        """The model's answer ended: the conversation goes on with it (or, an error answer, failed)."""
        endpoint, conv, log, assembler = self.endpoint, self.conv, self.log, self.assembler
        self.ended = True
        if assembler.finish_kind in ("error", "aborted"):
            if log is not None:
                log.end_call(assembler, len(conv.messages))
            if self.live:
                endpoint.errored_conversations[conv.id] = str(
                    assembler.finish.get("message", "an error answer")
                )
            endpoint.binder.failed(conv)
            return
        content = answer_content(assembler)
        has_calls = any(b.get("type") == "tool-call" for b in content)
        # answered: a failure before it was a retried call, not the conversation's end; an abandoned
        # attempt is taken back only by its retry (``send``): another request leaves it the end
        if endpoint.failed_conversations.get(conv.id) != ABANDONED:
            endpoint.failed_conversations.pop(conv.id, None)
        endpoint.errored_conversations.pop(conv.id, None)
        if log is not None:
            log.end_call(assembler, len(conv.messages) + 1)
        endpoint.binder.answered(conv, {"role": "assistant", "content": content}, turn_ended=not has_calls)

    def failed(self, exc: BaseException) -> tuple[str, str, int]:
        """``(message, code, status)`` of the client's error answer to ``exc``, which ended the call; the
        run is told (a problem, the conversation failed or errored) and the log ends (held for a retry of
        a transient failure). A ``BaseException`` that is no ``Exception`` is raised again. An
        abandoned call's failure is nobody's: nothing is told."""
        if self.abandoned:
            return ABANDONED, "ABORTED", 499
        message, code, status = self._status(exc)
        # an upstream's error may echo the key it was sent: what reaches the client is scrubbed
        message = self.endpoint.scrubber.scrub_fixed(message)
        if self.live and not (isinstance(exc, LlmError) and exc.recorded):  # a recorded failure replayed
            self._upstream_problem(exc, message, status)
            self._mark_conversation(exc, message)
        self._end(exc, message, code)
        return message, code, status

    def _status(self, exc: BaseException) -> tuple[str, str, int]:
        endpoint = self.endpoint
        if isinstance(exc, LlmError):
            return exc.message, exc.code, exc.status or 502
        if isinstance(exc, HarnessError):  # the replay engine refused to serve: a run problem
            return exc.message, exc.code, 400
        if isinstance(exc, ConnectionError):  # the client went away while its answer was sent
            endpoint.problem(f"conversation #{self.conv.rank + 1}: {CLIENT_GONE}")
            return CLIENT_GONE, "ABORTED", 499
        if isinstance(exc, Exception):  # a defect of ours: a JSON error for the client, a failed run
            message = (
                f"endpoint error: {type(exc).__name__}: {exc} (raised at {raised_at(exc)}, serving a call of "
                f"conversation #{self.conv.rank + 1}); a defect of dsh-replay: the run failed, and a run it "
                "kept is not accepted"
            )
            endpoint.problems.append(message)
            return message, DEFECT_CODE, 500
        raise exc

    def _upstream_problem(self, exc: BaseException, message: str, status: int) -> None:
        """The run's problem of an upstream answer that is no recording of the agent: its credentials
        refused, or a route that is not the API's (a wrong base URL)."""
        endpoint, fmt = self.endpoint, self.fmt
        if isinstance(exc, LlmError) and exc.code == "AUTH":
            # an answer to missing or wrong credentials is no recording of the agent: recording it
            # would make the commonest set-up mistake a green fixture
            # (the report's one note says that nothing is written)
            env, api_key = endpoint.keys[fmt.PATH]
            holder = endpoint.config.key_holder
            key = (
                f"is not set in {holder}'s environment: set it there (the agent's own key is never "
                "forwarded upstream)"
                if not api_key
                else "was refused"
            )
            tried = f" at {exc.url}" if isinstance(exc, UpstreamError) and exc.url else ""
            endpoint.problem(
                f"upstream refused the credentials (HTTP {status}{tried}: {message}); the key in ${env} {key}"
            )
        elif isinstance(exc, UpstreamError) and exc.status in NOT_THE_CLIENTS:
            # the route is not there: a wrong upstream base URL, not the agent's outcome; recording
            # its answer would make the mistake a green fixture that replays the 404
            endpoint.problem(
                f"upstream {exc.url} answered HTTP {status} to {fmt.PATH} ({message}): that URL is not "
                f"the API's route; check the upstream base URL ({endpoint.config.upstream_flag}: e.g. "
                "https://api.openai.com/v1 or https://api.anthropic.com); nothing of this call was "
                "recorded"
            )

    def _mark_conversation(self, exc: BaseException, message: str) -> None:
        """A recording's conversation after the failure: left out (no answer of the agent's model, or
        one that cannot be read whole; the client gone; the call cancelled by the endpoint's stop,
        an answer no provider gave), or recorded as it happened until a retry of it is answered (an
        upstream error)."""
        endpoint, conv = self.endpoint, self.conv
        no_answer = isinstance(exc, LlmError) and (
            exc.code in ("AUTH", "CANCELLED")  # cancelled: the endpoint's stop, not the provider's answer
            or (isinstance(exc, UpstreamError) and exc.status in NOT_THE_CLIENTS)
            or (exc.code == "CONNECTION" and not self.received)
        )
        if isinstance(exc, UnreadableAnswer) or no_answer:
            endpoint.failed_conversations[conv.id] = message
        elif isinstance(exc, LlmError):
            endpoint.errored_conversations[conv.id] = message
        elif isinstance(exc, ConnectionError):
            endpoint.failed_conversations[conv.id] = message

    def _end(self, exc: BaseException, message: str, code: str) -> None:
        """End the call's log and its conversation's turn after ``exc``."""
        from ..replay.errors import UnmatchedSessionError

        self.ended = True
        log = self.log
        recorded = getattr(exc, "retry_headers", None)
        if log is not None and self.live and transient(exc):
            log.hold(message, code)  # a retry of the same request is the call again (record.py)
            self.retry[:] = [recorded if isinstance(recorded, Mapping) else {}]
            self._sent_retry_headers(self.retry[0])
        elif log is None and isinstance(recorded, Mapping):
            # a replayed transient failure: its client is sent the headers the recording's was (a
            # ``throw`` entry's ``retryHeaders``), so its SDK retries as often as it did
            self.retry[:] = [recorded]
        if log is not None and not (self.live and transient(exc)):
            log.fail(message, code)
        if isinstance(exc, UnmatchedSessionError):
            # it took no recorded conversation: the next request is bound as if it never came
            self.endpoint.binder.discard(self.binding)
        else:
            self.endpoint.binder.failed(self.conv)


class Attempts:
    """A recording's calls whose answer has not started, by the state their request leaves their
    conversation in (its last chain hash, :func:`~.conversations.prefix_hashes`): where the same
    request again finds an attempt its client abandoned while it still waits for the upstream."""

    def __init__(self) -> None:
        self._waiting: dict[int, list[Answer]] = {}

    def add(self, answer: Answer) -> None:
        """``answer`` waits for the model's answer."""
        self._waiting.setdefault(answer.state, []).append(answer)

    def discard(self, answer: Answer) -> None:
        """``answer`` started (or ended): no retry takes its place."""
        waiting = self._waiting.get(answer.state)
        if waiting is not None and answer in waiting:
            waiting.remove(answer)
            if not waiting:
                del self._waiting[answer.state]

    def left(self, upstream: Any) -> int:
        """At the endpoint's stop: every waiting call whose client left is abandoned now and its call to
        ``upstream`` ended (nobody is left to answer, and no retry can come: an upstream that stalls
        must not hold the stop). Returns how many were."""
        return sum(self.take_over(state, upstream) for state in list(self._waiting))

    def take_over(self, state: int, upstream: Any) -> int:
        """A request arrived that leaves a conversation in ``state``: each waiting call of the same
        request whose client left is abandoned (:meth:`Answer.abandon`: the request binds as its retry)
        and its call to ``upstream`` (an :class:`~.record.UpstreamModel`, or ``None``) ended. Returns
        how many were."""
        left = [answer for answer in self._waiting.get(state, ()) if answer.client_left()]
        for answer in left:
            answer.abandon()
            if upstream is not None and answer.task is not None:
                upstream.drop(answer.task, ABANDONED)
        return len(left)


def raised_at(exc: BaseException) -> str:
    """``recording/models.py:486 in _usage``: where ``exc`` was raised (its innermost frame), the path
    from the package's directory when it is the package's."""
    import traceback

    frames = traceback.extract_tb(exc.__traceback__)
    if not frames:
        return "an unknown place"
    last = frames[-1]
    path = last.filename.replace("\\", "/")
    mark = "/pytest_dsh_replay/"
    where = path.split(mark, 1)[1] if mark in path else path
    return f"{where}:{last.lineno} in {last.name}"


def answer_response(exc: ErrorAnswer, scrubber: Any, headers: Mapping[str, str] | None = None) -> Any:
    """A provider's error answer (``exc``, recorded or live) as the client's response: its status, body
    and content type as it sent them, a secret the body quotes scrubbed with ``scrubber`` (the run's
    :class:`~..llm.secrets.SecretScrubber`: as everything a client is sent); ``headers`` as for
    :func:`error_response`."""
    from aiohttp import web

    text = exc.body.decode("utf-8", "surrogateescape")
    body = scrubber.scrub_fixed(text).encode("utf-8", "surrogateescape")
    sent = dict(headers) if headers is not None else dict(NO_RETRY)
    if exc.content_type:
        sent["Content-Type"] = exc.content_type
    return web.Response(body=body, status=exc.status or 502, headers=sent)


def error_response(
    fmt: WireFormat, message: str, code: str, status: int, headers: Mapping[str, str] | None = None
) -> Any:
    """The format's error body as the client's response; ``headers``: an upstream's retry headers (a
    transient failure the client's SDK retries), else ``x-should-retry: false`` (the SDK raises at once)."""
    from aiohttp import web

    body = orjson.dumps(fmt.error_body(message, code, status))
    sent = dict(headers) if headers is not None else NO_RETRY
    return web.Response(body=body, status=status, content_type="application/json", headers=sent)


__all__ = [
    "ABANDONED",
    "CLIENT_GONE",
    "NO_RETRY",
    "Answer",
    "Attempts",
    "answer_response",
    "error_response",
    "raised_at",
]
