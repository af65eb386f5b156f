"""A Messages request on an OpenAI route runs as a chat completion, and its answer comes
back as an Anthropic message."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from batchgw.config.catalog import Catalog, load_catalog
from batchgw.upstream.translate import TranslationError, chat_to_message, messages_to_chat
from batchgw.validation import RequestInvalid
from batchgw.validation.chat import validate_chat_body
from batchgw.validation.messages import validate_messages_body
from batchgw.validation.translatable import check_translatable

CONFIG = Path(__file__).resolve().parents[2] / "config" / "models.local.json"

_WEATHER = {
    "name": "get_weather",
    "description": "The weather in a city",
    "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
}


def _request(**fields: Any) -> dict[str, Any]:
    body = {
        "model": "sim-chat",
        "max_tokens": 256,
        "messages": [{"role": "user", "content": "Hello"}],
        **fields,
    }
    validate_messages_body(body, "2023-06-01")
    check_translatable(body)
    return body


def _chat(message: dict[str, Any], finish_reason: str = "stop", **choice: Any) -> dict[str, Any]:
    return {
        "id": "chatcmpl-abc123",
        "object": "chat.completion",
        "model": "sim-chat",
        "choices": [{"index": 0, "message": message, "finish_reason": finish_reason, **choice}],
        "usage": {"prompt_tokens": 12, "completion_tokens": 5, "total_tokens": 17},
    }


# --- which requests are translated ---------------------------------------------------------


def test_only_messages_on_an_openai_route_are_translated() -> None:
    catalog: Catalog = load_catalog(CONFIG)
    assert catalog.models["sim-chat-only"].translates("/v1/messages")
    assert not catalog.models["sim-claude"].translates("/v1/messages")
    assert not catalog.models["sim-chat"].translates("/v1/chat/completions")


def test_check_translatable_names_the_parameter_and_model() -> None:
    body = {
        "model": "sim-chat-only",
        "max_tokens": 10,
        "messages": [{"role": "user", "content": "x"}],
        "top_k": 3,
    }
    with pytest.raises(RequestInvalid) as caught:
        check_translatable(body)
    assert caught.value.code == "unsupported_feature"
    assert caught.value.param == "top_k"
    assert "model 'sim-chat-only'" in caught.value.message
    assert "the gateway would have to drop it" in caught.value.message


# --- the request ---------------------------------------------------------------------------


def test_plain_request_maps_to_a_chat_request() -> None:
    chat = messages_to_chat(_request())
    assert chat == {
        "model": "sim-chat",
        "messages": [{"role": "user", "content": "Hello"}],
        "max_tokens": 256,
    }


def test_system_string_becomes_a_system_message() -> None:
    chat = messages_to_chat(_request(system="Be brief."))
    assert chat["messages"][0] == {"role": "system", "content": "Be brief."}


def test_system_blocks_become_text_parts() -> None:
    chat = messages_to_chat(_request(system=[{"type": "text", "text": "A"}, {"type": "text", "text": "B"}]))
    assert chat["messages"][0] == {
        "role": "system",
        "content": [{"type": "text", "text": "A"}, {"type": "text", "text": "B"}],
    }


def test_text_and_images_become_content_parts() -> None:
    blocks = [
        {"type": "text", "text": "Compare:"},
        {"type": "image", "source": {"type": "url", "url": "https://example.com/a.png"}},
        {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "iVBORw0"}},
    ]
    chat = messages_to_chat(_request(messages=[{"role": "user", "content": blocks}]))
    assert chat["messages"] == [
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "Compare:"},
                {"type": "image_url", "image_url": {"url": "https://example.com/a.png"}},
                {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBORw0"}},
            ],
        }
    ]


def test_sampling_stop_and_user_map_to_their_chat_counterparts() -> None:
    chat = messages_to_chat(
        _request(temperature=0.2, top_p=0.9, stop_sequences=["END", "STOP"], metadata={"user_id": "u-7"})
    )
    assert chat["temperature"] == 0.2
    assert chat["top_p"] == 0.9
    assert chat["stop"] == ["END", "STOP"]
    assert chat["user"] == "u-7"
    assert chat["max_tokens"] == 256


def test_tools_become_function_tools() -> None:
    chat = messages_to_chat(_request(tools=[_WEATHER, {"name": "noop", "input_schema": {"type": "object"}}]))
    assert chat["tools"] == [
        {
            "type": "function",
            "function": {
                "name": "get_weather",
                "description": "The weather in a city",
                "parameters": _WEATHER["input_schema"],
            },
        },
        {"type": "function", "function": {"name": "noop", "parameters": {"type": "object"}}},
    ]


@pytest.mark.parametrize(
    ("choice", "expected"),
    [
        ({"type": "auto"}, "auto"),
        ({"type": "any"}, "required"),
        ({"type": "none"}, "none"),
        ({"type": "tool", "name": "get_weather"}, {"type": "function", "function": {"name": "get_weather"}}),
    ],
)
def test_tool_choice_maps_to_the_chat_tool_choice(choice: dict[str, Any], expected: Any) -> None:
    chat = messages_to_chat(_request(tools=[_WEATHER], tool_choice=choice))
    assert chat["tool_choice"] == expected
    assert "parallel_tool_calls" not in chat


def test_disabling_parallel_tool_use_turns_off_parallel_tool_calls() -> None:
    chat = messages_to_chat(
        _request(tools=[_WEATHER], tool_choice={"type": "auto", "disable_parallel_tool_use": True})
    )
    assert chat["parallel_tool_calls"] is False


def test_tool_use_becomes_tool_calls_and_tool_result_a_tool_message() -> None:
    messages = [
        {"role": "user", "content": "Weather in Paris and Rome?"},
        {
            "role": "assistant",
            "content": [
                {"type": "text", "text": "Checking."},
                {"type": "tool_use", "id": "toolu_1", "name": "get_weather", "input": {"city": "Paris"}},
                {"type": "tool_use", "id": "toolu_2", "name": "get_weather", "input": {"city": "Rome"}},
            ],
        },
        {
            "role": "user",
            "content": [
                {"type": "tool_result", "tool_use_id": "toolu_1", "content": "sunny"},
                {
                    "type": "tool_result",
                    "tool_use_id": "toolu_2",
                    "content": [{"type": "text", "text": "rain"}],
                },
                {"type": "text", "text": "Which is warmer?"},
            ],
        },
    ]
    chat = messages_to_chat(_request(messages=messages, tools=[_WEATHER]))
    assert chat["messages"][1:] == [
        {
            "role": "assistant",
            "content": [{"type": "text", "text": "Checking."}],
            "tool_calls": [
                {
                    "id": "toolu_1",
                    "type": "function",
                    "function": {"name": "get_weather", "arguments": '{"city":"Paris"}'},
                },
                {
                    "id": "toolu_2",
                    "type": "function",
                    "function": {"name": "get_weather", "arguments": '{"city":"Rome"}'},
                },
            ],
        },
        {"role": "tool", "tool_call_id": "toolu_1", "content": "sunny"},
        {"role": "tool", "tool_call_id": "toolu_2", "content": [{"type": "text", "text": "rain"}]},
        {"role": "user", "content": [{"type": "text", "text": "Which is warmer?"}]},
    ]
    validate_chat_body(chat)


def test_assistant_tool_use_without_text_has_null_content() -> None:
    messages = [
        {"role": "user", "content": "Go."},
        {
            "role": "assistant",
            "content": [{"type": "tool_use", "id": "t1", "name": "get_weather", "input": {}}],
        },
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1"}]},
    ]
    chat = messages_to_chat(_request(messages=messages, tools=[_WEATHER]))
    assert chat["messages"][1]["content"] is None
    assert chat["messages"][2] == {"role": "tool", "tool_call_id": "t1", "content": ""}
    assert len(chat["messages"]) == 3
    validate_chat_body(chat)


def test_assistant_prefill_string_is_kept() -> None:
    messages = [{"role": "user", "content": "Count."}, {"role": "assistant", "content": "1, 2,"}]
    chat = messages_to_chat(_request(messages=messages))
    assert chat["messages"][-1] == {"role": "assistant", "content": "1, 2,"}


# --- the response --------------------------------------------------------------------------


def test_text_completion_becomes_an_end_turn_message() -> None:
    message = chat_to_message(_chat({"role": "assistant", "content": "Hi there."}), model="sim-chat-only")
    assert message == {
        "id": "msg_abc123",
        "type": "message",
        "role": "assistant",
        "model": "sim-chat-only",
        "content": [{"type": "text", "text": "Hi there."}],
        "stop_reason": "end_turn",
        "stop_sequence": None,
        "usage": {"input_tokens": 12, "output_tokens": 5},
    }


def test_length_becomes_max_tokens() -> None:
    message = chat_to_message(_chat({"role": "assistant", "content": "Hi"}, "length"), model="m")
    assert message["stop_reason"] == "max_tokens"


def test_tool_calls_become_tool_use_blocks_with_parsed_input() -> None:
    call = {
        "id": "call_9",
        "type": "function",
        "function": {"name": "get_weather", "arguments": '{"city":"Oslo"}'},
    }
    message = chat_to_message(
        _chat({"role": "assistant", "content": "Let me check.", "tool_calls": [call]}, "tool_calls"),
        model="m",
    )
    assert message["content"] == [
        {"type": "text", "text": "Let me check."},
        {"type": "tool_use", "id": "call_9", "name": "get_weather", "input": {"city": "Oslo"}},
    ]
    assert message["stop_reason"] == "tool_use"


def test_empty_tool_arguments_are_an_empty_input() -> None:
    call = {"id": "call_1", "type": "function", "function": {"name": "noop", "arguments": ""}}
    message = chat_to_message(
        _chat({"role": "assistant", "content": None, "tool_calls": [call]}, "tool_calls"), model="m"
    )
    assert message["content"] == [{"type": "tool_use", "id": "call_1", "name": "noop", "input": {}}]


@pytest.mark.parametrize("arguments", ["{not json", "[1, 2]", '"text"'])
def test_tool_arguments_that_are_not_a_json_object_cannot_be_translated(arguments: str) -> None:
    call = {"id": "call_1", "type": "function", "function": {"name": "f", "arguments": arguments}}
    with pytest.raises(TranslationError):
        chat_to_message(
            _chat({"role": "assistant", "content": None, "tool_calls": [call]}, "tool_calls"), model="m"
        )


@pytest.mark.parametrize("response", [{"id": "x"}, {"choices": []}, {"choices": [{"finish_reason": "stop"}]}])
def test_completion_without_a_message_cannot_be_translated(response: dict[str, Any]) -> None:
    with pytest.raises(TranslationError):
        chat_to_message(response, model="m")


def test_stop_sequence_reported_by_the_backend_is_named() -> None:
    response = _chat({"role": "assistant", "content": "one two"}, "stop", stop_reason="END")
    message = chat_to_message(response, model="m", stop_sequences=["END", "STOP"])
    assert message["stop_reason"] == "stop_sequence"
    assert message["stop_sequence"] == "END"


def test_stop_without_a_reported_sequence_is_end_turn() -> None:
    response = _chat({"role": "assistant", "content": "one two"}, "stop", stop_reason=None)
    message = chat_to_message(response, model="m", stop_sequences=["END"])
    assert (message["stop_reason"], message["stop_sequence"]) == ("end_turn", None)


def test_eos_token_id_reported_as_stop_reason_is_end_turn() -> None:
    response = _chat({"role": "assistant", "content": "one"}, "stop", stop_reason=151645)
    assert chat_to_message(response, model="m", stop_sequences=["END"])["stop_reason"] == "end_turn"


def test_content_filter_and_refusal_become_refusal() -> None:
    filtered = chat_to_message(_chat({"role": "assistant", "content": ""}, "content_filter"), model="m")
    assert filtered["stop_reason"] == "refusal"
    refused = chat_to_message(_chat({"role": "assistant", "content": None, "refusal": "I can't."}), model="m")
    assert refused["content"] == [{"type": "text", "text": "I can't."}]
    assert refused["stop_reason"] == "refusal"


def test_message_id_is_derived_from_the_chat_id_or_the_response() -> None:
    response = _chat({"role": "assistant", "content": "x"})
    assert chat_to_message({**response, "id": "gen-42"}, model="m")["id"] == "msg_gen-42"
    without = {key: value for key, value in response.items() if key != "id"}
    first = chat_to_message(without, model="m")["id"]
    assert first.startswith("msg_") and len(first) == 28
    assert chat_to_message(without, model="m")["id"] == first


def test_missing_usage_counts_zero() -> None:
    response = {
        "id": "chatcmpl-1",
        "choices": [{"message": {"role": "assistant", "content": "x"}, "finish_reason": "stop"}],
    }
    assert chat_to_message(response, model="m")["usage"] == {"input_tokens": 0, "output_tokens": 0}


# --- a tool-call conversation, both ways --------------------------------------------------


def test_tool_call_conversation_round_trips() -> None:
    first = _request(
        system="You are a weather bot.",
        messages=[{"role": "user", "content": "Weather in Paris?"}],
        tools=[_WEATHER],
        tool_choice={"type": "auto"},
    )
    chat_request = messages_to_chat(first)
    validate_chat_body(chat_request)
    assert chat_request["tools"][0]["function"]["name"] == "get_weather"

    call = {
        "id": "call_P1",
        "type": "function",
        "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'},
    }
    answer = chat_to_message(
        _chat({"role": "assistant", "content": None, "tool_calls": [call]}, "tool_calls"), model="sim-chat"
    )
    assert answer["stop_reason"] == "tool_use"
    (tool_use,) = answer["content"]
    assert tool_use == {
        "type": "tool_use",
        "id": "call_P1",
        "name": "get_weather",
        "input": {"city": "Paris"},
    }

    # The client runs the tool and sends the conversation back, as with Anthropic's API.
    second = _request(
        system="You are a weather bot.",
        messages=[
            *first["messages"],
            {"role": "assistant", "content": answer["content"]},
            {
                "role": "user",
                "content": [{"type": "tool_result", "tool_use_id": tool_use["id"], "content": "18°C"}],
            },
        ],
        tools=[_WEATHER],
    )
    chat_request = messages_to_chat(second)
    validate_chat_body(chat_request)
    assistant, tool = chat_request["messages"][2:]
    assert assistant["tool_calls"][0]["id"] == "call_P1"
    assert json.loads(assistant["tool_calls"][0]["function"]["arguments"]) == {"city": "Paris"}
    assert tool == {"role": "tool", "tool_call_id": "call_P1", "content": "18°C"}

    final = chat_to_message(_chat({"role": "assistant", "content": "It is 18°C in Paris."}), model="sim-chat")
    assert final["content"] == [{"type": "text", "text": "It is 18°C in Paris."}]
    assert final["stop_reason"] == "end_turn"
