"""What the golden scripts share (qwen3_golden.py, smollm2_golden.py): llm-cli generate's greedy
ids, and their comparison with numpy_reference.py's."""

import json
import subprocess
import sys


def generate(cli, model, prompt, new_tokens, *extra):
    """{"prompt_ids", "generated_ids"} of a greedy llm-cli generate on the CPU backend."""
    out = subprocess.run(
        [cli, "generate", "--model", model, "--prompt", prompt, "--max-tokens", str(new_tokens),
         "--temperature", "0", "--ignore-eos", "--ids", "--backend", "cpu", *extra],
        capture_output=True, text=True, check=False)
    if out.returncode != 0:
        sys.exit(f"llm-cli generate failed ({out.returncode}): {out.stderr}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def compare(cli, model, reference, prompts, new_tokens, *extra):
    """Each prompt's greedy ids against the reference's from the same prompt ids; prints a line
    a prompt and exits 1 when any differs."""
    failures = 0
    for prompt in prompts:
        got = generate(cli, model, prompt, new_tokens, *extra)
        want, margins = reference.greedy(got["prompt_ids"], new_tokens)
        if got["generated_ids"] == want:
            print(f"ok   {prompt!r}: {new_tokens} tokens (smallest margin {min(margins):.2e})")
            continue
        i = next(i for i, (a, b) in enumerate(zip(got["generated_ids"], want)) if a != b)
        print(f"FAIL {prompt!r}: token {i}: ours {got['generated_ids'][i]}, reference {want[i]} "
              f"(reference margin {margins[i]:.2e})\n  ours {got['generated_ids']}\n  want {want}")
        failures += 1
    if failures:
        sys.exit(f"{failures} of {len(prompts)} prompts differ from the float64 reference")
    print(f"all {len(prompts)} prompts agree with the float64 numpy reference")
