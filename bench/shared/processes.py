"""One measured process: timed from start to exit, its peak RSS its own, killed past an RSS cap.

Every process a section measures (the project's and its limit's) runs under LAUNCHER, so the table's
seconds and megabytes are the process's alone; a failure is recorded, with its last error line, never
raised past the section.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import statistics
import subprocess  # noqa: S404  # the measured processes are run as the user runs them
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from surveillance_pipeline.core.settings import PROJECT_ROOT

GB = 1024 * 1024  # ru_maxrss is in kB
# Starts the measured process and reports its wall time, exit status and peak RSS (``os.wait4``). Linux
# charges a child the RSS its parent had when it forked (exec keeps the larger of the two), so the bench,
# with Dagster imported, cannot spawn the measured process itself: this launcher (python -I -S, a few MB)
# does, and the child's ``ru_maxrss`` is its own.
LAUNCHER = """
import json, os, sys, time
report, argv = sys.argv[1], sys.argv[2:]
started = time.perf_counter()
pid = os.posix_spawnp(argv[0], argv, os.environ)
_, status, usage = os.wait4(pid, 0)
seconds = time.perf_counter() - started
code = os.waitstatus_to_exitcode(status)
with open(report, "w", encoding="utf-8") as handle:
    json.dump({"seconds": seconds, "returncode": code, "max_rss_kb": usage.ru_maxrss}, handle)
sys.exit(code if code >= 0 else 128 - code)
"""


@dataclass
class ProcessRun:
    """A child process from start to exit: wall seconds, peak RSS (kB), and why it failed, if it did."""

    name: str
    seconds: float
    max_rss_kb: int
    returncode: int
    error: str | None
    stdout: str

    @property
    def ok(self) -> bool:
        return self.error is None


def current_rss_kb(pid: int) -> int:
    with contextlib.suppress(OSError, ValueError):
        for line in Path(f"/proc/{pid}/status").read_text(encoding="ascii").splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


def child_pid(pid: int) -> int | None:
    """The (one) child of ``pid``: the measured process under its launcher."""
    with contextlib.suppress(OSError, ValueError):
        children = Path(f"/proc/{pid}/task/{pid}/children").read_text(encoding="ascii").split()
        return int(children[0]) if children else None
    return None


ERROR_LINE = re.compile(r"^[A-Za-z_][\w.]*(Error|Exception|Failure|Failed)\b.*")


def last_error_line(path: Path) -> str:
    """The last line of a log that names an error (``SomeError: message``), else its last non-empty line.

    Read from the file's tail only: a failed run's stderr can be long.
    """
    with path.open("rb") as handle:
        handle.seek(max(0, path.stat().st_size - 262_144))
        lines = [line.strip() for line in handle.read().decode("utf-8", "replace").splitlines()]
    lines = [line for line in lines if line]
    return next((line for line in reversed(lines) if ERROR_LINE.match(line)), lines[-1] if lines else "")


def run_measured(
    name: str,
    argv: list[str],
    environment: dict[str, str],
    logs: Path,
    rss_cap_kb: int,
    stdin: Path | None = None,
) -> ProcessRun:
    """Run ``argv`` to its end under LAUNCHER; its stdout and stderr go to ``logs/<name>.out|.err``.

    The launcher times the process from spawn to exit and reads its peak RSS from ``os.wait4``; this
    process watches the RSS meanwhile and kills the process past ``rss_cap_kb``.
    """
    logs.mkdir(parents=True, exist_ok=True)
    out_path, err_path = logs / f"{name}.out", logs / f"{name}.err"
    report = logs / f"{name}.rusage.json"
    report.unlink(missing_ok=True)
    killed: str | None = None
    with (
        out_path.open("wb") as out,
        err_path.open("wb") as err,
        stdin.open("rb") if stdin is not None else open(os.devnull, "rb") as source,  # noqa: SIM115
    ):
        started = time.perf_counter()
        launcher = subprocess.Popen(  # noqa: S603  # fixed argv, no shell
            [sys.executable, "-I", "-S", "-c", LAUNCHER, str(report), *argv],
            env={**os.environ, **environment},
            cwd=PROJECT_ROOT,
            stdin=source,
            stdout=out,
            stderr=err,
        )
        while True:
            try:
                launcher.wait(timeout=0.25)
                break
            except subprocess.TimeoutExpired:
                measured = child_pid(launcher.pid)
                if killed is None and measured is not None and current_rss_kb(measured) > rss_cap_kb:
                    killed = f"killed by the bench: RSS passed the {rss_cap_kb / GB:g} GB cap"
                    with contextlib.suppress(ProcessLookupError):
                        os.kill(measured, signal.SIGKILL)
        wall = time.perf_counter() - started
    try:
        usage = json.loads(report.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        usage = {"seconds": wall, "max_rss_kb": 0, "returncode": launcher.returncode}
    returncode = int(usage["returncode"])
    error = None
    if killed is not None:
        error = killed
    elif returncode < 0:
        error = f"killed by signal {signal.Signals(-returncode).name} ({last_error_line(err_path)})"
    elif returncode != 0:
        error = last_error_line(err_path) or f"exit status {returncode}"
    return ProcessRun(
        name=name,
        seconds=float(usage["seconds"]),
        max_rss_kb=int(usage["max_rss_kb"]),
        returncode=returncode,
        error=error,
        stdout=out_path.read_text(encoding="utf-8", errors="replace"),
    )


def median_run(runs: list[ProcessRun]) -> dict[str, Any]:
    """Several runs of one process: median seconds of the good ones, the largest RSS of all, any error."""
    good = [run.seconds for run in runs if run.ok]
    errors = [run.error for run in runs if run.error]
    return {
        "seconds": round(statistics.median(good), 3) if good else None,
        "runs": [round(run.seconds, 3) for run in runs],
        "max_rss_mb": round(max(run.max_rss_kb for run in runs) / 1024, 1),
        "error": errors[-1] if errors else None,
    }


def failed(error: BaseException) -> dict[str, Any]:
    text = f"{type(error).__name__}: {error}".strip().splitlines()
    return {"seconds": None, "runs": [], "max_rss_mb": None, "error": text[-1] if text else "failed"}
