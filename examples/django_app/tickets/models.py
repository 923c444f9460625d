from __future__ import annotations

from django.db import models


class Ticket(models.Model):
    title = models.CharField(max_length=200)
    # Filled in once the request's transaction has committed and the run exists.
    run_id = models.CharField(max_length=36, blank=True, default="")
    created_at = models.DateTimeField(auto_now_add=True)

    def __str__(self) -> str:
        return self.title
