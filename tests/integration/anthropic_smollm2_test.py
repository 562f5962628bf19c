"""Anthropic's official `anthropic` SDK against the router's Messages API (/v1/messages), with a
real instruct model: a CPU llm-worker serving SmolLM2-135M-Instruct from its GGUF file behind
llm-router, as openai_smollm2_test.py starts them. The SDK authenticates with x-api-key.

Greedy, asked the capital of France, `messages.create` answers with the chat API's own text,
streamed (the SDK's event accumulator) and not, with usage that adds up to the chat API's
prompt tokens (input_tokens + cache_read_input_tokens). A `system` prompt is the chat's system
message. A stop sequence ends it with stop_reason "stop_sequence"; max_tokens with
"max_tokens"; a max_tokens beyond the context (Claude Code's 32000) is lowered to it;
max_tokens 0 answers nothing (a cache warm-up). A prefill (a final assistant
message) is continued: the prefix plus the continuation is the unprefilled answer. A named
tool is called for "Paris" (the SDK parses `input`), streamed and not, and its tool_result sent
back is answered. `messages.parse` fills a Pydantic model under output_config.format.
`count_tokens` counts the prompt a create has. `models.list` answers in Anthropic's shape.
Errors come in Anthropic's shape: a bad key is an AuthenticationError, an image block a
BadRequestError naming the block.

  .venv/bin/python anthropic_smollm2_test.py --bin build/bin \\
      --model .cache/models/smollm2/SmolLM2-135M-Instruct.Q4_1.gguf
"""
import os
import sys

import anthropic
import openai
import pydantic

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from openai_sdk_test import TOKEN, check, token_dir  # noqa: E402
from openai_smollm2_test import NAME, QUESTION, model_args, start  # noqa: E402

GREEDY = {"extra_body": {"temperature": 0}}  # this SDK has no temperature parameter
TOOLS = [{"name": "get_weather", "description": "The weather in a city",
          "input_schema": {"type": "object", "properties": {"city": {"type": "string"}},
                           "required": ["city"]}}]
WEATHER = [{"role": "user", "content": "What is the weather in Paris?"}]


def text_of(message):
    return "".join(b.text for b in message.content if b.type == "text")


def plain_answers(client, chat_answer):
    r = client.messages.create(model=NAME, max_tokens=32, messages=QUESTION, **GREEDY)
    text = text_of(r)
    print(f"{NAME} (messages): {text!r}, usage {r.usage}")
    want = chat_answer.choices[0].message.content
    check(text == want, f"messages.create says {text!r}; the chat API {want!r}")
    check(r.stop_reason == "end_turn" and r.role == "assistant" and r.model == NAME,
          f"stop_reason {r.stop_reason}, role {r.role}, model {r.model}")
    u = r.usage
    check(u.input_tokens + u.cache_read_input_tokens == chat_answer.usage.prompt_tokens and
          u.output_tokens == chat_answer.usage.completion_tokens, f"usage {u}")
    with client.messages.stream(model=NAME, max_tokens=32, messages=QUESTION, **GREEDY) as s:
        streamed = "".join(s.text_stream)
        final = s.get_final_message()
    check(streamed == text and text_of(final) == text and final.stop_reason == "end_turn",
          f"streamed {streamed!r}, final {final}")
    check(final.usage.output_tokens == u.output_tokens, f"streamed usage {final.usage}")
    count = client.messages.count_tokens(model=NAME, messages=QUESTION)
    check(count.input_tokens == chat_answer.usage.prompt_tokens, f"count_tokens {count}")
    return text


def stops_and_limits(client, openai_client, text):
    system = "You are a geography teacher."
    r = client.messages.create(model=NAME, max_tokens=32, system=system, messages=QUESTION,
                               **GREEDY)
    chat = openai_client.chat.completions.create(
        model=NAME, max_tokens=32, temperature=0,
        messages=[{"role": "system", "content": system}] + QUESTION)
    check(text_of(r) == chat.choices[0].message.content,
          f"with a system prompt {text_of(r)!r}, the chat API {chat.choices[0].message.content!r}")
    r = client.messages.create(model=NAME, max_tokens=32, messages=QUESTION,
                               stop_sequences=["Paris"], **GREEDY)
    check(r.stop_reason == "stop_sequence" and r.stop_sequence == "Paris" and
          text_of(r) == text[:text.index("Paris")], f"a stop sequence: {r}")
    r = client.messages.create(model=NAME, max_tokens=2, messages=QUESTION, **GREEDY)
    check(r.stop_reason == "max_tokens" and r.usage.output_tokens == 2, f"max_tokens 2: {r}")
    # Claude Code's max_tokens is beyond this model's context: lowered to it, as the API does.
    r = client.messages.create(model=NAME, max_tokens=32000, messages=QUESTION, **GREEDY)
    check(text_of(r) == text and r.stop_reason == "end_turn", f"max_tokens 32000: {r}")
    r = client.messages.create(model=NAME, max_tokens=0, messages=QUESTION, **GREEDY)
    check(r.content == [] and r.usage.output_tokens == 0, f"max_tokens 0: {r}")
    prefix = text[:text.index(" Paris")]
    r = client.messages.create(model=NAME, max_tokens=32, **GREEDY,
                               messages=QUESTION + [{"role": "assistant", "content": prefix}])
    print(f"prefilled {prefix!r}, continued {text_of(r)!r}")
    check(prefix + text_of(r) == text, f"prefill {prefix!r} + {text_of(r)!r} is not {text!r}")


def tool_turns(client):
    common = dict(model=NAME, max_tokens=60, messages=WEATHER, tools=TOOLS,
                  tool_choice={"type": "tool", "name": "get_weather"}, **GREEDY)
    r = client.messages.create(**common)
    calls = [b for b in r.content if b.type == "tool_use"]
    check(r.stop_reason == "tool_use" and len(calls) == 1, f"a named tool: {r}")
    call = calls[0]
    print(f"{NAME} calls {call.name}({call.input})")
    check(call.name == "get_weather" and call.input.get("city") == "Paris", f"the call: {call}")
    with client.messages.stream(**common) as s:
        final = s.get_final_message()
    streamed = [b for b in final.content if b.type == "tool_use"]
    check(len(streamed) == 1 and streamed[0].input == call.input, f"streamed call: {final}")
    turns = WEATHER + [
        {"role": "assistant", "content": r.content},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": call.id,
                                      "content": "18 degrees Celsius, sunny"}]}]
    # Its template has no call format: tool_choice auto is refused, so none (as the chat test).
    answer = client.messages.create(model=NAME, max_tokens=40, messages=turns, tools=TOOLS,
                                    tool_choice={"type": "none"}, **GREEDY)
    print(f"{NAME} after the tool: {text_of(answer)!r}")
    check(answer.stop_reason in ("end_turn", "max_tokens") and text_of(answer),
          f"the answer after the tool's result: {answer}")


class Capital(pydantic.BaseModel):
    country: str
    capital: str


def structured(client):
    # A 135M model's facts are its own: what is checked is the shape the schema enforces.
    r = client.messages.parse(model=NAME, max_tokens=60, output_format=Capital, **GREEDY,
                              messages=[{"role": "user", "content": "France's capital, as JSON."}])
    print(f"{NAME} parsed: {r.parsed_output!r}")
    check(isinstance(r.parsed_output, Capital) and r.stop_reason == "end_turn",
          f"messages.parse: {r}")


def errors(client, port):
    bad = anthropic.Anthropic(base_url=f"http://127.0.0.1:{port}", api_key="wrong",
                              max_retries=0)
    try:
        bad.messages.create(model=NAME, max_tokens=8, messages=QUESTION)
        check(False, "a wrong key was accepted")
    except anthropic.AuthenticationError as e:
        check(e.body["error"]["type"] == "authentication_error", f"a wrong key: {e.body}")
    image = [{"role": "user", "content": [
        {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": ""}}]}]
    try:
        client.messages.create(model=NAME, max_tokens=8, messages=image)
        check(False, "an image block was accepted")
    except anthropic.BadRequestError as e:
        check(e.body["type"] == "error" and e.body["error"]["type"] == "invalid_request_error" and
              "image" in e.body["error"]["message"], f"an image block: {e.body}")


def main():
    args = model_args(__doc__, "anthropic_smollm2_test")
    tmp = token_dir("anthropic-smollm2-")
    procs = []
    try:
        procs, port = start(args, tmp)
        client = anthropic.Anthropic(base_url=f"http://127.0.0.1:{port}", api_key=TOKEN,
                                     max_retries=0, timeout=120)
        openai_client = openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key=TOKEN,
                                      max_retries=0, timeout=120)
        models = client.models.list()
        check([m.id for m in models.data] == [NAME] and models.data[0].type == "model",
              f"models.list() is {models}")
        chat_answer = openai_client.chat.completions.create(model=NAME, messages=QUESTION,
                                                            temperature=0, max_tokens=32)
        text = plain_answers(client, chat_answer)
        stops_and_limits(client, openai_client, text)
        tool_turns(client)
        structured(client)
        errors(client, port)
        print("anthropic_smollm2_test: passed")
    finally:
        for p in reversed(procs):
            p.stop()


if __name__ == "__main__":
    main()
