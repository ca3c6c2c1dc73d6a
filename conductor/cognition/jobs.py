"""The three cognition jobs, by name."""

from __future__ import annotations

from conductor.cognition import consolidation, extraction, verification
from conductor.cognition.job import JobSpec

JOBS: dict[str, JobSpec] = {spec.name: spec for spec in (
    verification.SPEC, consolidation.SPEC, extraction.SPEC)}
