#!/usr/bin/env python3
"""A tiny Whisper model in whisper.cpp's ggml layout, for timing tests.

Its hyperparameters are shrunk (width 64, 2 heads, 1 layer each side; the
audio context, 1,500 positions for 30 s, and the text context, 448, kept);
its weights are seeded random, so it transcribes nonsense at a real
encoder's and decoder's pace for its size. The mel filters and the
vocabulary are taken from whisper.cpp's own test model
(models/for-tests-ggml-base.bin, which holds no weights).

usage: make_whisper_ggml.py FOR_TESTS_MODEL OUT (scripts/whisper-fixture.sh runs it)
"""
import random
import struct
import sys

src, out = sys.argv[1], sys.argv[2]
data = open(src, "rb").read()
magic, = struct.unpack_from("<I", data, 0)
assert magic == 0x67676D6C, "not a ggml model"
hp = list(struct.unpack_from("<11i", data, 4))
n_vocab, n_audio_ctx, _, _, _, n_text_ctx, _, _, _, n_mels, _ = hp
rest = data[4 + 44:]  # mel filters and vocabulary, as they are

STATE, HEADS, LAYERS = 64, 2, 1
# ftype 1: the matrices and convolutions in F16 (whisper.cpp's CPU
# convolution takes F16 kernels only), norms, biases and positions in F32.
hp = [n_vocab, n_audio_ctx, STATE, HEADS, LAYERS, n_text_ctx, STATE, HEADS, LAYERS, n_mels, 1]
rng = random.Random(7)


def tensor(f, name, ne, fill=None, half=False):
    n = 1
    for d in ne:
        n *= d
    f.write(struct.pack("<iii", len(ne), len(name), 1 if half else 0))
    f.write(struct.pack("<%di" % len(ne), *ne))
    f.write(name.encode())
    values = [rng.gauss(0.0, 0.02) for _ in range(n)] if fill is None else [fill] * n
    f.write(struct.pack("<%d%s" % (n, "e" if half else "f"), *values))


def block(f, prefix, cross):
    s = STATE
    norms = ["mlp_ln", "attn_ln"] + (["cross_attn_ln"] if cross else [])
    for ln in norms:
        tensor(f, f"{prefix}.{ln}.weight", [s], 1.0)
        tensor(f, f"{prefix}.{ln}.bias", [s], 0.0)
    tensor(f, f"{prefix}.mlp.0.weight", [s, 4 * s], half=True)
    tensor(f, f"{prefix}.mlp.0.bias", [4 * s], 0.0)
    tensor(f, f"{prefix}.mlp.2.weight", [4 * s, s], half=True)
    tensor(f, f"{prefix}.mlp.2.bias", [s], 0.0)
    for attn in ["attn"] + (["cross_attn"] if cross else []):
        tensor(f, f"{prefix}.{attn}.query.weight", [s, s], half=True)
        tensor(f, f"{prefix}.{attn}.query.bias", [s], 0.0)
        tensor(f, f"{prefix}.{attn}.key.weight", [s, s], half=True)
        tensor(f, f"{prefix}.{attn}.value.weight", [s, s], half=True)
        tensor(f, f"{prefix}.{attn}.value.bias", [s], 0.0)
        tensor(f, f"{prefix}.{attn}.out.weight", [s, s], half=True)
        tensor(f, f"{prefix}.{attn}.out.bias", [s], 0.0)


with open(out, "wb") as f:
    f.write(struct.pack("<I", magic))
    f.write(struct.pack("<11i", *hp))
    f.write(rest)
    s = STATE
    tensor(f, "encoder.positional_embedding", [s, n_audio_ctx])
    tensor(f, "encoder.conv1.weight", [3, n_mels, s], half=True)
    tensor(f, "encoder.conv1.bias", [1, s], 0.0)
    tensor(f, "encoder.conv2.weight", [3, s, s], half=True)
    tensor(f, "encoder.conv2.bias", [1, s], 0.0)
    tensor(f, "encoder.ln_post.weight", [s], 1.0)
    tensor(f, "encoder.ln_post.bias", [s], 0.0)
    for i in range(LAYERS):
        block(f, f"encoder.blocks.{i}", False)
    tensor(f, "decoder.positional_embedding", [s, n_text_ctx])
    tensor(f, "decoder.token_embedding.weight", [s, n_vocab], half=True)
    tensor(f, "decoder.ln.weight", [s], 1.0)
    tensor(f, "decoder.ln.bias", [s], 0.0)
    for i in range(LAYERS):
        block(f, f"decoder.blocks.{i}", True)
