"""Small agents written against the real ``openai`` SDK, as a user would write them (the endpoint's clients).

``run_agent`` / ``run_agent_async``: a tool loop (``ls`` and, when ``spawn`` is given, ``delegate``, whose
result is a child conversation with its own system prompt started while the parent's tool call is open;
``parallel`` children run under ``asyncio.gather``). Streamed and whole answers are both read.
"""

from __future__ import annotations

import asyncio
import json
import random
from typing import Any

import openai

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "ls",
            "description": "list files",
            "parameters": {"type": "object", "properties": {"path": {"type": "string"}}},
        },
    },
    {
        "type": "function",
        "function": {
            "name": "delegate",
            "description": "ask helpers",
            "parameters": {
                "type": "object",
                "properties": {"tasks": {"type": "array", "items": {"type": "string"}}},
            },
        },
    },
]


def _message_from_stream(stream: Any) -> dict[str, Any]:
    text = ""
    calls: dict[int, dict[str, str]] = {}
    for chunk in stream:
        if not chunk.choices:
            continue
        delta = chunk.choices[0].delta
        text += delta.content or ""
        for call in delta.tool_calls or []:
            entry = calls.setdefault(call.index, {"id": "", "name": "", "arguments": ""})
            entry["id"] = call.id or entry["id"]
            if call.function is not None:
                entry["name"] += call.function.name or ""
                entry["arguments"] += call.function.arguments or ""
    return _assistant(text, list(calls.values()))


def _assistant(text: str, calls: list[dict[str, str]]) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": text or None}
    if calls:
        message["tool_calls"] = [
            {"id": c["id"], "type": "function", "function": {"name": c["name"], "arguments": c["arguments"]}}
            for c in calls
        ]
    return message


def _whole(response: Any) -> dict[str, Any]:
    message = response.choices[0].message
    calls = [
        {"id": c.id, "name": c.function.name, "arguments": c.function.arguments}
        for c in message.tool_calls or []
    ]
    return _assistant(message.content or "", calls)


def _tool(name: str, arguments: str) -> str:
    if name == "ls":
        return "a.txt\nb.txt"
    raise AssertionError(name)


def run_agent(
    prompt: str,
    *,
    stream: bool = True,
    system: str = "You are terse.",
    model: str = "fake-1",
    client: Any = None,
    tool: Any = None,
) -> list[dict[str, Any]]:
    """The sync tool loop; returns the whole conversation (``tool(name, arguments) -> str``: the tools'
    results, default ``ls``'s fixed listing)."""
    tool = tool or _tool
    client = client or openai.OpenAI(max_retries=0)
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": system},
        {"role": "user", "content": prompt},
    ]
    for _ in range(8):
        if stream:
            out = client.chat.completions.create(
                model=model,
                messages=messages,
                tools=TOOLS,
                stream=True,
                stream_options={"include_usage": True},
            )
            message = _message_from_stream(out)
        else:
            message = _whole(client.chat.completions.create(model=model, messages=messages, tools=TOOLS))
        messages.append(message)
        if not message.get("tool_calls"):
            return messages
        for call in message["tool_calls"]:
            content = tool(call["function"]["name"], call["function"]["arguments"])
            messages.append({"role": "tool", "tool_call_id": call["id"], "content": content})
    raise AssertionError("the loop did not end")


async def _ask(
    client: Any, messages: list[dict[str, Any]], stream: bool, model: str, jitter: random.Random | None = None
) -> dict[str, Any]:
    if jitter is not None:  # a random sub-millisecond delay: requests of parallel children arrive permuted
        await asyncio.sleep(jitter.random() / 1000)
    if not stream:
        return _whole(await client.chat.completions.create(model=model, messages=messages, tools=TOOLS))
    out = await client.chat.completions.create(model=model, messages=messages, tools=TOOLS, stream=True)
    text = ""
    calls: dict[int, dict[str, str]] = {}
    async for chunk in out:
        if not chunk.choices:
            continue
        delta = chunk.choices[0].delta
        text += delta.content or ""
        for call in delta.tool_calls or []:
            entry = calls.setdefault(call.index, {"id": "", "name": "", "arguments": ""})
            entry["id"] = call.id or entry["id"]
            if call.function is not None:
                entry["name"] += call.function.name or ""
                entry["arguments"] += call.function.arguments or ""
    return _assistant(text, list(calls.values()))


async def run_agent_async(
    prompt: str,
    *,
    stream: bool = True,
    system: str = "You are terse.",
    model: str = "fake-1",
    child_system: str = "You are a helper.",
    client: Any = None,
    jitter: random.Random | None = None,
) -> list[dict[str, Any]]:
    """The async tool loop; ``delegate`` runs one child conversation per task under ``asyncio.gather``."""
    client = client or openai.AsyncOpenAI(max_retries=0)
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": system},
        {"role": "user", "content": prompt},
    ]
    for _ in range(8):
        message = await _ask(client, messages, stream, model, jitter)
        messages.append(message)
        if not message.get("tool_calls"):
            return messages
        for call in message["tool_calls"]:
            name, arguments = call["function"]["name"], call["function"]["arguments"]
            if name == "delegate":
                tasks = json.loads(arguments)["tasks"]
                order = list(range(len(tasks)))
                if jitter is not None:
                    jitter.shuffle(order)  # children started in a random order
                started = [
                    run_agent_async(
                        tasks[i],
                        stream=stream,
                        system=child_system,
                        model=model,
                        client=client,
                        jitter=jitter,
                    )
                    for i in order
                ]
                done = dict(zip(order, await asyncio.gather(*started), strict=True))
                answers = [done[i] for i in range(len(tasks))]
                content = "\n".join(str(a[-1]["content"]) for a in answers)
            else:
                content = _tool(name, arguments)
            messages.append({"role": "tool", "tool_call_id": call["id"], "content": content})
    raise AssertionError("the loop did not end")
