"""What the Hugging Face packages make of dptrain's files; run by tests/train/hf_test.cpp with the interpreter of
scripts/python-env.sh, which compares the JSON printed here against dptrain's own reader and loss.

  read FILE   every tensor of a safetensors file as the `safetensors` package reads it, printed as JSON
              {reader: {name: {dtype, shape, hex}}} with hex the tensor's raw little-endian bytes. Readers:
              "safe_open+deserialize" (the package's Rust parser; no torch needed) always, and
              "safetensors.torch.load_file" where torch imports.
  loss DIR WINDOWS
              GPT2LMHeadModel.from_pretrained(DIR) in fp32 on int32 windows [n, n_positions + 1] (inputs [:, :-1],
              targets [:, 1:]); prints the mean cross-entropy and what from_pretrained reported (missing,
              unexpected or mismatched weights, warnings) as JSON.
"""
import json
import logging
import sys


def read(path):
    import safetensors
    from safetensors import deserialize, safe_open

    readers = {}
    with open(path, "rb") as f:
        parsed = {name: info for name, info in deserialize(f.read())}
    handle = safe_open(path, framework="numpy")
    tensors = {}
    for name in handle.keys():
        view = handle.get_slice(name)
        tensors[name] = {"dtype": view.get_dtype(), "shape": list(view.get_shape()),
                         "hex": bytes(parsed[name]["data"]).hex()}
        if parsed[name]["dtype"] != view.get_dtype() or list(parsed[name]["shape"]) != tensors[name]["shape"]:
            sys.exit(f"hf_check: {name}: safe_open says {view.get_dtype()} {view.get_shape()}, deserialize "
                     f"{parsed[name]['dtype']} {parsed[name]['shape']}")
    if set(parsed) != set(tensors):
        sys.exit(f"hf_check: safe_open and deserialize list different tensors")
    readers["safe_open+deserialize"] = tensors
    metadata = handle.metadata()

    try:
        import torch
    except ImportError:
        torch = None
    if torch is not None:
        from safetensors.torch import load_file
        names = {torch.bfloat16: "BF16", torch.float32: "F32"}
        readers["safetensors.torch.load_file"] = {
            name: {"dtype": names.get(t.dtype, str(t.dtype)), "shape": list(t.shape),
                   "hex": t.contiguous().view(torch.uint8).numpy().tobytes().hex()}
            for name, t in load_file(path).items()}
    print(json.dumps({"safetensors_version": safetensors.__version__, "metadata": metadata or {},
                      "readers": readers}))


class Collect(logging.Handler):
    def __init__(self):
        super().__init__(logging.WARNING)
        self.messages = []

    def emit(self, record):
        self.messages.append(record.getMessage())


def loss(folder, windows_path):
    import numpy as np
    import torch
    import torch.nn.functional as F
    import transformers
    from transformers import GPT2LMHeadModel

    transformers.logging.set_verbosity_warning()
    collect = Collect()
    transformers.logging.get_logger().addHandler(collect)
    model, info = GPT2LMHeadModel.from_pretrained(folder, torch_dtype=torch.float32, output_loading_info=True)
    model.eval()
    seq = model.config.n_positions
    windows = torch.from_numpy(np.fromfile(windows_path, dtype="<i4").astype(np.int64)).view(-1, seq + 1)
    with torch.no_grad():
        logits = model(windows[:, :-1]).logits  # [n, seq, vocab]
        mean = F.cross_entropy(logits.reshape(-1, logits.shape[-1]).float(), windows[:, 1:].reshape(-1))
    print(json.dumps({
        "loss": mean.item(),
        "logits_dtype": str(logits.dtype),
        "windows": windows.shape[0],
        "tied": model.lm_head.weight.data_ptr() == model.transformer.wte.weight.data_ptr(),
        "missing_keys": list(info["missing_keys"]),
        "unexpected_keys": list(info["unexpected_keys"]),
        "mismatched_keys": [list(map(str, k)) for k in info["mismatched_keys"]],
        "error_msgs": list(info["error_msgs"]),
        "warnings": collect.messages,
        "transformers_version": transformers.__version__,
        "torch_version": torch.__version__,
    }))


def main():
    if len(sys.argv) == 3 and sys.argv[1] == "read":
        read(sys.argv[2])
    elif len(sys.argv) == 4 and sys.argv[1] == "loss":
        loss(sys.argv[2], sys.argv[3])
    else:
        sys.exit(__doc__)


if __name__ == "__main__":
    main()
