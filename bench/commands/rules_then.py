"""The command recogniser's rules as they stood at a commit, for a fair leave-one-set-out
(`bench.commands.learned`): the rules of today were tuned on every earlier set, so on
those sets they score 1.000 by construction and say nothing of what a classifier adds.
Each fold instead takes the newest rules not yet tuned on the set it scores, read from
git (`git show COMMIT:conductor/writing/commands.py`, and `command_facts.py` where that
commit has it) and loaded as private modules.
"""

from __future__ import annotations

import subprocess
import sys
import types
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
FACTS_IMPORT = "from conductor.writing.command_facts import"

# Which rules score which set: the newest commit whose rules had not been tuned on it.
# be821e0: the first round's rules with the dev set (tuned on dev from the start: on dev
# they are in-sample, and the bench says so); its rules read test blind (0.813/0.735).
# 52bde4d: the second round's (tuned on dev and test), which read holdout blind
# (0.933/0.892). The fourth set is scored with today's rules, tuned on all three.
FOLD_RULES = {"dev": "be821e0", "test": "be821e0", "holdout": "52bde4d"}
IN_SAMPLE = {"dev"}  # folds whose rules had been tuned on the set they score


def _source(commit: str, path: str) -> str | None:
    done = subprocess.run(["git", "show", f"{commit}:{path}"], cwd=ROOT,
                          capture_output=True, text=True, check=False)
    return done.stdout if done.returncode == 0 else None


def _load(name: str, source: str) -> types.ModuleType:
    module = types.ModuleType(name)
    sys.modules[name] = module  # dataclasses look their module up while the class is made
    exec(compile(source, f"<{name}>", "exec"), module.__dict__)  # noqa: S102 (our own history)
    return module


def rules_at(commit: str) -> Callable[[str], str]:
    """The recogniser at `commit`, as a function from a message to its kind ("none" when
    it is no command)."""
    commands = _source(commit, "conductor/writing/commands.py")
    if commands is None:
        raise SystemExit(f"git cannot show conductor/writing/commands.py at {commit}")
    facts = _source(commit, "conductor/writing/command_facts.py")
    if facts is not None:
        facts_name = f"_rules_{commit}_facts"
        _load(facts_name, facts)
        commands = commands.replace(FACTS_IMPORT, f"from {facts_name} import")
    module = _load(f"_rules_{commit}", commands)

    def kind(message: str) -> str:
        found = module.recognise(message)
        return found.kind if found else "none"
    return kind
