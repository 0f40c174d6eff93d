"""Verdicts in people's words: each loss-scaling method against the single-device loss, and
evaluations of one checkpoint against its no-strategy result.

Plain values in, plain values out: the app shows them, the API returns them, the tests read them.
No TensorFlow, no Gradio.
"""

from __future__ import annotations

from .plots import count

# Two losses of one batch agree when they differ by less than this fraction of the reference:
# float32 sums over replicas in another order differ in the 7th digit, a wrong divisor by 1/G or more.
LOSS_TOLERANCE = 1e-4
# Two evaluations of one checkpoint agree when their accuracies are equal to 4 decimals (0.01 %):
# the same weights on another device set classify the same images the same way.
ACCURACY_DIGITS = 4

# (key in loss_check's result, the method in a few words), in the order the tab shows them.
LOSS_METHODS = (
    ("distributed", "Distributed step: compute_average_loss, SUM over replicas"),
    ("tutorial_fixed_g", "Tutorial's constant: global_batch_size=G"),
    ("keras_default", "Keras 3's default reduction"),
    ("mistake_reduce_mean", "Mistake: reduce_mean per replica"),
    ("mistake_keras_mean", "Mistake: Keras Mean of scaled losses"),
)


def times(ratio: float) -> str:
    """'2×', '1.5×', '1.33×': at most 3 significant digits, no trailing zeros."""
    return f"{ratio:.3g}×"


def loss_verdict(value, reference: float) -> dict:
    """One method's loss against the single-device loss: {ok, ratio, verdict}. No value: the
    method failed (Keras's default reduction with an empty replica, whose result TensorFlow's
    reduction refuses to add up)."""
    if value is None:
        return {"ok": False, "ratio": None, "verdict": "fails: TensorFlow cannot add up an empty replica's result"}
    if reference == 0:
        ok = value == 0
        return {"ok": ok, "ratio": None, "verdict": "right" if ok else "wrong: the reference is 0"}
    ratio = value / reference
    if abs(ratio - 1) < LOSS_TOLERANCE:
        return {"ok": True, "ratio": ratio, "verdict": "right: equals the single-device loss"}
    if ratio > 1:
        return {"ok": False, "ratio": ratio, "verdict": f"wrong: {times(ratio)} too large"}
    if ratio <= 0:
        return {"ok": False, "ratio": ratio, "verdict": "wrong: 0 or below"}
    return {"ok": False, "ratio": ratio, "verdict": f"wrong: {times(1 / ratio)} too small"}


def loss_verdicts(result: dict) -> list[dict]:
    """Each method of a loss_check result with its loss and verdict: [{key, method, loss, ok,
    ratio, verdict}], the single-device reference first (ok, ratio 1)."""
    reference = result["single_device"]
    rows = [
        {
            "key": "single_device",
            "method": "Single device (reference)",
            "loss": reference,
            "ok": True,
            "ratio": 1.0,
            "verdict": "the reference",
        }
    ]
    for key, method in LOSS_METHODS:
        value = result.get(key)
        rows.append({"key": key, "method": method, "loss": value, **loss_verdict(value, reference)})
    return rows


def loss_headline(result: dict) -> str:
    """One sentence: the batch, how it was cut, and how many methods got it right."""
    verdicts = loss_verdicts(result)[1:]
    wrong = [v["method"] for v in verdicts if not v["ok"]]
    shares = " + ".join(str(n) for n in result.get("per_replica_examples", []))
    partial = " (a partial batch)" if result["examples"] < result["global_batch"] else ""
    batch = f"{result['examples']} examples{partial} cut {shares} over {count(result['replicas'], 'replica')}"
    if not wrong:
        return f"{batch}: every method gives the single-device loss."
    return f"{batch}: {len(wrong)} of {len(verdicts)} methods miss the single-device loss."


NOT_MEASURED = ("step", "examples")  # numbers in an evaluation's result that are not its measures


def measures(result: dict) -> dict:
    """What an evaluation measured, in order: a classifier's accuracy and loss; another task's
    test metrics (the GAN's d_loss and g_loss)."""
    if "accuracy" in result:
        return {k: float(result[k]) for k in ("accuracy", "loss") if k in result}
    return {
        k: float(v)
        for k, v in result.items()
        if isinstance(v, (int, float)) and not isinstance(v, bool) and k not in NOT_MEASURED
    }


def evaluation_row(result: dict, run: str, strategy: str, devices: list[str] | tuple[str, ...]) -> dict:
    """One evaluation as a row of the comparison table (plain values): the classifier's accuracy
    and loss as `accuracy` and `loss`, every measure under `measures`."""
    measured = measures(result)
    return {
        "run": run,
        "checkpoint": result.get("checkpoint"),
        "strategy": strategy,
        "devices": len(devices),
        "device_names": list(devices),
        **{k: measured[k] for k in ("accuracy", "loss") if k in measured},
        "measures": measured,
    }


def compare_evaluations(rows: list[dict]) -> list[dict]:
    """The rows, each with `difference` and `same` against the no-strategy evaluation of the same
    run and checkpoint (None for both when there is none yet). A classifier's: the accuracy's
    difference in percentage points, the same when equal to ACCURACY_DIGITS decimals. Another
    task's: the largest difference of its measures, the same when each is within LOSS_TOLERANCE
    of the no-strategy one, relative, as float32 sums in another order differ."""
    reference = {(r["run"], r["checkpoint"]): r for r in rows if r["strategy"] == "none"}
    out = []
    for r in rows:
        ref = reference.get((r["run"], r["checkpoint"]))
        if ref is None:
            out.append({**r, "difference": None, "same": None})
        elif "accuracy" in r and "accuracy" in ref:
            same = round(r["accuracy"], ACCURACY_DIGITS) == round(ref["accuracy"], ACCURACY_DIGITS)
            out.append({**r, "difference": 0.0 if same else 100 * (r["accuracy"] - ref["accuracy"]), "same": same})
        else:
            mine, theirs = r["measures"], ref["measures"]
            shared = [k for k in mine if k in theirs]
            gaps = [mine[k] - theirs[k] for k in shared]
            same = bool(shared) and all(
                abs(mine[k] - theirs[k]) <= LOSS_TOLERANCE * max(abs(theirs[k]), 1e-12) for k in shared
            )
            out.append({**r, "difference": 0.0 if same else max(gaps, key=abs, default=None), "same": same})
    return out
