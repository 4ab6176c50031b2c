#!/usr/bin/env python3
"""Oracle test: transformers.AutoTokenizer, loading the files `fp8train tokenizer export-hf` writes, encodes texts
to the same ids as `fp8train tokenizer encode`, for a SentencePiece BPE model trained by `fp8train tokenizer train`
and for the byte tokenizer; and decodes fp8train's ids back to the text.

Usage: test_tokenizer_oracle.py FP8TRAIN_BINARY SOURCE_DIR
Needs the packages of tests/python/requirements.txt; without them it fails, saying what to install.
Prints "N passed, M failed" and exits non-zero on any failure.
"""
import json
import os
import subprocess
import sys
import tempfile

REQUIREMENTS = "tests/python/requirements.txt"


def fail_missing(err):
    print(f"FAIL: the tokenizer oracle needs the Python packages of {REQUIREMENTS} "
          f"(pip install -r {REQUIREMENTS}); importing them failed: {type(err).__name__}: {err}")
    print("0 passed, 1 failed")
    sys.exit(1)


try:
    import google.protobuf  # noqa: F401  (transformers needs it to read a SentencePiece model)
    import sentencepiece  # noqa: F401
    from transformers import AutoTokenizer
except Exception as e:  # ImportError, or a broken install that raises something else while importing
    fail_missing(e)

# Texts chosen for the cases where tokenizers usually differ: leading, trailing and repeated spaces, tabs, blank
# lines, CRLF, non-ASCII (2-, 3- and 4-byte UTF-8, so byte-fallback pieces), special-token strings inside the
# text (fp8train encodes them as text), and the empty text.
TEXTS = [
    "First Citizen:\nBefore we proceed any further, hear me speak.\n",
    "The model trains with fine-grained FP8 scaling: 1x128 tiles for activations, 128x128 blocks for weights.",
    "  two  spaces\n\n\nand\ttabs\t\there ",
    " leading space",
    "trailing space ",
    "a\r\nb\r\n",
    "h\u00e9llo w\u00f6rld \u00fcn\u00efcode \u65e5\u672c\u8a9e \U0001F642 caf\u00e9",
    "<s> </s> <unk> <pad> <bos> <eos> </s>",
    "numbers 12345 67.89 -0.001 1e-7",
    "",
]


def main():
    if len(sys.argv) != 3:
        print(__doc__)
        sys.exit(2)
    binary, source = sys.argv[1], sys.argv[2]
    passed, failed = 0, 0

    def check(ok, what):
        nonlocal passed, failed
        if ok:
            passed += 1
        else:
            failed += 1
            print(f"FAIL: {what}")

    def fp8train(*args):
        r = subprocess.run([binary, *args], capture_output=True, text=True)
        if r.returncode != 0:
            raise RuntimeError(f"fp8train {' '.join(args)} failed: {r.stderr.strip()}")
        return r.stdout

    with tempfile.TemporaryDirectory() as tmp:
        # A small BPE model trained on the repository's own prose (deterministic, a few seconds).
        docs = [os.path.join(source, "README.md"), os.path.join(source, "docs", "architecture.md")]
        model = os.path.join(tmp, "tok.model")
        fp8train("tokenizer", "train", "--data", *docs, "--vocab", "600", "--out", model, "--threads", "1")
        long_text = open(docs[0], encoding="utf-8").read()
        for name, args, vocab in [("sentencepiece", ["--tokenizer", model], 600), ("byte", [], 259)]:
            hf_dir = os.path.join(tmp, "hf-" + name)
            fp8train("tokenizer", "export-hf", *args, "--out", hf_dir)
            tok = AutoTokenizer.from_pretrained(hf_dir)
            for text in TEXTS:
                ours = json.loads(fp8train("tokenizer", "encode", *args, "--text", text, "--json"))
                theirs = tok.encode(text, add_special_tokens=False)
                check(ours == theirs, f"{name}: {text!r}: fp8train {ours[:40]} != transformers {theirs[:40]}")
                check(tok(text)["input_ids"] == ours, f"{name}: {text!r}: tok(text) adds or changes ids")
                check(tok.decode(ours) == text, f"{name}: {text!r}: transformers decodes fp8train's ids to "
                                                f"{tok.decode(ours)!r}")
            ours = json.loads(fp8train("tokenizer", "encode", *args, "--file", docs[0], "--json"))
            theirs = tok.encode(long_text, add_special_tokens=False)
            check(ours == theirs, f"{name}: README.md ({len(ours)} ids from fp8train, {len(theirs)} from transformers)")
            check(len(tok) == vocab, f"{name}: transformers' vocabulary has {len(tok)} ids, fp8train's {vocab}")
            print(f"{name}: transformers {type(tok).__name__} agrees with fp8train on {len(TEXTS) + 1} texts")
    print(f"{passed} passed, {failed} failed")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
