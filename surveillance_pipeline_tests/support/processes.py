"""What processes a process has started, from Linux's /proc (whatever started them)."""

import os
from pathlib import Path


def child_pids() -> set[int]:
    """This process's children, live or not yet reaped."""
    found = set()
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue  # ended while listed
        # The parent pid is the second field after the command, which is in parentheses.
        if int(stat[stat.rindex(")") + 2 :].split()[1]) == os.getpid():
            found.add(int(entry))
    return found
