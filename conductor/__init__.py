"""Tandem's memory as a library: note store, search, journal and background jobs.

Kept import-free on purpose: callers import the submodule they need
(``from conductor.notes import NoteStore``), so importing ``conductor`` stays cheap.
"""
