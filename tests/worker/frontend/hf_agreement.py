"""Checks that llm-cli tokenize/detokenize agree exactly with Hugging Face `tokenizers`.

Run with the Python of the set-up's virtual environment (.venv/bin/python, which holds the
pinned `tokenizers` package):

  hf_agreement.py --cli build/bin/llm-cli --corpus tests/data/tokenizer_corpus.jsonl \
      --tokenizer ../shared/tokenizers/qwen3 [--tokenizer DIR ...]

For every tokenizer and corpus line it compares encode (with and without special tokens) and
decode (skipping and keeping special tokens); it also decodes seeded random id sequences
(including special and byte-fallback tokens) to stress the decoders. Exits 1 on any mismatch.
"""
import argparse
import json
import os
import random
import subprocess
import sys

from tokenizers import Tokenizer


def run_cli(cli, args, lines):
    proc = subprocess.run([cli] + args, input="".join(json.dumps(l, ensure_ascii=False) + "\n"
                                                      for l in lines),
                          capture_output=True, text=True, encoding="utf-8")
    # split("\n"), not splitlines(): U+2028 and U+0085 may appear unescaped inside strings.
    out = [json.loads(l) for l in proc.stdout.split("\n") if l]
    if len(out) != len(lines):
        sys.exit(f"llm-cli {' '.join(args)}: {len(out)} outputs for {len(lines)} inputs; "
                 f"stderr: {proc.stderr[:2000]}")
    return out


def random_id_sequences(tok, count, seed):
    rng = random.Random(seed)
    vocab = tok.get_vocab_size(with_added_tokens=True)
    added = [i for i in range(vocab) if tok.id_to_token(i) is not None and
             tok.id_to_token(i).startswith("<") and tok.id_to_token(i).endswith(">")]
    seqs = []
    for _ in range(count):
        n = rng.randint(1, 24)
        seq = []
        for _ in range(n):
            r = rng.random()
            if r < 0.15 and added:
                seq.append(rng.choice(added))
            else:
                seq.append(rng.randrange(vocab))
        seqs.append([i for i in seq if tok.id_to_token(i) is not None])
    return [s for s in seqs if s]


def check(cli, tokenizer_dir, texts):
    path = os.path.join(tokenizer_dir, "tokenizer.json")
    tok = Tokenizer.from_file(path)
    failures = []

    for add_special in (False, True):
        args = ["tokenize", "--tokenizer", tokenizer_dir] + (["--add-special"] if add_special else [])
        ours = run_cli(cli, args, [{"text": t} for t in texts])
        for text, got in zip(texts, ours):
            want = tok.encode(text, add_special_tokens=add_special).ids
            if got.get("ids") != want:
                failures.append(f"encode(add_special={add_special}) {text[:80]!r}:\n"
                                f"   hf  {want[:40]}\n   ours {got.get('ids', got)}")

    id_lists = [tok.encode(t, add_special_tokens=True).ids for t in texts]
    id_lists += random_id_sequences(tok, 300, seed=1234)
    for skip in (True, False):
        args = ["detokenize", "--tokenizer", tokenizer_dir] + ([] if skip else ["--keep-special"])
        ours = run_cli(cli, args, [{"ids": ids} for ids in id_lists])
        for ids, got in zip(id_lists, ours):
            want = tok.decode(ids, skip_special_tokens=skip)
            if got.get("text") != want:
                failures.append(f"decode(skip_special={skip}) {ids[:30]}:\n"
                                f"   hf   {want!r}\n   ours {got.get('text', got)!r}")
    return failures


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--cli", required=True)
    p.add_argument("--corpus", required=True)
    p.add_argument("--tokenizer", action="append", required=True)
    a = p.parse_args()
    with open(a.corpus, encoding="utf-8") as f:
        texts = [json.loads(l)["text"] for l in f if l.strip()]
    total = 0
    for d in a.tokenizer:
        if not os.path.exists(os.path.join(d, "tokenizer.json")):
            print(f"FAIL {d}: no tokenizer.json (the tests need ../shared)")
            total += 1
            continue
        failures = check(a.cli, d, texts)
        total += len(failures)
        print(f"{'ok  ' if not failures else 'FAIL'} {d}: {len(texts)} texts, "
              f"{len(failures)} mismatches")
        for msg in failures[:15]:
            print("  " + msg)
    sys.exit(1 if total else 0)


if __name__ == "__main__":
    main()
