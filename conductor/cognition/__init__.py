"""Background turns that keep the memory layers current: the cognition jobs.

Public face:

* `JOBS` (jobs): the three jobs, each with its schedule, state threshold and artifacts;
* `JobController` (controller): which job is due for which user, and why;
* `run_job` (runner): one run, from prompt to artifact to run record;
* `JobBackend` (backend): what runs a job's turn (the engine or an endpoint).

A job answers in JSON constrained by its schema; code renders the artifact, so a file is
never malformed whatever the model writes, and a job may write only its own artifacts.
"""
