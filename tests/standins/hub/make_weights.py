#!/usr/bin/env python3
"""Write the STAND-IN hub's data: small real GGUF files under the real file names, and DIR/hub.json.

Test infrastructure for hubstandin.py. The names, repos and generations are those of the engine contract
(docs/engine-contract.md in the shared docs, "Model generations"); the contents are tiny (tens to hundreds
of KiB) and deterministic, so the same bytes, hashes and fake commits come out on every machine and every
run. Needs the `gguf` package (the venv's).

    python make_weights.py --out DIR
"""

from __future__ import annotations

import argparse
import hashlib
import json
import logging
import sys
from pathlib import Path

import gguf
import numpy as np

BASE_REPO = "antirez/deepseek-v4-gguf"
DRAFTER_REPO = "bleysg/DeepSeek-V4-Flash-DSpark-drafter-GGUF"
GATED_REPO = "ds4-standin/gated-gguf"
# The late-2026 families' own repositories (engine contract, "The engine owners run in late 2026"; Qwen's
# is the shipped catalog's guess, the contract naming none).
V41_REPO = "antirez/deepseek-v4.1-flash-gguf"
GLM_REPO = "antirez/glm-5.3-flash-gguf"
QWEN_REPO = "antirez/qwen3.8-flash-next-gguf"
TOKENS = ["hf_standin_token"]
ARCH = "deepseek4"  # what the engine's own quantizer (gguf-tools/deepseek4-quantize.c) writes

# repo -> [(file name, role, generation, rows of the padded embedding tensor)]. Each row is 4 KiB of f32:
# the base files are the large ones so that resume tests have something to cut, and they differ in size
# from each other so a mix-up shows.
REPOS = {
    BASE_REPO: [
        ("DeepSeek-V4-Flash-IQ2XXS-w2Q2K-AProjQ8-SExpQ8-OutQ8-chat-v2-imatrix-0731.gguf", "base", "0731", 96),
        # The Q4 quantization (ds4f-q4) that two Sparks serve as a pair: the larger base, as published.
        (
            "DeepSeek-V4-Flash-Q4KExperts-F16HC-F16Compressor-F16Indexer-Q8Attn-Q8Shared-Q8Out-chat-v2-imatrix-0731.gguf",
            "base",
            "0731",
            160,
        ),
        ("DeepSeek-V4-Flash-IQ2XXS-w2Q2K-AProjQ8-SExpQ8-OutQ8-chat-v2-imatrix.gguf", "base", "legacy", 80),
        ("DeepSeek-V4-Flash-MTP-Q4K-Q8_0-F32.gguf", "mtp", "legacy", 8),
        # Upstream's DSpark support GGUF (`--dspark --mtp-model FILE`), where the fork loads its drafter.
        ("DeepSeek-V4-Flash-DSpark-support-0731.gguf", "dspark_support", "0731", 9),
        # Vision-Exp (ds4f-vision-q2, ds4f-vision-dspark) beside 0731, where the shipped catalog guesses it.
        ("DeepSeek-V4-Flash-Vision-Exp-IQ2XXS-w2Q2K-AProjQ8-SExpQ8-OutQ8.gguf", "base", "vision-exp", 88),
        ("DeepSeek-V4-Flash-Vision-Encoder.gguf", "vision", "vision-exp", 4),
        ("DeepSeek-V4-Flash-Vision-Exp-DSpark-support.gguf", "dspark_support", "vision-exp", 8),
    ],
    DRAFTER_REPO: [
        ("DSpark-drafter-Q2K-Q8-0731.gguf", "dspark", "0731", 12),
        ("DSpark-drafter-Q2K-Q8.gguf", "dspark", "legacy", 10),
        # The fork's own Vision-Exp drafter: the stand-in engine refuses the 0731 one beside its base.
        ("DSpark-drafter-Q2K-Q8-vision-exp.gguf", "dspark", "vision-exp", 11),
    ],
    GATED_REPO: [
        ("ds4-standin-gated.gguf", "base", "0731", 2),
    ],
    V41_REPO: [("DeepSeek-V4.1-Flash-Q2.gguf", "base", "v4.1", 112)],
    GLM_REPO: [
        ("GLM-5.3-Flash-Q2.gguf", "base", "glm-5.3", 84),
        ("GLM-5.3-Flash-Vision-Encoder.gguf", "vision", "glm-5.3", 5),
    ],
    QWEN_REPO: [("Qwen3.8-Flash-Next-Q2.gguf", "base", "qwen3.8", 72)],
}
GATED = {GATED_REPO}

# A few DeepSeek-style tokens: enough for a reader that insists on a token table (the engine refuses a
# GGUF without one), with the answer its smoke test looks for.
VOCAB = [
    "<｜begin▁of▁sentence｜>",
    "<｜end▁of▁sentence｜>",
    "<｜User｜>",
    "<｜Assistant｜>",
    "Paris",
    ".",
    " ",
]


def _values(seed: str, count: int) -> np.ndarray:
    """Deterministic f32 values from a hash stream, independent of numpy's random generators."""
    raw = hashlib.shake_256(seed.encode()).digest(count)
    return (np.frombuffer(raw, dtype=np.uint8).astype(np.float32) - 128.0) / 128.0


def write_gguf(path: Path, role: str, generation: str, rows: int) -> None:
    writer = gguf.GGUFWriter(path, arch=ARCH)
    writer.add_name(f"DeepSeek V4 Flash stand-in ({role}, {generation})")
    writer.add_tokenizer_model("gpt2")  # guess: the tokenizer type llama.cpp uses for DeepSeek models
    writer.add_token_list(VOCAB)
    writer.add_string("ds4standin.role", role)
    writer.add_string("ds4standin.generation", generation)
    # The file name seeds the data, so no two stand-in files share content (and so a sha256).
    writer.add_tensor("token_embd.weight", _values(path.name, rows * 1024).reshape(rows, 1024))
    writer.add_tensor("blk.0.attn_norm.weight", _values(path.name + "/attn_norm", 64))
    writer.add_tensor("output_norm.weight", _values(path.name + "/output_norm", 64))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()


def fake_commit(repo: str, files: dict[str, dict]) -> str:
    """A 40-hex id that, like a git commit, changes whenever the repo's content does."""
    h = hashlib.sha1(f"ds4-standin\0{repo}\0".encode())
    for name in sorted(files):
        h.update(f"{name}\0{files[name]['sha256']}\n".encode())
    return h.hexdigest()


def build(out: Path) -> dict:
    """Write every repo's files under out/repos/<org>/<repo>/ and out/hub.json; return hub.json's content."""
    logging.getLogger("gguf").setLevel(logging.WARNING)
    repos = {}
    for repo, files in REPOS.items():
        folder = out / "repos" / repo
        folder.mkdir(parents=True, exist_ok=True)
        described = {}
        for name, role, generation, rows in files:
            path = folder / name
            write_gguf(path, role, generation, rows)
            data = path.read_bytes()
            described[name] = {
                "blob": path.relative_to(out).as_posix(),
                "size": len(data),
                "sha256": hashlib.sha256(data).hexdigest(),
                "role": role,
                "generation": generation,
            }
        commit = fake_commit(repo, described)
        repos[repo] = {
            "gated": repo in GATED,
            "refs": {"main": commit},
            "commits": {commit: {"files": described}},
        }
    doc = {"format": 1, "tokens": TOKENS, "repos": repos}
    (out / "hub.json").write_text(json.dumps(doc, indent=2, sort_keys=True) + "\n")
    return doc


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description="Write the stand-in hub's GGUF files and hub.json.")
    parser.add_argument("--out", required=True, type=Path)
    args = parser.parse_args(argv)
    doc = build(args.out)
    for repo, content in doc["repos"].items():
        commit = content["refs"]["main"]
        for name, f in content["commits"][commit]["files"].items():
            print(f"{repo}@{commit[:12]} {name} {f['size']} B sha256 {f['sha256'][:12]}…", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
