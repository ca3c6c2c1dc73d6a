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
                            | _subclass_asked(tree, trees.values())
                            | _aliases_asked(tree)) - door)}
    assert around == {}


def test_the_check_sees_memory_asked_through_an_alias_or_by_name():
    """The check above follows the services under another name: a local alias of the
    state's memory (`memory = state.memory`, as the admin routes keep it), a state named
    otherwise (`st`, a ServerState parameter or one taken from `app.state.tandem`), an alias
    of a parameter or field typed MemoryServices/MemoryDoor, an alias of an alias, and a
    getattr with a string constant on any of them. A profile's memory section, a
    MemoryContext (one shadowing an alias too) and a getattr with a computed name are not
    taken for the services."""
    tree = ast.parse(
        "def routes(state):\n"
        "    memory = state.memory\n"
        "    def handler():\n        return memory.ledger.find()\n"
        "    def shadowed(memory: MemoryContext):\n        return memory.user\n"
        "    getattr(state.memory, '_ledger')\n"
        "    state.profile.memory.mode\n"
        "def f(st: ServerState):\n    st.memory.triggers.fire()\n"
        "def g(request):\n    st = request.app.state.tandem\n"
        "    m = st.memory\n    again = m\n    again._saver.save()\n"
        "    getattr(m, 'prewarm', None)\n    getattr(m, name)\n"
        "def h(services: MemoryDoor, memory: MemoryContext):\n"
        "    door = services\n    door.shown.remember(memory.user)\n"
        "class A:\n    services: MemoryServices\n"
        "    def k(self):\n        held = self.services\n        held.prefetch.queue()\n"
        "        getattr(self.services, '_writer')\n")
    assert _aliases_asked(tree) == {"ledger", "_ledger", "triggers", "_saver", "prewarm",
                                    "shown", "prefetch", "_writer"}


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


def _aliases_asked(tree: ast.AST) -> set[str]:
    """What a module takes of the services under another name: `alias.attr` where the
    alias was set from `<state>.memory` (<state> ending in state or tandem, or a name for
    the state: a ServerState parameter, a local set from `...state` or `...tandem`), from a
    parameter or a `self.` field typed MemoryServices/MemoryDoor, or from another alias;
    `<state>.memory.attr` for such a state name; and `getattr(services, "attr")` (hasattr,
    setattr) with a string constant on any of these. Scope by scope, as Python binds names:
    a nested function sees its outer function's aliases unless a parameter shadows them."""
    return _scope_asked(tree, frozenset(), frozenset(), frozenset())


def _own(scope: ast.AST):
    """The nodes of a scope, not those of the functions, lambdas and classes inside it."""
    for child in ast.iter_child_nodes(scope):
        yield child
        if not isinstance(child, _SCOPES):
            yield from _own(child)


_SCOPES = (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)
_BY_NAME = {"getattr", "hasattr", "setattr"}


def _scope_asked(scope: ast.AST, services: frozenset[str], states: frozenset[str],
                 fields: frozenset[str]) -> set[str]:
    """`_aliases_asked` within one scope, given the services' names, the state's names and
    the `self.` fields it inherits; then within each scope nested in it."""
    outer = services, states  # what a class body's methods see: not the body's own names
    services, states = set(services), set(states)
    if isinstance(scope, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda):
        params = [*scope.args.posonlyargs, *scope.args.args, *scope.args.kwonlyargs]
        for a in params:  # a parameter shadows an outer alias of the same name
            services.discard(a.arg)
            states.discard(a.arg)
        services |= {a.arg for a in params if _is_services(a.annotation)}
        states |= {a.arg for a in params if a.annotation is not None
                   and "ServerState" in ast.unparse(a.annotation)}

    def is_state(node: ast.AST) -> bool:
        return (isinstance(node, ast.Name) and node.id in states) or (
            isinstance(node, ast.Name | ast.Attribute)
            and ast.unparse(node).endswith(("state", "tandem")))

    def is_services(node: ast.AST) -> bool:
        if isinstance(node, ast.Name):
            return node.id in services
        return isinstance(node, ast.Attribute) and (
            (node.attr == "memory" and is_state(node.value))
            or (node.attr in fields and isinstance(node.value, ast.Name)
                and node.value.id == "self"))

    own = list(_own(scope))
    bound = [(n.targets[0].id, n.value) for n in own if isinstance(n, ast.Assign)
             and len(n.targets) == 1 and isinstance(n.targets[0], ast.Name)]
    bound += [(n.target.id, n.value) for n in own if isinstance(n, ast.AnnAssign)
              and isinstance(n.target, ast.Name) and n.value is not None]
    services |= {n.target.id for n in own if isinstance(n, ast.AnnAssign)
                 and isinstance(n.target, ast.Name) and _is_services(n.annotation)}
    while True:  # an alias of an alias: until no new name is bound
        found = {name for name, value in bound if is_services(value)} - services
        named = {name for name, value in bound if is_state(value)} - states - found
        if not found and not named:
            break
        services |= found
        states |= named
    asked = {n.attr for n in own if isinstance(n, ast.Attribute) and is_services(n.value)}
    asked |= {n.args[1].value for n in own if isinstance(n, ast.Call)
              and isinstance(n.func, ast.Name) and n.func.id in _BY_NAME
              and len(n.args) >= 2 and is_services(n.args[0])
              and isinstance(n.args[1], ast.Constant) and isinstance(n.args[1].value, str)}
    for inner in (n for n in own if isinstance(n, _SCOPES)):
        if isinstance(inner, ast.ClassDef):  # a class body binds no names its methods see
            kept = frozenset(n.target.id for n in inner.body if isinstance(n, ast.AnnAssign)
                             and isinstance(n.target, ast.Name) and _is_services(n.annotation))
            asked |= _scope_asked(inner, frozenset(services), frozenset(states), kept)
        elif isinstance(scope, ast.ClassDef):
            asked |= _scope_asked(inner, *outer, fields)
        else:
            asked |= _scope_asked(inner, frozenset(services), frozenset(states), fields)
    return asked
