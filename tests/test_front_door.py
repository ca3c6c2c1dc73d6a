"""A chat turn calls memory flat: `MemoryServices.begin_turn` and `admit_turn` on its way
to the engine, `MemoryServices.record_turn` on its way back (tests/test_turn_crossings.py
counts every crossing of a real request, and that memory never calls the server back).

Held twice: on the source (server/turn/ asks MemoryServices for nothing else of a turn's
work) and on the real app (a chat request, a streamed one with tools, a Messages and a
Responses request each make exactly one call of each)."""

from __future__ import annotations

import ast
from pathlib import Path

from tests.inprocess import InProcessApp

REPO = Path(__file__).resolve().parents[1]

# What server/turn/ may ask of MemoryServices, and why. A turn's own memory work is the three
# calls; the rest is not a turn's way through memory.
TURN_CALLS = {"begin_turn", "admit_turn", "record_turn"}
NOT_A_TURN = {
    "settings": "who a request is for (request_user), read before memory's part begins",
    "derived_session": "the conversation's id when the client names none, found with who "
                       "the request is for, before memory's part begins (its answers as "
                       "the ledger knows them, with their status lines or without)",
    "metrics": "the server's own /metrics object, kept beside memory: the turn counts the "
               "hidden parts its layout added (fit.count_hidden)",
    "store": "the answer's own acts while it runs: a <tandem_memory> block the model "
             "writes (answering/memblock.py) and the engine tools it calls",
    "leases": "replicas: the user's lease taken ahead, in a worker thread, for the blocks "
              "the model writes while it answers (answering/generate.py)",
    "layers": "the engine tool memory_read, which reads layer files too, while the answer "
              "runs; and the continuous conversation's layers and history: the messages "
              "it sends through the chat turn, and its turn appended once recorded",
}
# ... and in server/turn/continuous.py alone: the continuous conversation's own history.
CONTINUOUS = {
    "on_change": "the continuous conversation's history turn written: the index syncs",
    "show_answer": "the continuous conversation's replayed answers made known to the "
                   "render (the shown answers are memory's own: MemoryServices._shown)",
    "answers_shown": "the render of conversation_prefix_ids, the prewarm's prefix, takes "
                     "the replayed answers back to what the model wrote",
    "shared_context": "conversation_prefix_ids: the prewarm's prefix of the continuous "
                      "conversation, idle-time work, not a turn",
}
# The conductor functions behind the calls: the turn never calls them itself.
BEHIND_THE_DOOR = {"choose_hidden", "note_miss", "record_injections", "injections_to_record",
                   "carry_out", "recognise", "session_after_answer"}


def _asked(tree: ast.AST, fields_elsewhere: frozenset[str] = frozenset()) -> set[str]:
    """What a module takes of MemoryServices: `x.attr` where x is a parameter annotated
    with it (in that function), `self.x.attr` where x is a field annotated with it or set
    from such a parameter (in that class), and `y.f.attr` where f is a field of another
    class annotated with it (`fields_elsewhere`: `answer.services.leases`)."""
    asked: set[str] = {n.attr for n in ast.walk(tree) if isinstance(n, ast.Attribute)
                       and isinstance(n.value, ast.Attribute)
                       and n.value.attr in fields_elsewhere}
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            params = {a.arg for a in (*node.args.posonlyargs, *node.args.args,
                                      *node.args.kwonlyargs) if _is_services(a.annotation)}
            asked |= {n.attr for n in ast.walk(node) if isinstance(n, ast.Attribute)
                      and isinstance(n.value, ast.Name) and n.value.id in params}
        elif isinstance(node, ast.ClassDef):
            fields = {n.target.id for n in node.body if isinstance(n, ast.AnnAssign)
                      and isinstance(n.target, ast.Name) and _is_services(n.annotation)}
            for method in node.body:
                if isinstance(method, ast.FunctionDef | ast.AsyncFunctionDef):
                    params = {a.arg for a in method.args.args if _is_services(a.annotation)}
                    fields |= {t.attr for n in ast.walk(method) if isinstance(n, ast.Assign)
                               and isinstance(n.value, ast.Name) and n.value.id in params
                               for t in n.targets if isinstance(t, ast.Attribute)}
            asked |= {n.attr for n in ast.walk(node) if isinstance(n, ast.Attribute)
                      and isinstance(n.value, ast.Attribute) and n.value.attr in fields
                      and isinstance(n.value.value, ast.Name) and n.value.value.id == "self"}
    return asked


def _is_services(annotation: ast.AST | None) -> bool:
    """MemoryServices, or the interface the server annotates it with (MemoryDoor)."""
    return annotation is not None and any(
        name in ast.unparse(annotation) for name in ("MemoryServices", "MemoryDoor"))


def _services_fields(trees: list[ast.AST]) -> frozenset[str]:
    """The names of class fields annotated MemoryServices or MemoryDoor (Answer's
    `services`)."""
    return frozenset(n.target.id for tree in trees for c in ast.walk(tree)
                     if isinstance(c, ast.ClassDef) for n in c.body
                     if isinstance(n, ast.AnnAssign) and isinstance(n.target, ast.Name)
                     and _is_services(n.annotation))


def test_the_turn_asks_memory_for_a_turn_through_its_three_calls_only():
    """Every server/turn module asks MemoryServices only for the turn's calls and the
    services that are not a turn's way through memory (NOT_A_TURN and, for the continuous
    conversation, CONTINUOUS say why each), and imports none of the decisions behind the
    two calls. (Red on the code before them: the turn asked the ledger, the notes shown,
    the metrics, the cache salt, the leases, the prewarm, the prefetch's queue and the
    writer's triggers, and imported choose_hidden, note_miss, carry_out and the rest.)"""
    asked_wrongly, imported = {}, {}
    trees = {path: ast.parse(path.read_text())
             for path in sorted((REPO / "server" / "turn").rglob("*.py"))}
    fields = _services_fields(list(trees.values()))
    assert fields, "Answer keeps the services as a field"
    for path, tree in trees.items():
        allowed = TURN_CALLS | set(NOT_A_TURN)
        if path.name == "continuous.py":
            allowed |= set(CONTINUOUS)
        extra = _asked(tree, fields) - allowed
        if extra:
            asked_wrongly[str(path.relative_to(REPO))] = sorted(extra)
        taken = {alias.name for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)
                 and (node.module or "").startswith("conductor.") for alias in node.names}
        if taken & BEHIND_THE_DOOR:
            imported[str(path.relative_to(REPO))] = sorted(taken & BEHIND_THE_DOOR)
    assert asked_wrongly == {}
    assert imported == {}


def test_the_rule_sees_a_turn_asking_memory_another_way():
    """The check above is no blind one: a module that asks the ledger or the triggers, by
    parameter, field or attribute set in __init__, is seen; a MemoryContext named alike
    is not taken for the services."""
    tree = ast.parse(
        "def f(services: MemoryServices, memory: MemoryContext):\n"
        "    services.ledger.find(memory.user)\n"
        "class A:\n    services: MemoryServices\n"
        "    def g(self):\n        self.services.shown.remember()\n"
        "class B:\n    def __init__(self, memory: MemoryServices):\n"
        "        self.memory = memory\n"
        "    def h(self):\n        self.memory.triggers.turn_done()\n"
        "def k(answer: Answer):\n    answer.services.prewarm.seen()\n")
    assert _asked(tree, _services_fields([tree])) == {"ledger", "shown", "triggers",
                                                      "prewarm"}


TOOLS = [{"type": "function", "function": {
    "name": "read_file", "description": "Read a file",
    "parameters": {"type": "object", "properties": {"path": {"type": "string"}}}}}]


def test_each_kind_of_turn_calls_memory_once_down_and_once_up(served, tmp_path, monkeypatch):
    """A chat request, a streamed one with tools, a Messages and a Responses request:
    each begins and admits its turn once before the engine and records it once after."""
    app = InProcessApp(served, tmp_path)
    calls: list[str] = []
    for name in sorted(TURN_CALLS):
        method = getattr(app.memory, name)

        def counted(*args, _method=method, _name=name, **kwargs):
            calls.append(_name)
            return _method(*args, **kwargs)
        monkeypatch.setattr(app.memory, name, counted)

    def turn(method: str, path: str, body: dict, stream: bool = False) -> list[str]:
        calls.clear()
        response = app.request(method, path, json=body)
        assert response.status_code == 200, response.text
        if stream:
            assert response.text.rstrip().endswith(("data: [DONE]", "}")), response.text
        return list(calls)

    user = [{"role": "user", "content": "what does the build script do?"}]
    once = ["begin_turn", "admit_turn", "record_turn"]
    assert turn("POST", "/v1/chat/completions", {
        "model": "tiny", "messages": user, "script": "It builds."}) == once
    assert turn("POST", "/v1/chat/completions", {
        "model": "tiny", "messages": user, "tools": TOOLS, "stream": True,
        "script": '<tool_call>\n{"name": "read_file", "arguments": {"path": "b.sh"}}'
                  "\n</tool_call>"}, stream=True) == once
    assert turn("POST", "/v1/messages", {
        "model": "tiny", "max_tokens": 64, "messages": user, "script": "It builds."}) == once
    assert turn("POST", "/v1/responses", {
        "model": "tiny", "input": "what does the build script do?",
        "script": "It builds."}) == once
    assert app.memory.records("tester")  # the calls did what they stand for


def test_the_hiding_decision_copies_no_note_to_match_when_no_index_is_shown(tmp_path,
                                                                            monkeypatch):
    """Without an index in the shared context (the default `notes_shown`), the hiding
    decision takes the ids of the notes a message may match (`NoteReads.ids`, kept with
    the scan) instead of a copy of each (`store.list`, which copied and sorted every note
    on every decision): only the session's own notes, which its tail lists, are listed.
    The matched note is the same. (Red before: a list of the user's notes each turn.)"""
    from conductor.memory.context import MemoryContext
    from conductor.memory.hiding import choose_hidden
    from conductor.memory.services import MemoryServices
    from conductor.memory.turn import TurnFacts

    services = MemoryServices(tmp_path)
    store = services.store("ann")
    for i, (thing, place) in enumerate([("invoices", "billing"), ("tokens", "auth"),
                                        ("thumbnails", "media"), ("webhooks", "hooks")]):
        assert store.add(title=f"{thing.title()} live in {place}", kind="reference",
                         body=f"The {thing} service runs on port 80{i}0.", scope="user").note
    lag = store.add(title="Kafka lag alert", kind="reference", scope="user",
                    body="The kafka consumer lag alert fires at 5000 messages.").note
    listed: list[dict] = []
    real_list = store.list

    def list_spy(**filters):
        listed.append(filters)
        return real_list(**filters)
    monkeypatch.setattr(store, "list", list_spy)
    memory = MemoryContext(user="ann", session="s1", project=None, mode="on", header=None,
                           has_user_message=True)
    facts = TurnFacts("why does the kafka consumer lag alert fire", False, memory)
    hidden = choose_hidden(services, memory, None, facts, lambda text: len(text.split()))
    assert [f.get("scope") for f in listed] == ["session"]
    assert [t.note_ids for t in hidden.tails if t.kind == "notes"] == [(lag.id,)]


def test_a_memory_command_for_another_replicas_user_is_a_409_from_inside_the_call(
        served, tmp_path):
    """The command is carried out inside `admit_turn`; where another replica holds the
    user's lease it is still the whole request's retryable 409, naming the writer, and
    nothing is written (the in-memory lease service; the replicas lane runs etcd)."""
    from conductor.memory.lease import LeaseKeeper, MemoryLeases

    app = InProcessApp(served, tmp_path)
    leases = MemoryLeases()
    LeaseKeeper(leases, "replica-a").token("tester")  # replica a is tester's writer
    app.memory.leases = LeaseKeeper(leases, "replica-b")
    response = app.request("POST", "/v1/chat/completions", json={
        "model": "tiny", "script": "Noted.",
        "messages": [{"role": "user", "content": "remember that deploys run on fridays"}]})
    assert response.status_code == 409, response.text
    assert response.json()["error"]["code"] == "lease_busy"
    assert response.headers["X-Tandem-Writer"] == "replica-a"
    assert int(response.headers["Retry-After"]) >= 1
    assert app.memory.store("tester").list() == []
