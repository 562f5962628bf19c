"""The official `openai` Python SDK against a router in front of two CPU llm-workers of different
models: tinystories-656k named "tiny", and random:tiny named "rand" with the alias "rand-latest"
(a byte-level tokenizer, so a prompt has another token count there). models.list() lists the
three names once each; 200 interleaved completions and chat completions, 16 at a time, each
name their model and are answered by it (the response's model field, and the prompt token
count of that model's tokenizer); each worker's finished-request counter adds up to the calls
that named its model; /tokenize (its prompt form, and its messages form counting what a chat
completion counts) and /detokenize go by model too; an unknown name is a 404
model_not_found listing the served names; n = 4 gives four choices, the prompt computed once.
The gRPC side of the same cluster: two_model_test.cc.

Run with the virtual environment's Python (.venv/bin/python holds the pinned `openai`):

  openai_two_models_test.py --bin build/bin --model ../shared/models/tinystories-656k \
      --chat-template tests/data/chat_template_test.jinja

Exits 1 on the first failed check, saying which.
"""
import concurrent.futures
import os
import sys

import httpx
import openai

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from openai_sdk_test import (  # noqa: E402
    TOKEN, Proc, check, fail, metric, parse_args, token_dir, wait_for)

PROMPT = "Once upon a time there was a"


def start_cluster(args, tmp):
    """The two workers and the router; returns (procs, router http port, worker metrics ports)."""
    procs, ports = [], {}
    for name, flags in (("tiny", ["--model.path", args.model]),
                        ("rand", ["--model.path", "random:tiny",
                                  "--model.served_names", "rand-latest"])):
        w = Proc([f"{args.bin}/llm-worker", *flags, "--model.name", name,
                  "--model.chat_template", args.chat_template,
                  "--server.listen", "127.0.0.1:0", "--server.metrics_listen", "127.0.0.1:0",
                  "--engine.cpu_threads", "1"],
                 r"on port (\d+), metrics on port (\d+)", tmp, f"worker-{name}")
        procs.append(w)
        ports[name] = (int(w.match.group(1)), int(w.match.group(2)))
    r = Proc([f"{args.bin}/llm-router", "--router.listen", "127.0.0.1:0",
              "--router.metrics_listen", "127.0.0.1:0", "--router.http_listen", "127.0.0.1:0",
              "--auth.token_file", os.path.join(tmp, "token"),
              "--discovery.workers", ",".join(f"127.0.0.1:{p}" for p, _ in ports.values())],
             r"routing on port (\d+), metrics on port (\d+), http on port (\d+)", tmp, "router")
    procs.append(r)
    _, router_metrics, http_port = (int(g) for g in r.match.groups())
    if not wait_for(
            lambda: (metric(router_metrics, 'llm_router_workers{state="ready"}') or 0) >= 2, 30):
        fail("the router never saw two ready workers")
    return procs, http_port, {name: m for name, (_, m) in ports.items()}


def finished(metrics_port):
    """Requests a worker has finished, over every reason."""
    return sum(metric(metrics_port, f'llm_requests_finished_total{{[^}}]*reason="{r}"[^}}]*}}')
               or 0 for r in ("stop", "length", "error"))


def ask(client, i, name):
    """Call i: a completion (even) or a chat completion (odd) naming `name`; returns the
    response's model and prompt token count."""
    if i % 2 == 0:
        r = client.completions.create(model=name, prompt=PROMPT, max_tokens=2, temperature=0)
    else:
        r = client.chat.completions.create(model=name, max_tokens=2, temperature=0,
                                           messages=[{"role": "user", "content": PROMPT}])
    return r.model, r.usage.prompt_tokens


def check_choices(client):
    """n = 4: four choices with their index, the prompt computed once (the later choices take
    its full 16-token blocks from the prefix cache: usage's cached tokens), usage counting the
    prompt once and every choice's tokens; streamed, each choice's deltas under its index."""
    story = ("Once upon a time, in a small town by the sea, there lived a boy called Sam who "
             "kept a red kite under his bed. Every windy morning he ran up the hill")
    r = client.completions.create(model="tiny", prompt=story, n=4, max_tokens=8, temperature=1.0,
                                  seed=11, extra_body={"ignore_eos": True})
    indexes = sorted(c.index for c in r.choices)
    u = r.usage
    check(indexes == [0, 1, 2, 3] and all(c.finish_reason == "length" for c in r.choices),
          f"n=4: four choices, indexes {indexes}")
    check(u.prompt_tokens >= 32 and u.completion_tokens == 32 and
          u.total_tokens == u.prompt_tokens + 32,
          f"n=4: usage counts the prompt once ({u.prompt_tokens}) and 4 x 8 completion tokens "
          f"({u.completion_tokens})")
    cached = u.prompt_tokens_details.cached_tokens if u.prompt_tokens_details else 0
    check(cached == u.prompt_tokens // 16 * 16,
          f"n=4: the later choices found the prompt's full blocks cached ({cached} of "
          f"{u.prompt_tokens})")
    check(len({c.text for c in r.choices}) > 1, "n=4: the choices sample their own streams")
    text, finishes = {}, {}
    for chunk in client.chat.completions.create(
            model="tiny", n=4, max_tokens=8, temperature=1.0, seed=12, stream=True,
            messages=[{"role": "user", "content": story}]):
        for c in chunk.choices:
            text[c.index] = text.get(c.index, "") + (c.delta.content or "")
            if c.finish_reason:
                finishes[c.index] = c.finish_reason
    check(sorted(text) == [0, 1, 2, 3] and sorted(finishes) == [0, 1, 2, 3],
          f"n=4 streamed: deltas and a finish for each index ({sorted(finishes)})")


def main():
    args = parse_args()
    tmp = token_dir("openai-two-models-")
    procs = []
    try:
        procs, http_port, worker_metrics = start_cluster(args, tmp)
        client = openai.OpenAI(base_url=f"http://127.0.0.1:{http_port}/v1", api_key=TOKEN,
                               max_retries=0, timeout=60)
        models = sorted(m.id for m in client.models.list().data)
        check(models == ["rand", "rand-latest", "tiny"], f"models.list() is {models}")

        # Each model's prompt token counts (completion, chat), from one call of each kind.
        expected = {}
        for model in ("tiny", "rand"):
            expected[model] = [ask(client, kind, model)[1] for kind in (0, 1)]
        check(expected["tiny"] != expected["rand"],
              f"the two tokenizers count the prompt differently: {expected}")

        names = ["tiny", "rand", "tiny", "rand-latest"]
        with concurrent.futures.ThreadPoolExecutor(16) as pool:
            answers = list(pool.map(lambda i: (i, ask(client, i, names[i % 4])), range(200)))
        for i, (model, prompt_tokens) in answers:
            name = names[i % 4]
            served = "tiny" if name == "tiny" else "rand"
            if model != name:
                fail(f"call {i} named {name} and the answer says {model}")
            if prompt_tokens != expected[served][i % 2]:
                fail(f"call {i} named {name}: {prompt_tokens} prompt tokens, "
                     f"where {served} counts {expected[served][i % 2]}")
        check(True, "200 interleaved calls each answered by the model they named")

        # 100 calls per model, plus the 2 that measured each tokenizer.
        if not wait_for(lambda: (finished(worker_metrics["tiny"]),
                                 finished(worker_metrics["rand"])) == (102, 102), 10):
            fail(f"finished per worker: tiny {finished(worker_metrics['tiny'])}, "
                 f"rand {finished(worker_metrics['rand'])} (102 each expected)")
        check(True, "each worker finished the 102 calls that named its model")

        # /tokenize and /detokenize (vLLM's shapes) go to a worker of the model they name.
        base = f"http://127.0.0.1:{http_port}"
        headers = {"Authorization": f"Bearer {TOKEN}"}
        for name, served in (("tiny", "tiny"), ("rand-latest", "rand")):
            t = httpx.post(f"{base}/tokenize", headers=headers, timeout=30,
                           json={"model": name, "prompt": PROMPT}).json()
            check(t["count"] == len(t["tokens"]) == expected[served][0] and t["max_model_len"] > 0,
                  f"/tokenize naming {name}: {t['count']} tokens, as its completions count")
            d = httpx.post(f"{base}/detokenize", headers=headers, timeout=30,
                           json={"model": name, "tokens": t["tokens"]}).json()
            check(PROMPT in d["prompt"], f"/detokenize naming {name} gives the prompt back: "
                  f"{d['prompt']!r}")
            # The chat form: the template's rendering, as a chat completion counts it.
            t = httpx.post(f"{base}/tokenize", headers=headers, timeout=30,
                           json={"model": name,
                                 "messages": [{"role": "user", "content": PROMPT}]}).json()
            check(t.get("count") == expected[served][1],
                  f"/tokenize with messages naming {name}: {t}, as its chat completions count "
                  f"({expected[served][1]})")
        r = httpx.post(f"{base}/tokenize", headers=headers, timeout=30, json={"prompt": PROMPT})
        check(r.status_code == 400, f"/tokenize without a model, two served: {r.status_code}")
        r = httpx.post(f"{base}/tokenize", headers=headers, timeout=30,
                       json={"model": "gpt-4o", "prompt": PROMPT})
        check(r.status_code == 404 and r.json()["error"]["code"] == "model_not_found",
              f"/tokenize naming an unknown model: {r.status_code}")

        check_choices(client)

        try:
            client.completions.create(model="gpt-4o", prompt=PROMPT, max_tokens=2)
            fail("an unknown model was served")
        except openai.NotFoundError as e:
            body = e.body if isinstance(e.body, dict) else {}
            check(body.get("code") == "model_not_found" and "rand-latest" in str(e),
                  f"an unknown model is 404 model_not_found listing the served names: {e}")
    finally:
        for p in procs:
            p.stop()


if __name__ == "__main__":
    main()
