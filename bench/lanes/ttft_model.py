"""What a later turn's TTFT is made of, fitted over one run's turns: a fixed cost, a cost
per prefilled token and a cost per token of the prompt (the cached ones are read by
every new token's attention). With it, the floor a prefetch cannot go below: a turn that
prefills no more than memory off does, over memory on's longer prompt."""

from __future__ import annotations

from bench.lanes.threaded_summary import LATER_FROM_TURN
from bench.report import mean_of

FITTED_MODES = ("off", "shadow", "on", "prefetch", "hinted")  # naive: no cache, apart


def fit_ttft(turns: list[dict]) -> dict[str, float] | None:
    """Least squares of the engine's TTFT on (1, prefilled tokens, prompt tokens) over
    the later turns of the cached modes; None with too few turns to fit."""
    import numpy as np

    rows = [t for t in turns if t["turn"] >= LATER_FROM_TURN and t["mode"] in FITTED_MODES
            and t.get("engine_ttft_s") is not None]
    if len(rows) < 6:
        return None
    x = np.array([[1.0, t["prefilled_tokens"], t["prompt_tokens"]] for t in rows])
    y = np.array([t["engine_ttft_s"] for t in rows])
    coef, *_ = np.linalg.lstsq(x, y, rcond=None)
    spread = float(((y - y.mean()) ** 2).sum())
    r2 = 1.0 - float(((y - x @ coef) ** 2).sum()) / spread if spread else 0.0
    return {"fixed_s": float(coef[0]), "per_prefilled_token_s": float(coef[1]),
            "per_prompt_token_s": float(coef[2]), "r2": r2, "turns": len(rows)}


def predicted(model: dict[str, float], prefilled: float, prompt: float) -> float:
    return (model["fixed_s"] + model["per_prefilled_token_s"] * prefilled
            + model["per_prompt_token_s"] * prompt)


def prefetch_floor(turns: list[dict], model: dict[str, float] | None,
                   mode: str = "hinted") -> float | None:
    """`mode`'s TTFT over off's as the fit predicts it had every note been prefetched:
    each later turn prefilling what off's same turn did, over `mode`'s own prompt."""
    if model is None:
        return None
    by_turn = {(t["mode"], t["turn"]): t for t in turns if t["turn"] >= LATER_FROM_TURN}
    pairs = [(t, by_turn.get(("off", turn))) for (m, turn), t in by_turn.items() if m == mode]
    pairs = [(t, off) for t, off in pairs if off is not None]
    if not pairs:
        return None
    floor = mean_of(predicted(model, off["prefilled_tokens"], t["prompt_tokens"])
                    for t, off in pairs)
    base = mean_of(predicted(model, off["prefilled_tokens"], off["prompt_tokens"])
                   for _, off in pairs)
    return floor / base if floor is not None and base else None
