"""Times Hugging Face `tokenizers` encoding a corpus, single-threaded; prints one JSON line:
warm (repeated passes, word cache filled) and cold (first pass after loading) throughput.

Called by `llm-bench tokenizer` with the set-up's .venv Python:
  hf_tokenizer_bench.py --tokenizer DIR --corpus FILE --seconds S
The corpus is JSON lines {"text": ...}. Uses encode_batch with RAYON_NUM_THREADS=1 (set by the
caller) so there is neither per-call Python overhead nor parallelism to favour either side.
"""
import argparse
import json
import os
import time

from tokenizers import Tokenizer


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--tokenizer", required=True)
    p.add_argument("--corpus", required=True)
    p.add_argument("--seconds", type=float, default=2.0)
    a = p.parse_args()
    path = os.path.join(a.tokenizer, "tokenizer.json")
    with open(a.corpus, encoding="utf-8") as f:
        texts = [json.loads(l)["text"] for l in f if l.strip()]
    corpus_bytes = sum(len(t.encode("utf-8")) for t in texts)
    # Cold: the first pass of a freshly loaded tokenizer (every word misses the cache); median
    # of three loads.
    cold = []
    for _ in range(3):
        tok = Tokenizer.from_file(path)
        start = time.perf_counter()
        tok.encode_batch(texts, add_special_tokens=False)
        cold.append(time.perf_counter() - start)
    cold_s = sorted(cold)[1]
    tokens = sum(len(e.ids) for e in tok.encode_batch(texts, add_special_tokens=False))  # warm-up
    passes = 0
    start = time.perf_counter()
    while True:
        tok.encode_batch(texts, add_special_tokens=False)
        passes += 1
        elapsed = time.perf_counter() - start
        if elapsed >= a.seconds:
            break
    print(json.dumps({"bytes_per_second": corpus_bytes * passes / elapsed,
                      "cold_bytes_per_second": corpus_bytes / cold_s,
                      "tokens_per_second": tokens * passes / elapsed,
                      "tokens_per_pass": tokens, "passes": passes,
                      "threads": os.environ.get("RAYON_NUM_THREADS", "default")}))


if __name__ == "__main__":
    main()
