"""`python -m distcore bench`: a quick smoke test of the report's shape (not of speed).

Performance is measured by running the benchmark itself; here it runs with a
handful of steps so the whole thing takes about a minute.
"""

import json
import os
import signal
import subprocess
import sys

import pytest

from conftest import ROOT
from distcore import bench, devices


@pytest.mark.slow
def test_bench_json_shape_and_positive_numbers():
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"}
    args = [
        "bench",
        "--replicas",
        "1,2",
        "--steps",
        "4",
        "--repeats",
        "1",
        "--warmup",
        "2",
        "--memory-steps",
        "10",
        "--quick",
        "--json",
    ]
    proc = subprocess.run(
        [sys.executable, "-m", "distcore", *args], cwd=ROOT, capture_output=True, text=True, timeout=240, env=env
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    report = json.loads(proc.stdout.strip().splitlines()[-1])

    assert [row["replicas"] for row in report["results"]] == [1, 2]
    for row in report["results"]:
        assert row["global_batch"] == 64 * row["replicas"]
        for key in ("distcore", "tutorial", "keras_fit", "step_only", "vs_tutorial", "vs_keras_fit", "ceiling_share"):
            assert row[key] > 0, (key, row)
        samples = report["samples"][str(row["replicas"])]
        assert all(len(samples[name]) == 1 and samples[name][0] > 0 for name in bench.MEASURED)
        assert row["step_only_vs_keras_fit"] == round(samples["step_only"][0] / samples["keras_fit"][0], 3)
        # Each contender ran in its own process: distcore with a core share per replica,
        # the tutorial and Keras fit with TensorFlow's default threads.
        threads = {
            name: info["intra_op_threads"] for name, info in report["runs"][str(row["replicas"])]["contenders"].items()
        }
        share = devices.intra_op_threads(row["replicas"])
        assert threads == {
            "distcore": share,
            "step_only": share,
            "tutorial": "TensorFlow default",
            "keras_fit": "TensorFlow default",
        }
        # distcore's own Adam and Conv2D; the tutorial and Keras fit have Keras's, as their users write them.
        kinds = {
            name: (info["optimizer"], info["conv2d"])
            for name, info in report["runs"][str(row["replicas"])]["contenders"].items()
        }
        assert kinds == {
            "distcore": ("FusedAdam", "distcore"),
            "step_only": ("FusedAdam", "distcore"),
            "tutorial": ("Adam", "keras"),
            "keras_fit": ("Adam", "keras"),
        }
    assert report["ceiling"] > 0
    detail = report["ceiling_detail"]
    assert 14.5e6 < detail["flops_per_example"] < 15.0e6  # the tutorial CNN, forward + backward
    assert detail["matmul_flops_per_sec"] > 1e9
    layers = detail["layer_profile"]["layers"]  # each Conv2D and Dense layer, timed alone
    assert [x["input"] for x in layers] == [[28, 28, 1], [13, 13, 32], [1600], [64]]
    assert all(x["ms"] > 0 and x["gflops_per_sec"] > 0 for x in layers)
    bound = 64 / (sum(x["ms"] for x in layers) / 1e3)  # batch 64 in the layers' summed time
    assert abs(detail["layer_profile"]["kernels_examples_per_sec"] - bound) < 0.01 * bound
    assert 0 < report["peak_memory_gib"] < 24
    assert 0 < report["first_step_seconds"] < 120
    # A profile at each replica count, of step_only and of distcore's own loop.
    assert [p["replicas"] for p in report["step_profiles"]] == [1, 2]
    for profile in report["step_profiles"]:
        for name in ("step_only", "distcore"):
            measured = profile[name]
            assert measured["step_ms"] > 0 and measured["traced_step_ms"] > 0
            assert (
                0 < measured["conv_ms_per_step"] < measured["busy_thread_ms_per_step"]
            )  # kernels nest in the threads' work
        ratio = profile["distcore"]["step_ms"] / profile["step_only"]["step_ms"]  # of the rounded step times
        assert abs(profile["distcore_step_vs_step_only"] - ratio) < 0.01
        assert profile["input_alone"]["wall_ms"] > 0 and profile["one_batch"]["step_ms"] > 0
    # Where distcore's step time beyond step_only's goes, per replica count: its parts add up to it.
    assert [item["replicas"] for item in report["overhead"]] == [1, 2]
    for item in report["overhead"]:
        parts = item["python_between_calls_ms"] + item["distributed_iterator_ms"] + item["data_pipeline_ms"]
        assert abs(parts - item["overhead_ms"]) < 0.01
        assert isinstance(item["input_keeps_up"], bool) and item["input_alone_cpu_ms"] > 0
        # The OS's context switches a step, as counted: the iterator's hand-offs are voluntary ones.
        assert set(item["switches"]) == {"step_only", "one_batch", "distcore"}
        assert all(len(pair) == 2 and min(pair) >= 0 for pair in item["switches"].values())
        assert item["iterator_bound"] > 0
    assert report["split"]["steps"] == 64 and 0 < report["split_plan_seconds"] < 60
    assert report["machine"]["cores"] >= 1 and report["machine"]["tensorflow"]
    if "cpu family" in open("/proc/cpuinfo").read():  # a host's move to another CPU shows
        assert "cpu family" in report["machine"]["cpu"] and "model " in report["machine"]["cpu"]
    assert set(report["targets"]) >= {
        "ceiling_share@1",
        "vs_tutorial@2",
        "vs_keras_fit@1",
        "peak_memory_gib",
        "first_step_seconds",
        "split_plan_seconds",
        "share_of_step_only@1",
        "share_of_step_only@2",
    }
    assert all(
        isinstance(check["met"], bool)
        for name, check in report["targets"].items()
        if not name.startswith("ceiling_share")
    )
    # --quick's ceiling is two brief matmuls (52 GFLOP/s against 219 once): its shares are not judged.
    assert all(
        check["met"] is None and "too briefly" in check["note"]
        for name, check in report["targets"].items()
        if name.startswith("ceiling_share")
    )
    # Each speed target stands next to what the same step reached with no loop cost.
    for row in report["results"]:
        r = row["replicas"]
        assert report["targets"][f"ceiling_share@{r}"]["bound"] == row["step_only_ceiling_share"] > 0
        assert report["targets"][f"vs_keras_fit@{r}"]["bound"] == row["step_only_vs_keras_fit"]
        assert report["targets"][f"vs_tutorial@{r}"]["bound"] == row["step_only_vs_tutorial"]
    text = bench.format_report(report)  # the plain-text form renders the same report
    assert "keras_fit" in text and "ceiling" in text and "step_only" in text
    assert "iterator" in text and "data pipeline" in text and "Python between calls" in text


def profile_of(step_only, distcore, one_batch, alone_ms):
    """A made-up worker_profile answer: (step ms, Python ms, CPU ms) of each, the input alone's ms."""

    def timing(t):
        return dict(zip(("step_ms", "python_ms", "cpu_ms", "switches"), t))

    return {
        "replicas": 2,
        "step_only": timing(step_only),
        "distcore": timing(distcore),
        "one_batch": timing(one_batch),
        "input_alone": {"wall_ms": alone_ms, "cpu_ms": 1.2},
    }


@pytest.mark.slow
def test_the_gan_bench_measures_both_loops_and_their_losses():
    """The GAN's bench, tiny (global batch 16, 2 steps): both loops' rates, their ratio, the target,
    and each loop's losses from the same initial weights."""
    args = ["bench", "--task", "gan", "--replicas", "1", "--steps", "2", "--repeats", "1", "--warmup", "1"]
    args += ["--global-batch", "16", "--trend-steps", "4", "--json"]
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"}
    proc = subprocess.run(
        [sys.executable, "-m", "distcore", *args], cwd=ROOT, capture_output=True, text=True, timeout=240, env=env
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    report = json.loads(proc.stdout)
    assert report["task"] == "gan" and report["settings"]["global_batch"] == 16
    (row,) = report["results"]
    assert row["replicas"] == 1 and row["distcore"] > 0 and row["guide"] > 0
    samples = report["samples"]["1"]
    assert row["vs_guide"] == round(samples["distcore"][0] / samples["guide"][0], 3)
    assert row["step_only"] > 0 and row["step_only_vs_guide"] == round(samples["step_only"][0] / samples["guide"][0], 3)
    target = report["targets"]["vs_guide@1"]
    assert (target["value"], target["met"], target["bound"]) == (
        row["vs_guide"],
        row["vs_guide"] >= 1.1,
        row["step_only_vs_guide"],
    )
    contenders = report["runs"]["1"]["contenders"]
    assert (
        contenders["distcore"]["steps_per_loop"] == 20
        and contenders["guide"]["intra_op_threads"] == "TensorFlow default"
    )
    assert contenders["guide"]["optimizer"] == contenders["distcore"]["optimizer"] == "Adam"
    trend = report["trend"]
    assert [w["steps"] for w in trend["windows"]] == ["1-1", "2-2", "3-3", "4-4"]
    for name in ("distcore", "guide"):
        assert len(trend["curves"][name]) == 4
        # The same initial weights: the discriminator starts near chance, d_loss and g_loss near ln 2.
        assert all(0.5 < value < 0.9 for value in trend["first_step"][name].values()), trend["first_step"]
    text = bench.format_gan_report(report)
    assert f"{row['vs_guide']:.3f}x" in text and "steps       1-1: distcore d_loss" in text


def test_flags_of_the_other_task_are_refused(capsys):
    from distcore import cli

    for args, message in (
        (["--task", "gan", "--quick"], "--quick applies only to --task classifier."),
        (["--task", "GAN", "--memory-steps", "5"], "--memory-steps applies only to --task classifier."),
        (["--global-batch", "32"], "--global-batch applies only to --task gan."),
        (["--task", "classifier", "--trend-steps", "0"], "--trend-steps applies only to --task gan."),
        (["--task", "regression"], "--task ('regression') must be classifier or gan."),
    ):
        assert cli.main(["bench", *args, "--json"]) == 2
        assert json.loads(capsys.readouterr()[0])["error"] == message


def test_the_overhead_over_step_only_splits_into_parts_that_add_up():
    """Mechanics of the breakdown, on made-up numbers: 10 ms against 9 ms a step, of which 0.1 ms is
    the loop's Python, 0.3 ms the iterator (fed one cached batch) and the rest fresh data."""
    item = bench.overhead_breakdown(profile_of((9.0, 0.05, 18.0), (10.0, 0.15, 20.5), (9.4, 0.15, 18.6), 1.1))
    assert item["overhead_ms"] == 1.0 and item["overhead_share"] == 0.1
    assert (item["python_between_calls_ms"], item["distributed_iterator_ms"], item["data_pipeline_ms"]) == (
        0.1,
        0.3,
        0.6,
    )
    assert item["largest"] == "data_pipeline" and item["extra_cpu_ms"] == 2.5
    assert item["input_keeps_up"] is True  # 1.1 ms of input a step against a 9 ms step: it is CPU, not waiting
    text = bench.format_overhead(item, 2)
    assert text.split()[:8] == ["2", "distcore", "10.00", "ms", "=", "step_only", "9.00", "+"]
    assert "iterator 0.30, data pipeline 0.60, Python between calls 0.10" in text
    assert "CPU +2.50 ms a step" in text and "costs the CPU it takes from the step" in text
    # The cached-batch loop bounds any loop fed by the same iterator: 9 / 9.4 of step_only's rate.
    assert item["iterator_bound"] == 0.957
    assert "context switches" not in text  # none were counted in these made-up rounds
    counted = bench.overhead_breakdown(
        profile_of((9.0, 0.05, 18.0, [2.0, 0.5]), (10.0, 0.15, 20.5, [26.0, 9.0]), (9.4, 0.15, 18.6, [21.0, 7.5]), 1.1)
    )
    assert counted["switches"] == {"step_only": [2.0, 0.5], "one_batch": [21.0, 7.5], "distcore": [26.0, 9.0]}
    assert (
        "context switches a step (voluntary/involuntary): step_only 2.0/0.5, one_batch 21.0/7.5, distcore 26.0/9.0"
        in bench.format_overhead(counted, 2)
    )
    # An input slower than the step itself: the step waits for it, and the report says so.
    slow = bench.overhead_breakdown(profile_of((2.0, 0.05, 4.0), (3.0, 0.1, 5.0), (2.2, 0.1, 4.3), 2.5))
    assert slow["input_keeps_up"] is False and "the step waits for it" in bench.format_overhead(slow, 1)
    assert item["disturbed"] is False and slow["disturbed"] is False
    # A loop faster than step_only, or a part below 0, is other load at work: the line says so.
    upset = bench.overhead_breakdown(profile_of((16.5, 0.0, 21.0), (15.1, 0.0, 25.0), (19.8, 0.0, 24.2), 0.5))
    assert upset["disturbed"] is True and "DISTURBED" in bench.format_overhead(upset, 2)


def test_the_profile_counts_both_kinds_of_convolution_kernel_and_nothing_else():
    """Event names as tf.profiler recorded them for the CNN's step (TensorFlow 2.21, oneDNN)."""
    scope = "while/body/_1/gradient_tape/while/cnn_1/"
    kernels = [
        scope + "conv2d_1_2/convolution/Conv2DBackpropFilter:_MklNativeConv2DBackpropFilterWithBias",
        scope + "conv2d_1_2/convolution/Conv2DBackpropInput:_MklNativeConv2DBackpropInput",
        "while/body/_1/while/cnn_1/conv2d_1_2/Relu:_MklNativeFusedConv2D",
        "while/body/_1/while/cnn_1/conv2d_1/Relu:_MklNativeFusedDepthwiseConv2dNative",
        scope + "conv2d_1/depthwise/DepthwiseConv2dNativeBackpropFilter:_MklNativeDepthwiseConv2dNativeBackpropFilter",
    ]
    others = [
        scope + "conv2d_1/ReluGrad:ReluGrad",
        scope + "conv2d_1/BiasAdd/BiasAddGrad:BiasAddGrad",
        "while/body/_1/while/cnn_1/conv2d_1/Reshape/ReadVariableOp:ReadVariableOp",
        "ExecutorState::Process",
    ]
    assert [bench.is_conv_kernel(name) for name in kernels + others] == [True] * 5 + [False] * 4


def test_a_target_above_what_step_only_reached_is_out_of_reach():
    """Mechanics of the target check, on made-up numbers."""
    report = {
        "results": [
            {
                "replicas": 2,
                "ceiling_share": 0.6,
                "step_only_ceiling_share": 0.65,
                "vs_tutorial": 1.2,
                "step_only_vs_tutorial": 1.05,  # noise can put step_only below
                "vs_keras_fit": 1.2,
                "step_only_vs_keras_fit": 1.4,
            },
            {
                "replicas": 4,
                "ceiling_share": 0.27,
                "step_only_ceiling_share": 0.23,
                "vs_tutorial": 1.2,
                "step_only_vs_tutorial": 1.3,
                "vs_keras_fit": 1.25,
                "step_only_vs_keras_fit": 1.1,
            },
        ],
        "peak_memory_gib": 0.8,
        "first_step_seconds": 5.0,
        "split_plan_seconds": 0.7,
    }
    for row, (distcore, step_only) in zip(report["results"], ((9000, 10000), (8000, 9800))):
        row.update(distcore=distcore, step_only=step_only, share_of_step_only=round(distcore / step_only, 3))
    report["overhead"] = [{"replicas": 2, "iterator_bound": 0.95}, {"replicas": 4, "iterator_bound": 0.84}]
    disturbed = [{**item, "disturbed": True} for item in report["overhead"]]
    # A breakdown disturbed by other load bounds nothing: the target is judged with no bound.
    assert bench.check_targets({**report, "overhead": disturbed})["share_of_step_only@4"] == {
        "value": 0.816,
        "target": ">= 0.9",
        "met": False,
        "note": "the overhead breakdown was disturbed by other load: no bound",
    }
    targets = bench.check_targets(report)
    assert {key: (check["met"], check["reachable"]) for key, check in targets.items() if "bound" in check} == {
        "ceiling_share@2": (False, False),  # 0.8 wanted; even step_only reached 0.65
        "vs_tutorial@2": (True, True),
        "vs_keras_fit@2": (False, True),  # missed, but step_only shows a loop could get there
        # not "out of reach for any loop" where distcore itself beat step_only (disturbed by other load)
        "ceiling_share@4": (False, None),
        "vs_tutorial@4": (True, True),
        "vs_keras_fit@4": (False, None),
        "share_of_step_only@2": (True, True),  # 0.9 of step_only
        # 0.816 of step_only, where one cached batch through the same iterator reached only 0.84
        "share_of_step_only@4": (False, False),
    }
    lines = bench.format_targets(targets)
    assert (
        "  MISS  share_of_step_only@4: 0.816 (target >= 0.9; distcore fed one cached batch 0.84: "
        "out of reach for any loop fed by the iterator training reads)" in lines
    )
    assert "  MISS  ceiling_share@2: 0.6 (target >= 0.8; step_only 0.65: out of reach for any loop)" in lines
    # No 1-replica row, so no scaling check; with one, 2 replicas on 2 cores are checked, 4 are not.
    assert not any(key.startswith("scaling") for key in targets)
    one = {**report["results"][0], "replicas": 1, "distcore": 7000, "step_only": 7800}
    report.update(results=[one, *report["results"]], machine={"cores": 2})
    scaling = {key: check for key, check in bench.check_targets(report).items() if key.startswith("scaling")}
    assert scaling == {
        "scaling@2": {"value": 1.286, "target": ">= 0.9", "met": True, "bound": 1.282, "reachable": True}
    }
    assert "no bound" in targets["vs_keras_fit@4"]["note"]
    assert targets["peak_memory_gib"] == {"value": 0.8, "target": "< 1.5", "met": True}


def test_bad_replica_list_is_a_user_error():
    proc = subprocess.run(
        [sys.executable, "-m", "distcore", "bench", "--replicas", "1,x", "--json"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 2
    assert "comma-separated" in json.loads(proc.stdout)["error"]


def test_a_replica_count_over_the_limit_names_the_limit(capsys):
    # --replicas 17 is told the limit, not "must be a comma-separated list of counts, e.g. 1,2,4".
    from distcore import cli

    assert cli.main(["bench", "--replicas", "1,17", "--json"]) == 2
    assert json.loads(capsys.readouterr()[0])["error"] == (
        "--replicas ('1,17') must be a comma-separated list of counts from 1 to 16 (the logical CPU devices a "
        "process can have), e.g. 1,2,4."
    )
    assert cli.main(["bench", "--replicas", "1, 1", "--json"]) == 2  # it measured the 1-replica set twice
    assert json.loads(capsys.readouterr()[0])["error"] == (
        "--replicas ('1, 1') lists a count twice: give each once, e.g. 1,2,4."
    )


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGHUP], ids=["SIGTERM", "SIGHUP"])
@pytest.mark.slow
def test_a_stopped_bench_leaves_no_worker_and_no_file_behind(tmp_path, sig):
    # SIGTERM or SIGHUP stops `bench` through its clean-ups: no contender goes on measuring (up to
    # 75 s), none is killed with the bench leaving autograph's files in TMPDIR.
    from conftest import wait_for

    args = ["bench", "--replicas", "1", "--steps", "4", "--repeats", "1", "--warmup", "2", "--quick", "--json"]
    proc = subprocess.Popen(
        [sys.executable, "-m", "distcore", *args],
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "TMPDIR": str(tmp_path)},
    )

    def status(pid):
        try:
            return open(f"/proc/{pid}/status").read()
        except OSError:
            return ""  # gone

    def contenders():
        found = subprocess.run(["pgrep", "-f", "distcore.bench --worker serve"], capture_output=True, text=True)
        return [pid for pid in found.stdout.split() if f"PPid:\t{proc.pid}\n" in status(pid)]

    children = wait_for(
        lambda: len(contenders()) == 4 and list(tmp_path.glob("__autograph_generated_file*")) and contenders(),
        timeout=180,
        poll=0.05,
    )  # all four up, and tracing
    assert children and proc.poll() is None
    proc.send_signal(sig)
    _, stderr = proc.communicate(timeout=90)
    assert proc.returncode == 128 + sig and "Traceback" not in stderr, stderr[-2000:]
    assert stderr.splitlines()[-1] == f"stopped ({sig.name}).", stderr[-2000:]  # (not "Ctrl-C")
    alive = lambda pid: status(pid) and "State:\tZ" not in status(pid)  # noqa: E731 (a zombie is gone)
    assert not any(alive(pid) for pid in children)
    assert sorted(p.name for p in tmp_path.iterdir()) == []


@pytest.mark.slow
def test_a_stop_while_a_one_off_worker_measures_leaves_no_file_behind(tmp_path):
    # A stop while the ceiling worker runs leaves no autograph file of it in TMPDIR (subprocess.run,
    # which kills its child at once, left one 2 times in 4).
    from conftest import wait_for

    args = ["bench", "--replicas", "1", "--steps", "4", "--repeats", "1", "--warmup", "2", "--quick", "--json"]
    proc = subprocess.Popen(
        [sys.executable, "-m", "distcore", *args],
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "TMPDIR": str(tmp_path)},
    )

    def ceiling():
        command = ["pgrep", "-P", str(proc.pid), "-f", "bench --worker ceiling"]
        return subprocess.run(command, capture_output=True, text=True).stdout.split()

    assert wait_for(lambda: ceiling() and list(tmp_path.glob("__autograph_generated_file*")), timeout=180, poll=0.02)
    proc.send_signal(signal.SIGTERM)
    _, stderr = proc.communicate(timeout=90)
    assert proc.returncode == 143 and stderr.splitlines()[-1] == "stopped (SIGTERM).", stderr[-2000:]
    assert sorted(p.name for p in tmp_path.iterdir()) == []
