"""What the bench tells: its progress on stderr, the machine it ran on, and each section's one answer.

A section's latest figures live in one place, overwritten by each run of the section:
``<out>/results/<section>.md`` (the table) and ``<section>.json`` (every repetition); plain ``make bench``
writes ``<out>/results.md`` and ``results.json`` over the sections it ran. Each names the commit it
measured, since no file is named after one.
"""

from __future__ import annotations

import contextlib
import json
import os
import platform
import shutil
import subprocess  # noqa: S404  # git, to name the commit measured
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from bench.shared.timing import to_json
from surveillance_pipeline.core.settings import PROJECT_ROOT

RESULTS = "results"
# The bench's own outputs, which a run changes: not a change to the code it measures.
OUTPUTS_PATHSPEC = ":(exclude)bench/results*"


def log(message: str) -> None:
    print(f"[bench {datetime.now(UTC):%H:%M:%S}] {message}", file=sys.stderr, flush=True)


def machine() -> str:
    memory = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    system = f"{platform.system()} {platform.release()}"
    with contextlib.suppress(OSError):
        # platform.freedesktop_os_release() names the distribution (Debian 12) where the kernel would not.
        system = platform.freedesktop_os_release().get("PRETTY_NAME", system)
    return f"{os.cpu_count()} cores, {memory:.0f} GiB, {system}"


def current_commit() -> str:
    """The checkout's commit (short), said to carry uncommitted changes when the work tree does."""
    git = shutil.which("git")
    if git is None:
        return "unknown"
    try:
        head = subprocess.run(  # noqa: S603  # fixed argv, no shell
            [git, "rev-parse", "--short", "HEAD"],
            cwd=PROJECT_ROOT,
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
        changed = subprocess.run(  # noqa: S603  # fixed argv, no shell
            [git, "diff", "--quiet", "HEAD", "--", ".", OUTPUTS_PATHSPEC], cwd=PROJECT_ROOT, check=False
        ).returncode
    except (OSError, subprocess.CalledProcessError):
        return "unknown"
    return f"{head} with uncommitted changes" if changed else head


def section_paths(out: Path, name: str) -> tuple[Path, Path]:
    """A section's table and figures: ``<out>/results/<name>.md`` and ``.json``."""
    folder = out / RESULTS
    return folder / f"{name}.md", folder / f"{name}.json"


def write_section(out: Path, name: str, section: dict[str, Any], table: str) -> str:
    """Overwrite the section's one answer with this run's: its table, and its figures as JSON."""
    return _write(*section_paths(out, name), section, table)


def write_results(out: Path, results: dict[str, Any], table: str) -> str:
    """Plain make bench's answer over every section it ran: ``<out>/results.md`` and ``results.json``."""
    return _write(out / f"{RESULTS}.md", out / f"{RESULTS}.json", results, table)


def _write(markdown: Path, figures: Path, section: dict[str, Any], table: str) -> str:
    markdown.parent.mkdir(parents=True, exist_ok=True)
    commit = section.get("commit") or current_commit()
    figures.write_text(json.dumps(to_json({**section, "commit": commit}), indent=1) + "\n", encoding="utf-8")
    markdown.write_text(f"{table.rstrip()}\n\nMeasured at commit {commit}.\n", encoding="utf-8")
    return table
