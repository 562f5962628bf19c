"""The official `openai` Python SDK against llm-router's HTTP API, with two CPU llm-workers on
the test model: completions and chat, streaming and not; greedy text equal to the gRPC path's
(llm-cli call through the same router); usage; 100 concurrent streams; a client that leaves
mid-stream leaves the workers with nothing running; every bad field a 400 naming it; a wrong
token a 401.

Run with the virtual environment's Python (.venv/bin/python holds the pinned `openai`):

  openai_sdk_test.py --bin build/bin --model ../shared/models/tinystories-656k \
      --chat-template tests/data/chat_template_test.jinja

Exits 1 on the first failed check, saying which.
"""
import argparse
import concurrent.futures
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request

import httpx
import openai

TOKEN = "test-token-0123456789"


def fail(msg):
    print(f"FAIL: {msg}", file=sys.stderr)
    sys.exit(1)


def check(cond, msg):
    if not cond:
        fail(msg)
    print(f"ok: {msg}")


def wait_for(done, timeout_s):
    """Calls `done` every 50 ms until it returns true (True) or `timeout_s` seconds pass (False)."""
    deadline = time.monotonic() + timeout_s
    while not done():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


class Proc:
    def __init__(self, argv, ready, tmp, name):
        self.log_path = os.path.join(tmp, name + ".log")
        self.log = open(self.log_path, "w+")
        self.p = subprocess.Popen(argv, stdout=self.log, stderr=subprocess.STDOUT)

        def ready_or_exited():
            # The log is read before the exit is checked, so a line printed just before an
            # exit is still found.
            self.match = re.search(ready, open(self.log_path).read())
            return self.match is not None or self.p.poll() is not None
        if not wait_for(ready_or_exited, 60):
            fail(f"{name} did not start: {open(self.log_path).read()[-2000:]}")
        if self.match is None:
            fail(f"{name} exited: {open(self.log_path).read()[-2000:]}")

    def stop(self):
        if self.p.poll() is None:
            self.p.send_signal(signal.SIGTERM)
            try:
                self.p.wait(20)
            except subprocess.TimeoutExpired:
                self.p.kill()


def token_dir(prefix):
    """A temporary folder holding `token`, the router's API token file."""
    tmp = tempfile.mkdtemp(prefix=prefix)
    with open(os.path.join(tmp, "token"), "w") as f:
        f.write(TOKEN + "\n")
    return tmp


def metric(port, name):
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
    m = re.search(rf"^{name}(?:{{[^}}]*}})? ([0-9.e+-]+)$", text, re.M)
    return float(m.group(1)) if m else None


def parse_args():
    """--bin, --model (the test model's folder, which must exist) and --chat-template."""
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", required=True)
    ap.add_argument("--model", required=True)
    ap.add_argument("--chat-template", required=True)
    args = ap.parse_args()
    if not os.path.isdir(args.model):
        fail(f"the test model is missing: {args.model} (../shared is required)")
    return args


def main():
    args = parse_args()
    tmp = token_dir("openai-sdk-")
    procs = []
    try:
        workers = []
        for i in range(2):
            w = Proc([f"{args.bin}/llm-worker", "--model.path", args.model,
                      "--model.chat_template", args.chat_template,
                      "--server.listen", "127.0.0.1:0", "--server.metrics_listen", "127.0.0.1:0",
                      "--engine.cpu_threads", "1",
                      # 1 ms per step: a 400-token answer lasts long enough to walk away from.
                      "--engine.extra_step_ms", "1"],
                     r"on port (\d+), metrics on port (\d+)", tmp, f"worker{i}")
            procs.append(w)
            workers.append((int(w.match.group(1)), int(w.match.group(2))))
        r = Proc([f"{args.bin}/llm-router", "--router.listen", "127.0.0.1:0",
                  "--router.metrics_listen", "127.0.0.1:0", "--router.http_listen", "127.0.0.1:0",
                  "--auth.token_file", os.path.join(tmp, "token"),
                  "--discovery.workers", ",".join(f"127.0.0.1:{p}" for p, _ in workers)],
                 r"routing on port (\d+), metrics on port (\d+), http on port (\d+)", tmp, "router")
        procs.append(r)
        grpc_port, router_metrics, http_port = (int(g) for g in r.match.groups())
        ready = 'llm_router_workers{state="ready"}'
        if not wait_for(lambda: (metric(router_metrics, ready) or 0) >= 2, 30):
            fail("the router never saw two ready workers")

        client = openai.OpenAI(base_url=f"http://127.0.0.1:{http_port}/v1", api_key=TOKEN,
                               max_retries=0, timeout=60)
        models = [m.id for m in client.models.list().data]
        check(models == ["tinystories-656k"], f"models.list() is {models}")
        model = models[0]

        # Completions: greedy text equals the gRPC path's.
        prompt = "Once upon a time"
        grpc = subprocess.run([f"{args.bin}/llm-cli", "call", "--target",
                               f"127.0.0.1:{grpc_port}", "--prompt", prompt, "--max-tokens", "40",
                               "--temperature", "0", "--quiet", "--token-file",
                               os.path.join(tmp, "token")],
                              capture_output=True, text=True)
        if grpc.returncode != 0:
            fail(f"llm-cli call failed: {grpc.stderr}")
        # The gRPC client's structured output flags reach the worker.
        constrained = subprocess.run([f"{args.bin}/llm-cli", "call", "--target",
                                      f"127.0.0.1:{grpc_port}", "--prompt", prompt, "--quiet",
                                      "--choice", "Lily", "--choice", "Tom and Sue",
                                      "--token-file", os.path.join(tmp, "token")],
                                     capture_output=True, text=True)
        check(constrained.returncode == 0 and
              constrained.stdout.rstrip("\n") in ("Lily", "Tom and Sue"),
              f"llm-cli call --choice answers one choice: {constrained.stdout!r}"
              f" {constrained.stderr!r}")
        c = client.completions.create(model=model, prompt=prompt, max_tokens=40, temperature=0)
        check(c.choices[0].text == grpc.stdout.rstrip("\n"),
              f"completion text {c.choices[0].text!r} equals the gRPC path's {grpc.stdout!r}")
        check(c.object == "text_completion" and c.id.startswith("cmpl-") and c.model == model,
              "completion id, object and model")
        check(c.choices[0].finish_reason == "length", "finish_reason length at max_tokens")
        check(c.usage.completion_tokens == 40 and c.usage.prompt_tokens == 6 and
              c.usage.total_tokens == 46, f"completion usage {c.usage}")
        # Streaming: the deltas add up to the same text; usage at the end when asked.
        chunks = list(client.completions.create(model=model, prompt=prompt, max_tokens=40,
                                                temperature=0, stream=True,
                                                stream_options={"include_usage": True}))
        text = "".join(ch.choices[0].text for ch in chunks if ch.choices)
        check(text == c.choices[0].text, "streamed completion equals the non-streamed one")
        check(len(chunks) > 5, f"the completion streamed in {len(chunks)} chunks")
        check(chunks[-1].usage is not None and chunks[-1].usage.completion_tokens == 40,
              "the last chunk carries usage")
        # Logprobs.
        lp = client.completions.create(model=model, prompt=prompt, max_tokens=5, temperature=0,
                                       logprobs=2)
        check(len(lp.choices[0].logprobs.tokens) == 5 and
              all(len(t) == 2 for t in lp.choices[0].logprobs.top_logprobs) and
              "".join(lp.choices[0].logprobs.tokens) == lp.choices[0].text,
              "completion logprobs: 5 tokens, 2 alternatives each, tokens spell the text")

        # Chat, rendered with the template given to the workers.
        messages = [{"role": "system", "content": "You tell stories."},
                    {"role": "user", "content": "Tell me about a cat."}]
        ch = client.chat.completions.create(model=model, messages=messages, max_tokens=20,
                                            temperature=0)
        msg = ch.choices[0].message
        check(msg.role == "assistant" and len(msg.content) > 0, f"chat answer {msg.content!r}")
        check(ch.object == "chat.completion" and ch.id.startswith("chatcmpl-"), "chat id, object")
        check(ch.usage.completion_tokens == 20 and ch.usage.prompt_tokens > 10,
              f"chat usage {ch.usage}")
        parts = list(client.chat.completions.create(model=model, messages=messages,
                                                    max_tokens=20, temperature=0, stream=True))
        check(parts[0].choices[0].delta.role == "assistant", "the first chat chunk has the role")
        streamed = "".join(p.choices[0].delta.content or "" for p in parts if p.choices)
        check(streamed == msg.content, "streamed chat equals the non-streamed one")
        check(parts[-1].choices[0].finish_reason == "length", "chat finish_reason")
        clp = client.chat.completions.create(model=model, messages=messages, max_tokens=3,
                                             temperature=0, logprobs=True, top_logprobs=3)
        content = clp.choices[0].logprobs.content
        check(len(content) == 3 and all(len(t.top_logprobs) == 3 for t in content) and
              content[0].top_logprobs[0].logprob >= content[0].top_logprobs[1].logprob,
              "chat logprobs: 3 tokens, 3 alternatives each, most likely first")

        # 100 concurrent streams.
        def one_stream(i):
            got = client.chat.completions.create(
                model=model, max_tokens=16, temperature=0.8, seed=i, stream=True,
                messages=[{"role": "user", "content": f"Story number {i}"}])
            n = 0
            finish = None
            for part in got:
                if part.choices and part.choices[0].delta.content:
                    n += 1
                if part.choices and part.choices[0].finish_reason:
                    finish = part.choices[0].finish_reason
            return n, finish
        with concurrent.futures.ThreadPoolExecutor(100) as pool:
            results = list(pool.map(one_stream, range(100)))
        check(all(n > 0 and f in ("length", "stop") for n, f in results),
              "100 concurrent streams each streamed and finished")

        # A client that leaves mid-stream: nothing is left running at the workers.
        with httpx.Client(timeout=30) as h:
            with h.stream("POST", f"http://127.0.0.1:{http_port}/v1/completions",
                          headers={"Authorization": f"Bearer {TOKEN}"},
                          json={"model": model, "prompt": prompt, "max_tokens": 400,
                                "ignore_eos": True, "stream": True}) as resp:
                check(resp.status_code == 200, f"the long stream started ({resp.status_code})")
                lines = resp.iter_lines()
                first = next(l for l in lines if l.startswith("data: "))
                check(first.startswith("data: {"), "the abandoned stream had started")
                running = sum(metric(m, "llm_num_requests_running") or 0 for _, m in workers)
                check(running == 1, f"it is running at a worker ({running}) when the client leaves")
        if not wait_for(
                lambda: sum(metric(m, "llm_num_requests_running") or 0 for _, m in workers) == 0,
                10):
            fail("a request is still running at a worker after its client left")
        check(True, "after the client left, 0 requests run at the workers")

        # Bad fields: 400 naming the parameter.
        bad = [
            ("n", dict(n=17)),  # 1 to 16
            ("max_tokens", dict(max_tokens=0)),
            ("temperature", dict(temperature="hot")),
            ("stop", dict(stop=5)),
            ("top_logprobs", dict(top_logprobs=3)),
            # The test template has no call format: the worker refuses to read calls.
            ("tool_choice", dict(tools=[{"type": "function", "function": {"name": "f"}}])),
            ("response_format", dict(response_format={"type": "xml"})),
            ("frobnicate", dict(extra_body={"frobnicate": 1})),
            ("temperature", dict(temperature=150)),  # the worker's range check, mapped
            ("messages[0].role", dict(messages=[{"role": "robot", "content": "x"}])),
        ]
        for param, kwargs in bad:
            call = dict(model=model, messages=[{"role": "user", "content": "hi"}], max_tokens=4)
            call.update(kwargs)
            try:
                client.chat.completions.create(**call)
                fail(f"{kwargs} was accepted")
            except openai.BadRequestError as e:
                got = e.body.get("param") if isinstance(e.body, dict) else None
                check(e.status_code == 400 and got == param, f"{kwargs} -> 400 param={got}")
        try:
            client.completions.create(model="no-such-model", prompt="x")
            fail("an unknown model was accepted")
        except openai.NotFoundError as e:
            check(e.status_code == 404, "an unknown model is 404")
        # A wrong token.
        wrong = openai.OpenAI(base_url=f"http://127.0.0.1:{http_port}/v1", api_key="wrong",
                              max_retries=0)
        try:
            wrong.completions.create(model=model, prompt="x", max_tokens=2)
            fail("a wrong token was accepted")
        except openai.AuthenticationError as e:
            check(e.status_code == 401, "a wrong token is 401")
        print("all checks passed")
    finally:
        for p in reversed(procs):
            p.stop()


if __name__ == "__main__":
    main()
