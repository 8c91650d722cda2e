#!/usr/bin/env python3
"""What ptxas makes of every kernel of kernels/ for sm_90, read without a GPU.

Usage: kernel_resources_test.py NVCC SOURCE_DIR

Compiles each kernels/*.cu as the build does (C++17, sm_90) to PTX (the global loads and stores each kernel
issues), and assembles that with ptxas into a cubin, reading its resource report (registers, stack frame, spill
stores and loads, shared memory per kernel); where cuobjdump is found (on the PATH or beside nvcc), also reads the cubin's machine code
(SASS). Prints one row per kernel and fails where:
  - any kernel spills registers to local memory;
  - any kernel has a stack frame, but embedding_backward_wte, whose 16 slot tags are an array indexed by token
    (64 bytes, kept per thread on purpose: kernels/encoder.cu);
  - a kernel that kernels/vectorized.cuh vectorises (elementwise.cu, optimizer.cu, the permutes of attention.cu,
    the embedding's forward)
    issues no 16-byte global load
    and store (ld.global.v4 / st.global.v4 in the PTX; LDG.E.128 / STG.E.128 in the SASS where it is read): its
    wide path would have been compiled away.
"""
import pathlib
import re
import shutil
import subprocess
import sys
import tempfile

STACK_ALLOWED = {"embedding_backward_wte": 64}
# The kernels written over for_each_element, for_each_chunk or for_each_loaded_chunk (kernels/vectorized.cuh).
VECTORISED = {"gelu_forward", "gelu_backward", "reduce_add_bf16", "add_f32", "cast_f32_to_bf16", "cast_bf16_to_f32",
              "adamw_f32_grad", "adamw_bf16_grad", "permute_qkv", "unpermute", "permute_heads", "unpermute_qkv",
              "embedding_forward", "classifier", "layernorm_forward",
              "layernorm_backward"}


def kernel_name(mangled):
    """The kernel's own name from an Itanium-mangled dptrain::kernels::NAME(...)."""
    m = re.match(r"_ZN7dptrain7kernels(\d+)", mangled)
    if not m:
        return mangled
    length = int(m.group(1))
    start = m.end()
    return mangled[start:start + length]


def run_tool(command, what):
    """The finished command (stdout and stderr as text); exits with its errors where it failed."""
    run = subprocess.run([str(c) for c in command], capture_output=True, text=True)
    if run.returncode != 0:
        sys.exit(f"{what} failed:\n{run.stderr}")
    return run


def ptx_of(nvcc, source, include, ptx):
    """The build's compilation of one kernel file (C++17, sm_90), stopped at the PTX."""
    run_tool([nvcc, "-std=c++17", "-arch=sm_90", "-ptx", "-I", include, "-I", source.parent, source, "-o", ptx],
             f"nvcc -ptx on {source.name}")


def resource_report(ptxas, ptx, cubin):
    """{kernel: {registers, stack, spill_stores, spill_loads, smem}} from ptxas -v, assembling the PTX to the cubin
    (what nvcc would have run next)."""
    run = run_tool([ptxas, "-arch=sm_90", "-v", ptx, "-o", cubin], f"ptxas on {ptx.name}")
    kernels, current = {}, None
    for line in run.stderr.splitlines():
        if m := re.search(r"Function properties for (\S+)", line):
            current = kernel_name(m.group(1))
            kernels[current] = {"registers": 0, "stack": 0, "spill_stores": 0, "spill_loads": 0, "smem": 0}
        elif current and (m := re.search(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads",
                                         line)):
            kernels[current].update(stack=int(m.group(1)), spill_stores=int(m.group(2)), spill_loads=int(m.group(3)))
        elif current and (m := re.search(r"Used (\d+) registers", line)):
            kernels[current]["registers"] = int(m.group(1))
            if s := re.search(r"(\d+) bytes smem", line):
                kernels[current]["smem"] = int(s.group(1))
    return kernels


def global_accesses(ptx):
    """{kernel: (16-byte global loads, 16-byte global stores)} from the PTX."""
    accesses = {}
    for m in re.finditer(r"\.entry (\S+)\((.*?)\n\}\n", ptx.read_text(), re.S):
        body = m.group(2)
        accesses[kernel_name(m.group(1))] = (len(re.findall(r"\bld\.global(?:\.(?:nc|ca|cg|cs|lu|cv))?\.v4\.", body)),
                                             len(re.findall(r"\bst\.global(?:\.(?:wb|cg|cs|wt))?\.v4\.", body)))
    return accesses


def sass_accesses(cuobjdump, cubin):
    """{kernel: (16-byte global loads, 16-byte global stores)} from the cubin's machine code."""
    run = run_tool([cuobjdump, "--dump-sass", cubin], f"cuobjdump on {cubin.name}")
    accesses, current = {}, None
    for line in run.stdout.splitlines():
        if m := re.search(r"Function : (\S+)", line):
            current = kernel_name(m.group(1))
            accesses[current] = [0, 0]
        elif current and re.search(r"\bLDG\.E[\w.]*\.128\b", line):
            accesses[current][0] += 1
        elif current and re.search(r"\bSTG\.E[\w.]*\.128\b", line):
            accesses[current][1] += 1
    return {k: tuple(v) for k, v in accesses.items()}


def main():
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    nvcc, root = sys.argv[1], pathlib.Path(sys.argv[2])
    include = str(root / "include")
    beside_nvcc = str(pathlib.Path(nvcc).parent)
    ptxas = shutil.which("ptxas", path=beside_nvcc) or shutil.which("ptxas")
    cuobjdump = shutil.which("cuobjdump") or shutil.which("cuobjdump", path=beside_nvcc)
    if not ptxas:
        sys.exit(f"no ptxas beside {nvcc} or on the PATH")
    sources = sorted((root / "kernels").glob("*.cu"))
    problems, rows = [], []
    with tempfile.TemporaryDirectory() as tmp:
        tmp = pathlib.Path(tmp)
        for source in sources:
            ptx, cubin = tmp / (source.stem + ".ptx"), tmp / (source.stem + ".cubin")
            ptx_of(nvcc, source, include, ptx)
            report = resource_report(ptxas, ptx, cubin)
            wide = global_accesses(ptx)
            sass = sass_accesses(cuobjdump, cubin) if cuobjdump else {}
            if not report:
                problems.append(f"{source.name}: ptxas reported no kernel")
            for name, r in sorted(report.items()):
                loads, stores = wide.get(name, (0, 0))
                sass_loads, sass_stores = sass.get(name, (0, 0))
                rows.append((source.name, name, r, loads, stores, f"{sass_loads}/{sass_stores}" if cuobjdump else "-"))
                if r["spill_stores"] or r["spill_loads"]:
                    problems.append(f"{name} spills ({r['spill_stores']} B stored, {r['spill_loads']} B loaded)")
                if r["stack"] > STACK_ALLOWED.get(name, 0):
                    problems.append(f"{name} has a {r['stack']}-byte stack frame "
                                    f"(allowed {STACK_ALLOWED.get(name, 0)})")
                if name in VECTORISED and (loads == 0 or stores == 0):
                    problems.append(f"{name} has no 16-byte global access in its PTX ({loads} loads, {stores} stores)")
                if name in VECTORISED and cuobjdump and (sass_loads == 0 or sass_stores == 0):
                    problems.append(f"{name} has no 16-byte global access in its SASS ({sass_loads} LDG.E.128, "
                                    f"{sass_stores} STG.E.128)")
    print(f"{'file':<16} {'kernel':<26} {'registers':>9} {'stack B':>8} {'spills B':>9} {'smem B':>7} "
          f"{'PTX 16-B ld/st':>14} {'SASS 16-B ld/st':>15}")
    for file, name, r, loads, stores, sass_pair in rows:
        print(f"{file:<16} {name:<26} {r['registers']:>9} {r['stack']:>8} {r['spill_stores'] + r['spill_loads']:>9} "
              f"{r['smem']:>7} {f'{loads}/{stores}':>14} {sass_pair:>15}")
    print(f"{len(rows)} kernels in {len(sources)} files (sm_90); machine code "
          + (f"read by {cuobjdump}" if cuobjdump else "not read (no cuobjdump)"))
    for p in problems:
        print(f"FAIL: {p}")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
