"""Tool calling and structured output through the official `openai` SDK: a router and a CPU
llm-worker on a model with random weights and a byte-level vocabulary (so any text can be
spelled), once per call format we parse (the Qwen3, Llama 3.1, Mistral v0.3 and Granite 3.3 chat
templates),
and once for a template with none (Phi-4's: forced calls are then a JSON array of calls, and
tool_choice auto is a 400).

For each format: tool_choice "required" and a named function, streaming and not, give
finish_reason "tool_calls" and calls whose arguments validate against the tool's schema,
streamed as OpenAI streams them (id and name first, then the arguments over several deltas)
(Python's `jsonschema`); the SDK's `chat.completions.parse` reads them into Pydantic models.
A second turn sends the calls and their results back (role "tool") with tool_choice "none".
With the Qwen3 template also: `chat.completions.parse` with Pydantic response_formats (with
HttpUrl and AnyUrl fields, a dict, a set, a pattern with lengths), bad tool requests
(400 naming the parameter), and its thinking kept apart (the template writes <think>, so the
worker reads reasoning out: a grammar-made "<think>...</think>answer" is reasoning_content
and content, streamed and not).

Run with the virtual environment's Python (.venv/bin/python holds the pinned packages):

  openai_tools_test.py --bin build/bin --templates ../shared/chat-templates/templates

Exits 1 on the first failed check, saying which.
"""
import argparse
import json
import os
import sys
from typing import Literal

import jsonschema
import openai
import pydantic

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from openai_sdk_test import TOKEN, Proc, check, fail, metric, token_dir, wait_for  # noqa: E402


class GetWeather(pydantic.BaseModel):
    city: str = pydantic.Field(max_length=16)
    unit: Literal["c", "f"]


class Now(pydantic.BaseModel):
    pass


class Person(pydantic.BaseModel):
    name: str = pydantic.Field(max_length=20)
    age: int = pydantic.Field(ge=0, le=150)
    pets: list[Literal["cat", "dog"]] = pydantic.Field(max_length=3)


class Site(pydantic.BaseModel):
    name: str = pydantic.Field(max_length=12)
    url: pydantic.HttpUrl  # format "uri", maxLength 2083
    mirror: pydantic.AnyUrl | None  # format "uri"


class Shelf(pydantic.BaseModel):
    counts: dict[str, int]  # additionalProperties: a schema
    scores: dict[Literal["low", "high"], int]  # propertyNames
    colors: set[Literal["red", "green", "blue"]]  # uniqueItems
    sku: str = pydantic.Field(pattern=r"^[A-Z]+[0-9]*$", min_length=3, max_length=6)


TOOLS = [openai.pydantic_function_tool(GetWeather), openai.pydantic_function_tool(Now)]
SCHEMAS = {t["function"]["name"]: t["function"]["parameters"] for t in TOOLS}
MESSAGES = [{"role": "user", "content": "What is the weather in Paris?"}]


def check_calls(calls, names, what):
    check(bool(calls), f"{what}: the answer holds calls")
    for c in calls:
        check(c.type == "function" and c.id and c.function.name in names,
              f"{what}: call {c.function.name} ({c.id}) is of {sorted(names)}")
        args = json.loads(c.function.arguments)
        jsonschema.validate(args, SCHEMAS[c.function.name])
        check(True, f"{what}: arguments {c.function.arguments} validate")


MOST_DELTAS = [0]  # the most deltas one streamed call came in, per format


def streamed_calls(stream):
    """The SDK's chunks put together, as a client does: calls by index. Each call streams: its
    first delta has the id and name, and its arguments come over several deltas."""
    calls, finish, text, deltas = {}, None, "", {}
    for chunk in stream:
        if not chunk.choices:
            continue
        choice = chunk.choices[0]
        text += choice.delta.content or ""
        for d in choice.delta.tool_calls or []:
            first = d.index not in calls
            check(bool(d.id) == first and bool(d.function.name) == first,
                  f"call {d.index}: id and name on its first delta only ({d})")
            c = calls.setdefault(d.index, {"id": None, "name": "", "arguments": ""})
            c["id"] = d.id or c["id"]
            c["name"] += d.function.name or ""
            c["arguments"] += d.function.arguments or ""
            deltas[d.index] = deltas.get(d.index, 0) + 1
        finish = choice.finish_reason or finish
    # A reader that falls behind gets pieces joined, so one call may come in one delta; over a
    # format's streams, some must not.
    MOST_DELTAS[0] = max([MOST_DELTAS[0]] + list(deltas.values()))
    out = [openai.types.chat.ChatCompletionMessageToolCall(
        id=c["id"], type="function", function={"name": c["name"], "arguments": c["arguments"]})
        for _, c in sorted(calls.items())]
    return out, finish, text


def serve(args, template, tmp, procs):
    w = Proc([f"{args.bin}/llm-worker", "--model.path", "random:tiny",
              "--model.chat_template", os.path.join(args.templates, template),
              "--server.listen", "127.0.0.1:0", "--server.metrics_listen", "127.0.0.1:0",
              "--engine.cpu_threads", "1"],
             r"on port (\d+), metrics on port (\d+)", tmp, f"worker-{template}")
    procs.append(w)
    r = Proc([f"{args.bin}/llm-router", "--router.listen", "127.0.0.1:0",
              "--router.metrics_listen", "127.0.0.1:0", "--router.http_listen", "127.0.0.1:0",
              "--auth.token_file", os.path.join(tmp, "token"),
              "--discovery.workers", f"127.0.0.1:{w.match.group(1)}"],
             r"routing on port (\d+), metrics on port (\d+), http on port (\d+)", tmp,
             f"router-{template}")
    procs.append(r)
    _, router_metrics, http_port = (int(g) for g in r.match.groups())
    if not wait_for(
            lambda: (metric(router_metrics, 'llm_router_workers{state="ready"}') or 0) >= 1, 30):
        fail("the router never saw the worker ready")
    return openai.OpenAI(base_url=f"http://127.0.0.1:{http_port}/v1", api_key=TOKEN,
                         max_retries=0, timeout=120)


def calls_in_every_mode(client, fmt):
    model = client.models.list().data[0].id
    common = dict(model=model, messages=MESSAGES, tools=TOOLS, max_tokens=600)
    for seed in range(3):
        # Greedy would repeat calls until max_tokens: sampled, or one call.
        r = client.chat.completions.create(**common, tool_choice="required", seed=seed,
                                           parallel_tool_calls=seed != 0)
        m = r.choices[0]
        check(m.finish_reason == "tool_calls", f"{fmt} required: finish_reason {m.finish_reason}")
        check(not m.message.content, f"{fmt} required: no content ({m.message.content!r})")
        check_calls(m.message.tool_calls, SCHEMAS, f"{fmt} required, seed {seed}")
        calls, finish, text = streamed_calls(client.chat.completions.create(
            **common, tool_choice="required", seed=seed, parallel_tool_calls=seed != 0,
            stream=True))
        check(finish == "tool_calls" and text == "", f"{fmt} required, streamed: {finish}")
        check_calls(calls, SCHEMAS, f"{fmt} required, streamed, seed {seed}")
        check([(c.function.name, c.function.arguments) for c in calls] ==
              [(c.function.name, c.function.arguments) for c in m.message.tool_calls],
              f"{fmt}: the streamed calls are the same as the whole answer's (seed {seed})")
    named = {"type": "function", "function": {"name": "GetWeather"}}
    for stream in (False, True):
        if stream:
            calls, finish, _ = streamed_calls(client.chat.completions.create(
                **common, tool_choice=named, temperature=0, parallel_tool_calls=False,
                stream=True))
        else:
            r = client.chat.completions.create(**common, tool_choice=named, temperature=0,
                                               parallel_tool_calls=False)
            calls, finish = r.choices[0].message.tool_calls, r.choices[0].finish_reason
        check(finish == "tool_calls" and len(calls) == 1,
              f"{fmt} named, stream={stream}: one call, finish_reason {finish}")
        check_calls(calls, {"GetWeather"}, f"{fmt} named, stream={stream}")
    # The SDK's parse: the arguments as Pydantic objects.
    parsed = client.chat.completions.parse(**common, tool_choice=named, seed=7,
                                           parallel_tool_calls=False)
    args = parsed.choices[0].message.tool_calls[0].function.parsed_arguments
    check(isinstance(args, GetWeather), f"{fmt}: parse() gives {args!r}")
    # A second turn: the calls (their ids and arguments as given) and their results go back
    # through the template.
    first = client.chat.completions.create(**common, tool_choice="required", seed=1)
    calls = first.choices[0].message.tool_calls
    turn = MESSAGES + [first.choices[0].message.model_dump(exclude_none=True)] + [
        {"role": "tool", "tool_call_id": c.id, "content": "18 C, sunny"} for c in calls]
    second = client.chat.completions.create(model=model, messages=turn, tools=TOOLS,
                                            tool_choice="none", max_tokens=8, seed=1)
    m = second.choices[0]
    check(m.finish_reason == "length" and not m.message.tool_calls and m.message.content,
          f"{fmt}: a second turn with {len(calls)} tool results answers in text")
    return model


def qwen_extras(client, model):
    # Structured output through the SDK's parse and a Pydantic model.
    for seed in range(3):
        r = client.chat.completions.parse(model=model, messages=MESSAGES, response_format=Person,
                                          max_tokens=400, seed=seed)
        p = r.choices[0].message.parsed
        check(isinstance(p, Person), f"parse(response_format=Person) gives {p!r}")
    # URLs (Pydantic's HttpUrl and AnyUrl): the SDK's parse validates them with Pydantic.
    for seed in range(3):
        r = client.chat.completions.parse(model=model, messages=MESSAGES, response_format=Site,
                                          max_tokens=1500, seed=seed)
        site = r.choices[0].message.parsed
        check(isinstance(site, Site) and site.url.scheme in ("http", "https"),
              f"parse(response_format=Site) gives {site!r}")
        check(len(json.loads(r.choices[0].message.content)["url"]) <= 2083,
              "an HttpUrl keeps its maxLength")
    # A dict and a set: values checked, and members unique.
    for seed in range(3):
        r = client.chat.completions.parse(model=model, messages=MESSAGES, response_format=Shelf,
                                          max_tokens=1500, seed=seed)
        shelf = r.choices[0].message.parsed
        check(isinstance(shelf, Shelf), f"parse(response_format=Shelf) gives {shelf!r}")
        raw = json.loads(r.choices[0].message.content)
        check(len(raw["colors"]) == len(set(raw["colors"])), f"{raw['colors']} has no repeats")
    # Bad tool requests: 400 naming the parameter.
    bad = [
        ("tool_choice", dict(tool_choice={"type": "function", "function": {"name": "nope"}})),
        ("tools", dict(tools=[{"type": "function", "function": {"name": "a b"}}],
                       tool_choice="required")),
        ("tools", dict(tools=[{"type": "function", "function": {
            "name": "f", "parameters": {"type": "object", "properties": {
                "x": {"type": "string", "format": "hostname"}}}}}], tool_choice="required")),
        ("tool_choice", dict(tool_choice="required", response_format={"type": "json_object"})),
        ("functions", dict(functions=[{"name": "f"}])),
    ]
    for param, kwargs in bad:
        call = dict(model=model, messages=MESSAGES, tools=TOOLS, max_tokens=4)
        call.update(kwargs)
        try:
            client.chat.completions.create(**call)
            fail(f"{kwargs} was accepted")
        except openai.BadRequestError as e:
            got = e.body.get("param") if isinstance(e.body, dict) else None
            check(e.status_code == 400 and got == param, f"{kwargs} -> 400 param={got}")


def reasoning_is_apart(client, model):
    # The Qwen3 template writes <think>: its worker keeps the thinking out of the text. A
    # grammar makes the random model think, then answer.
    grammar = 'root ::= "<think>\\n" [a-z]{3,10} "\\n</think>\\n\\n" [a-z]{2,8}'
    common = dict(model=model, messages=MESSAGES, max_tokens=60, seed=1,
                  extra_body={"structured_outputs": {"grammar": grammar}})
    r = client.chat.completions.create(**common)
    message = r.choices[0].message
    thought = (message.model_extra or {}).get("reasoning_content")
    print(f"qwen3: reasoning {thought!r}, content {message.content!r}")
    check(isinstance(thought, str) and thought.isalpha() and 3 <= len(thought) <= 10 and
          message.content.isalpha(), f"the thinking apart from the answer: {message}")
    streamed_thought, streamed = "", ""
    for chunk in client.chat.completions.create(**common, stream=True):
        delta = chunk.choices[0].delta if chunk.choices else None
        if delta is not None:
            streamed_thought += (delta.model_extra or {}).get("reasoning_content") or ""
            streamed += delta.content or ""
    check(streamed_thought == thought and streamed == message.content,
          f"streamed reasoning {streamed_thought!r} and content {streamed!r}")


def auto_is_refused(client):
    model = client.models.list().data[0].id
    try:
        client.chat.completions.create(model=model, messages=MESSAGES, tools=TOOLS, max_tokens=4)
        fail("json: tool_choice auto on a worker that reads no calls was answered")
    except openai.BadRequestError as e:
        check(e.body["param"] == "tool_choice" and "auto" in e.body["message"],
              f"json: tool_choice auto is a 400 naming tool_choice ({e.body})")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", required=True)
    ap.add_argument("--templates", required=True)
    args = ap.parse_args()
    if not os.path.isdir(args.templates):
        fail(f"the chat templates are missing: {args.templates} (../shared is required)")
    tmp = token_dir("openai-tools-")
    procs = []
    try:
        for template, fmt in (("qwen3.jinja", "hermes"), ("llama31.jinja", "llama3_json"),
                              ("mistral_v03.jinja", "mistral"), ("granite33.jinja", "granite"),
                              ("phi4.jinja", "json")):
            client = serve(args, template, tmp, procs)
            log = open(procs[-2].log_path).read()
            if fmt == "json":  # a template with no call format: forced calls as a JSON array
                check("tool calls: none (from the chat template); tool_choice auto refused, "
                      "required and named calls written as json" in log,
                      f"{template}: the worker writes forced calls as json")
                auto_is_refused(client)
            else:
                check(f"tool calls: {fmt} (from the chat template)" in log,
                      f"{template}: the worker reads {fmt} calls")
            MOST_DELTAS[0] = 0
            model = calls_in_every_mode(client, fmt)
            check(MOST_DELTAS[0] > 1,
                  f"{fmt}: calls' arguments stream (at most {MOST_DELTAS[0]} deltas a call)")
            # Granite 3.3's asks for <think></think> when thinking is on.
            thinks = fmt in ("hermes", "granite")
            check(f"reasoning: {'think' if thinks else 'none'} (from the chat template)" in log,
                  f"{template}: the worker's reasoning format")
            if fmt == "hermes":
                qwen_extras(client, model)
                reasoning_is_apart(client, model)
            for p in procs:
                p.stop()
            procs.clear()
        print("PASS")
    finally:
        for p in procs:
            p.stop()


if __name__ == "__main__":
    main()
