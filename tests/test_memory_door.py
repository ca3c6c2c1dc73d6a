"""Memory's front door as an interface (conductor/memory/interface.py): `MemoryServices`
satisfies `MemoryDoor` member for member, each method with the same signature, so the
interface the server annotates with cannot drift from what create_app builds."""

from __future__ import annotations

import ast
import inspect
from pathlib import Path

from conductor.memory.interface import MemoryDoor
from conductor.memory.services import MemoryServices
from tests.test_front_door import _asked, _is_services, _services_fields

SERVER = Path(__file__).resolve().parents[1] / "server"


def _members(cls: type) -> dict[str, object]:
    """The protocol's own members: methods, properties and annotated fields."""
    own = {name: value for name, value in vars(cls).items()
           if not name.startswith("_") and (callable(value) or isinstance(value, property))}
    fields = dict.fromkeys(inspect.get_annotations(cls))
    return {**fields, **own}


def _drift(door: type, concrete: type, instance: object) -> dict[str, str]:
    """Each member of `door` that `concrete` lacks or has otherwise, and how."""
    wrong = {}
    for name, member in _members(door).items():
        found = inspect.getattr_static(concrete, name, None)
        if isinstance(member, property):
            if not isinstance(found, property):
                wrong[name] = "not a property"
            elif inspect.signature(found.fget) != inspect.signature(member.fget):
                wrong[name] = str(inspect.signature(found.fget))
        elif callable(member):
            if not inspect.isfunction(found):
                wrong[name] = "not a method"
            elif inspect.signature(found) != inspect.signature(member):
                wrong[name] = f"{inspect.signature(found)} != {inspect.signature(member)}"
        elif not hasattr(instance, name):  # a field: set on every instance
            wrong[name] = "no such field"
        elif (annotation := inspect.get_annotations(concrete).get(name)) is not None \
                and annotation != inspect.get_annotations(door)[name]:
            wrong[name] = f"annotated {annotation}"
    return wrong


def test_memory_services_has_every_member_of_the_door_alike(tmp_path):
    assert {"begin_turn", "admit_turn", "record_turn", "store", "settings"} <= set(
        _members(MemoryDoor))
    assert _drift(MemoryDoor, MemoryServices, MemoryServices(tmp_path)) == {}


def test_the_check_sees_a_door_that_drifted(tmp_path):
    """A method the services take other arguments for, one they lack, a field they lack:
    each is seen by the very check above."""
    class Drifted(MemoryDoor):
        watchers: int

        def store(self, user: str, project: str) -> None: ...

        def no_such_call(self) -> None: ...

    drift = _drift(Drifted, MemoryServices, MemoryServices(tmp_path))
    assert set(drift) == {"store", "no_such_call", "watchers"}, drift


def test_the_server_asks_memory_only_for_what_the_door_names():
    """Every server module (the turn, the routes, the idle-time services, the app) asks
    MemoryServices only for the door's members: none of its parts, private or not, is
    reached around the interface. (Red before the parts went private: the idle time and
    the app reached the ledger, its saver, the writer's triggers, the prefetch's and the
    prewarm's queues directly, some 40 times.)"""
    trees = {path: ast.parse(path.read_text()) for path in sorted(SERVER.rglob("*.py"))}
    fields = _services_fields(list(trees.values())) - {"memory"}
    door = set(_members(MemoryDoor))
    around = {str(path.relative_to(SERVER.parent)): sorted(extra) for path, tree in trees.items()
              if (extra := (_asked(tree, fields) | _state_memory_asked(tree)
                            | _subclass_asked(tree, trees.values())) - door)}
    assert around == {}


def _subclass_asked(tree: ast.AST, trees) -> set[str]:
    """`self.memory.attr` in a subclass of a class whose __init__ keeps the services as
    `self.memory` (the idle-time services: `IdleService`)."""
    holders: dict[str, set[str]] = {}
    for other in trees:
        for c in ast.walk(other):
            if isinstance(c, ast.ClassDef):
                for init in (m for m in c.body if isinstance(m, ast.FunctionDef)
                             and m.name == "__init__"):
                    params = {a.arg for a in init.args.args if _is_services(a.annotation)}
                    kept = {t.attr for n in ast.walk(init) if isinstance(n, ast.Assign)
                            and isinstance(n.value, ast.Name) and n.value.id in params
                            for t in n.targets if isinstance(t, ast.Attribute)}
                    if kept:
                        holders[c.name] = kept
    asked: set[str] = set()
    for c in ast.walk(tree):
        if isinstance(c, ast.ClassDef):
            kept = set().union(*(holders.get(ast.unparse(b), set()) for b in c.bases))
            asked |= {n.attr for n in ast.walk(c) if isinstance(n, ast.Attribute)
                      and isinstance(n.value, ast.Attribute) and n.value.attr in kept
                      and isinstance(n.value.value, ast.Name) and n.value.value.id == "self"}
    return asked


def _state_memory_asked(tree: ast.AST) -> set[str]:
    """`state.memory.attr` and `app.state.tandem.memory.attr`: the app's ServerState's
    memory (not a profile's memory section, nor a turn's MemoryContext)."""
    return {n.attr for n in ast.walk(tree) if isinstance(n, ast.Attribute)
            and isinstance(n.value, ast.Attribute) and n.value.attr == "memory"
            and ast.unparse(n.value.value).endswith(("state", "tandem"))}
