"""Checks that tokenizers built from GGUF metadata agree exactly with Hugging Face transformers.

Run with the Python of the set-up's virtual environment (.venv/bin/python, which holds `gguf`):

  gguf_tokenizer_agreement.py --encoder build/tests/bin/gguf_vocab_encode \
      --corpus tests/data/tokenizer_corpus.jsonl --shared ../shared \
      --transformers-path .venv/transformers-ref \
      [--gguf .cache/models/smollm2/SmolLM2-135M-Instruct.Q4_1.gguf ...]

Cases: each --gguf file as it is, and GGUF files this script writes into a temporary folder from
the Hugging Face tokenizers in <shared>/tokenizers (llama3: gpt2/llama-bpe, also with
add_bos_token as Meta's files have it; qwen3: gpt2/qwen2; mistral: llama SPM with scores, token
types and no merges), their vocabulary metadata laid out the way llama.cpp's
convert_hf_to_gguf.py lays it out (`generate`).

The reference is transformers' own GGUF tokenizer conversion,
AutoTokenizer.from_pretrained(dir, gguf_file=name), from transformers 5.24.0. That needs
tokenizers >= 0.23.1, whose decoding differs from the tokenizers 0.22.1 that hf_agreement.py
checks against (0.23 no longer skips `normalized` special tokens whose content the normalizer
changes), so transformers, that tokenizers and regex live in a folder of their own
(--transformers-path, put first on sys.path; pip install --no-deps --target).
transformers reads GGUF metadata with a module that imports torch (only for tensor data), and its
config path refuses to run without torch; the test environment has no torch, so this script puts
gguf-py's reader in place of that module and lifts that check (`_load_transformers`). Everything
that builds the tokenizer is transformers'.

For every case and corpus line it compares encode (with and without special tokens) and decode
of the reference's ids (skipping and keeping special tokens). Exits 1 on any mismatch.
"""
import argparse
import functools
import json
import os
import subprocess
import sys
import tempfile
import types

import gguf
import numpy as np

# ---------------------------------------------------------------------------------------------
# Writing GGUF files from Hugging Face tokenizer directories, as convert_hf_to_gguf.py does.
# ---------------------------------------------------------------------------------------------


def _looks_special(token):
    """convert_hf_to_gguf's does_token_look_special: added tokens it marks CONTROL anyway."""
    return (token in ("<pad>", "<mask>", "<2mass>", "[@BOS@]") or
            (token.startswith("<|") and token.endswith("|>")) or
            (token.startswith("<\uff5c") and token.endswith("\uff5c>")) or
            (token.startswith("<unused") and token.endswith(">")))


def _special_vocab(tok_json, config, n_vocab):
    """gguf-py SpecialVocab's reading of tokenizer.json + tokenizer_config.json: special ids
    (looked up among the added tokens), add_*_token flags and the chat template."""
    ids, add = {}, {}
    post = tok_json.get("post_processor") or {}
    for proc in post.get("processors", [post]):
        if proc.get("type") == "TemplateProcessing" and len(proc.get("single", [])) > 1:
            first = proc["single"][0].get("SpecialToken", {}).get("id")
            last = proc["single"][-1].get("SpecialToken", {}).get("id")
            if first:
                add["bos"] = first == config.get("bos_token")
            if last:
                add["eos"] = last == config.get("eos_token")
    for typ in ("bos", "eos", "unk", "pad"):
        if isinstance(config.get(f"add_{typ}_token"), bool):
            add[typ] = config[f"add_{typ}_token"]
        entry = config.get(f"{typ}_token")
        if isinstance(entry, dict):
            entry = entry.get("content")
        if not isinstance(entry, str):
            continue
        tid = next((a["id"] for a in tok_json["added_tokens"] if a["content"] == entry), None)
        if tid is not None and tid < n_vocab:
            ids[typ] = tid
    return ids, add, config.get("chat_template")


def _byte_level_metadata(tok_json, vocab_size, pre):
    """_set_vocab_gpt2 / get_vocab_base: the vocabulary padded to the model's vocab_size with
    [PADn] tokens, added tokens CONTROL when special (or special-looking) else USER_DEFINED,
    the merges as "a b" strings."""
    vocab = dict(tok_json["model"]["vocab"])
    added = {a["id"]: a for a in tok_json["added_tokens"]}
    for a in added.values():
        vocab[a["content"]] = a["id"]
    reverse = {i: t for t, i in vocab.items()}
    tokens, types_ = [], []
    for i in range(vocab_size):
        if i not in reverse:
            tokens.append(f"[PAD{i}]")
            types_.append(gguf.TokenType.UNUSED)
        elif i in added:
            token = reverse[i]
            if added[i]["special"] or _looks_special(token):
                types_.append(gguf.TokenType.CONTROL)
            else:
                types_.append(gguf.TokenType.USER_DEFINED)
                token = token.replace("\u2581", " ")
            tokens.append(token)
        else:
            tokens.append(reverse[i])
            types_.append(gguf.TokenType.NORMAL)
    merges = [m if isinstance(m, str) else " ".join(m) for m in tok_json["model"]["merges"]]
    return {"model": "gpt2", "pre": pre, "tokens": tokens, "types": types_, "merges": merges}


def _sentencepiece_metadata(tok_json):
    """_set_vocab_sentencepiece for a sentencepiece BPE vocabulary: byte tokens BYTE, special
    added tokens CONTROL, no merges, and the scores a sentencepiece BPE model carries.

    NOTE: shared/tokenizers/mistral has no tokenizer.model to read scores from. sentencepiece's
    BPE trainer scores each piece minus the step that learnt it, and the single characters after
    all of them; the merge list of tokenizer.json is in that order, so the scores are rebuilt
    from it (0 for the special and byte tokens, as sentencepiece has them)."""
    reverse = {i: t for t, i in tok_json["model"]["vocab"].items()}
    special = {a["id"] for a in tok_json["added_tokens"] if a["special"]}
    step = {}
    for rank, merge in enumerate(tok_json["model"]["merges"]):
        left, right = merge.split(" ", 1) if isinstance(merge, str) else merge
        step.setdefault(left + right, rank)
    tokens, types_, scores = [], [], []
    for i in range(len(reverse)):
        token = reverse[i]
        tokens.append(token)
        if i in special or _looks_special(token):
            types_.append(gguf.TokenType.CONTROL)
            scores.append(0.0)
        elif len(token) == 6 and token.startswith("<0x") and token.endswith(">"):
            types_.append(gguf.TokenType.BYTE)
            scores.append(0.0)
        else:
            types_.append(gguf.TokenType.NORMAL)
            scores.append(-float(step.get(token, len(step) + i)))
    return {"model": "llama", "pre": "default", "tokens": tokens, "types": types_,
            "scores": scores, "add_space_prefix": True}


def write_gguf(path, arch, name, meta, special_ids, add_flags, chat_template):
    w = gguf.GGUFWriter(path, arch)
    w.add_name(name)
    w.add_block_count(1)
    w.add_context_length(4096)
    w.add_embedding_length(8)
    w.add_feed_forward_length(16)
    w.add_head_count(2)
    w.add_head_count_kv(2)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_tokenizer_model(meta["model"])
    w.add_tokenizer_pre(meta["pre"])
    w.add_token_list(meta["tokens"])
    if "scores" in meta:
        w.add_token_scores(meta["scores"])
    w.add_token_types(meta["types"])
    if meta.get("merges"):
        w.add_token_merges(meta["merges"])
    if "add_space_prefix" in meta:
        w.add_add_space_prefix(meta["add_space_prefix"])
    for typ, tid in special_ids.items():
        getattr(w, f"add_{typ}_token_id")(tid)
    for typ, value in add_flags.items():
        if typ in ("bos", "eos"):
            getattr(w, f"add_add_{typ}_token")(value)
    if chat_template:
        w.add_chat_template(chat_template)
    w.add_tensor("token_embd.weight", np.zeros((len(meta["tokens"]), 8), dtype=np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


# name, tokenizer folder, architecture, vocab_size (config.json), kind, extra add_* flags
GENERATED_CASES = [
    ("llama3", "llama3", "llama", 128256, "llama-bpe", {}),
    # Llama 3 files from Meta's own tokenizer.json say add_bos_token = true.
    ("llama3-add-bos", "llama3", "llama", 128256, "llama-bpe", {"bos": True}),
    ("qwen3", "qwen3", "qwen3", 151936, "qwen2", {}),
    ("mistral", "mistral", "llama", 32000, "spm", {}),
]


def generate(shared, out_dir):
    paths = []
    for name, folder, arch, vocab_size, kind, extra in GENERATED_CASES:
        src = os.path.join(shared, "tokenizers", folder)
        with open(os.path.join(src, "tokenizer.json"), encoding="utf-8") as f:
            tok_json = json.load(f)
        with open(os.path.join(src, "tokenizer_config.json"), encoding="utf-8") as f:
            config = json.load(f)
        if kind == "spm":
            meta = _sentencepiece_metadata(tok_json)
        else:
            meta = _byte_level_metadata(tok_json, vocab_size, kind)
        ids, add, template = _special_vocab(tok_json, config, len(meta["tokens"]))
        add.update(extra)
        path = os.path.join(out_dir, f"{name}.gguf")
        write_gguf(path, arch, f"{name} tokenizer test", meta, ids, add, template)
        paths.append(path)
    return paths


# ---------------------------------------------------------------------------------------------
# The two sides.
# ---------------------------------------------------------------------------------------------


@functools.lru_cache(maxsize=1)
def read_metadata(path):
    """(metadata, tensor names) of a GGUF file, read once with gguf-py (slow on big vocabularies)
    for the reference's metadata reader."""
    reader = gguf.GGUFReader(path)
    metadata = {key: field.contents() for key, field in reader.fields.items()}
    return metadata, tuple(t.name for t in reader.tensors)


def run_jsonl(cmd, requests):
    proc = subprocess.run(cmd, input="".join(json.dumps(r, ensure_ascii=False) + "\n"
                                             for r in requests),
                          capture_output=True, text=True, encoding="utf-8")
    # split("\n"), not splitlines(): U+2028 and U+0085 may appear unescaped inside strings.
    out = [json.loads(l) for l in proc.stdout.split("\n") if l]
    if proc.returncode != 0 or len(out) != len(requests):
        sys.exit(f"{' '.join(cmd)}: exit {proc.returncode}, {len(out)} outputs for "
                 f"{len(requests)} inputs; stderr: {proc.stderr[:2000]}")
    return out


def our_results(encoder, gguf_path, texts, id_lists, work_dir):
    """Our side: encode each text (without and with special tokens) and decode each id list
    (skipping and keeping special tokens). Returns (encodes, decodes) keyed by the flag. The
    encoder opens the GGUF file with our reader (Tokenizer::Load, as --tokenizer FILE.gguf does)."""
    del work_dir
    requests = []
    for add_special in (False, True):
        requests += [{"text": t, "add_special": add_special} for t in texts]
    for skip in (True, False):
        requests += [{"ids": ids, "skip_special": skip} for ids in id_lists]
    out = run_jsonl([encoder, "--gguf", gguf_path], requests)
    n, m = len(texts), len(id_lists)
    encodes = {False: out[:n], True: out[n:2 * n]}
    decodes = {True: out[2 * n:2 * n + m], False: out[2 * n + m:]}
    return encodes, decodes


def _load_transformers():
    """transformers with gguf-py standing in for its torch-importing GGUF metadata reader."""

    def read_gguf_metadata(path, string_arrays=()):
        metadata, tensor_names = read_metadata(path)
        # Like transformers' reader: string arrays not asked for are their length.
        metadata = {key: len(value) if (isinstance(value, list) and value and
                                        isinstance(value[0], str) and key not in string_arrays)
                    else value for key, value in metadata.items()}
        return metadata, tensor_names

    stub = types.ModuleType("transformers.integrations.gguf.reader")
    stub.read_gguf_metadata = read_gguf_metadata
    sys.modules["transformers.integrations.gguf.reader"] = stub
    import transformers.modeling_gguf_pytorch_utils as gguf_utils
    gguf_utils.is_torch_available = lambda: True  # metadata only: return_tensors=False
    import tokenizers
    import transformers
    from transformers import AutoTokenizer
    print(f"reference: transformers {transformers.__version__}, tokenizers "
          f"{tokenizers.__version__}", flush=True)
    return AutoTokenizer


def reference_tokenizer(auto_tokenizer, gguf_path):
    return auto_tokenizer.from_pretrained(os.path.dirname(os.path.abspath(gguf_path)),
                                          gguf_file=os.path.basename(gguf_path))


# ---------------------------------------------------------------------------------------------


def check(auto_tokenizer, encoder, gguf_path, texts, work_dir):
    ref = reference_tokenizer(auto_tokenizer, gguf_path)
    want_ids = {s: [ref.encode(t, add_special_tokens=s) for t in texts] for s in (False, True)}
    id_lists = [ids for ids in want_ids[True] if ids]
    encodes, decodes = our_results(encoder, gguf_path, texts, id_lists, work_dir)
    failures = []
    for add_special in (False, True):
        for text, want, got in zip(texts, want_ids[add_special], encodes[add_special]):
            if got.get("ids") != want:
                failures.append(f"encode(add_special={add_special}) {text[:80]!r}:\n"
                                f"   hf   {want[:40]}\n   ours {got.get('ids', got)}")
    for skip in (True, False):
        for ids, got in zip(id_lists, decodes[skip]):
            want = ref.decode(ids, skip_special_tokens=skip)
            if got.get("text") != want:
                failures.append(f"decode(skip_special={skip}) {ids[:30]}:\n"
                                f"   hf   {want!r}\n   ours {got.get('text', got)!r}")
    return failures


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--encoder", required=True, help="the gguf_vocab_encode executable")
    p.add_argument("--corpus", required=True)
    p.add_argument("--shared", required=True, help="the shared folder holding tokenizers/")
    p.add_argument("--gguf", action="append", default=[], help="a real GGUF file to check")
    p.add_argument("--transformers-path", help="folder holding transformers and its tokenizers")
    a = p.parse_args()
    if a.transformers_path:
        if not os.path.isdir(a.transformers_path):
            sys.exit(f"FAIL: --transformers-path {a.transformers_path} does not exist (install "
                     "transformers there with pip install --no-deps --target)")
        sys.path.insert(0, a.transformers_path)
    missing = [path for path in a.gguf if not os.path.isfile(path)]
    for path in missing:  # a model scripts/setup.sh could not fetch: loud, and a failure in CI
        print("#" * 96 + f"\n--gguf {path} does not exist (scripts/setup.sh fetches it from PyPI)"
              + "; checking the generated files only\n" + "#" * 96, flush=True)
    if missing and os.environ.get("LLM_CI"):
        sys.exit("FAIL: a model the test needs is missing (LLM_CI is set)")
    a.gguf = [path for path in a.gguf if path not in missing]
    with open(a.corpus, encoding="utf-8") as f:
        texts = [json.loads(l)["text"] for l in f if l.strip()]
    auto_tokenizer = _load_transformers()
    total = 0
    with tempfile.TemporaryDirectory() as tmp:
        for path in a.gguf + generate(a.shared, tmp):
            failures = check(auto_tokenizer, a.encoder, path, texts, tmp)
            total += len(failures)
            print(f"{'ok  ' if not failures else 'FAIL'} {os.path.basename(path)}: "
                  f"{len(texts)} texts, {len(failures)} mismatches", flush=True)
            for msg in failures[:15]:
                print("  " + msg)
    sys.exit(1 if total else 0)


if __name__ == "__main__":
    main()
