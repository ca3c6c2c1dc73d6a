"""The three cognition jobs, by name."""

from __future__ import annotations

from conductor.background import consolidation, extraction, verification
from conductor.background.job import JobSpec

JOBS: dict[str, JobSpec] = {spec.name: spec for spec in (
    verification.SPEC, consolidation.SPEC, extraction.SPEC)}
