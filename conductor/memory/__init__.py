"""Memory's front door: the one package the server asks for memory.

The server (HTTP routes, the turn, its idle-time services, the CLIs) imports
`conductor.memory` and its modules, never a deeper part of `conductor/` (tests/test_layout.py
holds the rule), as the rest of vLLM imports its scheduler's interface and the plain data it
hands across. What is here:

* `services.MemoryServices`: the server's memory state, one object (stores per user, the
  ledger, session tokens, the Responses store, private behind its calls; `idle_work`'s
  queues for the idle time), with `MemorySettings`; `interface.MemoryDoor` names what the
  server may call on it;
* `context.MemoryContext`: what memory does for one request, and the session derivation;
* `turn`: the plain data of a chat turn's flat calls: `MemoryServices.begin_turn`
  (`TurnFacts` in, a `TurnMemory` out), `MemoryServices.admit_turn` once the layout
  stands (a `LaidTurn` in, a `TurnPlan` out) and `MemoryServices.record_turn` after the
  answer (`TurnOutcome`);
* `hiding`: the decision of what goes hidden in a prompt and where (`choose_hidden` from
  plain `TurnFacts`, returning a `HiddenContext` of `Tail`s), and what is recorded after,
  behind the two calls;
* `types`: what the server may use of the parts of `conductor/` below (the ledger, the
  notes, the writing, the search, the layers, the jobs, the storage), one list of exactly
  that and nothing more.
"""
