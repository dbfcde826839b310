"""make run (or any command) in a process group of its own, its group's RSS sampled until it exits, and
make run's own table read back: what the whole-run and refresh sections time."""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess  # noqa: S404  # make run and dagster are run as the user runs them
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from surveillance_pipeline.core.settings import PROJECT_ROOT

RSS_CAP_GB = 8.0
POLL_SECONDS = 0.2
# make run's table: "  <asset> <loaded> <skipped> <rows> <seconds|->  <reasons>"
TABLE_LINE = re.compile(r"^\s+([a-z_]+)\s+(\d+)\s+(\d+)\s+(\d+)\s+([\d.]+|-)\s")
RUNS_LINE = re.compile(r"^(\d+) runs \(.*\): (\w+) in ([\d.]+) s")


@dataclass
class GroupRun:
    """A process and its group from start to exit: wall seconds, peak summed and single RSS (kB)."""

    seconds: float
    returncode: int
    peak_group_kb: int = 0
    peak_single_kb: int = 0
    peak_processes: int = 0
    stdout: str = ""
    stderr_tail: str = ""
    assets: dict[str, dict[str, Any]] = field(default_factory=dict)
    reported_seconds: float | None = None
    # (epoch seconds, largest single RSS in kB) at each poll, to tell which step a peak came in.
    rss_samples: list[tuple[float, int]] = field(default_factory=list)
    started_at: float = 0.0
    peak_single_mb_by_step: dict[str, float] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        return {
            "seconds": round(self.seconds, 3),
            "returncode": self.returncode,
            "reported_seconds": self.reported_seconds,
            "peak_group_mb": round(self.peak_group_kb / 1024, 1),
            "peak_single_mb": round(self.peak_single_kb / 1024, 1),
            "peak_processes": self.peak_processes,
            "assets": self.assets,
            "peak_single_mb_by_step": self.peak_single_mb_by_step,
            "error": self.stderr_tail if self.returncode else None,
            "stdout": self.stdout.splitlines(),
        }


def group_rss_kb(pgid: int) -> tuple[int, int, int]:
    """(summed RSS, largest single RSS, process count) of the processes in group ``pgid``, from /proc."""
    total = largest = count = 0
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        with contextlib.suppress(OSError, ValueError, IndexError):
            # /proc/<pid>/stat: "pid (comm) state ppid pgrp ..."; comm may hold spaces, hence the rsplit.
            fields = Path(entry.path, "stat").read_text(encoding="ascii", errors="replace")
            if int(fields.rsplit(")", 1)[1].split()[2]) != pgid:
                continue
            for line in Path(entry.path, "status").read_text(encoding="ascii").splitlines():
                if line.startswith("VmRSS:"):
                    rss = int(line.split()[1])
                    total, largest, count = total + rss, max(largest, rss), count + 1
                    break
    return total, largest, count


def parse_table(stdout: str) -> tuple[float | None, dict[str, dict[str, Any]]]:
    """make run's reported total and its per-asset lines: loaded, skipped, rows, seconds."""
    reported = None
    assets: dict[str, dict[str, Any]] = {}
    for line in stdout.splitlines():
        if match := RUNS_LINE.match(line):
            reported = float(match.group(3))
        elif (match := TABLE_LINE.match(line)) and match.group(1) != "asset":
            name, loaded, skipped, rows, seconds = match.groups()
            assets[name] = {
                "loaded": int(loaded),
                "skipped": int(skipped),
                "rows": int(rows),
                "seconds": None if seconds == "-" else float(seconds),
            }
    return reported, assets


def run_group(argv: list[str], environment: dict[str, str], rss_cap_kb: int) -> GroupRun:
    """``argv`` in a session (and process group) of its own, its group's RSS sampled until it exits."""
    started = time.perf_counter()
    started_at = time.time()
    process = subprocess.Popen(  # noqa: S603  # fixed argv, no shell
        argv,
        env={**os.environ, **environment},
        cwd=PROJECT_ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    peak = single = count = 0
    samples: list[tuple[float, int]] = []
    with contextlib.ExitStack() as stack:
        # Drained in threads: a long run's stderr would fill the pipe and block it.
        import concurrent.futures

        pool = stack.enter_context(concurrent.futures.ThreadPoolExecutor(2))
        assert process.stdout is not None and process.stderr is not None  # noqa: S101
        out = pool.submit(process.stdout.read)
        err = pool.submit(process.stderr.read)
        while process.poll() is None:
            total, largest, processes = group_rss_kb(process.pid)
            peak, single, count = max(peak, total), max(single, largest), max(count, processes)
            samples.append((time.time(), largest))
            if total > rss_cap_kb:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(process.pid, signal.SIGKILL)
            time.sleep(POLL_SECONDS)
        seconds = time.perf_counter() - started
        stdout, stderr = out.result(), err.result()
    reported, assets = parse_table(stdout)
    tail = [line for line in stderr.splitlines() if line.strip()]
    return GroupRun(
        seconds=seconds,
        returncode=process.returncode,
        peak_group_kb=peak,
        peak_single_kb=single,
        peak_processes=count,
        stdout=stdout,
        stderr_tail=tail[-1] if tail else "",
        assets=assets,
        reported_seconds=reported,
        rss_samples=samples,
        started_at=started_at,
    )
