#!/usr/bin/env python3
"""Generate a llama-architecture GGUF with random weights for tests.

No model hub: weights are N(0, 0.02), the vocabulary is SentencePiece-style
(byte fallback, ASCII pieces, pseudo-words built from merges of earlier pieces)
and the chat template is ChatML, so llama-server serves chat and completions.

Clean output: residual dimension 0 is pinned to a positive constant (the
embeddings carry it; attn_output and ffn_down never write it) and the output
rows of byte, unknown, control and (unless --allow-eos) end tokens get -1000 on
that dimension. The model then emits only plain ASCII pieces, one token per
SSE chunk, and never stops before max_tokens.
"""
import argparse
import random

import numpy as np
import gguf

PRESETS = {
    # name: (vocab, embd, layers, ff, heads, kv_heads)
    "tiny": (512, 64, 2, 128, 4, 4),
    "small": (4096, 256, 4, 768, 4, 4),
    "50m": (32000, 512, 8, 1536, 8, 8),
}

CHATML = (
    "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' + "
    "message['content'] + '<|im_end|>' + '\\n'}}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)

NORMAL, UNKNOWN, CONTROL, BYTE = 1, 2, 3, 6


def vocabulary(size, rng):
    tokens = [("<unk>", UNKNOWN), ("<s>", CONTROL), ("</s>", CONTROL)]
    tokens += [(f"<0x{b:02X}>", BYTE) for b in range(256)]
    tokens += [("<|im_start|>", CONTROL), ("<|im_end|>", CONTROL)]
    printable = [chr(c) for c in range(33, 127)]
    tokens += [("\u2581", NORMAL)]
    tokens += [(c, NORMAL) for c in printable]
    tokens += [("\u2581" + c, NORMAL) for c in printable]
    seen = {t for t, _ in tokens}
    letters = "abcdefghijklmnopqrstuvwxyz"
    pieces = [t for t, _ in tokens if t.lstrip("\u2581").isalpha()]
    # Pseudo-words: each is the merge of two existing pieces, so SentencePiece's
    # bigram merging can reach it.
    while len(tokens) < size:
        left = rng.choice(pieces)
        right = rng.choice(letters) + (rng.choice(letters) if rng.random() < 0.5 else "")
        word = left + right
        if word in seen or len(word) > 12:
            continue
        seen.add(word)
        tokens.append((word, NORMAL))
        pieces.append(word)
    return tokens[:size]


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--preset", choices=PRESETS, default="tiny")
    ap.add_argument("--out", required=True)
    ap.add_argument("--ctx", type=int, default=8192)
    ap.add_argument("--seed", type=int, default=42)
    ap.add_argument("--allow-eos", action="store_true")
    args = ap.parse_args()

    vocab, embd, layers, ff, heads, kv_heads = PRESETS[args.preset]
    rng = random.Random(args.seed)
    nrng = np.random.default_rng(args.seed)
    tokens = vocabulary(vocab, rng)
    head_dim = embd // heads

    w = gguf.GGUFWriter(args.out, "llama")
    w.add_name(f"tokenscope-random-{args.preset}")
    w.add_context_length(args.ctx)
    w.add_embedding_length(embd)
    w.add_block_count(layers)
    w.add_feed_forward_length(ff)
    w.add_head_count(heads)
    w.add_head_count_kv(kv_heads)
    w.add_rope_dimension_count(head_dim)
    w.add_rope_freq_base(10000.0)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_file_type(gguf.LlamaFileType.MOSTLY_F16)
    w.add_tokenizer_model("llama")
    w.add_token_list([t for t, _ in tokens])
    w.add_token_scores([-float(i) for i in range(len(tokens))])
    w.add_token_types([k for _, k in tokens])
    w.add_unk_token_id(0)
    w.add_bos_token_id(1)
    w.add_eos_token_id(2)
    w.add_eot_token_id(260)  # <|im_end|>
    w.add_add_bos_token(True)
    w.add_add_eos_token(False)
    w.add_chat_template(CHATML)

    def rand(*shape):
        return (nrng.standard_normal(shape) * 0.02).astype(np.float16)

    emb = rand(vocab, embd)
    emb[:, 0] = 1.0
    w.add_tensor("token_embd.weight", emb)
    w.add_tensor("output_norm.weight", np.ones(embd, dtype=np.float32))
    out = rand(vocab, embd)
    out[:, 0] = 0.0
    for i, (_, kind) in enumerate(tokens):
        banned = kind != NORMAL or (i == 2 and not args.allow_eos)
        if kind == CONTROL and i == 2 and args.allow_eos:
            banned = False
        if banned:
            out[i, 0] = -1000.0
    w.add_tensor("output.weight", out)
    for l in range(layers):
        p = f"blk.{l}."
        w.add_tensor(p + "attn_norm.weight", np.ones(embd, dtype=np.float32))
        w.add_tensor(p + "attn_q.weight", rand(embd, embd))
        w.add_tensor(p + "attn_k.weight", rand(kv_heads * head_dim, embd))
        w.add_tensor(p + "attn_v.weight", rand(kv_heads * head_dim, embd))
        o = rand(embd, embd)
        o[0, :] = 0.0
        w.add_tensor(p + "attn_output.weight", o)
        w.add_tensor(p + "ffn_norm.weight", np.ones(embd, dtype=np.float32))
        w.add_tensor(p + "ffn_gate.weight", rand(ff, embd))
        w.add_tensor(p + "ffn_up.weight", rand(ff, embd))
        d = rand(embd, ff)
        d[0, :] = 0.0
        w.add_tensor(p + "ffn_down.weight", d)

    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


if __name__ == "__main__":
    main()
