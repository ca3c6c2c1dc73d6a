"""`tandem bench` is the bench's own subcommand, found through its ``tandem.cli`` entry point
(bench/cli.py), and says so clearly when that entry point is not installed. No engine."""

from __future__ import annotations

import json
from importlib.metadata import entry_points

from server.cli import plugins
from server.cli.main import build_parser, main


def test_tandem_bench_comes_from_the_bench_entry_point_and_runs_as_before(tmp_path, capsys):
    points = {p.name: p.value for p in entry_points(group="tandem.cli")}
    assert points.get("bench") == "bench.cli:register"
    args = build_parser().parse_args(["bench", "--ledger", "--quick", "--out", str(tmp_path)])
    assert (args.command, args.ledger, args.quick, args.clients, args.rounds) == (
        "bench", True, True, "32,128", 5)
    # a real run of the one bench that needs no engine, through `tandem`'s own main
    assert main(["bench", "--ledger", "--quick", "--out", str(tmp_path)]) == 0
    assert json.loads((tmp_path / "results.json").read_text())["misses"] == 0
    capsys.readouterr()
    # the bench's own checks of its flags still answer as the CLI's errors
    assert main(["bench", "--facts", "facts.jsonl"]) == 2
    assert "--facts goes with --quality" in capsys.readouterr().err
    assert main(["bench", "--clients", "4"]) == 2
    assert "--clients and --against-vllm go with --load" in capsys.readouterr().err


def test_without_its_entry_point_tandem_bench_says_it_is_not_installed(monkeypatch, capsys,
                                                                       tmp_path):
    # an install made before the entry point was declared: the group holds nothing
    monkeypatch.setattr(plugins, "entry_points", lambda group: [])
    parser = build_parser()
    assert "bench" in parser.format_help()
    # the engine-free bench first: a CLI that still ran the bench itself fails fast here
    for argv in (["bench", "--ledger", "--quick", "--out", str(tmp_path)], ["bench"],
                 ["bench", "--help"]):
        assert main(argv) == 2
        err = capsys.readouterr().err
        assert "`tandem bench` is not installed" in err, argv
        assert "'tandem.cli'" in err and "pip install -e ." in err, argv
