"""A task for the workers' own tests, registered on the workers' real app (`celery worker --include` this
module): it notes each start and end in a file, and sleeps in between, like a long step."""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

from surveillance_pipeline.orchestration.celery_worker_app import app

NOTE_AND_SLEEP = "surveillance_tests.note_and_sleep"


@app.task(name=NOTE_AND_SLEEP, bind=True)
def note_and_sleep(self: Any, notes: str, label: str, seconds: float) -> str:
    with Path(notes).open("a") as file:
        file.write(f"{time.time()} {label} start {self.request.hostname} {os.getpid()}\n")
    time.sleep(seconds)
    with Path(notes).open("a") as file:
        file.write(f"{time.time()} {label} end {self.request.hostname} {os.getpid()}\n")
    return str(self.request.hostname)
