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


def test_memory_services_has_every_member_of_the_door_alike(tmp_path):
    services = MemoryServices(tmp_path)
    members = _members(MemoryDoor)
    assert {"begin_turn", "admit_turn", "record_turn", "store", "settings"} <= set(members)
    wrong = {}
    for name, member in members.items():
        concrete = inspect.getattr_static(MemoryServices, name, None)
        if isinstance(member, property):
            if not isinstance(concrete, property):
                wrong[name] = "not a property"
            elif inspect.signature(concrete.fget) != inspect.signature(member.fget):
                wrong[name] = str(inspect.signature(concrete.fget))
        elif callable(member):
            if not inspect.isfunction(concrete):
                wrong[name] = "not a method"
            elif inspect.signature(concrete) != inspect.signature(member):
                wrong[name] = f"{inspect.signature(concrete)} != {inspect.signature(member)}"
        elif not hasattr(services, name):  # a field: set on every instance
            wrong[name] = "no such field"
        elif (annotation := inspect.get_annotations(MemoryServices).get(name)) is not None \
                and annotation != inspect.get_annotations(MemoryDoor)[name]:
            wrong[name] = f"annotated {annotation}"
    assert wrong == {}


def test_the_check_sees_a_door_that_drifted():
    """A method the services lack, or take other arguments for, is seen."""
    class Drifted(MemoryDoor):
        def store(self, user: str, project: str) -> None: ...

    concrete = inspect.getattr_static(MemoryServices, "store")
    assert inspect.signature(concrete) != inspect.signature(vars(Drifted)["store"])
    assert inspect.getattr_static(MemoryServices, "no_such_call", None) is None
