"""The layout's rules, checked on the source: no import circle, each package imports only
the packages below it, no package folder past 15 modules, no module past 400 lines.
(ARCHITECTURE.md draws the same arrows.)"""

from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

from engine.backend import EngineBackend

REPO = Path(__file__).resolve().parents[1]
PACKAGES = ("engine", "kernels", "conductor", "server", "bench")
MAX_MODULES = 15
MAX_LINES = 400

# Which top-level parts a part may never import: the arrows point down only.
FORBIDDEN = {
    "engine": ("conductor", "server", "bench"),
    "kernels": ("engine", "conductor", "server", "bench"),
    "conductor": ("engine", "server", "bench", "kernels"),
    # `tandem bench` is the bench's own entry point (bench/cli.py): nothing in the server,
    # the CLI included, imports the bench
    "server": ("bench",),
    # past the engine seam: engine.backend.EngineBackend, never the vLLM engine itself
    "server.http": ("server.access", "server.turn", "server.routes", "server.idle",
                    "server.cli", "server.mcp",
                    "server.app", "engine.engine"),
    "server.access": ("server.turn", "server.routes", "server.idle", "server.cli",
                      "server.mcp", "server.app", "engine.engine"),
    "server.turn": ("server.routes", "server.idle", "server.cli", "server.app",
                    "server.mcp", "engine.engine"),
    "server.idle": ("server.routes", "server.cli", "server.app", "engine.engine",
                          "server.mcp"),
    "server.routes": ("server.cli", "server.app", "server.mcp", "engine.engine"),
    # the memory tools over MCP: beside the routes, calling what they call, never them
    "server.mcp": ("server.routes", "server.cli", "server.app", "engine.engine"),
    "server.app": ("server.cli",),
    "bench": ("server.cli",),
}
# The packages inside conductor, lowest first: each imports only the ones before it (and
# its own modules). A new package takes its place here (ARCHITECTURE.md states the same).
CONDUCTOR_ORDER = ("storage", "layers", "ledger", "search", "notes", "hidden", "writing",
                   "cognition", "memory")


def source_modules() -> dict[str, Path]:
    modules = {}
    for package in PACKAGES:
        for path in (REPO / package).rglob("*.py"):
            parts = path.relative_to(REPO).with_suffix("").parts
            name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
            modules[name] = path
    return modules


def _type_checking_only(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def imports_of(path: Path, modules: dict[str, Path], types: bool = False) -> set[str]:
    """The project modules `path` imports at run time, in functions too (an import
    inside a function is still an arrow; `if TYPE_CHECKING:` ones only with `types`)."""
    found: set[str] = set()

    def resolve(name: str) -> str | None:
        while name:
            if name in modules:
                return name
            name = name.rpartition(".")[0]
        return None

    def visit(node: ast.AST) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.If) and _type_checking_only(child) and not types:
                continue
            if isinstance(child, ast.Import):
                for alias in child.names:
                    target = resolve(alias.name)
                    if target:
                        found.add(target)
            elif isinstance(child, ast.ImportFrom) and child.module and not child.level:
                for alias in child.names:
                    target = resolve(f"{child.module}.{alias.name}")
                    if target:
                        found.add(target)
            visit(child)

    visit(ast.parse(path.read_text()))
    return found


def import_graph(types: bool = False) -> dict[str, set[str]]:
    """Each module's imports: at run time, or with `types` the type-only ones too."""
    modules = source_modules()
    return {name: imports_of(path, modules, types) - {name} for name, path in modules.items()}


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected groups of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def connect(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for target in sorted(graph.get(node, ())):
            if target not in index:
                connect(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            group = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                group.append(member)
                if member == node:
                    break
            if len(group) > 1:
                found.append(sorted(group))

    for node in sorted(graph):
        if node not in index:
            connect(node)
    return found


def _within(module: str, part: str) -> bool:
    return module == part or module.startswith(part + ".")


def test_circles_are_found_by_the_walker():
    assert circles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert circles({"a": {"b"}, "b": set()}) == []


def test_no_module_imports_itself_back_through_others():
    assert circles(import_graph()) == []


def test_no_module_imports_itself_back_even_for_its_types():
    """A circle of type-only imports is a circle of meaning all the same (the turn's data
    and the hiding decision naming each other, the decision naming the services that
    ask it): each part's types sit below the parts that use them."""
    assert circles(import_graph(types=True)) == []


def test_each_part_imports_only_the_parts_below_it():
    wrong = sorted(
        f"{module} -> {target}"
        for module, targets in import_graph().items()
        for part, banned in FORBIDDEN.items() if _within(module, part)
        for target in targets if any(_within(target, b) for b in banned)
    )
    assert wrong == []


def _conductor_package(module: str) -> str | None:
    parts = module.split(".")
    return parts[1] if parts[0] == "conductor" and len(parts) > 1 else None


def test_conductors_packages_import_only_the_ones_below_them():
    packages = {p.name for p in (REPO / "conductor").iterdir() if (p / "__init__.py").exists()}
    assert packages - set(CONDUCTOR_ORDER) == set()  # each package has its place
    rank = {name: i for i, name in enumerate(CONDUCTOR_ORDER)}
    upward = sorted(
        f"{module} -> {target}"
        for module, targets in import_graph().items() if (low := _conductor_package(module))
        for target in targets
        if (high := _conductor_package(target)) and high != low and rank[high] > rank[low]
    )
    assert upward == []


def test_no_package_folder_holds_more_than_fifteen_modules_of_its_own():
    counts: dict[str, int] = defaultdict(int)
    for path in source_modules().values():
        if path.name not in ("__init__.py", "__main__.py"):
            counts[str(path.parent.relative_to(REPO))] += 1
    assert {folder: n for folder, n in counts.items() if n > MAX_MODULES} == {}


def test_every_module_is_under_four_hundred_lines():
    paths = [*source_modules().values(), *(REPO / "tests").rglob("*.py"),
             *(REPO / "scripts").rglob("*.py")]
    long = {str(p.relative_to(REPO)): n for p in paths
            if (n := len(p.read_text().splitlines())) >= MAX_LINES}
    assert long == {}


def test_the_vllm_engine_stands_behind_the_seam(engine):
    """The server past the seam asks only what EngineBackend declares; today's engine has
    all of it (another backend, proxy mode's, must too)."""
    assert isinstance(engine, EngineBackend)


def test_the_server_asks_memory_through_its_front_door_only():
    """server/ imports conductor.memory (MemoryServices, the hiding decision, the one list
    of what it may use of the parts below: conductor.memory.types) and nothing deeper in
    conductor/."""
    deeper = sorted(
        f"{module} -> {target}"
        for module, targets in import_graph().items() if _within(module, "server")
        for target in targets
        if _within(target, "conductor") and not _within(target, "conductor.memory")
    )
    assert deeper == []
