"""The memory note store: every memory feature writes through it. The files are the truth.

One ``NoteStore`` serves one user's tree under a memory root (``$TANDEM_HOME/memory``):

    store = NoteStore(root, "alice")            # clock=... to inject time in tests
    other = store.for_user("bob")               # same root, another user's tree

Model side (the inline answer, the background writer, the HTTP route, the dashboard):
``add``, ``update`` and ``archive``, each with a ``source`` and, for ``add``/``update``,
``has_user_message``. The model only writes provisional notes.

User side (dashboard and CLI, ``via=``): ``edit`` (a ratified revision), ``ratify``,
``reject``, ``pin``, ``user_archive``, ``delete``, ``delete_all``.

Reading: ``get``, ``list``, ``search``; usage: ``record_injection``, ``uses_in_days``;
upkeep: ``regenerate_index`` and the nightly helpers used by ``conductor.cognition.nightly``.

Every write returns a ``WriteResult``. A write that breaks a rule is refused with a
machine-readable ``reason`` (``conductor.notes.rules.Reason``), never raised; an I/O failure is
returned as ``io_error``. Wrong argument types raise. Writes hold a per-user ``flock``, so
threads and processes lose no note; each file is replaced atomically, so a crash leaves
the old note whole. Every write, refusal, injection and nightly run is journaled without
titles or bodies.

Modules: ``store`` (``NoteStore``, put together from ``model_writes``, ``user_writes``,
``reads``, ``usage_counts`` and ``maintenance``, all on ``core``), ``snapshot`` (loading
the files), ``filters`` and ``helpers``; a note's file form (``note_format``), the rules a
write must pass and what it returns (``rules``: ``WriteResult``; ``secrets``), the
same-fact check (``dedupe``); the BM25 index over notes is
``conductor.search.notes_bm25``.
"""

from conductor.notes.filters import STATES
from conductor.notes.helpers import USER_VIAS
from conductor.notes.maintenance import TEMP_FILE_AGE
from conductor.notes.rules import WriteResult
from conductor.notes.store import NoteStore

__all__ = ["STATES", "TEMP_FILE_AGE", "USER_VIAS", "NoteStore", "WriteResult"]
