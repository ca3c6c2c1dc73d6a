"""`python -m bench.commands.learned`: would a learned recogniser of memory commands reach
the goal (writes precision >= 0.99, recall >= 0.95 on a set never tuned on) where four
rounds of rules did not (issue 60)? No generative model: a logistic regression over
hashed n-grams, all-MiniLM-L6-v2's sentence vectors, or both, alone and with the rules.

The protocol, fixed before the fourth set is read:

1. Leave-one-set-out on the three earlier sets (dev, test, holdout): train on two, score
   the third, all three ways. Each fold's rules are the newest not yet tuned on the set
   it scores (`rules_then.FOLD_RULES`; on dev they are in-sample, marked so).
2. Methods, each at thresholds on the classifier's probability p of a command kind:
   `classifier` (says its likeliest command when p >= t), `rules or classifier` (the
   rules' command, else the classifier's at t: for recall), `rules vetoed` (the rules'
   command kept only when the classifier gives that kind p >= t: for precision).
3. The choice (`choose`), on the three folds' answers pooled: the highest recall among
   those at precision >= 0.99 and recall >= 0.95 (the goal met); failing that, among
   those whose recall is at least the rules', the highest precision (then recall);
   failing that, the rules.
4. Only then the chosen one, trained on all three sets, scores messages-fourth.tsv once,
   beside today's rules and each other method's own operating point (the same rule within
   that method; the veto's, failing it, the highest F0.5). Nothing is tuned on the fourth
   set after that.

Also measured: each method's cost a message (ms, this machine, one message at a time),
and the learning curve (the chosen classifier's pooled figures against training size).
Writes results.json, summary.md and pr-threshold.png under bench/results/commands/learned/.
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Callable
from datetime import datetime

import numpy as np

from bench.commands.learned_model import Softmax, embed_features
from bench.commands.learned_report import load_average, plot, summary
from bench.commands.rules_then import FOLD_RULES, IN_SAMPLE, rules_at
from bench.commands.run import GOALS, OUT, WRITES, rows
from conductor.writing.command_classifier import KINDS, WEIGHTS, ngram_features
from conductor.writing.commands import recognise

EARLIER = ("dev", "test", "holdout")
FEATURES = ("ngrams", "embedding", "both")
CS = (10.0, 100.0)
METHODS = ("classifier", "rules or classifier", "rules vetoed")
THRESHOLDS = tuple(round(t, 2) for t in (*np.arange(0.1, 0.96, 0.05), 0.97, 0.99))
SIZES = (60, 120, 240, 360)
SEEDS = (0, 1)


def decide(method: str, rule: str, p: np.ndarray, t: float) -> str:
    """One message's kind under `method` from the rules' kind and the classifier's p."""
    best = 1 + int(np.argmax(p[1:]))  # the likeliest command kind (KINDS[0] is none)
    learned = KINDS[best] if p[best] >= t else "none"
    if method == "classifier":
        return learned
    if method == "rules or classifier":
        return rule if rule != "none" else learned
    if method == "rules vetoed":
        return rule if rule != "none" and p[KINDS.index(rule)] >= t else "none"
    return rule


def tally(labels: list[str], said: list[str]) -> dict:
    """Writes precision and recall: right only with the labelled kind (as run.py)."""
    labelled = sum(label in WRITES for label in labels)
    flagged = sum(kind in WRITES for kind in said)
    right = sum(kind in WRITES and kind == label for label, kind in zip(labels, said, strict=True))
    return {"labelled": labelled, "flagged": flagged, "right": right,
            "precision": right / flagged if flagged else 1.0,
            "recall": right / labelled if labelled else 1.0}


def features(name: str, texts: list[str], cache: dict[str, np.ndarray]) -> np.ndarray:
    if name == "ngrams":
        return ngram_features(texts)
    vectors = np.vstack([cache[text] for text in texts])
    return vectors if name == "embedding" else np.hstack([ngram_features(texts), vectors])


def cross_validate(sets: dict[str, list[dict]], cache: dict) -> dict:
    """Every (features, C) fitted three ways; each fold's answers at every method and
    threshold, kept per fold and pooled."""
    folds: dict = {}
    for held in EARLIER:
        train = [row for key in EARLIER if key != held for row in sets[key]]
        rule = rules_at(FOLD_RULES[held])
        folds[held] = {"rules": [rule(r["text"]) for r in sets[held]],
                       "labels": [r["label"] for r in sets[held]], "proba": {}}
        for feature in FEATURES:
            x_train = features(feature, [r["text"] for r in train], cache)
            x_held = features(feature, [r["text"] for r in sets[held]], cache)
            for c in CS:
                model = Softmax(c=c).fit(x_train, [r["label"] for r in train])
                folds[held]["proba"][f"{feature}, C={c:g}"] = model.proba(x_held)
    grid: dict = {"rules": {"per_fold": {}, "pooled": None}}
    pooled_rules = ([], [])
    for held, fold in folds.items():
        grid["rules"]["per_fold"][held] = tally(fold["labels"], fold["rules"])
        pooled_rules[0].extend(fold["labels"])
        pooled_rules[1].extend(fold["rules"])
    grid["rules"]["pooled"] = tally(*pooled_rules)
    for model in folds["dev"]["proba"]:
        for method in METHODS:
            for t in THRESHOLDS:
                per_fold, labels, said = {}, [], []
                for held, fold in folds.items():
                    answers = [decide(method, r, p, t)
                               for r, p in zip(fold["rules"], fold["proba"][model], strict=True)]
                    per_fold[held] = tally(fold["labels"], answers)
                    labels += fold["labels"]
                    said += answers
                grid[f"{method} | {model} | t={t}"] = {
                    "method": method, "model": model, "threshold": t,
                    "per_fold": per_fold, "pooled": tally(labels, said)}
    return grid


def choose(grid: dict, method: str | None = None) -> str:
    """Step 3 of the protocol, on the pooled folds; with `method`, that method's operating
    point (by the same rule, and failing it the highest F0.5: precision weighs more)."""
    rules = grid["rules"]["pooled"]
    entries = [(key, e["pooled"]) for key, e in grid.items()
               if key != "rules" and method in (None, e["method"])]
    goal = [(k, s) for k, s in entries if s["precision"] >= GOALS["precision"]
            and s["recall"] >= GOALS["recall"]]
    if goal:
        return max(goal, key=lambda ks: (ks[1]["recall"], ks[1]["precision"]))[0]
    kept = [(k, s) for k, s in entries if s["recall"] >= rules["recall"]]
    if kept:
        return max(kept, key=lambda ks: (ks[1]["precision"], ks[1]["recall"]))[0]
    if method is None:
        return "rules"
    return max(entries, key=lambda ks: _f_half(ks[1]))[0]


def _f_half(s: dict) -> float:
    p, r = s["precision"], s["recall"]
    return 1.25 * p * r / (0.25 * p + r) if p + r else 0.0


def learning_curve(sets: dict, cache: dict, points: list[dict]) -> dict[str, list[dict]]:
    """Each operating point's pooled figures (all of one model) when each fold trains on
    `size` of its messages (drawn at random, twice)."""
    feature, c = points[0]["model"].split(", C=")
    curves: dict[str, list[dict]] = {p["name"]: [] for p in points}
    for size in (*SIZES, None):
        runs: dict[str, list[dict]] = {p["name"]: [] for p in points}
        for seed in SEEDS if size else (0,):
            labels: list[str] = []
            said: dict[str, list[str]] = {p["name"]: [] for p in points}
            for held in EARLIER:
                train = [row for key in EARLIER if key != held for row in sets[key]]
                if size:
                    pick = np.random.default_rng(seed).permutation(len(train))[:size]
                    train = [train[i] for i in pick]
                model = Softmax(c=float(c)).fit(
                    features(feature, [r["text"] for r in train], cache),
                    [r["label"] for r in train])
                proba = model.proba(features(feature, [r["text"] for r in sets[held]], cache))
                rule = rules_at(FOLD_RULES[held])
                kinds = [rule(r["text"]) for r in sets[held]]
                for point in points:
                    said[point["name"]] += [decide(point["method"], k, p, point["threshold"])
                                            for k, p in zip(kinds, proba, strict=True)]
                labels += [r["label"] for r in sets[held]]
            for point in points:
                runs[point["name"]].append(tally(labels, said[point["name"]]))
        for name, tallies in runs.items():
            curves[name].append({"train_size": size or "all (two sets)",
                                 "precision": float(np.mean([t["precision"] for t in tallies])),
                                 "recall": float(np.mean([t["recall"] for t in tallies]))})
    return curves


def cost_ms(texts: list[str], run: Callable[[str], object]) -> float:
    """Median milliseconds for one message, each run alone (as a request would)."""
    times = []
    for text in texts:
        start = time.perf_counter()
        run(text)
        times.append((time.perf_counter() - start) * 1000)
    return float(np.median(times))


def costs(texts: list[str], models: dict[str, Softmax]) -> dict[str, float]:
    out = {"rules": cost_ms(texts, recognise)}
    for feature, model in models.items():
        def one(text: str, feature: str = feature, model: Softmax = model) -> np.ndarray:
            x = ngram_features([text]) if feature == "ngrams" else embed_features([text])
            if feature == "both":
                x = np.hstack([ngram_features([text]), x])
            return model.proba(x)
        out[f"rules and classifier ({feature})"] = out["rules"] + cost_ms(texts, one)
    return out


def export() -> None:
    """The served fall-back's weights (`memory.command_recogniser: learned`): the chosen
    method of the committed run, which must be the rules with an n-gram classifier (an
    embedding costs far more than a request may spend), fitted on dev, test and holdout."""
    chosen = json.loads((OUT / "learned" / "results.json").read_text())["chosen"]
    method, model, threshold = chosen.split(" | ")
    feature, c = model.split(", C=")
    if method != "rules or classifier" or feature != "ngrams":
        raise SystemExit(f"the chosen method is {chosen}: not the n-gram fall-back served")
    earlier = [r for key in EARLIER for r in rows(f"messages-{key}.tsv")]
    fitted = Softmax(c=float(c)).fit(ngram_features([r["text"] for r in earlier]),
                                     [r["label"] for r in earlier])
    assert fitted.weights is not None and fitted.bias is not None
    partial = WEIGHTS.with_name(WEIGHTS.name + ".partial")
    with partial.open("wb") as handle:  # a handle: np.savez adds .npz to a bare name
        np.savez_compressed(handle, weights=fitted.weights.astype(np.float16),
                            bias=fitted.bias, threshold=float(threshold.split("=")[1]))
    partial.replace(WEIGHTS)  # atomic: a server starting now reads the old or the new
    print(f"wrote {WEIGHTS} ({chosen}, {len(earlier)} messages)")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.commands.learned",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("--folds-only", action="store_true",
                        help="stop after the leave-one-set-out choice: the fourth set unread")
    parser.add_argument("--export", action="store_true",
                        help="fit the committed run's chosen n-gram model on the three "
                        f"earlier sets and write its weights to {WEIGHTS.name}, then stop")
    args = parser.parse_args(argv)
    if args.export:
        export()
        return
    load_start = load_average()
    sets = {key: rows(f"messages-{key}.tsv") for key in (*EARLIER, "fourth")}
    texts = sorted({r["text"] for key in EARLIER for r in sets[key]})
    started = time.perf_counter()
    cache = dict(zip(texts, embed_features(texts), strict=True))
    grid = cross_validate(sets, cache)
    chosen_key = choose(grid)
    chosen = grid[chosen_key]
    print(f"chosen on the folds: {chosen_key}: {chosen['pooled']}")
    if args.folds_only:
        print(summary({"when": "", "seconds": 0, "load_average": {"start": 0, "end": 0},
                       "protocol": [], "fold_rules": FOLD_RULES, "in_sample_folds": [],
                       "grid": grid, "chosen": chosen_key, "fourth": {}, "cost_ms": {},
                       "learning_curve": {}}))
        return
    # step 4: the fourth set, once: the chosen one and each method's own operating point
    points = {key: grid[key] for key in dict.fromkeys(
        [chosen_key, *(choose(grid, method) for method in METHODS)]) if key != "rules"}
    fourth = sets["fourth"]
    labels = [r["label"] for r in fourth]
    today = [(lambda f: f.kind if f else "none")(recognise(r["text"])) for r in fourth]
    scored = {"rules (today's)": tally(labels, today)}
    earlier = [r for key in EARLIER for r in sets[key]]
    fourth_texts = [r["text"] for r in fourth]
    cache.update(zip(fourth_texts, embed_features(fourth_texts), strict=True))
    final: dict[str, Softmax] = {}
    for key, point in points.items():
        if point["model"] not in final:
            feature, c = point["model"].split(", C=")
            final[point["model"]] = Softmax(c=float(c)).fit(
                features(feature, [r["text"] for r in earlier], cache),
                [r["label"] for r in earlier])
        feature = point["model"].split(", C=")[0]
        proba = final[point["model"]].proba(features(feature, fourth_texts, cache))
        said = [decide(point["method"], rule, p, point["threshold"])
                for rule, p in zip(today, proba, strict=True)]
        scored[key] = tally(labels, said)
        scored[key]["false_positives"] = [
            {"text": r["text"], "label": r["label"], "said": k}
            for r, k in zip(fourth, said, strict=True) if k in WRITES and k != r["label"]]
    by_feature = {m.split(", C=")[0]: model for m, model in final.items()}
    for feature in FEATURES:  # every feature's cost, chosen or not (weights do not matter)
        if feature not in by_feature:
            by_feature[feature] = Softmax(c=CS[0], steps=1).fit(
                features(feature, [r["text"] for r in earlier[:50]], cache),
                [r["label"] for r in earlier[:50]])
    # the learning curve of the chosen model: its method and the classifier alone
    model_of = chosen["model"] if chosen_key != "rules" else grid[choose(grid, "classifier")][
        "model"]
    curve_points = [{"name": key, **grid[key]} for key in points
                    if grid[key]["model"] == model_of]
    results = {
        "when": datetime.now().isoformat(timespec="seconds"),
        "load_average": {"start": load_start},
        "protocol": __doc__.split("\n\n")[1:6], "in_sample_folds": sorted(IN_SAMPLE),
        "fold_rules": FOLD_RULES, "goals": GOALS, "grid": grid, "chosen": chosen_key,
        "fourth": scored,
        "learning_curve": learning_curve(sets, cache, curve_points) if curve_points else {},
        "cost_ms": costs([r["text"] for r in sets["dev"][:100]], by_feature),
    }
    results["load_average"]["end"] = load_average()
    results["seconds"] = round(time.perf_counter() - started)
    out = OUT / "learned"
    out.mkdir(parents=True, exist_ok=True)
    (out / "results.json").write_text(json.dumps(results, indent=1, ensure_ascii=False) + "\n")
    plot(grid, chosen_key, out / "pr-threshold.png")
    text = summary(results)
    (out / "summary.md").write_text(text)
    print(text)


if __name__ == "__main__":
    main()
