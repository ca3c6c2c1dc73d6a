"""The background writer's budget on a paid backend (proxy mode): the estimate before a run,
the spend ledger's rows after it, and how `tandem proxy` decides a backend is paid."""

from __future__ import annotations

import argparse
import json
import os
import stat

import pytest

from engine.profiles import ProfileError
from server.cli.proxy import is_paid, writer_setup
from server.idle.writer_budget import (
    WRITER_CLIENT,
    RequestUsage,
    WriterBudget,
    WriterPolicy,
)

DAY = 86_400.0


class Clock:
    def __init__(self, at: float = 1_790_000_000.0) -> None:
        self.at = at

    def __call__(self) -> float:
        return self.at


def budget(tmp_path, clock=None, **limits) -> WriterBudget:
    policy = WriterPolicy(price_in=1.0, price_out=4.0, backend="https://api.example|m",
                          **limits)
    return WriterBudget(policy, tmp_path / "cognition" / "spend.jsonl", clock or Clock())


def test_a_run_is_estimated_at_every_prompt_and_every_output_cap(tmp_path):
    spend = budget(tmp_path, daily_usd=0.01)
    # 2 prompts of 2,000 tokens at 1 USD/M (0.004) + 2 x 512 tokens at 4 USD/M (0.0041)
    assert spend.refusal([2_000, 2_000], 512) is None
    refused = spend.refusal([3_000, 3_000], 512)
    assert refused is not None and "daily 0.01 USD" in refused


def test_a_prompt_over_the_cap_is_refused_whatever_it_costs(tmp_path):
    spend = budget(tmp_path, max_prompt_tokens=1_000, daily_usd=100.0)
    assert "over its cap of 1000" in spend.refusal([10, 1_001], 16)


def test_each_request_is_one_ledger_row_of_the_writer_client_with_counts_only(tmp_path):
    spend = budget(tmp_path)
    cost = spend.charge("run1", [RequestUsage(1_000, 900, 1), RequestUsage(1_100, 1_000, 50)])
    assert cost == pytest.approx((2_100 * 1.0 + 51 * 4.0) / 1e6)
    rows = [json.loads(line) for line in spend.path.read_text().splitlines()]
    assert [r["client"] for r in rows] == [WRITER_CLIENT, WRITER_CLIENT]
    assert [(r["prompt_tokens"], r["cached_tokens"], r["completion_tokens"]) for r in rows] \
        == [(1_000, 900, 1), (1_100, 1_000, 50)]
    assert set(rows[0]) == {"at", "day", "client", "run", "backend", "prompt_tokens",
                            "cached_tokens", "completion_tokens", "usd"}
    assert stat.S_IMODE(os.stat(spend.path).st_mode) == 0o600
    assert spend.spent_today == pytest.approx(cost) and spend.runs_today == 1


def test_the_runs_of_a_day_are_capped_and_a_new_day_starts_afresh(tmp_path):
    clock = Clock()
    spend = budget(tmp_path, clock, runs_per_day=2)
    spend.charge("a", [RequestUsage(10, 0, 1)])
    spend.charge("b", [RequestUsage(10, 0, 1)])
    assert "2 runs for today are spent" in spend.refusal([10], 16)
    clock.at += DAY
    assert spend.refusal([10], 16) is None and spend.runs_today == 0


def test_a_restart_keeps_the_days_spend_and_skips_a_torn_line(tmp_path):
    clock = Clock()
    first = budget(tmp_path, clock, daily_usd=0.01)
    first.charge("a", [RequestUsage(8_000, 0, 0)])  # 0.008 USD
    with first.path.open("a") as torn:
        torn.write('{"day": "')
    again = budget(tmp_path, clock, daily_usd=0.01)
    assert again.spent_today == pytest.approx(0.008) and again.runs_today == 1
    assert again.refusal([1_000], 512) is not None  # 0.008 + 0.001 + 0.002 > 0.01


def proxy_args(backend: str, writer: str = "auto", paid: bool | None = None,
               price: str | None = None) -> argparse.Namespace:
    return argparse.Namespace(backend=backend, writer=writer, paid=paid, price=price,
                              model="m", writer_daily_usd=0.25, writer_runs_per_day=48,
                              writer_max_prompt=32_000)


@pytest.mark.parametrize("backend,key,paid", [
    ("http://127.0.0.1:8001", "k", False),
    ("http://localhost:8001", "k", False),
    ("http://192.168.1.20:8000", "k", False),
    ("http://gpu-box.lan:8000", "k", False),
    ("https://api.example.com", None, False),  # no key: nobody bills it
    ("https://api.example.com", "k", True),
    ("http://8.8.8.8:80", "k", True),
])
def test_a_backend_is_paid_when_it_takes_a_key_away_from_this_network(backend, key, paid):
    assert is_paid(backend, key, None) is paid


def test_the_operator_says_paid_or_free_over_the_guess():
    assert is_paid("http://127.0.0.1:8001", None, True) is True
    assert is_paid("https://api.example.com", "k", False) is False


def test_auto_is_on_for_a_free_backend_and_off_for_a_paid_one():
    mode, policy = writer_setup(proxy_args("http://127.0.0.1:8001"), None)
    assert mode == "on" and policy is not None and not policy.paid
    assert writer_setup(proxy_args("https://api.example.com"), "k") == ("off", None)


def test_a_free_backends_writer_is_not_limited_but_its_requests_are_written_down(tmp_path):
    _, policy = writer_setup(proxy_args("http://127.0.0.1:8001"), None)
    spend = WriterBudget(policy, tmp_path / "spend.jsonl", Clock())
    for run in range(60):  # past a paid backend's 48 runs a day
        assert spend.refusal([100_000], 512) is None
        spend.charge(f"run{run}", [RequestUsage(100_000, 0, 10)])
    rows = [json.loads(line) for line in spend.path.read_text().splitlines()]
    assert len(rows) == 60 and {r["usd"] for r in rows} == {0.0}


def test_on_a_paid_backend_the_jobs_run_only_when_asked():
    from engine.profiles import load_profile
    from server.cli.proxy import jobs_off

    assert load_profile("chat").memory.jobs_mode == "on"
    assert jobs_off(load_profile("chat")).memory.jobs_mode == "off"


def test_a_writer_on_a_paid_backend_without_a_price_is_refused_with_the_fix_named():
    with pytest.raises(ProfileError, match="--price IN,OUT"):
        writer_setup(proxy_args("https://api.example.com", writer="on"), "k")


def test_a_writer_on_a_paid_backend_gets_its_budget():
    mode, policy = writer_setup(proxy_args("https://api.example.com", writer="shadow",
                                           price="0.15,0.60"), "k")
    assert mode == "shadow"
    assert (policy.price_in, policy.price_out, policy.daily_usd) == (0.15, 0.60, 0.25)


@pytest.mark.parametrize("price", ["0.15", "a,b", "0,0", "-1,2", "nan,1", "inf,1"])
def test_a_bad_price_is_a_clear_error(price):
    with pytest.raises(ProfileError, match="--price"):
        writer_setup(proxy_args("https://api.example.com", writer="on", price=price), "k")
