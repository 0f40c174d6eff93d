"""The scaling sweep: its plan and checks, speed-up and efficiency from run folders, the
statement of what limits scaling, and (slow) a real two-run sweep from the CLI."""

import json
import subprocess
import sys

import pytest
from test_compare import write_run

from distcore import compareplots, sweep
from distcore.config import DistcoreError

REPO = sweep.jobs.REPO_ROOT


def test_plan_points_batches_and_flags():
    plan = sweep.Sweep(replicas=(1, 2, 4), workers=(1, 2), max_steps=40)
    assert plan.points() == [(1, 1), (2, 1), (4, 1), (2, 2)]
    assert [plan.batch(r) for r in (1, 2, 4)] == [64, 128, 256]  # 64 per replica
    assert sweep.Sweep(replicas=(1, 2), global_batch=96).batch(2) == 96
    args = plan.args(4, 1)
    assert args[:2] == ["--replicas", "4"] and "--devices" not in args
    assert "--replicas" not in plan.args(2, 2) and args[args.index("--max-steps") + 1] == "40"
    assert sweep.run_name("s", 2, 1) == "s-r2" and sweep.run_name("s", 2, 2) == "s-r2-w2"


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"replicas": (1, 1)}, "twice"),
        ({"replicas": (0,)}, "replicas"),
        ({"replicas": (1,), "global_batch": 64, "per_replica_batch": 32}, "not both"),
        ({"max_steps": 0}, "max steps"),
        ({"name": "../x"}, "sweep name"),
        ({"target_accuracy": 1.5}, "target accuracy"),
    ],
)
def test_bad_plans_are_refused(kwargs, match):
    with pytest.raises(DistcoreError, match=match):
        sweep.Sweep(**kwargs)
    with pytest.raises(DistcoreError, match="empty"):
        sweep.int_list("", "replicas", 8)


def test_speedup_efficiency_and_time_to_target(tmp_path):
    write_run(tmp_path, "s-r1", replicas=1, accuracy=0.72)
    write_run(tmp_path, "s-r2", replicas=2, batch=128, accuracy=0.6)
    out = sweep.result(tmp_path, ["s-r1", "s-r2", "s-r4"], target=0.7)  # s-r4 not run yet
    one, two = out["entries"]
    assert (one["speedup"], one["efficiency"]) == (1.0, 1.0)
    assert two["examples_per_sec"] == 2000.0 and two["speedup"] == 2.0 and two["efficiency"] == 1.0
    assert one["time_to_target_seconds"] == 10.0 and two["time_to_target_seconds"] is None
    assert "logical CPU devices" in out["limit"] and "share this machine" in out["limit"]
    fig = compareplots.scaling_figure(out)
    assert [t.name for t in fig.data] == ["ideal (linear)", "one process"]
    assert list(fig.data[0].y) == [1000.0, 2000.0]


def test_gpu_runs_say_so():
    entry = {"replicas": 2, "workers": 1, "gpu": True}
    assert "its own GPU" in sweep.scaling_limit([entry])
    cpu = sweep.scaling_limit([{**entry, "gpu": False}, {"replicas": 2, "workers": 2, "gpu": False}], cores=2)
    assert "2 core(s)" in cpu and "loopback" in cpu


def test_a_second_sweep_in_the_same_second_gets_the_next_free_name(tmp_path):
    plan = sweep.Sweep(replicas=(1, 2))
    sweep.runs.write_json_atomic(tmp_path / f"sweep-1{sweep.SUFFIX}", {"state": "finished"})
    (tmp_path / "sweep-1-2-r1").mkdir()  # a run of that name: taken too
    assert sweep.free_name(tmp_path, plan, stamp="sweep-1") == "sweep-1-3"
    with pytest.raises(DistcoreError, match="a sweep or run named 'sweep-1' exists already: name the sweep"):
        sweep.free_name(tmp_path, sweep.Sweep(replicas=(1, 2), name="sweep-1"))
    assert "all 1 share" not in sweep.scaling_limit([{"replicas": 1, "workers": 1, "gpu": False}], cores=2)


def test_a_second_sweep_is_refused_while_one_runs(tmp_path):
    sweep.runs.write_json_atomic(tmp_path / f"busy{sweep.SUFFIX}", {"state": "running", "pid": sweep.os.getpid()})
    assert sweep.running(tmp_path) == "busy"
    with pytest.raises(DistcoreError, match="still running"):
        sweep.start(tmp_path, sweep.Sweep(replicas=(1, 2)), max_jobs=2)


def test_a_sweep_of_one_device_set_is_refused_and_the_default_batch_is_named():
    with pytest.raises(DistcoreError, match=r"one device set \(1 replica\(s\)\) has nothing to compare"):
        sweep.Sweep(replicas=(1,))
    with pytest.raises(DistcoreError, match="nothing to compare"):
        sweep.Sweep(replicas=(2,), workers=(1,))
    assert sweep.Sweep(replicas=(2,), workers=(2,)).points() == [(2, 1), (2, 2)]  # 2 replicas, then 2 workers
    weak = sweep.Sweep(replicas=(1, 2))
    assert weak.per_replica_batch == 64 and [weak.batch(r) for r in (1, 2)] == [64, 128]
    assert sweep.Sweep(replicas=(1, 2), global_batch=96).per_replica_batch is None


@pytest.mark.slow
def test_cli_sweep_of_one_and_two_replicas(tmp_path):
    """`distcore sweep --replicas 1,2 --json`, tiny: both entries measured, with an efficiency."""
    cmd = [
        sys.executable,
        "-m",
        "distcore",
        "sweep",
        "--replicas",
        "1,2",
        "--max-steps",
        "12",
        "--steps-per-loop",
        "4",
        "--train-examples",
        "1024",
        "--test-examples",
        "256",
        "--name",
        "tiny",
        "--runs-dir",
        str(tmp_path),
        "--json",
    ]
    out = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    record = json.loads(out.stdout.strip().splitlines()[-1])
    assert record["state"] == "finished" and [e["run"] for e in record["entries"]] == ["tiny-r1", "tiny-r2"]
    for e in record["entries"]:
        assert e["examples_per_sec"] > 0 and e["efficiency"] > 0 and e["state"] == "finished"
    assert json.loads((tmp_path / "tiny.sweep.json").read_text())["state"] == "finished"
    assert (tmp_path / "tiny-r2" / "system.jsonl").is_file()
