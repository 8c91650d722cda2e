"""The fields both GPU checks' summaries start with (scripts/gpu-check.sh, scripts/gpu-check-multi.sh): the commit
the carried bundle was built from, the date, the device, the NCCL version dptrain loads, and the run's progress log.
Run from the repository root, as the checks are."""
import datetime
import os


def text(path, default=""):
    """A small file's text, stripped; `default` where it is missing (a step that did not get to write it)."""
    return open(path).read().strip() if os.path.exists(path) else default


def machine(out, nccl_version):
    return {
        "commit": text("build-gpu/COMMIT") or "unknown",
        "date": datetime.date.today().isoformat(),
        "device": text(os.path.join(out, "device-name.txt")) or "unknown",
        "nccl_version": nccl_version,
        "progress": text(os.path.join(out, "progress.txt")).splitlines(),
    }
