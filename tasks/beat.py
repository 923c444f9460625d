"""Beat's scheduler: Celery's persistent one, which also creates the folder its
schedule file goes in (by default ``$RUNWRIGHT_HOME``, which only the local
stack would otherwise have made), so beat starts in a fresh directory."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from celery.beat import PersistentScheduler


class Scheduler(PersistentScheduler):  # type: ignore[misc]
    def setup_schedule(self) -> Any:
        Path(self.schedule_filename).parent.mkdir(parents=True, exist_ok=True)
        return super().setup_schedule()
