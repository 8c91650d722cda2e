#!/usr/bin/python3
"""Plots of a dptrain run and a dpbench sweep (Debian's python3-matplotlib and python3-numpy).

  scripts/plot.py [--run run.jsonl] [--bench bench.json [--link link.json]] [--out DIR]

--run writes DIR/loss.png (train and validation loss per step) and DIR/step_time.png (measured step time,
communication time and their modelled values per step). --bench writes DIR/link_time.png: measured time over
message size, log-log, one line per operation and algorithm of the sweep, each beside the time its formula in
docs/systems-model.md gives (dashed): on the link of --link (α, B and, where link.json has it, γ for the
collectives that add), or without --link on a least-squares α–β fit of that line's own rows (relative errors, as
`dpbench --fit`). A line without a formula (sendrecv) or whose fit is not defined (one size, one rank, a fit with
no positive B) is drawn without a model line, and a note says so.

At least one of --run and --bench is needed; DIR (default .) is made when missing. Every input is read and checked
before anything is drawn: bad input prints one line `plot: ...` and exits with 2.
"""
import argparse
import json
import math
import os
import sys

# The step record's fields that are plotted: numbers, or null where the value was not finite.
STEP_FIELDS = ("step", "loss", "val_loss", "step_ms", "step_model_ms", "comm_ms", "transfer_ms", "comm_model_ms")
BENCH_EXPECTED = "expected the JSON array of rows that dpbench --json writes (op, algo, size, time_us, ranks)"


def fail(message, code=2):
    print(f"plot: {message}", file=sys.stderr)
    sys.exit(code)


def is_number(value):
    """A finite number (a JSON integer too large for a float is not)."""
    if not isinstance(value, (int, float)) or isinstance(value, bool):
        return False
    try:
        return math.isfinite(value)
    except OverflowError:
        return False


def json_type(value):
    names = {dict: "an object", list: "an array", str: "a string", bool: "a boolean", type(None): "null"}
    return names.get(type(value), "a number")


def is_count(value, least):
    return isinstance(value, int) and not isinstance(value, bool) and value >= least


def read_text(path, flag):
    try:
        with open(path, encoding="utf-8") as f:
            return f.read()
    except (OSError, UnicodeDecodeError) as e:
        fail(f"{flag}: cannot read '{path}': {e.strerror if isinstance(e, OSError) else e}")


def read_json(path, flag, expected):
    try:
        return json.loads(read_text(path, flag))
    except (ValueError, RecursionError) as e:  # RecursionError: nested deeper than the parser goes
        fail(f"{flag}: '{path}' is not JSON ({e}); {expected}")


def read_run(path):
    """The step records of a dptrain --log JSONL file."""
    steps = []
    for number, line in enumerate(read_text(path, "--run").splitlines(), 1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except (ValueError, RecursionError) as e:
            fail(f"--run: '{path}' line {number} is not JSON ({e}); expected the JSONL of dptrain --log")
        if not isinstance(record, dict) or "step" not in record or "event" in record:
            continue
        for key in STEP_FIELDS:
            value = record.get(key)
            if not is_number(value) and (key == "step" or value is not None):
                fail(f"--run: '{path}' line {number}: '{key}' is {json.dumps(value)}, expected a number")
            if key.endswith("_ms") and value is not None and (value < 0 or (key == "step_ms" and value == 0)):
                fail(f"--run: '{path}' line {number}: '{key}' is {json.dumps(value)}, expected a time in ms "
                     f"({'> 0' if key == 'step_ms' else '≥ 0'})")
        steps.append(record)
    if not steps:
        fail(f"--run: '{path}' holds no step records (expected the JSONL of dptrain --log)")
    if all(r.get("loss") is None for r in steps):
        fail(f"--run: '{path}' holds no loss in its {len(steps)} step record(s) (expected the JSONL of dptrain --log)")
    return steps


def read_bench(path):
    """The rows of a dpbench --json file with a size > 0, all of one rank count."""
    rows = read_json(path, "--bench", BENCH_EXPECTED)
    if not isinstance(rows, list):
        fail(f"--bench: '{path}' holds {json_type(rows)}, {BENCH_EXPECTED}")
    for i, row in enumerate(rows):
        ok = (isinstance(row, dict) and isinstance(row.get("op"), str) and isinstance(row.get("algo"), str)
              and is_count(row.get("size"), 0) and is_count(row.get("ranks"), 1) and is_number(row.get("time_us"))
              and row["time_us"] > 0)
        if not ok:
            fail(f"--bench: '{path}' row {i} is {json.dumps(row)[:80]}; {BENCH_EXPECTED}: size an integer ≥ 0, "
                 f"time_us > 0, ranks an integer ≥ 1")
    rows = [r for r in rows if r["size"] > 0]
    if not rows:
        fail(f"--bench: '{path}' holds no rows with a size > 0; {BENCH_EXPECTED}")
    ranks = sorted({r["ranks"] for r in rows})
    if len(ranks) > 1:
        fail(f"--bench: '{path}' mixes rank counts {ranks}; expected the rows of one dpbench run")
    return rows


def link_values(entry):
    """(α s, B bytes/s, γ s/byte) of a link object, γ 0 where it holds none; None where they are not finite with
    α ≥ 0, B > 0 and γ ≥ 0."""
    alpha, bandwidth, gamma = entry.get("alpha_s"), entry.get("bandwidth_Bps"), entry.get("gamma_s_per_byte", 0.0)
    if not (is_number(alpha) and alpha >= 0 and is_number(bandwidth) and bandwidth > 0 and is_number(gamma)
            and gamma >= 0):
        return None
    return alpha, bandwidth, gamma


def read_link(path):
    """A link.json (dpbench --fit) as (its link, {algorithm: its own fit}): the top-level α, B, γ are the first
    algorithm's; `fits` holds each algorithm's, which its model line uses."""
    link = read_json(path, "--link", "expected the link.json that dpbench --fit writes")
    if not isinstance(link, dict):
        fail(f"--link: '{path}' holds {json_type(link)}, expected the link.json object that dpbench --fit writes")
    values = link_values(link)
    if values is None:
        fail(f"--link: '{path}' holds alpha_s {json.dumps(link.get('alpha_s'))}, bandwidth_Bps "
             f"{json.dumps(link.get('bandwidth_Bps'))} and gamma_s_per_byte {json.dumps(link.get('gamma_s_per_byte'))}"
             f"; need finite α ≥ 0, B > 0 and γ ≥ 0")
    fits = link.get("fits")
    by_algorithm = {}
    for entry in fits if isinstance(fits, list) else []:
        if isinstance(entry, dict) and isinstance(entry.get("algo"), str) and link_values(entry) is not None:
            by_algorithm[entry["algo"]] = link_values(entry)
    return values, by_algorithm


def terms(op, algo, p, n):
    """(α count, bytes moved at B, bytes added at γ) of docs/systems-model.md's formula for one call of n bytes on
    p ranks, or None where there is none (sendrecv). As dpbench --fit, native all-reduce follows the ring's."""
    hops, ring = p - 1, (p - 1) / p * n
    if op == "allreduce" and algo == "tree":
        levels = (p - 1).bit_length()  # ⌈log2 p⌉
        return 2 * levels, 2 * levels * n, (2 if p > 2 else 1) * levels * n
    return {"allreduce": (2 * hops, 2 * ring, ring), "reduce_scatter": (hops, ring, ring),
            "all_gather": (hops, ring, 0)}.get(op)


def fit(coefficients, seconds, np):
    """(α, B, 0) minimising the relative error of c1·α + c2/B against the times, α ≥ 0; None where no such fit
    with B > 0 is determined (fewer than two sizes, one rank)."""
    a = np.array(coefficients, dtype=float)[:, :2] / seconds[:, None]
    scale = np.linalg.norm(a, axis=0)
    if not np.all(scale > 0):
        return None
    (alpha, inverse_bandwidth), _, rank, _ = np.linalg.lstsq(a / scale, np.ones(len(seconds)), rcond=None)
    if rank < 2:
        return None
    alpha, inverse_bandwidth = alpha / scale[0], inverse_bandwidth / scale[1]
    if alpha < 0:  # as dpbench: refitted with α = 0
        alpha, inverse_bandwidth = 0.0, a[:, 1].sum() / (a[:, 1] @ a[:, 1])
    return (alpha, 1 / inverse_bandwidth, 0.0) if inverse_bandwidth > 0 else None


def describe(link):
    alpha, bandwidth, gamma = link
    return f"α {alpha * 1e6:.1f} µs, B {bandwidth / 1e9:.2f} GB/s" + (f", γ {gamma * 1e9:.3g} ns/B" if gamma else "")


def plot_loss(steps, out, plt):
    fig, ax = plt.subplots(figsize=(7, 4))
    ax.plot([r["step"] for r in steps], series(steps, "loss"), label="train")
    val = [r for r in steps if r.get("val_loss") is not None]
    if val:
        ax.plot([r["step"] for r in val], [r["val_loss"] for r in val], "o-", label="validation")
    ax.set_xlabel("step")
    ax.set_ylabel("mean cross-entropy (nats)")
    ax.legend()
    ax.grid(alpha=0.3)
    save(fig, out, "loss.png")


def series(steps, key):
    return [math.nan if r.get(key) is None else r[key] for r in steps]


def plot_step_time(steps, out, plt):
    s = [r["step"] for r in steps]
    fig, ax = plt.subplots(figsize=(7, 4))
    for key, style, label in (("step_ms", "-", "step, measured"), ("step_model_ms", "--", "step, modelled"),
                              ("comm_ms", ":", "communication, wall time (transfer + skew)"),
                              ("transfer_ms", "-", "communication, transfer (what the model predicts)"),
                              ("comm_model_ms", "--", "communication, modelled")):
        if any((r.get(key) or 0) > 0 for r in steps):  # a log scale: a run of one rank has no communication
            ax.plot(s, series(steps, key), style, label=label)
    ax.set_xlabel("step")
    ax.set_ylabel("ms")
    ax.set_yscale("log")
    ax.legend()
    ax.grid(alpha=0.3)
    save(fig, out, "step_time.png")


def plot_link_time(rows, link, out, plt, np):
    p = rows[0]["ranks"]
    fig, ax = plt.subplots(figsize=(7, 4))
    lines = sorted({(r["op"], r["algo"]) for r in rows})
    for op, algo in lines:
        mine = sorted((r for r in rows if (r["op"], r["algo"]) == (op, algo)), key=lambda r: r["size"])
        sizes = np.array([r["size"] for r in mine], dtype=float)
        seconds = np.array([r["time_us"] * 1e-6 for r in mine])
        (measured,) = ax.loglog(sizes, seconds * 1e6, "o-", label=f"{op} {algo}, measured")
        coefficients = [terms(op, algo, p, n) for n in sizes]
        if coefficients[0] is None:
            print(f"plot: note: {op} {algo}: no model line (docs/systems-model.md has no formula for {op})")
            continue
        model = (link[1].get(algo, link[0]) if link else None) or fit(coefficients, seconds, np)
        if model is None:
            print(f"plot: note: {op} {algo}: no model line (an α–β fit needs two sizes or more on two ranks or more "
                  f"and a positive B; --link gives the link instead)")
            continue
        modelled = [c1 * model[0] + c2 / model[1] + c3 * model[2] for c1, c2, c3 in coefficients]
        ax.loglog(sizes, np.array(modelled) * 1e6, "--", color=measured.get_color(),
                  label=f"{op} {algo}, model ({describe(model)}{'' if link else ', fitted'})")
    ax.set_xlabel("message size (bytes)")
    ax.set_ylabel("time (µs)")
    title = f"{', '.join(sorted({op for op, _ in lines}))} on {p} ranks"
    ax.set_title(title + ("; links of --link" if link else ""), fontsize=9)
    ax.legend(fontsize=7)
    ax.grid(alpha=0.3, which="both")
    save(fig, out, "link_time.png")


def save(fig, out, name):
    """Writes the figure beside its final name and renames it: a failed write leaves an earlier plot as it was."""
    fig.tight_layout()
    path = os.path.join(out, name)
    temporary = os.path.join(out, f".{name}.tmp-{os.getpid()}.png")
    try:
        fig.savefig(temporary, dpi=120)
        os.replace(temporary, path)
    except OSError as e:
        try:
            os.remove(temporary)
        except OSError:
            pass
        fail(f"--out: cannot write '{path}': {e.strerror}")


class Parser(argparse.ArgumentParser):
    def error(self, message):  # one line, not argparse's usage block
        fail(f"{message} (usage: {' '.join(self.format_usage().removeprefix('usage: ').split())})")


def main():
    parser = Parser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--run", help="dptrain --log JSONL")
    parser.add_argument("--bench", help="dpbench --json output")
    parser.add_argument("--link", help="link.json (dpbench --fit); default: fit each line of the bench")
    parser.add_argument("--out", default=".", help="folder for the PNG files (default: .)")
    args = parser.parse_args()
    if args.link is not None and args.bench is None:
        parser.error("--link is drawn against --bench, which is missing")
    if args.run is None and args.bench is None:
        parser.error("nothing to plot: give --run, --bench or both")
    steps = read_run(args.run) if args.run is not None else None
    rows = read_bench(args.bench) if args.bench is not None else None
    link = read_link(args.link) if args.link is not None else None
    try:
        import matplotlib
        import numpy as np

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as e:
        fail(f"{e}: needs Debian's python3-matplotlib and python3-numpy (apt-get install python3-matplotlib)", 1)
    try:
        os.makedirs(args.out, exist_ok=True)
    except OSError as e:
        fail(f"--out: cannot make the folder '{args.out}': {e.strerror}")
    if steps:
        plot_loss(steps, args.out, plt)
        plot_step_time(steps, args.out, plt)
    if rows:
        plot_link_time(rows, link, args.out, plt, np)


if __name__ == "__main__":
    main()
