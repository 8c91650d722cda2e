#!/usr/bin/python3
"""The dptrain GPT-2 model in plain PyTorch: the reference to compare against, in speed and in mathematics.

Same architecture as src/compute/gpt.cpp: learned token and position embeddings, pre-LayerNorm blocks (eps 1e-5)
with causal multi-head attention (qkv and output projections with biases) and a 4H MLP with tanh-GELU, a final
LayerNorm and an LM head tied to the token embedding; the loss is the mean cross-entropy. Parameter names, order
and [out, in] shapes are those of the flat layout (include/dptrain/model/layout.hpp). Attention is the plain math,
softmax(QKᵀ/√d + causal mask)·V (torch 1.13 has no scaled_dot_product_attention).

  bench  train on random tokens with AdamW and print `pytorch_tokens_per_s <value>`: on the CPU in fp32 eager mode
         (with --bf16 in BF16 autocast);
         with --device cuda (torch ≥ 2) in BF16 autocast with scaled_dot_product_attention (flash/cuDNN attention),
         fused AdamW, and with --compile through torch.compile — the peer of dptrain's cuda backend
  bench-ddp  the same on the CPU over --nproc local processes (torch.multiprocessing, gloo) under
         DistributedDataParallel, each rank on batch / nproc windows of the global batch, --threads each; prints
         `pytorch_ddp_tokens_per_s <value>` (global tokens per second, rank 0's median step) — the peer of
         `mpirun -np N dptrain`
  check  load weights from a safetensors file, run one forward/backward on the given windows, print the mean loss,
         gradient norms, torch version and FNV-1a hashes of the weights and windows it used (JSON) and optionally
         write the whole gradient (tests/compute/pytorch_reference_test and its committed fixture
         tests/compute/data/pytorch_reference.json)

Run with Debian's /usr/bin/python3 (torch 1.13, numpy).
"""
import argparse
import contextlib
import json
import math
import os
import statistics
import struct
import sys
import time

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F


USE_SDPA = False  # bench --device cuda: the fused attention kernels of torch ≥ 2


class Attention(nn.Module):
    def __init__(self, width, heads, seq):
        super().__init__()
        self.heads = heads
        self.c_attn = nn.Linear(width, 3 * width)  # weight [3H, H]: q | k | v, heads contiguous in each
        self.c_proj = nn.Linear(width, width)
        self.register_buffer("mask", torch.tril(torch.ones(seq, seq, dtype=torch.bool)), persistent=False)

    def forward(self, x):  # x [B, T, H]
        B, T, H = x.shape
        hs = H // self.heads
        q, k, v = self.c_attn(x).split(H, dim=2)
        q = q.view(B, T, self.heads, hs).transpose(1, 2)  # [B, NH, T, hs]
        k = k.view(B, T, self.heads, hs).transpose(1, 2)
        v = v.view(B, T, self.heads, hs).transpose(1, 2)
        if USE_SDPA:
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)  # [B, NH, T, hs]
        else:
            scores = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(hs))  # [B, NH, T, T]
            scores = scores.masked_fill(~self.mask[:T, :T], float("-inf"))
            y = F.softmax(scores, dim=-1) @ v  # [B, NH, T, hs]
        return self.c_proj(y.transpose(1, 2).reshape(B, T, H))


class Mlp(nn.Module):
    def __init__(self, width):
        super().__init__()
        self.c_fc = nn.Linear(width, 4 * width)  # [4H, H]
        self.c_proj = nn.Linear(4 * width, width)  # [H, 4H]

    def forward(self, x):
        return self.c_proj(F.gelu(self.c_fc(x), approximate="tanh"))


class Block(nn.Module):
    def __init__(self, width, heads, seq):
        super().__init__()
        self.ln_1 = nn.LayerNorm(width, eps=1e-5)
        self.attn = Attention(width, heads, seq)
        self.ln_2 = nn.LayerNorm(width, eps=1e-5)
        self.mlp = Mlp(width)

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class Gpt(nn.Module):
    def __init__(self, vocab, seq, layers, width, heads):
        super().__init__()
        if layers < 1 or width % heads != 0:
            raise SystemExit(f"gpt_reference: need layers >= 1 and heads dividing width, got layers {layers}, "
                             f"width {width}, heads {heads}")
        self.wte = nn.Embedding(vocab, width)  # also the LM head (tied)
        self.wpe = nn.Embedding(seq, width)
        self.h = nn.ModuleList(Block(width, heads, seq) for _ in range(layers))
        self.ln_f = nn.LayerNorm(width, eps=1e-5)
        self.initialise(layers)

    def initialise(self, layers):
        # GPT-2: normal(0, 0.02), residual projections 0.02/sqrt(2L), biases 0, LayerNorm weights 1.
        for name, p in self.named_parameters():
            if p.dim() == 1:
                nn.init.ones_(p) if name.endswith(("ln_1.weight", "ln_2.weight", "ln_f.weight")) else nn.init.zeros_(p)
            else:
                std = 0.02 / math.sqrt(2 * layers) if name.endswith("c_proj.weight") else 0.02
                nn.init.normal_(p, 0.0, std)

    def forward(self, inputs, targets):  # [B, T] each → mean cross-entropy
        T = inputs.shape[1]
        x = self.wte(inputs) + self.wpe(torch.arange(T, device=inputs.device))
        for block in self.h:
            x = block(x)
        logits = self.ln_f(x) @ self.wte.weight.t()  # [B, T, V]
        return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1))


def adamw(model, lr=3e-4, **options):
    # Decay 2-D tensors (matrices and embeddings) only, as the flat layout marks them.
    decay = [p for p in model.parameters() if p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    return torch.optim.AdamW([{"params": decay, "weight_decay": 0.1}, {"params": no_decay, "weight_decay": 0.0}],
                             lr=lr, betas=(0.9, 0.95), eps=1e-8, **options)


def bench(args):
    global USE_SDPA
    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    cuda = args.device == "cuda"
    USE_SDPA = cuda
    model = Gpt(args.vocab, args.seq, args.layers, args.width, args.heads).to(args.device)
    optimizer = adamw(model, fused=True) if cuda else adamw(model)
    step_model = torch.compile(model) if args.compile else model
    generator = torch.Generator().manual_seed(args.seed + 1)
    tokens_per_step = args.batch * args.seq
    times = []
    for step in range(args.steps):
        windows = torch.randint(0, args.vocab, (args.batch, args.seq + 1), generator=generator).to(args.device)
        if cuda:
            torch.cuda.synchronize()
        start = time.perf_counter()
        optimizer.zero_grad(set_to_none=True)
        with torch.autocast(args.device, dtype=torch.bfloat16) if cuda or args.bf16 else contextlib.nullcontext():
            loss = step_model(windows[:, :-1], windows[:, 1:])
        loss.backward()
        optimizer.step()
        if cuda:
            torch.cuda.synchronize()
        elapsed = time.perf_counter() - start
        times.append(elapsed)
        print(f"step {step} loss {loss.item():.4f} time {elapsed * 1e3:.1f} ms"
              f"{' (warm-up)' if step < args.warmup else ''}", file=sys.stderr)
    median = statistics.median(times[args.warmup:])
    params = sum(p.numel() for p in model.parameters())
    where = f"{torch.cuda.get_device_name()}, BF16 autocast, SDPA{', torch.compile' if args.compile else ''}" \
        if cuda else f"{args.threads} threads{', BF16 autocast' if args.bf16 else ''}"
    print(f"torch {torch.__version__}, {where}, {params} parameters, {tokens_per_step} tokens/step, "
          f"median step {median * 1e3:.1f} ms over {len(times) - args.warmup} steps", file=sys.stderr)
    print(f"pytorch_tokens_per_s {tokens_per_step / median:.1f}")


def ddp_worker(rank, args, port, result):
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel
    torch.set_num_threads(args.threads)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=args.nproc)
    torch.manual_seed(args.seed)  # the same initial weights on every rank (DDP also broadcasts rank 0's)
    gpt = Gpt(args.vocab, args.seq, args.layers, args.width, args.heads)
    # gloo cannot broadcast the bool causal masks; they are constants, identical on every rank.
    DistributedDataParallel._set_params_and_buffers_to_ignore_for_model(
        gpt, [name for name, _ in gpt.named_buffers() if name.endswith("mask")])
    model = DistributedDataParallel(gpt)
    optimizer = adamw(model.module)
    generator = torch.Generator().manual_seed(args.seed + 1 + rank)
    local = args.batch // args.nproc
    times = []
    for step in range(args.steps):
        windows = torch.randint(0, args.vocab, (local, args.seq + 1), generator=generator)
        # The ranks start each step together, outside its time, as dptrain's exchange between steps is outside
        # its own.
        dist.barrier()
        start = time.perf_counter()
        optimizer.zero_grad(set_to_none=True)
        loss = model(windows[:, :-1], windows[:, 1:])
        loss.backward()  # DDP all-reduces the gradient buckets while backward runs
        optimizer.step()
        elapsed = time.perf_counter() - start
        times.append(elapsed)
        if rank == 0:
            print(f"step {step} loss {loss.item():.4f} time {elapsed * 1e3:.1f} ms"
                  f"{' (warm-up)' if step < args.warmup else ''}", file=sys.stderr)
    if rank == 0:
        result.put(statistics.median(times[args.warmup:]))
    dist.destroy_process_group()


def bench_ddp(args):
    if args.nproc < 1 or args.batch % args.nproc != 0:
        raise SystemExit(f"gpt_reference: --batch {args.batch} must be divisible by --nproc {args.nproc}")
    import socket
    import torch.multiprocessing as mp
    with socket.socket() as s:  # a free local port for the rendezvous
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    context = mp.get_context("spawn")
    result = context.SimpleQueue()
    mp.start_processes(ddp_worker, args=(args, port, result), nprocs=args.nproc, start_method="spawn")
    median = result.get()
    tokens_per_step = args.batch * args.seq
    print(f"torch {torch.__version__}, DistributedDataParallel (gloo), {args.nproc} processes x {args.threads} "
          f"threads, {tokens_per_step} tokens/step (global), median step {median * 1e3:.1f} ms over "
          f"{args.steps - args.warmup} steps", file=sys.stderr)
    print(f"pytorch_ddp_tokens_per_s {tokens_per_step / median:.1f}")


def fnv1a(data):
    """64-bit FNV-1a over bytes, as dptrain::fnv1a (include/dptrain/core/hash.hpp)."""
    h = 0xcbf29ce484222325
    for byte in data:
        h = ((h ^ byte) * 0x100000001b3) & 0xFFFFFFFFFFFFFFFF
    return h


def refuse(message):
    """Bad input: one line and exit 2."""
    print(f"gpt_reference: {message}", file=sys.stderr)
    sys.exit(2)


def read_safetensors(path):
    """name → fp32 numpy array, for F32 and BF16 tensors (the formats dptrain writes)."""
    if os.path.exists(path) and not os.path.isfile(path):  # a folder, a device, a FIFO
        refuse(f"--safetensors: '{path}' is not a regular file")
    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError as e:
        refuse(f"--safetensors: cannot read '{path}': {e.strerror}")
    try:
        (header_size,) = struct.unpack("<Q", data[:8])
        header = json.loads(data[8:8 + header_size])
        if not isinstance(header, dict):
            raise ValueError(f"its header is {type(header).__name__}")
    except (struct.error, ValueError, RecursionError) as e:
        refuse(f"--safetensors: '{path}' is not a safetensors file ({e})")
    body = data[8 + header_size:]
    tensors = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        try:
            begin, end = info["data_offsets"]
            raw = body[begin:end]
            if info["dtype"] == "F32":
                array = np.frombuffer(raw, dtype="<f4")
            elif info["dtype"] == "BF16":
                array = (np.frombuffer(raw, dtype="<u2").astype(np.uint32) << 16).view(np.float32)
            else:
                refuse(f"--safetensors: '{path}': tensor {name} has dtype {info['dtype']}; F32 or BF16 expected")
            tensors[name] = array.reshape(info["shape"]).copy()
        except (TypeError, KeyError, ValueError) as e:  # an entry that is not an object, lacks a key, or misfits
            refuse(f"--safetensors: '{path}': tensor {name}'s entry {json.dumps(info)[:200]} does not describe its "
                   f"bytes ({type(e).__name__}: {e})")
    return tensors


def check(args):
    torch.set_num_threads(args.threads)
    tensors = read_safetensors(args.safetensors)
    if "wte.weight" not in tensors or "wpe.weight" not in tensors:
        raise SystemExit(f"gpt_reference: {args.safetensors} has no wte.weight/wpe.weight")
    vocab, width = tensors["wte.weight"].shape
    seq = tensors["wpe.weight"].shape[0]
    layers = sum(1 for name in tensors if name.endswith(".ln_1.weight"))
    model = Gpt(vocab, seq, layers, width, args.heads)
    state = model.state_dict()
    missing = sorted(set(state) - set(tensors))
    unexpected = sorted(set(tensors) - set(state))
    if missing or unexpected:
        raise SystemExit(f"gpt_reference: names differ from the layout: missing {missing}, unexpected {unexpected}")
    for name, value in tensors.items():
        if tuple(state[name].shape) != value.shape:
            raise SystemExit(f"gpt_reference: {name} has shape {list(value.shape)}, "
                             f"expected {list(state[name].shape)}")
    model.load_state_dict({name: torch.from_numpy(value) for name, value in tensors.items()})
    if args.tokens:
        if not os.path.isfile(args.tokens):
            refuse(f"--tokens: no file '{args.tokens}'")
        ids = np.fromfile(args.tokens, dtype="<i4")
        if ids.size == 0 or ids.size % (seq + 1) or os.path.getsize(args.tokens) % 4:
            refuse(f"--tokens: '{args.tokens}' holds {os.path.getsize(args.tokens)} bytes, expected whole windows of "
                   f"{seq + 1} int32 tokens ({4 * (seq + 1)} bytes each), at least one")
        if ids.min() < 0 or ids.max() >= vocab:
            refuse(f"--tokens: '{args.tokens}' holds token {int(ids.min() if ids.min() < 0 else ids.max())}, "
                   f"outside the vocabulary [0, {vocab})")
        windows = torch.from_numpy(ids.astype(np.int64)).view(-1, seq + 1)
    else:
        windows = torch.randint(0, vocab, (args.batch, seq + 1), generator=torch.Generator().manual_seed(args.seed))
    loss = model(windows[:, :-1], windows[:, 1:])
    loss.backward()
    if args.grads:  # the flat gradient in layout order, fp32 little-endian
        try:
            np.concatenate([p.grad.detach().numpy().astype("<f4").ravel() for p in model.parameters()]).tofile(
                args.grads)
        except OSError as e:
            refuse(f"--grads: cannot write '{args.grads}': {e.strerror}")
    # The inputs as torch used them, hashed like the C++ side hashes its flat buffer and windows: the weights as
    # fp32 little-endian in layout order, the windows as int32 little-endian.
    flat_weights = np.concatenate([p.detach().numpy().astype("<f4").ravel() for p in model.parameters()])
    print(json.dumps({
        "loss": loss.item(),
        "torch_version": torch.__version__,
        "weights_fnv1a": f"{fnv1a(flat_weights.tobytes()):016x}",
        "windows_fnv1a": f"{fnv1a(windows.numpy().astype('<i4').tobytes()):016x}",
        "windows": windows.shape[0],
        "order": [name for name, _ in model.named_parameters()],
        "grad_norm": math.sqrt(sum(float(p.grad.double().pow(2).sum()) for p in model.parameters())),
        "grad_norms": {name: float(p.grad.double().norm()) for name, p in model.named_parameters()},
    }, indent=1))


class Parser(argparse.ArgumentParser):
    def error(self, message):  # one line, not argparse's usage block
        refuse(f"{message} (usage: {' '.join(self.format_usage().removeprefix('usage: ').split())})")


def check_arguments(args):
    """The ranges argparse's types do not check, and what this machine's torch can do."""
    for name in ("layers", "width", "heads", "seq", "vocab", "batch", "threads", "nproc"):
        value = getattr(args, name, None)
        if value is not None and value < 1:
            refuse(f"--{name} must be at least 1, got {value}")
    if args.mode != "check" and args.warmup < 0:
        refuse(f"--warmup must be at least 0, got {args.warmup}")
    if args.mode != "check" and args.steps <= args.warmup:
        refuse(f"--steps must be more than --warmup {args.warmup} (the median is of the steps after it), "
               f"got {args.steps}")
    if args.mode != "check" and args.width % args.heads:
        refuse(f"--heads {args.heads} must divide --width {args.width}")
    if getattr(args, "device", "cpu") == "cuda" and not torch.cuda.is_available():
        refuse("--device cuda: this torch sees no GPU (torch.cuda.is_available() is False)")
    if getattr(args, "compile", False) and not hasattr(torch, "compile"):
        refuse(f"--compile: torch {torch.__version__} has no torch.compile (needs torch ≥ 2)")


def main():
    parser = Parser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="mode", required=True, parser_class=Parser)
    b = sub.add_parser("bench", help="fp32 eager training throughput on random tokens")
    d = sub.add_parser("bench-ddp", help="the same under DistributedDataParallel (gloo) on --nproc processes")
    d.add_argument("--nproc", type=int, default=2, help="local processes (ranks)")
    for p in (b, d):
        p.add_argument("--layers", type=int, default=4)
        p.add_argument("--width", type=int, default=256)
        p.add_argument("--heads", type=int, default=4)
        p.add_argument("--seq", type=int, default=128)
        p.add_argument("--vocab", type=int, default=256)
        p.add_argument("--batch", type=int, default=16, help="windows per step")
        p.add_argument("--steps", type=int, default=6, help="steps in all; the median of those after --warmup is "
                                                             "reported")
        p.add_argument("--warmup", type=int, default=2, help="steps left out of the median")
        p.add_argument("--threads", type=int, default=1)
        p.add_argument("--seed", type=int, default=1234)
    b.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    b.add_argument("--compile", action="store_true", help="torch.compile the model (cuda)")
    b.add_argument("--bf16", action="store_true",
                   help="on the CPU, BF16 autocast (oneDNN's BF16 matmuls; the peer of --cpu-gemm onednn-bf16)")
    c = sub.add_parser("check", help="loss and gradient norms of the weights in a safetensors file")
    c.add_argument("--safetensors", required=True)
    c.add_argument("--heads", type=int, required=True, help="not recorded in the weights")
    c.add_argument("--tokens", help="int32 little-endian windows [n, seq+1]; default: random windows")
    c.add_argument("--batch", type=int, default=4, help="random windows when --tokens is not given")
    c.add_argument("--grads", help="write ∂(mean loss)/∂W here, fp32 in layout order")
    c.add_argument("--seed", type=int, default=1234)
    c.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    check_arguments(args)
    {"bench": bench, "bench-ddp": bench_ddp, "check": check}[args.mode](args)


if __name__ == "__main__":
    main()
