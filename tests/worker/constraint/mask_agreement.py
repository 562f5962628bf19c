"""Our token masks against llguidance's (the reference, pinned in .venv), along random
documents: `llm-cli masks` walks each constraint (the schemas of tests/data/structured,
json_object) with a tokenizer of ../shared/tokenizers and writes every step's mask; this
replays each walk in llguidance's matcher and compares the masks bit by bit.

The reference is configured as our outputs are: compact JSON (whitespace_flexible false).
Every token that only one side allows must be of a kind docs/engine.md lists ("Masks against
llguidance": forced bytes' other tokenizations, string extras JSON allows, non-special added
tokens, exponents, trailing zeros, -0, impossible dates); anything else
fails the test, reported with the document, the step and the tokens.

Run with the virtual environment's Python:

  mask_agreement.py --cli build/bin/llm-cli --tokenizers ../shared/tokenizers \
      --schemas tests/data/structured/schemas.json [--docs 200]

Prints one JSON line per tokenizer and constraint: steps compared, steps equal, and the kinds
of difference with an example each.
"""
import argparse
import json
import os
import re
import struct
import subprocess
import sys
import tempfile

import llguidance
import numpy as np


def read_walks(path, mask_bytes):
    with open(path, "rb") as f:
        data = f.read()
    (vocab,) = struct.unpack_from("<I", data, 0)
    if (vocab + 31) // 32 * 4 != mask_bytes:
        sys.exit(f"FAIL: {path}: our vocabulary has {vocab} tokens, the reference's masks "
                 f"{mask_bytes} bytes")
    at = 4
    while at < len(data):
        (n,) = struct.unpack_from("<I", data, at)
        at += 4
        tokens = list(struct.unpack_from(f"<{n}i", data, at))
        at += 4 * n
        masks = [data[at + i * mask_bytes: at + (i + 1) * mask_bytes] for i in range(n + 1)]
        at += (n + 1) * mask_bytes
        yield tokens, masks


def bits(mask):
    return np.flatnonzero(np.unpackbits(np.frombuffer(mask, dtype=np.uint8), bitorder="little"))


def eos_of(tokenizer_dir):
    config = json.load(open(os.path.join(tokenizer_dir, "tokenizer_config.json")))
    tok = json.load(open(os.path.join(tokenizer_dir, "tokenizer.json")))
    eos = config.get("eos_token")
    eos = eos.get("content") if isinstance(eos, dict) else eos
    for t in tok["added_tokens"]:
        if t["content"] == eos:
            return t["id"]
    return tok["model"]["vocab"][eos]


def classify(name, prefix, ff, ours_only, ref_only, added):
    """The listed kinds (docs/engine.md, "Masks against llguidance") of a step's differences,
    one per token that only one side allows; None when a token's difference is not listed."""
    escaping = prefix.endswith("\\") and (len(prefix) - len(prefix.rstrip("\\"))) % 2

    tail = prefix[-6:].encode("utf-8", "replace")

    def surrogate(t):
        # A \uD800..\uDFFF escape that this token writes part of (its backslash unescaped).
        joined = tail + t
        for m in re.finditer(rb"\\[uU][dD][89a-fA-F]", joined):
            slashes = len(joined[:m.start() + 1]) - len(joined[:m.start() + 1].rstrip(b"\\"))
            if m.end() > len(tail) and slashes % 2 == 1:
                return True
        return False

    def ours_kind(t):
        # The next bytes are forced: the reference allows only their canonical tokenization's
        # first token; we allow every token that spells a prefix of them.
        if ff and ff.startswith(t):
            return "forced bytes: other tokenizations"
        # RFC 8259 lets a string hold U+007F unescaped, escape '/' as \\/, and escape any four
        # hex digits, a surrogate's too (the reference takes a high surrogate only with a low
        # one after it, and none of the others).
        if b"\x7f" in t or b"\\/" in t or (escaping and t.startswith(b"/")) or surrogate(t):
            return "strings: U+007F, \\/, surrogates"
        # Added tokens that are not special (Qwen's <tool_call>, <|fim_prefix|>, ...) stand
        # for their text with us; the reference leaves every added token out.
        if t in added:
            return "added tokens"
        # An exponent after a number's digits (12e3, within the bounds); the reference writes
        # numbers without one.
        if prefix[-1:].isdigit() and t[:1] in (b"e", b"E"):
            return "numbers: exponents"
        # A bounded number may end on a fraction's trailing zero (-0.50); the reference ends
        # bounded numbers only on a non-zero digit.
        if re.search(r"[0-9]\.[0-9]*0$", prefix) and not t[:1].isdigit():
            return "numbers: a fraction's trailing zeros"
        return None

    def ref_kind(t):
        if prefix.endswith("-") and t.startswith(b"0"):
            return "integers: -0"  # we write no negative zero
        if re.search(r"[0-9]{4}-02-2?$", prefix) and t in (b"29", b"9"):
            return "dates: February 29 of common years"  # we take only real dates
        if re.search(r'"0{1,3}$', prefix) and set(t) == {ord("0")}:
            return "dates: year 0000"  # years 0001..9999, as a date parser takes them
        return None

    kinds = [ours_kind(t) for t in ours_only] + [ref_kind(t) for t in ref_only]
    return None if None in kinds else sorted(set(kinds))


def compare(tok, grammar, path, mask_bytes, name, added):
    stats = {"steps": 0, "equal": 0, "kinds": {}, "unlisted": []}
    text = lambda ids: [tok.decode_bytes([int(t)]) for t in ids]
    for d, (tokens, masks) in enumerate(read_walks(path, mask_bytes)):
        m = llguidance.LLMatcher(tok, grammar)
        if m.is_error():
            sys.exit(f"FAIL: llguidance refused {name}: {m.get_error()}")
        for i, ours in enumerate(masks):
            ref = m.compute_bitmask()
            stats["steps"] += 1
            if any(ref[mask_bytes:]):
                sys.exit(f"FAIL: the reference allows ids beyond the vocabulary ({name})")
            kind = None
            if ref[:mask_bytes] == ours:
                stats["equal"] += 1
            else:
                a = np.frombuffer(ours, dtype=np.uint8)
                b = np.frombuffer(ref[:mask_bytes], dtype=np.uint8)
                ours_only = text(bits((a & ~b).tobytes()))
                ref_only = text(bits((b & ~a).tobytes()))
                prefix = tok.decode_bytes(tokens[:i]).decode("utf-8", "replace")
                kind = classify(name, prefix, m.compute_ff_bytes(), ours_only, ref_only, added)
                example = {"doc": d, "step": i, "prefix": prefix[-60:],
                           "ours_only": [str(t) for t in ours_only[:6]],
                           "n_ours_only": len(ours_only),
                           "ref_only": [str(t) for t in ref_only[:6]], "n_ref_only": len(ref_only)}
                if kind is None:
                    stats["unlisted"].append(example)
                for k in kind or []:
                    stats["kinds"].setdefault(k, {"steps": 0, "example": example})
                    stats["kinds"][k]["steps"] += 1
            if i < len(tokens) and not m.consume_token(tokens[i]):
                # Our walk took a token only we allow: fine where that difference is listed
                # (the walk ends here for the reference).
                if ref[:mask_bytes] == ours or kind is None:
                    stats["unlisted"].append({"doc": d, "step": i, "rejected": tokens[i],
                                              "error": m.get_error()[:300]})
                break
    return stats


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--cli", required=True)
    ap.add_argument("--tokenizers", required=True)
    ap.add_argument("--schemas", required=True)
    ap.add_argument("--docs", type=int, default=200)
    ap.add_argument("--names", default="llama3,qwen3,mistral")
    args = ap.parse_args()
    schemas = json.load(open(args.schemas))
    failed = False
    for name in args.names.split(","):
        tdir = os.path.join(args.tokenizers, name)
        if not os.path.isdir(tdir):
            sys.exit(f"FAIL: the tokenizer is missing: {tdir} (../shared is required)")
        holder = tempfile.TemporaryDirectory(prefix=f"masks-{name}-")  # ~0.7 GB, removed after
        out = holder.name
        subprocess.run([args.cli, "masks", "--tokenizer", tdir, "--schemas", args.schemas,
                        "--docs", str(args.docs), "--out", out], check=True)
        tok = llguidance.LLTokenizer(open(os.path.join(tdir, "tokenizer.json")).read(),
                                     eos_token=eos_of(tdir))
        mask_bytes = (tok.vocab_size + 31) // 32 * 4
        added = {t["content"].encode() for t in
                 json.load(open(os.path.join(tdir, "tokenizer.json")))["added_tokens"]
                 if not t["special"]}
        options = {"whitespace_flexible": False, "json_allow_general_unicode_escapes": True}
        constraints = [(f"schema{i}", llguidance.LLMatcher.grammar_from_json_schema(s, options))
                       for i, s in enumerate(schemas)]
        constraints.append(("json_object", llguidance.LLMatcher.grammar_from_json_schema(
            {"type": "object"}, options)))
        for cname, grammar in constraints:
            stats = compare(tok, grammar, os.path.join(out, cname + ".bin"), mask_bytes, cname,
                            added)
            failed = failed or bool(stats["unlisted"])
            stats["unlisted"] = stats["unlisted"][:3]
            print(json.dumps({"tokenizer": name, "constraint": cname, **stats},
                             ensure_ascii=False), flush=True)
        holder.cleanup()
    if failed:
        sys.exit("FAIL: masks differ in ways docs/engine.md does not list (above)")
    print("PASS")


if __name__ == "__main__":
    main()
