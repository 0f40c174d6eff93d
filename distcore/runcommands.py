"""The `sweep` and `runs` commands of the CLI: a scaling sweep, and listing, renaming and
deleting runs and their notes by name. cli.py adds their parsers (add_parsers) and calls
cmd_sweep and cmd_runs. No TensorFlow in this process."""

from __future__ import annotations

import json
import sys

from . import manage, runs, settings, sweep
from .config import DistcoreError, check_float, check_int


def add_parsers(sub) -> None:
    p = sub.add_parser("sweep", help="train one configuration on several device sets in turn: speed-up, efficiency")
    p.add_argument("--replicas", default="1,2", help="comma-separated replica counts of one process (default 1,2)")
    p.add_argument("--workers", default="1", help="comma-separated worker-process counts; 2+ adds a cluster run")
    batch = p.add_mutually_exclusive_group()
    batch.add_argument("--global-batch", help="the same global batch on every device set (strong scaling)")
    batch.add_argument("--per-replica-batch", help="this batch per replica (weak scaling; default 64)")
    p.add_argument("--max-steps", default="40", help="steps of each run (default 40)")
    p.add_argument("--steps-per-loop", default="10", help="steps per loop (default 10)")
    p.add_argument("--train-examples", help="the first N training examples (default all 60,000)")
    p.add_argument("--test-examples", default="2000", help="test examples per test pass (default 2000)")
    p.add_argument("--target-accuracy", help="report the time each run took to reach this test accuracy, e.g. 0.7")
    p.add_argument("--name", help="the sweep's name; its runs are NAME-r1, NAME-r2, ... (default sweep-DATE-TIME)")
    p.add_argument("--runs-dir", help="the runs folder (default DISTCORE_RUNS_DIR, else ./runs)")
    p.add_argument("--json", action="store_true", help="print one JSON object")

    p = sub.add_parser("runs", help="list, rename or delete runs of the runs folder, or set a run's note")
    p.add_argument("action", nargs="?", default="list", choices=("list", "rename", "delete", "notes"))
    p.add_argument("names", nargs="*", help="rename: RUN NEW-NAME; delete: RUN; notes: RUN [TEXT]")
    p.add_argument("--runs-dir", help="the runs folder (default DISTCORE_RUNS_DIR, else ./runs)")
    p.add_argument("--json", action="store_true", help="print JSON")


def max_jobs() -> int:
    return check_int("DISTCORE_MAX_JOBS", settings.get("DISTCORE_MAX_JOBS"), low=1)


def cmd_sweep(args) -> int:
    from .bench import stops_as_ctrl_c  # a SIGTERM stops the run in training, as Ctrl-C does

    plan = sweep.Sweep(
        replicas=sweep.int_list(args.replicas, "--replicas", 16),
        workers=sweep.int_list(args.workers, "--workers", 8),
        global_batch=check_int("--global-batch", args.global_batch) if args.global_batch else None,
        per_replica_batch=check_int("--per-replica-batch", args.per_replica_batch) if args.per_replica_batch else None,
        max_steps=check_int("--max-steps", args.max_steps),
        steps_per_loop=check_int("--steps-per-loop", args.steps_per_loop),
        **({"train_examples": check_int("--train-examples", args.train_examples)} if args.train_examples else {}),
        test_examples=check_int("--test-examples", args.test_examples),
        target_accuracy=check_float("--target-accuracy", args.target_accuracy, low=0.0, high=1.0, low_open=True)
        if args.target_accuracy
        else None,
        name=args.name,
    )
    log = (lambda m: None) if args.json else (lambda m: print(m, file=sys.stderr, flush=True))
    with stops_as_ctrl_c():
        record = sweep.run(args.runs_dir or runs.runs_root(), plan, max_jobs(), log=log)
    if args.json:
        print(json.dumps(record), flush=True)
        return 0
    print(f"{'run':<32} {'replicas':>8} {'workers':>7} {'batch':>6} {'examples/s':>11} {'speed-up':>8} {'effic.':>7}")
    for e in record["entries"]:
        print(
            f"{e['run']:<32} {e['replicas'] or '-':>8} {e['workers']:>7} {e['global_batch'] or '-':>6} "
            f"{e['examples_per_sec'] or '-':>11} {e['speedup'] or '-':>8} {e['efficiency'] or '-':>7}"
        )
    print(record["limit"])
    return 0


def cmd_runs(args) -> int:
    root = runs.existing_root(args.runs_dir)
    action, names = args.action, args.names
    wanted = {"list": (0, 0), "rename": (2, 2), "delete": (1, 1), "notes": (1, 2)}[action]
    if not wanted[0] <= len(names) <= wanted[1]:
        usage = {
            "list": "runs list",
            "rename": "runs rename RUN NEW-NAME",
            "delete": "runs delete RUN",
            "notes": "runs notes RUN [TEXT]",
        }[action]
        raise DistcoreError(f"usage: distcore {usage}")
    if action == "list":
        from . import compare  # plotly, for this command only

        rows = compare.table(root)
        if args.json:
            print(json.dumps(rows), flush=True)
            return 0
        for r in rows:
            acc = f"{r['test_accuracy']:.4f}" if r["test_accuracy"] is not None else "-"
            print(
                f"{r['name']:<32} {r['status']:<9} {r['replicas'] or '-':>3} replicas  "
                f"batch {r['global_batch'] or '-':>5}  {r['steps']:>6} steps  acc {acc}  {r['notes'][:40]}"
            )
        return 0
    if action == "rename":
        out = manage.rename_run(root, names[0], names[1])
    elif action == "delete":
        out = manage.delete_run(root, names[0])
    elif len(names) == 1:
        out = {"run": names[0], "notes": manage.read_notes(manage.run_folder(root, names[0]))}
    else:
        out = manage.write_notes(root, names[0], names[1])
    print(json.dumps(out) if args.json else " ".join(f"{k}: {v}" for k, v in out.items()), flush=True)
    return 0
