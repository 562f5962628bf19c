"""Checks that `llm-cli chat-template` renders chat templates byte for byte as Python jinja2
does with Hugging Face transformers' semantics (apply_chat_template's environment).

Run with the virtual environment's Python (.venv/bin/python holds the pinned Jinja2):

  chat_template_agreement.py --cli build/bin/llm-cli --shared ../shared \
      --conversations tests/data/chat_conversations.jsonl

Cases: every template of ../shared/chat-templates (with its bos/eos tokens and extra keyword
arguments from templates.json) and of ../shared/tokenizers/{qwen3,llama3,mistral}, times every
conversation (tool conversations with tools, for templates that support tools), with and without
add_generation_prompt. A case where the template raises must raise on both sides. Exits 1 on any
mismatch, printing a diff of the first ones.
"""
import argparse
import datetime
import difflib
import json
import os
import subprocess
import sys

import jinja2
import jinja2.ext
from jinja2.sandbox import ImmutableSandboxedEnvironment

TODAY = datetime.datetime(2024, 7, 23, 12, 0, 0)


def hf_environment():
    """The environment transformers' _compile_jinja_template builds."""

    def raise_exception(message):
        raise jinja2.exceptions.TemplateError(message)

    def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators,
                          sort_keys=sort_keys)

    def strftime_now(fmt):
        return TODAY.strftime(fmt)

    class AssistantTracker(jinja2.ext.Extension):
        """transformers' {% generation %} tag, without the assistant-mask bookkeeping."""
        tags = {"generation"}

        def parse(self, parser):
            lineno = next(parser.stream).lineno
            body = parser.parse_statements(["name:endgeneration"], drop_needle=True)
            call = self.call_method("_generation_support")
            return jinja2.nodes.CallBlock(call, [], [], body).set_lineno(lineno)

        def _generation_support(self, caller):
            return caller()

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                        extensions=[AssistantTracker, jinja2.ext.loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now
    return env


def render_reference(env, source, bos, eos, case):
    """What apply_chat_template renders, or None when the template raises."""
    context = {}
    if bos is not None:
        context["bos_token"] = bos
    if eos is not None:
        context["eos_token"] = eos
    context.update(case.get("kwargs", {}))
    context["messages"] = case["messages"]
    context["tools"] = case.get("tools")
    context.setdefault("documents", None)
    context["add_generation_prompt"] = case["add_generation_prompt"]
    if isinstance(source, dict):  # named templates: transformers' choice
        name = "tool_use" if context["tools"] is not None and "tool_use" in source else "default"
        source = source[name]
    try:
        return env.from_string(source).render(**context)
    except jinja2.exceptions.TemplateError:
        return None
    except Exception:  # a template bug Python reports (TypeError...): the template fails
        return None


def run_cli(cli, args, cases):
    lines = "".join(json.dumps(c, ensure_ascii=False) + "\n" for c in cases)
    proc = subprocess.run([cli, "chat-template", "--now", TODAY.strftime("%Y-%m-%d")] + args,
                          input=lines, capture_output=True, text=True, encoding="utf-8")
    out = [json.loads(l) for l in proc.stdout.split("\n") if l]
    if len(out) != len(cases):
        sys.exit(f"llm-cli chat-template {' '.join(args)}: {len(out)} outputs for {len(cases)} "
                 f"inputs; stderr: {proc.stderr[:2000]}")
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--cli", required=True)
    ap.add_argument("--shared", required=True)
    ap.add_argument("--conversations", required=True)
    args = ap.parse_args()
    tdir = os.path.join(args.shared, "chat-templates")
    if not os.path.isdir(tdir):
        sys.exit(f"FAIL: {tdir} is missing (../shared is required)")
    with open(args.conversations, encoding="utf-8") as f:
        rows = [json.loads(l) for l in f if l.strip()]
    tools_def = rows[0]["tools_definition"]
    convs = rows[1:]
    meta = json.load(open(os.path.join(tdir, "templates.json"), encoding="utf-8"))

    # (name, source, bos, eos, cli args, cases)
    suites = []

    def cases_for(supports_tools, extras, tool_extras, special=()):
        out = []
        for conv in convs:
            with_tools = conv.get("tools", False)
            if with_tools and not supports_tools:
                continue
            for extra in (tool_extras if with_tools else extras):
                for agp in (True, False):
                    case = {"id": conv["id"], "messages": conv["messages"],
                            "add_generation_prompt": agp, "kwargs": extra}
                    if with_tools:
                        case["tools"] = tools_def
                    out.append(case)
        for sc in special:
            conv = next(c for c in convs if c["id"] == sc["conversation"])
            for agp in (True, False):
                out.append({"id": conv["id"] + "+special", "messages": conv["messages"],
                            "add_generation_prompt": agp, "kwargs": sc["extra"]})
        return out

    for name, m in meta.items():
        if name.startswith("_"):
            continue
        path = os.path.join(tdir, "templates", name + ".jinja")
        source = open(path, encoding="utf-8", newline="").read()
        cli_args = ["--template", path]
        if m.get("bos_token") is not None:
            cli_args += ["--bos-token", m["bos_token"]]
        if m.get("eos_token") is not None:
            cli_args += ["--eos-token", m["eos_token"]]
        suites.append((name, source, m.get("bos_token"), m.get("eos_token"), cli_args,
                       cases_for(m.get("supports_tools", False), m.get("extras", [{}]),
                                 m.get("tool_extras") or [{}], m.get("special_cases", []))))
    for tok in ("qwen3", "llama3", "mistral"):
        d = os.path.join(args.shared, "tokenizers", tok)
        cfg = json.load(open(os.path.join(d, "tokenizer_config.json"), encoding="utf-8"))
        tmpl = cfg.get("chat_template")
        if tmpl is None:
            # No template: llm-cli must say so clearly (the worker refuses chat the same way).
            proc = subprocess.run([args.cli, "chat-template", "--tokenizer", d], input="",
                                  capture_output=True, text=True)
            if proc.returncode == 0 or "no chat template" not in proc.stderr:
                sys.exit(f"FAIL: {d} has no chat template, but llm-cli said: {proc.stderr!r}")
            print(f"ok: {tok} has no chat template and llm-cli says so")
            continue
        if isinstance(tmpl, list):
            tmpl = {t["name"]: t["template"] for t in tmpl}

        def token(v):
            return v.get("content") if isinstance(v, dict) else v
        extras = [{"enable_thinking": True}, {"enable_thinking": False}] if tok == "qwen3" else [{}]
        suites.append((f"tokenizers/{tok}", tmpl, token(cfg.get("bos_token")),
                       token(cfg.get("eos_token")), ["--tokenizer", d],
                       cases_for(True, extras, extras)))

    env = hf_environment()
    total = mismatches = raised = 0
    shown = 0
    for name, source, bos, eos, cli_args, cases in suites:
        got = run_cli(args.cli, cli_args, cases)
        for case, out in zip(cases, got):
            total += 1
            want = render_reference(env, source, bos, eos, case)
            if want is None:
                raised += 1
                if "error" in out:
                    continue
                mismatches += 1
                if shown < 5:
                    shown += 1
                    print(f"MISMATCH {name} {case['id']} agp={case['add_generation_prompt']} "
                          f"kwargs={case['kwargs']}: jinja2 raised, llm-cli rendered")
                continue
            if out.get("text") == want:
                continue
            mismatches += 1
            if shown < 5:
                shown += 1
                print(f"MISMATCH {name} {case['id']} agp={case['add_generation_prompt']} "
                      f"kwargs={case['kwargs']}:")
                if "error" in out:
                    print(f"  llm-cli: error {out['error']}")
                else:
                    for l in difflib.unified_diff(want.splitlines(True), out["text"].splitlines(True),
                                                  "jinja2", "llm-cli", n=1):
                        sys.stdout.write("  " + l)
    print(f"{total} cases over {len(suites)} templates ({raised} raise in jinja2): "
          f"{total - mismatches} agree, {mismatches} differ")
    sys.exit(1 if mismatches else 0)


if __name__ == "__main__":
    main()
