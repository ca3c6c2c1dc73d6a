"""Memory's front door as an interface (conductor/memory/interface.py): `MemoryServices`
satisfies `MemoryDoor` member for member, each method with the same signature, so the
interface the server annotates with cannot drift from what create_app builds."""

from __future__ import annotations

import inspect

from conductor.memory.interface import MemoryDoor
from conductor.memory.services import MemoryServices


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
