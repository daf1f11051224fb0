"""The binder's message comparison key (pytest_dsh_replay/endpoint/conversations.py ``message_key``):
what clients change when they send a served answer back must not break the continuation."""

from __future__ import annotations

from pytest_dsh_replay.endpoint.conversations import Binder, message_key
from pytest_dsh_replay.llm import Message


def _answer(arguments: str) -> Message:
    return {
        "role": "assistant",
        "content": [
            {"type": "text", "text": "Checking."},
            {"type": "tool-call", "id": "call_1", "name": "get_weather", "arguments": arguments},
        ],
    }


def test_re_serialized_tool_call_arguments_key_the_same() -> None:
    """Regression: pydantic-ai parses tool-call arguments and sends them back compact, so a served
    ``{"city": "Oslo"}`` came back as ``{"city":"Oslo"}``, the continuation was missed and the next
    request was bound as a fork child."""
    assert message_key(_answer('{"city": "Oslo", "days": [1, 2]}')) == message_key(
        _answer('{"city":"Oslo","days":[1,2]}')
    )
    assert message_key(_answer('{"city": "Oslo"}')) != message_key(_answer('{"city": "Bergen"}'))
    # arguments that are not JSON are compared as sent
    assert message_key(_answer('{"city": ')) != message_key(_answer('{"city":'))
    assert message_key(_answer('"Oslo"')) != message_key(_answer("Oslo"))


def test_a_re_serialized_echo_continues_the_conversation() -> None:
    binder = Binder()
    user: Message = {"role": "user", "content": [{"type": "text", "text": "weather?"}]}
    first = binder.bind({"model": "m", "messages": [user]})
    binder.answered(first.conversation, _answer('{"city": "Oslo"}'), turn_ended=False)
    result: Message = {
        "role": "user",
        "content": [
            {
                "type": "tool-result",
                "toolCallId": "call_1",
                "content": [{"type": "text", "text": "sunny"}],
                "isError": False,
            }
        ],
    }
    second = binder.bind({"model": "m", "messages": [user, _answer('{"city":"Oslo"}'), result]})
    assert second.kind == "continue"
    assert second.conversation is first.conversation
