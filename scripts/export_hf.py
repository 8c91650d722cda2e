#!/usr/bin/env python3
"""Exports a dptrain checkpoint as a Hugging Face GPT-2 model folder.

  scripts/export_hf.py CKPT OUT

CKPT is a checkpoint directory (its `latest` file names the step folder) or one step folder (step-000150/).
OUT receives what `transformers.GPT2LMHeadModel.from_pretrained(OUT)` loads as it is:

  config.json         model_type gpt2 with the checkpoint's shape (n_layer, n_head, n_embd, n_positions = n_ctx =
                      seq, vocab_size), layer_norm_epsilon 1e-5, gelu_new (tanh GELU), tied word embeddings and
                      no dropout (dptrain trains without it)
  model.safetensors   fp32, under GPT2LMHeadModel's names (`transformer.h.0.attn.c_attn.weight`, ...). Matrices are
                      transposed from dptrain's nn.Linear [out, in] to GPT-2's Conv1D [in, out]; the LM head is
                      tied to transformer.wte.weight and not stored.

The BF16 weights become fp32 (exact: every BF16 value is an fp32 value), since numpy, which writes the file here,
has no bfloat16 type; the model therefore loads in fp32 by default. Needs numpy and safetensors only (no torch).
"""
import argparse
import json
import os
import sys

import numpy as np
from safetensors import deserialize
from safetensors.numpy import save_file

# dptrain's matrices in nn.Linear's [out, in] order; GPT-2's Conv1D stores [in, out].
CONV1D = ("attn.c_attn.weight", "attn.c_proj.weight", "mlp.c_fc.weight", "mlp.c_proj.weight")


def fail(message):
    sys.exit(f"export_hf: {message}")


def step_folder(ckpt):
    if os.path.isfile(os.path.join(ckpt, "meta.json")):
        return ckpt
    latest = os.path.join(ckpt, "latest")
    if not os.path.isfile(latest):
        fail(f"'{ckpt}' is neither a checkpoint step folder (no meta.json) nor a checkpoint directory (no 'latest')")
    with open(latest) as f:
        folder = os.path.join(ckpt, f.read().strip())
    if not os.path.isfile(os.path.join(folder, "meta.json")):
        fail(f"'{latest}' names '{folder}', which has no meta.json")
    return folder


def read_weights(path):
    """name → fp32 array, through the safetensors package's own parser (BF16 widened exactly, F32 as is)."""
    with open(path, "rb") as f:
        tensors = deserialize(f.read())
    weights = {}
    for name, info in tensors:
        raw = info["data"]
        if info["dtype"] == "BF16":
            array = (np.frombuffer(raw, dtype="<u2").astype(np.uint32) << 16).view(np.float32)
        elif info["dtype"] == "F32":
            array = np.frombuffer(raw, dtype="<f4").astype(np.float32)
        else:
            fail(f"{path}: tensor '{name}' has dtype {info['dtype']}; BF16 or F32 expected")
        weights[name] = array.reshape(info["shape"])
    return weights


def hf_config(model):
    return {
        "architectures": ["GPT2LMHeadModel"],
        "model_type": "gpt2",
        "vocab_size": model["vocab"],
        "n_positions": model["seq"],
        "n_ctx": model["seq"],
        "n_embd": model["width"],
        "n_layer": model["layers"],
        "n_head": model["heads"],
        "n_inner": None,  # 4 · n_embd
        "activation_function": "gelu_new",
        "layer_norm_epsilon": 1e-5,
        "resid_pdrop": 0.0,
        "embd_pdrop": 0.0,
        "attn_pdrop": 0.0,
        "initializer_range": 0.02,
        "scale_attn_weights": True,
        "scale_attn_by_inverse_layer_idx": False,
        "reorder_and_upcast_attn": False,
        "tie_word_embeddings": True,
        "use_cache": True,
        "torch_dtype": "float32",
    }


def export(ckpt, out):
    folder = step_folder(ckpt)
    with open(os.path.join(folder, "meta.json")) as f:
        meta = json.load(f)
    model = meta.get("model")
    if not isinstance(model, dict) or any(k not in model for k in ("vocab", "seq", "layers", "width", "heads")):
        fail(f"{folder}/meta.json has no complete 'model' section (vocab, seq, layers, width, heads)")
    weights = read_weights(os.path.join(folder, "model.safetensors"))

    expected = ["wte.weight", "wpe.weight", "ln_f.weight", "ln_f.bias"]
    for layer in range(model["layers"]):
        expected += [f"h.{layer}.{part}" for part in (
            "ln_1.weight", "ln_1.bias", "attn.c_attn.weight", "attn.c_attn.bias", "attn.c_proj.weight",
            "attn.c_proj.bias", "ln_2.weight", "ln_2.bias", "mlp.c_fc.weight", "mlp.c_fc.bias", "mlp.c_proj.weight",
            "mlp.c_proj.bias")]
    missing, unexpected = sorted(set(expected) - set(weights)), sorted(set(weights) - set(expected))
    if missing or unexpected:
        fail(f"{folder}/model.safetensors does not match meta.json's model: missing {missing}, unexpected {unexpected}")
    H, V, Q = model["width"], model["vocab"], model["seq"]
    if weights["wte.weight"].shape != (V, H) or weights["wpe.weight"].shape != (Q, H):
        fail(f"{folder}/model.safetensors: wte {list(weights['wte.weight'].shape)}, wpe "
             f"{list(weights['wpe.weight'].shape)}; meta.json says vocab {V}, seq {Q}, width {H}")

    tensors = {}
    for name in expected:
        value = weights[name]
        if name.endswith(CONV1D):
            value = value.T  # [out, in] → [in, out]
        tensors["transformer." + name] = np.ascontiguousarray(value, dtype=np.float32)

    os.makedirs(out, exist_ok=True)
    # from_pretrained refuses a safetensors file whose metadata does not name its framework.
    save_file(tensors, os.path.join(out, "model.safetensors"), metadata={"format": "pt"})
    with open(os.path.join(out, "config.json"), "w") as f:
        json.dump(hf_config(model), f, indent=2)
        f.write("\n")
    print(f"export_hf: {folder} (step {meta.get('step', '?')}) → {out}: GPT-2 with {model['layers']} layers, "
          f"{model['heads']} heads, width {H}, {Q} positions, vocabulary {V}, {len(tensors)} fp32 tensors")


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("ckpt", metavar="CKPT", help="checkpoint directory (dptrain --save DIR) or a step folder")
    parser.add_argument("out", metavar="OUT", help="output folder for config.json and model.safetensors")
    args = parser.parse_args()
    export(args.ckpt, args.out)


if __name__ == "__main__":
    main()
