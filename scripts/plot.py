#!/usr/bin/python3
"""Plots of a dptrain run and a dpbench sweep (Debian's python3-matplotlib).

  scripts/plot.py --run run.jsonl [--bench bench.json] [--link link.json] --out DIR

writes DIR/loss.png (train and validation loss per step), DIR/step_time.png (measured step time, communication
time and their modelled values per step) and, with --bench, DIR/link_time.png (measured collective time over
message size, log-log, per algorithm, with the α–β line of --link or of a least-squares fit).
"""
import argparse
import json
import os

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402


def read_jsonl(path):
    with open(path) as f:
        rows = [json.loads(line) for line in f if line.strip()]
    steps = [r for r in rows if "step" in r and "event" not in r]
    return steps, next((r for r in rows if r.get("event") == "summary"), None)


def plot_loss(steps, out):
    fig, ax = plt.subplots(figsize=(7, 4))
    ax.plot([r["step"] for r in steps], [r["loss"] for r in steps], label="train")
    val = [r for r in steps if "val_loss" in r]
    if val:
        ax.plot([r["step"] for r in val], [r["val_loss"] for r in val], "o-", label="validation")
    ax.set_xlabel("step")
    ax.set_ylabel("mean cross-entropy (nats)")
    ax.legend()
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(os.path.join(out, "loss.png"), dpi=120)


def plot_step_time(steps, out):
    s = [r["step"] for r in steps]
    fig, ax = plt.subplots(figsize=(7, 4))
    ax.plot(s, [r["step_ms"] for r in steps], label="step, measured")
    if "step_model_ms" in steps[0]:
        ax.plot(s, [r["step_model_ms"] for r in steps], "--", label="step, modelled")
    if "comm_ms" in steps[0]:
        ax.plot(s, [r["comm_ms"] for r in steps], label="communication, measured")
        ax.plot(s, [r["comm_model_ms"] for r in steps], "--", label="communication, modelled")
    ax.set_xlabel("step")
    ax.set_ylabel("ms")
    ax.set_yscale("log")
    ax.legend()
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(os.path.join(out, "step_time.png"), dpi=120)


def ring_allreduce_seconds(alpha, bandwidth, p, n):
    return 2 * (p - 1) * alpha + 2 * (p - 1) / p * n / bandwidth


def plot_link_time(rows, link, out):
    fig, ax = plt.subplots(figsize=(7, 4))
    for algo in sorted({r["algo"] for r in rows}):
        mine = sorted((r for r in rows if r["algo"] == algo and r["size"] > 0), key=lambda r: r["size"])
        ax.loglog([r["size"] for r in mine], [r["time_us"] for r in mine], "o-", label=f"{algo}, measured")
    sizes = np.array(sorted({r["size"] for r in rows if r["size"] > 0}), dtype=float)
    p = rows[0]["ranks"]
    if link is None:  # least squares on the ring rows: t = 2(p−1)·α + 2(p−1)/p·n·(1/B)
        ring = [r for r in rows if r["algo"] == "ring" and r["size"] > 0]
        a = np.array([[2 * (p - 1), 2 * (p - 1) / p * r["size"]] for r in ring])
        t = np.array([r["time_us"] * 1e-6 for r in ring])
        (alpha, inverse_bandwidth), *_ = np.linalg.lstsq(a, t, rcond=None)
        link = {"alpha_s": max(alpha, 0.0), "bandwidth_Bps": 1 / inverse_bandwidth}
    model = [ring_allreduce_seconds(link["alpha_s"], link["bandwidth_Bps"], p, n) * 1e6 for n in sizes]
    ax.loglog(sizes, model, "k--", label=f"α–β ring model (α {link['alpha_s'] * 1e6:.1f} µs, "
                                          f"B {link['bandwidth_Bps'] / 1e9:.2f} GB/s)")
    ax.set_xlabel("message size (bytes)")
    ax.set_ylabel("time (µs)")
    ax.set_title(f"all-reduce on {p} ranks")
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3, which="both")
    fig.tight_layout()
    fig.savefig(os.path.join(out, "link_time.png"), dpi=120)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--run", help="dptrain --log JSONL")
    parser.add_argument("--bench", help="dpbench --json output")
    parser.add_argument("--link", help="link.json (dpbench --fit); default: fit the bench's ring rows")
    parser.add_argument("--out", default=".")
    args = parser.parse_args()
    os.makedirs(args.out, exist_ok=True)
    if args.run:
        steps, _ = read_jsonl(args.run)
        if not steps:
            raise SystemExit(f"plot.py: {args.run} holds no step records")
        plot_loss(steps, args.out)
        plot_step_time(steps, args.out)
    if args.bench:
        with open(args.bench) as f:
            rows = [r for r in json.load(f) if r.get("op") in ("allreduce", "all_reduce")]
        link = None
        if args.link:
            with open(args.link) as f:
                link = json.load(f)
        plot_link_time(rows, link, args.out)


if __name__ == "__main__":
    main()
