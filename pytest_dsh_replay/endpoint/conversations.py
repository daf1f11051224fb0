"""Binding each request the endpoint receives to a conversation (one conversation = one session).

A client of an HTTP model API sends its whole history with every request; the endpoint infers which
conversation a request belongs to from that history. The rules, in order (store-and-fork.md's terms):

1. **Explicit headers** win: ``X-Dsh-Conversation: NAME`` names the conversation (continued when it
   exists, created otherwise); ``X-Dsh-Parent: NAME`` names the parent of a new conversation (and
   limits inference to that parent's children). A named conversation whose history is not a prefix of
   the request is an error (:class:`BindingError`), never re-guessed.
2. **Continue** conversation C when C's messages so far (its system prompt, the requests' messages and
   the answers served) are a prefix of the request (the longest such C). A request equal to C's history
   retries C's failed last call, or, when that call was answered, continues C: the answer sent back
   unchanged as the last message lets the model go on (Anthropic's ``pause_turn``, a long server-tool
   turn; an assistant prefill).
3. **Continued by the client** (its answer re-spelled): when the request begins with the whole request
   of C's last call (its messages, the same system prompt) and then, where C's answer stands, an
   assistant message that is not that answer (smolagents' ``ToolCallingAgent`` sends the model's tool
   calls back as a text ``Calling tools: [...]`` and their results as user messages): C went on, as the
   client spells it. The request starts a new conversation, a child of C seeded with the history as
   sent (:attr:`Binding.respelled`), so each call is checked exactly as sent; C's open tool calls go
   on in it (not a crash, not a sub-agent). Found by C's last request's hash: one lookup per message.
4. **Fork child** of C when the request shares with C a prefix that ends at a completed exchange (a
   ``turn/end``: an answer without tool calls) and then diverges: the child's seed is C's events through
   that ``turn/end`` (``seedLength``, store-and-fork.md §6).
5. Anything else is a **new conversation**: a **spawn child** of a conversation whose tool call is open
   at that moment (it answered with tool calls whose results have not come back), told by the call's id
   in the request's history (a handoff), else by the call's argument text in its first user message,
   else by being the only one (:func:`_infer_parent`); else a **new root**.

Messages are compared by a key that ignores what clients do not echo back: reasoning blocks, a
message's provider fields (``provider-fields`` blocks, ``llm/wire/fields.py``), a server tool's blocks
(``provider-block``: an SDK echoes them re-serialized, its ``null`` fields left out), the split of a text
into parts, content part wrappers, the spelling of tool-call arguments (compared as JSON values when
they parse). A recording numbers its conversations by what each asked first, not by arrival
(``recording.harvest.content_order``: parents before children; ``session.jsonl`` is a root), so the same
traffic in another arrival order writes the same files; when a replay binds identical first requests,
the recorded one whose parent is the live parent's recording comes first
(``replay.model.ReplayModel._of_parent``), creation order (:attr:`Conversation.rank`) breaks the ties
left. The ``X-Dsh-*`` headers shape a recording (rule 1) and are not stored.

Two conversations with the same system prompt and the same history so far (two children given the same
task, answered the same: twins) are one to these rules: a request continuing that history continues the
first one that is free, whichever twin sent it. Replaying, the replay model sorts them out: a twin's
request that does not match its recorded session's next call but matches its twin's swaps the two
recorded sessions (``replay.model.ReplayModel._twin``, docs/conversations.md "Twins").

What the rules cannot tell apart: a child started while two or more conversations have open tool
calls, that neither holds one of their calls nor its argument text, is a root (name its parent with
``X-Dsh-Parent``); a conversation that drops or rewrites earlier messages (client-side compaction)
becomes a new conversation.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Literal

import orjson
from msgspec import Struct, field

from ..errors import HarnessError
from ..llm import Message, ModelRequest

#: The header naming the conversation of a request.
CONVERSATION_HEADER = "X-Dsh-Conversation"
#: The header naming the parent of a new conversation.
PARENT_HEADER = "X-Dsh-Parent"

Kind = Literal["continue", "retry", "respelled", "fork", "spawn", "root"]


class BindingError(HarnessError):
    """A request cannot be bound as its explicit headers say (names the header and the difference)."""

    code = "ENDPOINT_BINDING"


def message_key(message: Message) -> tuple[Any, ...]:
    """The comparison key of one message (see module doc): what a client echoes back of it, hashable."""
    texts: list[str] = []
    rest: list[Any] = []
    for block in message.get("content", []):
        kind = block.get("type")
        if kind == "text":
            texts.append(str(block.get("text", "")))
        elif kind in ("reasoning", "provider-fields", "provider-block"):
            continue  # clients rarely echo the first two back, a server tool's block not as it came
        elif kind == "tool-call":
            rest.append(("call", block.get("id"), block.get("name"), _arguments_key(block.get("arguments"))))
        elif kind == "tool-result":
            content = block.get("content")
            if isinstance(content, list):
                pieces = [b for b in content if isinstance(b, Mapping) and b.get("type") == "text"]
                text = "".join(str(b.get("text", "")) for b in pieces)
            else:
                text = str(content)
            rest.append(("result", block.get("toolCallId"), text))
        else:
            rest.append(orjson.dumps(block, option=orjson.OPT_SORT_KEYS))
    return (message.get("role"), "".join(texts), *rest)


def _arguments_key(arguments: object) -> tuple[str, object]:
    """Tool-call arguments by their JSON value when they parse (a client that re-serializes them, as
    pydantic-ai does, sends the same value with other whitespace), else as the string sent; hashable."""
    if not isinstance(arguments, str):
        return ("raw", repr(arguments))
    try:
        return ("json", orjson.dumps(orjson.loads(arguments), option=orjson.OPT_SORT_KEYS))
    except orjson.JSONDecodeError:
        return ("raw", arguments)


def _chain(previous: int, key: object) -> int:
    return hash((previous, key))


class Conversation(Struct, eq=False):
    """One conversation: its live session id and what it has said so far.

    Attributes:
        id: the live session id (the ``sessionId`` of its model calls; the log's header id).
        rank: creation order (0 first).
        parent: the parent conversation's id, or ``None`` for a root.
        kind: how it was created: ``root``, ``spawn``, ``fork`` or ``continued`` (rule 3: a client's
            re-spelled continuation of its parent).
        seed_messages: for a fork child, how many messages it inherited.
        messages: its history: every request message and every answer served, in order.
        open_calls: tool-call ids of the last answer whose results have not come back.
        busy: a call is in flight.
        failed: its last call failed (a request equal to its history retries it).
        name: the ``X-Dsh-Conversation`` name, if any.
        candidates: the ids of the conversations whose tool calls were open when this root started,
            when there were two or more (its parent, if it has one, could not be told: rule 5).
        request_state: the chain hash of its last call's request messages (rule 3's key), ``None``
            before its first answer and once a client's re-spelled continuation took it.
        request_length: how many messages that request had.
    """

    id: str
    rank: int
    parent: str | None = None
    kind: str = "root"
    seed_messages: int = 0
    system: str = ""
    messages: list[Message] = field(default_factory=list)
    hashes: list[int] = field(default_factory=list)  # chain hash after the system key and each message
    boundaries: list[int] = field(default_factory=list)  # message counts where a turn ended
    open_calls: tuple[str, ...] = ()
    busy: bool = False
    failed: bool = False
    name: str | None = None
    candidates: tuple[str, ...] = ()
    request_state: int | None = None
    request_length: int = 0


class Binding(Struct):
    """Where one request goes.

    Attributes:
        conversation: the conversation (created already for ``fork``/``spawn``/``root``).
        kind: ``continue``, ``retry``, ``respelled``, ``fork``, ``spawn`` or ``root``.
        inherited: how many of the request's messages the conversation already had.
        delta: the request's new messages (``messages[inherited:]``).
        fork_source: for a fork, the source conversation and the message count of the shared turn end.
        respelled: for ``respelled`` (rule 3), the conversation the client went on with and the index
            of the request's message that re-spells its last answer.
    """

    conversation: Conversation
    kind: Kind
    inherited: int
    delta: list[Message]
    fork_source: tuple[Conversation, int] | None = None
    respelled: tuple[Conversation, int] | None = None


def prefix_hashes(
    system: str | None, messages: Sequence[Message], *, into: list[int] | None = None
) -> list[int]:
    """The chain hashes of a request: one after its system prompt's key, then one after each message's
    key (:func:`message_key`); ``into``: the hashes of the messages before ``messages`` (extended in
    place and returned; ``system`` is then ignored)."""
    out = into if into is not None else [_chain(0, ("system", system or ""))]
    h = out[-1]
    for message in messages:
        h = _chain(h, message_key(message))
        out.append(h)
    return out


class Binder:
    """Binds requests to conversations by the module's rules; one per endpoint, used from one event loop.

    ``bind`` creates conversations (ids from ``new_id``) and marks the bound one busy; ``answered`` /
    ``failed`` end its call. Lookups are by chained hashes of the message keys, so binding a request costs
    O(its messages), whatever the number of conversations.
    """

    def __init__(self, new_id: Any = None) -> None:
        self.conversations: list[Conversation] = []
        self._by_state: dict[int, list[Conversation]] = {}
        self._by_boundary: dict[int, list[tuple[Conversation, int]]] = {}
        #: a conversation's last request state -> the conversations (rule 3)
        self._by_request: dict[int, list[Conversation]] = {}
        self._by_name: dict[str, Conversation] = {}
        self._by_id: dict[str, Conversation] = {}
        #: conversations whose last answer has tool calls whose results have not come back (spawn parents)
        self._open: dict[int, Conversation] = {}
        self._counter = 0
        self._new_id = new_id or self._default_id

    def _default_id(self) -> str:
        return f"conversation-{self._counter}"

    def by_id(self, conversation_id: str) -> Conversation | None:
        """The conversation with that live id."""
        return self._by_id.get(conversation_id)

    def parent_of(self, conversation_id: str) -> str | None:
        """The parent's live id of a live conversation (``None``: a root, or not a conversation)."""
        conv = self.by_id(conversation_id)
        return None if conv is None else conv.parent

    def rank(self, conversation_id: str) -> int | None:
        """Creation rank of a live conversation id (the replay model's ``bind_order``)."""
        conv = self.by_id(conversation_id)
        return None if conv is None else conv.rank

    # -- state index -----------------------------------------------------------------------------

    def _state(self, conv: Conversation) -> int:
        return conv.hashes[-1]

    def _index(self, conv: Conversation) -> None:
        self._by_state.setdefault(self._state(conv), []).append(conv)

    def _unindex(self, conv: Conversation) -> None:
        peers = self._by_state.get(self._state(conv), [])
        if conv in peers:
            peers.remove(conv)

    def _extend(self, conv: Conversation, messages: Sequence[Message]) -> None:
        h = conv.hashes[-1]
        for message in messages:
            h = _chain(h, message_key(message))
            conv.hashes.append(h)
            conv.messages.append(message)

    # -- binding ---------------------------------------------------------------------------------

    def _create(
        self,
        request: ModelRequest,
        kind: str,
        parent: Conversation | None,
        seed: int,
        name: str | None,
    ) -> Conversation:
        self._counter += 1
        conv = Conversation(
            id=self._new_id(),
            rank=len(self.conversations),
            parent=parent.id if parent else None,
            kind=kind,
            seed_messages=seed,
            system=request.get("system", ""),
            name=name,
        )
        conv.hashes = prefix_hashes(conv.system, [])
        if parent is not None and seed:
            self._extend(conv, parent.messages[:seed])
            conv.boundaries = [b for b in parent.boundaries if b <= seed]
            for b in conv.boundaries:
                self._by_boundary.setdefault(conv.hashes[b], []).append((conv, b))
        self.conversations.append(conv)
        self._by_id[conv.id] = conv
        if name is not None:
            self._by_name[name] = conv
        return conv

    def bind(
        self,
        request: ModelRequest,
        headers: Mapping[str, str] | None = None,
        *,
        hashes: list[int] | None = None,
    ) -> Binding:
        """Bind ``request`` (its ``system`` and ``messages``) to a conversation; marks it busy.

        ``hashes``: the request's :func:`prefix_hashes` when the caller has them already (the
        endpoint's prefix cache); computed here otherwise.

        Raises:
            BindingError: ``ENDPOINT_BINDING``: a named conversation is busy or its history is not a
                prefix of the request; a named parent is unknown.
        """
        headers = headers or {}
        messages = list(request.get("messages", []))
        if hashes is None:
            hashes = prefix_hashes(request.get("system", ""), messages)
        name = _header(headers, CONVERSATION_HEADER)
        parent_name = _header(headers, PARENT_HEADER)
        parent: Conversation | None = None
        if parent_name is not None:
            parent = self._by_name.get(parent_name) or self.by_id(parent_name)
            if parent is None:
                raise BindingError(f"{PARENT_HEADER}: {parent_name!r} names no conversation seen so far")
        if name is not None and name in self._by_name:
            conv = self._by_name[name]
            n = len(conv.messages)
            if conv.busy:
                raise BindingError(f"{CONVERSATION_HEADER}: {name!r} already has a call in flight")
            if n >= len(hashes) or hashes[n] != self._state(conv):
                raise BindingError(
                    f"{CONVERSATION_HEADER}: the request's messages do not continue conversation {name!r} "
                    f"(its {n} message(s) so far are not a prefix of the request's {len(messages)})"
                )
            return self._continue(conv, messages, n)
        if name is None:
            found = self._find_continuation(hashes, messages, parent)
            if found is not None:
                return found
        respelled = self._find_respelled(hashes, messages, parent)
        if respelled is not None:
            source, at = respelled
            self._forget_request(source)
            self._set_open(source, ())  # its calls went on in the child, as the client spells them
            conv = self._create(request, "continued", source, 0, name)
            self._extend(conv, messages)
            conv.busy = True
            return Binding(conv, "respelled", 0, messages, respelled=respelled)
        fork = self._find_fork(hashes, messages, parent)
        if fork is not None:
            source, at = fork
            conv = self._create(request, "fork", source, at, name)
            self._extend(conv, messages[at:])
            conv.busy = True
            return Binding(conv, "fork", at, messages[at:], fork)
        candidates: tuple[str, ...] = ()
        handed: set[str] = set()
        if parent is None:
            open_ = [c for c in self._open.values() if not c.busy]
            parent, candidates, handed = _infer_parent(open_, request.get("system", ""), messages)
        conv = self._create(request, "spawn" if parent else "root", parent, 0, name)
        conv.candidates = candidates
        self._extend(conv, messages)
        if parent is not None and handed:  # the parent's calls got their results in the child's history
            self._set_open(parent, tuple(c for c in parent.open_calls if c not in handed))
        conv.busy = True
        return Binding(conv, "spawn" if parent else "root", 0, messages)

    def _continue(self, conv: Conversation, messages: list[Message], n: int) -> Binding:
        kind: Kind = "retry" if conv.failed and n == len(messages) else "continue"
        self._unindex(conv)
        delta = messages[n:]
        self._extend(conv, delta)
        self.results_arrived(conv, delta)
        conv.busy = True
        conv.failed = False
        return Binding(conv, kind, n, delta)

    def _find_continuation(
        self, hashes: list[int], messages: list[Message], parent: Conversation | None
    ) -> Binding | None:
        for n in range(len(hashes) - 1, -1, -1):
            for conv in self._by_state.get(hashes[n], ()):
                # an identical request retries a failed call, else continues the answer it ends with
                if conv.busy or len(conv.messages) != n or conv.name is not None:
                    continue
                if parent is not None and conv.parent != parent.id:
                    continue
                return self._continue(conv, messages, n)
        return None

    def _find_respelled(
        self, hashes: list[int], messages: list[Message], parent: Conversation | None
    ) -> tuple[Conversation, int] | None:
        """Rule 3: the conversation whose last call's request the request begins with, followed by an
        assistant message where that call's answer stands (re-spelled: an equal one continued it)."""
        for n in range(len(messages) - 1, 0, -1):
            if messages[n].get("role") != "assistant":
                continue
            for conv in self._by_request.get(hashes[n], ()):
                if conv.busy or conv.request_length != n or conv.name is not None:
                    continue
                if parent is not None and conv is not parent:
                    continue
                if len(conv.hashes) > n + 1 and conv.hashes[n + 1] == hashes[n + 1]:
                    continue  # its answer as served: a continuation or a fork, not a re-spelling
                return conv, n
        return None

    def _forget_request(self, conv: Conversation) -> None:
        if conv.request_state is not None:
            peers = self._by_request.get(conv.request_state, [])
            if conv in peers:
                peers.remove(conv)
            if not peers:
                self._by_request.pop(conv.request_state, None)
            conv.request_state = None

    def _find_fork(
        self, hashes: list[int], messages: list[Message], parent: Conversation | None
    ) -> tuple[Conversation, int] | None:
        for n in range(len(hashes) - 2, 0, -1):  # the request must diverge after the shared turn end
            for conv, at in self._by_boundary.get(hashes[n], ()):
                if at == n and (parent is None or conv is parent):
                    return conv, n
        return None

    # -- the end of a call -----------------------------------------------------------------------

    def answered(self, conv: Conversation, answer: Message, *, turn_ended: bool) -> None:
        """The call of ``conv`` was answered with ``answer``; ``turn_ended``: it has no tool calls."""
        self._forget_request(conv)
        conv.request_state, conv.request_length = conv.hashes[-1], len(conv.messages)
        self._by_request.setdefault(conv.request_state, []).append(conv)
        self._extend(conv, [answer])
        self._set_open(
            conv, tuple(str(b.get("id")) for b in answer.get("content", []) if b.get("type") == "tool-call")
        )
        if turn_ended:
            n = len(conv.messages)
            conv.boundaries.append(n)
            self._by_boundary.setdefault(conv.hashes[n], []).append((conv, n))
        conv.busy = False
        self._index(conv)

    def failed(self, conv: Conversation) -> None:
        """The call of ``conv`` failed (nothing answered; the same request may retry it)."""
        conv.busy = False
        conv.failed = True
        self._index(conv)

    def discard(self, binding: Binding) -> None:
        """Undo ``binding``, whose call failed having taken nothing (a replay whose request matched no
        recorded conversation). A conversation it created is forgotten: it is none of the run's, so it
        does not rank before the next one, and no later request continues, forks or spawns from it. A
        conversation it continued keeps its history, marked failed (:meth:`failed`)."""
        conv = binding.conversation
        if binding.kind in ("continue", "retry") or self._by_id.get(conv.id) is not conv:
            self.failed(conv)
            return
        if binding.respelled is not None:  # the conversation it went on from is as it was
            source = binding.respelled[0]
            source.request_state, source.request_length = source.hashes[-2], len(source.messages) - 1
            self._by_request.setdefault(source.request_state, []).append(source)
            last = source.messages[-1].get("content", [])
            self._set_open(source, tuple(str(b.get("id")) for b in last if b.get("type") == "tool-call"))
        if self.conversations[-1] is conv:  # the common case: nothing was created meanwhile
            self.conversations.pop()
        else:
            self.conversations.remove(conv)
            for later in self.conversations[conv.rank :]:  # a conversation created meanwhile moves up
                later.rank -= 1
        del self._by_id[conv.id]
        self._set_open(conv, ())
        if conv.name is not None and self._by_name.get(conv.name) is conv:
            del self._by_name[conv.name]
        for at in conv.boundaries:  # a fork child's inherited turn ends
            peers = self._by_boundary.get(conv.hashes[at], [])
            if (conv, at) in peers:
                peers.remove((conv, at))
        self._unindex(conv)
        self._forget_request(conv)
        conv.busy = False

    def results_arrived(self, conv: Conversation, delta: Sequence[Message]) -> None:
        """Clear the open tool calls answered by tool results in ``delta``."""
        answered = {
            str(b.get("toolCallId"))
            for m in delta
            for b in m.get("content", [])
            if b.get("type") == "tool-result"
        }
        self._set_open(conv, tuple(c for c in conv.open_calls if c not in answered))

    def _set_open(self, conv: Conversation, calls: tuple[str, ...]) -> None:
        conv.open_calls = calls
        if calls:
            self._open[id(conv)] = conv
        else:
            self._open.pop(id(conv), None)


def _infer_parent(
    open_: Sequence[Conversation], system: str, messages: Sequence[Message]
) -> tuple[Conversation | None, tuple[str, ...], set[str]]:
    """The parent of a new conversation (rule 5) among ``open_``, the conversations whose tool calls are
    open and that have no call in flight: ``(parent or None, candidates when it could not be told, the
    parent's call ids whose results the child's history holds)``.

    In order: the one whose open call the child's history holds (a handoff: the child was given the
    call and its result); the one whose open call's argument text the child's first user message holds
    (an agent run as a tool gets the call's ``input``, a delegating tool passes its prompt:
    :func:`_argument_match`), when exactly one conversation holds the best match; the only one, unless
    the child is its like (the same system prompt) that holds none of its calls' argument text while
    they have some (another run of the same agent started meanwhile: a root); else none (a root, with
    every open conversation as a candidate)."""
    ids = {
        str(b.get("toolCallId") if b.get("type") == "tool-result" else b.get("id"))
        for m in messages
        for b in m.get("content", [])
        if b.get("type") in ("tool-result", "tool-call")
    }
    owners = [c for c in open_ if ids.intersection(c.open_calls)]
    if len(owners) == 1:
        return owners[0], (), ids.intersection(owners[0].open_calls)
    if not open_:
        return None, (), set()
    text = next(
        (
            "".join(str(b.get("text", "")) for b in m.get("content", []) if b.get("type") == "text")
            for m in messages
            if m.get("role") == "user" and any(b.get("type") == "text" for b in m.get("content", []))
        ),
        "",
    ).strip()
    scores = {c.id: _argument_match(c, text) for c in open_}
    best = max(scores.values())
    winners = [c for c in open_ if scores[c.id] == best]
    if best > (0, 0) and len(winners) == 1:
        return winners[0], (), set()
    if len(open_) == 1:
        only = open_[0]
        if best == (0, 0) and only.system == (system or "") and _argument_match(only, None) > (0, 0):
            return None, (), set()  # its like, sharing none of its calls' text: a run of its own
        return only, (), set()
    return None, tuple(c.id for c in open_), set()


#: the shortest argument text that counts when the child's message only contains it (not equals it)
_MIN_CONTAINED = 4


def _argument_match(conv: Conversation, text: str | None) -> tuple[int, int]:
    """How well the child's first user message ``text`` holds the argument text of one of ``conv``'s
    open tool calls: ``(2, length)`` for a string argument equal to it, ``(1, length)`` for one it
    contains (at least :data:`_MIN_CONTAINED` characters), ``(0, 0)`` for none; the best of its calls.
    ``text=None``: whether its calls have argument text that could be matched at all (``(1, length)``)."""
    if text == "" or not conv.messages:
        return (0, 0)
    best = (0, 0)
    for block in conv.messages[-1].get("content", []):
        if block.get("type") != "tool-call" or str(block.get("id")) not in conv.open_calls:
            continue
        for leaf in _string_leaves(block.get("arguments")):
            leaf = leaf.strip()
            if text is None:
                if len(leaf) >= _MIN_CONTAINED:
                    best = max(best, (1, len(leaf)))
            elif leaf == text:
                best = max(best, (2, len(leaf)))
            elif len(leaf) >= _MIN_CONTAINED and leaf in text:
                best = max(best, (1, len(leaf)))
    return best


def _string_leaves(arguments: object) -> list[str]:
    """The string values of tool-call arguments (a JSON object's, at any depth), or the arguments
    themselves when they are a string that is not JSON."""
    if not isinstance(arguments, str):
        return []
    try:
        value = orjson.loads(arguments)
    except orjson.JSONDecodeError:
        return [arguments]
    out: list[str] = []
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            out.append(item)
        elif isinstance(item, dict):
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
    return out


def _header(headers: Mapping[str, str], name: str) -> str | None:
    value = headers.get(name)
    if value is None:
        value = next((v for k, v in headers.items() if k.lower() == name.lower()), None)
    return value.strip() if isinstance(value, str) and value.strip() else None


__all__ = [
    "CONVERSATION_HEADER",
    "PARENT_HEADER",
    "Binder",
    "Binding",
    "BindingError",
    "Conversation",
    "message_key",
    "prefix_hashes",
]
