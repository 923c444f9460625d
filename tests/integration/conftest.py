"""Fixtures shared by the integration modules."""

from __future__ import annotations

from tests.integration.test_approvals import approvals_engine, queued

__all__ = ["approvals_engine", "queued"]
