#!/usr/bin/env python3
"""Generate a LLaVA-style (CLIP ViT + MLP projector) multimodal projector
GGUF with random weights for tests, for llama-server's --mmproj.

No model hub: a 2-layer ViT of width 32 on 56x56 images in 14-pixel
patches (16 image tokens, plus the class embedding), projected by a
two-layer MLP to the text model's width (--text-embd, 64 for
make_gguf.py's tiny preset). The weights mean nothing; llama.cpp loads it,
encodes every image through it, and counts its tokens — what tests need.
"""
import argparse

import numpy as np
import gguf


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--out", required=True)
    ap.add_argument("--text-embd", type=int, default=64)
    ap.add_argument("--seed", type=int, default=7)
    args = ap.parse_args()

    image, patch, embd, ff, layers, heads = 56, 14, 32, 64, 2, 2
    n_pos = (image // patch) ** 2 + 1  # patches and the class embedding
    rng = np.random.default_rng(args.seed)

    def rand(*shape, dtype=np.float32):
        return (rng.standard_normal(shape) * 0.02).astype(dtype)

    w = gguf.GGUFWriter(args.out, "clip")
    w.add_name("tokenscope-random-mmproj")
    w.add_file_type(gguf.LlamaFileType.MOSTLY_F16)
    w.add_bool("clip.has_vision_encoder", True)
    w.add_bool("clip.use_gelu", True)
    w.add_string("clip.projector_type", "mlp")
    w.add_uint32("clip.vision.image_size", image)
    w.add_uint32("clip.vision.patch_size", patch)
    w.add_uint32("clip.vision.embedding_length", embd)
    w.add_uint32("clip.vision.feed_forward_length", ff)
    w.add_uint32("clip.vision.block_count", layers)
    w.add_uint32("clip.vision.attention.head_count", heads)
    w.add_float32("clip.vision.attention.layer_norm_epsilon", 1e-5)
    w.add_uint32("clip.vision.projection_dim", args.text_embd)
    w.add_array("clip.vision.image_mean", [0.5, 0.5, 0.5])
    w.add_array("clip.vision.image_std", [0.5, 0.5, 0.5])

    ones = lambda n: np.ones(n, dtype=np.float32)
    zeros = lambda n: np.zeros(n, dtype=np.float32)
    w.add_tensor("v.patch_embd.weight", rand(embd, 3, patch, patch, dtype=np.float16))
    w.add_tensor("v.patch_embd.bias", zeros(embd))
    w.add_tensor("v.class_embd", rand(embd))
    w.add_tensor("v.position_embd.weight", rand(n_pos, embd))
    w.add_tensor("v.pre_ln.weight", ones(embd))
    w.add_tensor("v.pre_ln.bias", zeros(embd))
    for l in range(layers):
        p = f"v.blk.{l}."
        for t in ("attn_q", "attn_k", "attn_v", "attn_out"):
            w.add_tensor(p + t + ".weight", rand(embd, embd, dtype=np.float16))
            w.add_tensor(p + t + ".bias", zeros(embd))
        for t in ("ln1", "ln2"):
            w.add_tensor(p + t + ".weight", ones(embd))
            w.add_tensor(p + t + ".bias", zeros(embd))
        w.add_tensor(p + "ffn_up.weight", rand(ff, embd, dtype=np.float16))
        w.add_tensor(p + "ffn_up.bias", zeros(ff))
        w.add_tensor(p + "ffn_down.weight", rand(embd, ff, dtype=np.float16))
        w.add_tensor(p + "ffn_down.bias", zeros(embd))
    w.add_tensor("mm.0.weight", rand(args.text_embd, embd, dtype=np.float16))
    w.add_tensor("mm.0.bias", zeros(args.text_embd))
    w.add_tensor("mm.2.weight", rand(args.text_embd, args.text_embd, dtype=np.float16))
    w.add_tensor("mm.2.bias", zeros(args.text_embd))

    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


if __name__ == "__main__":
    main()
