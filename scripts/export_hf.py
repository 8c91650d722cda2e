#!/usr/bin/env python3
"""Exports a dptrain checkpoint as a Hugging Face GPT-2 model folder.

  scripts/export_hf.py [--overwrite] CKPT OUT

CKPT is a checkpoint directory (its `latest` file names the step folder) or one step folder (step-000150/).
OUT receives what `transformers.GPT2LMHeadModel.from_pretrained(OUT)` loads as it is:

  config.json         model_type gpt2 with the checkpoint's shape (n_layer, n_head, n_embd, n_positions = n_ctx =
                      seq, vocab_size), layer_norm_epsilon 1e-5, gelu_new (tanh GELU), tied word embeddings and
                      no dropout (dptrain trains without it)
  model.safetensors   fp32, under GPT2LMHeadModel's names (`transformer.h.0.attn.c_attn.weight`, ...). Matrices are
                      transposed from dptrain's nn.Linear [out, in] to GPT-2's Conv1D [in, out]; the LM head is
                      tied to transformer.wte.weight and not stored.

The BF16 weights become fp32 (exact: every BF16 value is an fp32 value), since numpy, which writes the file here,
has no bfloat16 type; the model therefore loads in fp32 by default. Needs numpy, safetensors and xxhash (no torch).

Checked before anything is written, as `dptrain --resume` checks: meta.json is dptrain's (format, model shape) and
its contents are those its meta_checksum seals, model.safetensors has the XXH64 checksum meta.json records for it
(a checkpoint from before checksums were recorded is exported unchecked, with a note) and holds exactly the
model's tensors.

OUT is a new folder (made with any folders above it that are missing) or an empty one. A folder that holds anything else is refused unless --overwrite is given;
then its config.json and model.safetensors are replaced and every other file in it is kept (tokenizer files, a
README). OUT is refused even with --overwrite when it is the checkpoint, lies inside it or holds it, or holds a
dptrain checkpoint (a meta.json of dptrain's format, or a `latest` file). The export is written into OUT.tmp-PID
beside OUT and moved into place when complete, so a failure leaves no half-written OUT.

Bad input prints one line `export_hf: ...` and exits with 2; a failure to write OUT exits with 1.
"""
import argparse
import decimal
import json
import math
import os
import re
import shutil
import sys

try:
    import numpy as np
    import xxhash
    from safetensors import SafetensorError, deserialize
    from safetensors.numpy import save_file
except ImportError as e:
    sys.exit(f"export_hf: {e}: needs the Python packages numpy, safetensors and xxhash (scripts/python-env.sh "
             f"installs them into build/python; run this with build/python/bin/python)")

# kCheckpointFormat and kCheckpointFormatUnsealed, include/dptrain/train/checkpoint_meta.hpp: a meta.json of the
# first is sealed by its meta_checksum, and records the checksum of every file.
FORMATS = ("dptrain-checkpoint-2", "dptrain-checkpoint-1")
CHECKSUM = re.compile("xxh64:[0-9a-f]{16}")
MODEL_KEYS = ("vocab", "seq", "layers", "width", "heads")
EXPORT_FILES = ("config.json", "model.safetensors")
# dptrain's matrices in nn.Linear's [out, in] order; GPT-2's Conv1D stores [in, out].
CONV1D = ("attn.c_attn.weight", "attn.c_proj.weight", "mlp.c_fc.weight", "mlp.c_proj.weight")


def fail(message, code=2):
    print(f"export_hf: {message}", file=sys.stderr)
    sys.exit(code)


def shown(value):
    """A value as a message shows it: its JSON text, shortened."""
    text = json.dumps(value)
    return text if len(text) <= 40 else text[:37] + "..."


def reason(error):
    return error.strerror if isinstance(error, OSError) and error.strerror else str(error)


def read_bytes(path):
    # A folder, a device (a link to /dev/zero reads forever), a FIFO (blocks): never a file dptrain wrote.
    if os.path.exists(path) and not os.path.isfile(path):
        fail(f"'{path}' is not a regular file (expected the file dptrain wrote)")
    try:
        with open(path, "rb") as f:
            return f.read()
    except OSError as e:
        fail(f"cannot read '{path}': {reason(e)} (a dptrain checkpoint step folder holds meta.json and "
             f"model.safetensors)")


STEP_FOLDER = re.compile(r"step-(\d{1,18})(?:-(\d{1,9}))?")  # dptrain's kStepFolder


def step_folder(ckpt):
    if not os.path.isdir(ckpt):
        fail(f"CKPT '{ckpt}' is not a folder (expected a checkpoint directory, dptrain --save DIR, or one of its "
             f"step folders)")
    if os.path.isfile(os.path.join(ckpt, "meta.json")):
        return ckpt
    latest = os.path.join(ckpt, "latest")
    if os.path.exists(latest) and not os.path.isfile(latest):
        fail(f"'{latest}' is not a regular file (expected the one line dptrain writes, the name of the step folder)")
    if not os.path.isfile(latest):
        fail(f"'{ckpt}' is neither a checkpoint step folder (no meta.json) nor a checkpoint directory (no 'latest')")
    # As dptrain --resume reads it: one step folder's name (step-NNNNNN, or step-NNNNNN-K), trailing newlines and
    # spaces aside; anything else (a path, a carriage return) is a damaged or foreign `latest`, not followed.
    name = read_bytes(latest)[:4096].decode(errors="replace").rstrip("\n ")
    if not STEP_FOLDER.fullmatch(name):
        fail(f"'{latest}' names {json.dumps(name)}, expected a step folder (step-NNNNNN)")
    folder = os.path.join(ckpt, name)
    if not os.path.isfile(os.path.join(folder, "meta.json")):
        fail(f"'{latest}' names '{folder}', which has no meta.json")
    return folder


def read_meta(folder):
    """meta.json's object, with a complete model shape; refused in one line otherwise."""
    path = os.path.join(folder, "meta.json")
    try:
        meta = json.loads(read_bytes(path), parse_float=Number)
    except (ValueError, RecursionError) as e:  # JSONDecodeError, bytes that are not UTF-8, or nested too deep
        fail(f"{path}: not valid JSON ({e}); expected the JSON object dptrain writes")
    if not isinstance(meta, dict):
        fail(f"{path}: the document is {shown(meta)}, expected the JSON object dptrain writes")
    if meta.get("format") not in FORMATS:
        fail(f"{path}: 'format' is {shown(meta.get('format'))}, expected \"{FORMATS[0]}\" or \"{FORMATS[1]}\" "
             f"(not a dptrain checkpoint)")
    model = meta.get("model")
    if not isinstance(model, dict):
        fail(f"{path}: 'model' is {shown(model)}, expected an object with {', '.join(MODEL_KEYS)}")
    for key in MODEL_KEYS:
        if type(model.get(key)) is not int or model[key] < 1:
            fail(f"{path}: 'model.{key}' is {shown(model.get(key))}, expected a positive integer")
    if model["width"] % model["heads"]:
        fail(f"{path}: 'model.heads' {model['heads']} does not divide 'model.width' {model['width']}")
    return meta


def sealed(meta):
    """Whether meta.json carries a seal to verify: format 2 always; any document that holds a meta_checksum (a format
    2 whose "format" was changed to 1 still holds the seal of contents that said 2), as dptrain decides."""
    return meta["format"] == FORMATS[0] or "meta_checksum" in meta


def recorded_checksum(meta, folder):
    """model.safetensors' XXH64 as meta.json records it; None in a checkpoint from before checksums."""
    if "checksums" not in meta:
        if sealed(meta):
            fail(f"{folder}/meta.json: 'checksums' is missing, expected an object of file name to \"xxh64:...\" "
                 f"(a {FORMATS[0]} records the checksum of every file)")
        return None
    checksums = meta["checksums"]
    if not isinstance(checksums, dict):
        fail(f"{folder}/meta.json: 'checksums' is {shown(checksums)}, expected an object of file name to \"xxh64:...\"")
    text = checksums.get("model.safetensors")
    if not isinstance(text, str) or not CHECKSUM.fullmatch(text):
        fail(f"{folder}/meta.json: 'checksums.model.safetensors' is {shown(text)}, expected \"xxh64:\" and 16 hex "
             f"digits")
    return int(text[len("xxh64:"):], 16)


class Number(float):
    """A JSON number with a fraction or exponent, and its text in the file: dptrain wrote it as nlohmann::json writes
    the double (the text its meta_checksum was made of), which Python's shortest form is not always."""

    def __new__(cls, text):
        number = super().__new__(cls, text)
        number.text = text
        return number


def double_text(x):
    """A double in its shortest digits, laid out as nlohmann::json does: in decimal where the decimal exponent n
    (x = 0.d1d2… × 10^n) is from -3 to 15, else as d.ddde±XX. nlohmann's digits are Grisu2's, which are longer in
    a few cases (1 in 150 random doubles, mostly of 16 and 17 digits)."""
    if x == 0:
        return "-0.0" if math.copysign(1, x) < 0 else "0.0"
    _, digits, exponent = decimal.Decimal(repr(abs(float(x)))).normalize().as_tuple()
    d, k = "".join(map(str, digits)), len(digits)
    n = k + exponent
    if k <= n <= 15:
        text = d + "0" * (n - k) + ".0"
    elif 0 < n <= 15:
        text = d[:n] + "." + d[n:]
    elif -4 < n <= 0:
        text = "0." + "0" * -n + d
    else:
        text = d[0] + ("." + d[1:] if k > 1 else "") + f"e{n - 1:+03d}"
    return ("-" if x < 0 else "") + text


def json_text(value, numbers_as_written):
    """The compact text nlohmann::json's dump() gives a parsed document (keys in byte order, no spaces, UTF-8 kept):
    what dptrain's meta_checksum is the XXH64 of, without that key. Numbers with a fraction or exponent as the file
    has them (numbers_as_written: exact for a file dptrain wrote), or in their shortest form (a number whose text
    was edited but not its value, 3e-3 for 0.003)."""
    if isinstance(value, dict):
        return "{" + ",".join(f"{json_text(k, numbers_as_written)}:{json_text(value[k], numbers_as_written)}"
                              for k in sorted(value)) + "}"
    if isinstance(value, list):
        return "[" + ",".join(json_text(v, numbers_as_written) for v in value) + "]"
    if isinstance(value, float):
        return value.text if numbers_as_written and isinstance(value, Number) else double_text(value)
    return json.dumps(value, ensure_ascii=False)  # strings, integers, true, false, null


def check_seal(meta, folder):
    """Refuses a sealed meta.json whose contents are not those its meta_checksum was made of (edited or damaged)."""
    if not sealed(meta):
        return
    recorded = meta.get("meta_checksum")
    if not isinstance(recorded, str) or not CHECKSUM.fullmatch(recorded):
        fail(f"{folder}/meta.json: 'meta_checksum' is {shown(recorded)}, expected \"xxh64:\" and 16 hex digits")
    contents = {key: value for key, value in meta.items() if key != "meta_checksum"}
    expected = int(recorded[len("xxh64:"):], 16)
    actual = [xxhash.xxh64_intdigest(json_text(contents, as_written).encode()) for as_written in (True, False)]
    if expected not in actual:
        fail(f"checkpoint '{folder}': meta.json is damaged: xxh64 {actual[0]:016x} of its contents, expected "
             f"{expected:016x} (recorded in it as meta_checksum when it was written)")


def expected_shapes(model):
    """Every tensor of dptrain's model.safetensors and its shape ([out, in] for matrices)."""
    H, V, Q = model["width"], model["vocab"], model["seq"]
    shapes = {"wte.weight": (V, H), "wpe.weight": (Q, H), "ln_f.weight": (H,), "ln_f.bias": (H,)}
    block = {"ln_1.weight": (H,), "ln_1.bias": (H,), "attn.c_attn.weight": (3 * H, H), "attn.c_attn.bias": (3 * H,),
             "attn.c_proj.weight": (H, H), "attn.c_proj.bias": (H,), "ln_2.weight": (H,), "ln_2.bias": (H,),
             "mlp.c_fc.weight": (4 * H, H), "mlp.c_fc.bias": (4 * H,), "mlp.c_proj.weight": (H, 4 * H),
             "mlp.c_proj.bias": (H,)}
    for layer in range(model["layers"]):
        shapes.update({f"h.{layer}.{name}": shape for name, shape in block.items()})
    return shapes


def read_weights(path, checksum, model):
    """name → fp32 array, checked against the checksum and the model's shapes, through the safetensors package's
    own parser (BF16 widened exactly, F32 as is)."""
    data = read_bytes(path)
    actual = xxhash.xxh64(data).intdigest()
    if checksum is not None and actual != checksum:
        fail(f"checkpoint file '{path}' is damaged: xxh64 {actual:016x}, expected {checksum:016x} (recorded in "
             f"meta.json when it was written)")
    try:
        tensors = deserialize(data)
    except SafetensorError as e:
        fail(f"'{path}' is not a safetensors file ({e})")
    # The count first: a meta.json claiming millions of layers is refused before their names are listed.
    if len(tensors) != 4 + 12 * model["layers"]:
        fail(f"{path} holds {len(tensors)} tensors; meta.json's model ({model['layers']} layers) has "
             f"{4 + 12 * model['layers']}")
    shapes = expected_shapes(model)
    weights = {}
    for name, info in tensors:
        if name not in shapes:
            fail(f"{path}: tensor '{name}' is not one of meta.json's model ({model['layers']} layers)")
        if tuple(info["shape"]) != shapes[name]:
            shape = ", ".join(f"{key} {model[key]}" for key in MODEL_KEYS)
            fail(f"{path}: tensor '{name}' has shape {info['shape']}; meta.json's model ({shape}) needs "
                 f"{list(shapes[name])}")
        raw = info["data"]
        if info["dtype"] == "BF16":
            array = (np.frombuffer(raw, dtype="<u2").astype(np.uint32) << 16).view(np.float32)
        elif info["dtype"] == "F32":
            array = np.frombuffer(raw, dtype="<f4").astype(np.float32)
        else:
            fail(f"{path}: tensor '{name}' has dtype {info['dtype']}; BF16 or F32 expected")
        weights[name] = array.reshape(info["shape"])
    return weights


def check_out(out, ckpt, folder, overwrite):
    """Refuses an OUT that would overwrite a checkpoint or, without --overwrite, anything else already there."""
    real = os.path.realpath(out)
    for held in (folder, ckpt):
        checkpoint = os.path.realpath(held)
        common = os.path.commonpath([real, checkpoint])
        if common in (real, checkpoint):
            relation = "is" if real == checkpoint else "holds" if common == real else "lies inside"
            fail(f"OUT '{out}' {relation} the checkpoint '{held}'; export to a folder outside it")
    if not os.path.isdir(out):
        if os.path.lexists(out):
            fail(f"OUT '{out}' exists and is not a folder (expected a new folder or an empty one)")
        parent = os.path.dirname(os.path.abspath(out))
        while not os.path.lexists(parent):  # the nearest part of the path that exists must be a folder
            parent = os.path.dirname(parent)
        if not os.path.isdir(parent):
            fail(f"OUT '{out}': '{parent}' is in its path and is not a folder (expected a folder, or a path that "
                 f"can be created)")
        return
    try:
        entries = sorted(os.listdir(out))
    except OSError as e:
        fail(f"cannot list OUT '{out}': {reason(e)}")
    meta = os.path.join(out, "meta.json")
    if "latest" in entries or (os.path.isfile(meta) and any(f'"{f}"'.encode() in read_bytes(meta) for f in FORMATS)):
        fail(f"OUT '{out}' holds a dptrain checkpoint ({'latest' if 'latest' in entries else 'meta.json'}); "
             f"export to another folder")
    if entries and not overwrite:
        listed = ", ".join(entries[:3]) + (", ..." if len(entries) > 3 else "")
        fail(f"OUT '{out}' is not empty ({listed}); give --overwrite to replace its config.json and "
             f"model.safetensors (other files are kept), or choose a new folder")
    for name in EXPORT_FILES:
        path = os.path.join(out, name)
        if os.path.lexists(path) and not os.path.isfile(path):
            fail(f"OUT '{out}': '{name}' is not a file, so --overwrite cannot replace it")


def write_export(out, tensors, config):
    """Into a folder that exists (empty, or with other files under --overwrite; a link to one; the current folder):
    each file written beside its final name inside it, then renamed over it. A new OUT: both files written into
    OUT.tmp-PID, which is then renamed to OUT. Either way a failed write leaves no half-written file under OUT."""
    out = os.path.abspath(out)
    existing = os.path.isdir(out)
    temporary = os.path.join(out, f".export.tmp-{os.getpid()}") if existing else f"{out}.tmp-{os.getpid()}"
    try:
        os.makedirs(os.path.dirname(out), exist_ok=True)
        os.mkdir(temporary)
    except OSError as e:
        fail(f"cannot create '{temporary}': {reason(e)}", 1)
    try:
        # from_pretrained refuses a safetensors file whose metadata does not name its framework.
        save_file(tensors, os.path.join(temporary, "model.safetensors"), metadata={"format": "pt"})
        with open(os.path.join(temporary, "config.json"), "w") as f:
            json.dump(config, f, indent=2)
            f.write("\n")
        if existing:
            for name in EXPORT_FILES:
                os.replace(os.path.join(temporary, name), os.path.join(out, name))
        else:
            os.replace(temporary, out)
    except (OSError, SafetensorError) as e:
        fail(f"cannot write '{out}': {reason(e)}", 1)
    finally:
        shutil.rmtree(temporary, ignore_errors=True)


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


def export(ckpt, out, overwrite):
    folder = step_folder(ckpt)
    meta = read_meta(folder)
    model = meta["model"]
    check_out(out, ckpt, folder, overwrite)
    checksum = recorded_checksum(meta, folder)
    check_seal(meta, folder)  # last, as dptrain: a document whose structure is wrong is named by what is wrong
    if checksum is None:
        print(f"export_hf: note: {folder}/meta.json records no checksums (written before dptrain recorded them); "
              f"model.safetensors is exported unchecked", file=sys.stderr)
    weights = read_weights(os.path.join(folder, "model.safetensors"), checksum, model)

    tensors = {}
    for name, value in weights.items():
        if name.endswith(CONV1D):
            value = value.T  # [out, in] → [in, out]
        tensors["transformer." + name] = np.ascontiguousarray(value, dtype=np.float32)
    write_export(out, tensors, hf_config(model))
    print(f"export_hf: {folder} (step {meta.get('step', '?')}) → {out}: GPT-2 with {model['layers']} layers, "
          f"{model['heads']} heads, width {model['width']}, {model['seq']} positions, vocabulary {model['vocab']}, "
          f"{len(tensors)} fp32 tensors")


class Parser(argparse.ArgumentParser):
    def error(self, message):  # one line, not argparse's usage block
        fail(f"{message} (usage: {self.format_usage().removeprefix('usage: ').strip()})")


def main():
    parser = Parser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("ckpt", metavar="CKPT", help="checkpoint directory (dptrain --save DIR) or a step folder")
    parser.add_argument("out", metavar="OUT", help="output folder for config.json and model.safetensors")
    parser.add_argument("--overwrite", action="store_true",
                        help="write into a folder that holds other files: its config.json and model.safetensors "
                             "are replaced, the rest kept")
    args = parser.parse_args()
    if not args.out:
        parser.error("OUT is empty; expected the path of the folder to write")
    try:
        export(args.ckpt, args.out, args.overwrite)
    except KeyboardInterrupt:
        fail("interrupted", 130)


if __name__ == "__main__":
    main()
