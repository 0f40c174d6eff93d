import json
import subprocess
import sys

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from conftest import ROOT, cpus, training_pieces
from distcore import split
from distcore.config import DistcoreError, SplitConfig


def plan(n, g, r, **kw):
    return split.plan(SplitConfig(examples=n, global_batch=g, devices=cpus(r), **kw))


# The distributed-input guide's three tables, as TensorFlow produces them today.
SEED_TABLES = [
    ((6, 4, 2), [[[0, 1], [2, 3]], [[4], [5]]]),
    ((4, 4, 5), [[[0], [1], [2], [3], []]]),
    ((8, 4, 3), [[[0, 1], [2, 3], []], [[4, 5], [6, 7], []]]),
]


@pytest.mark.parametrize("args,expected", SEED_TABLES)
@pytest.mark.slow
def test_seed_tables(args, expected):
    assert plan(*args)["steps"] == expected


@pytest.mark.slow
def test_notes_call_out_partial_batches_and_empty_replicas():
    notes = " ".join(plan(6, 4, 2)["notes"])
    assert "Step 2 is a partial batch (2 of 4), split 1/1" in notes
    notes = " ".join(plan(4, 4, 5)["notes"])
    assert "replica 4 got nothing" in notes


@pytest.mark.slow
def test_a_replica_empty_in_every_step_is_one_note_not_one_per_step():
    # A global batch of 2 on 4 replicas: replicas 2 and 3 get nothing in each of the 20 steps.
    notes = plan(40, 2, 4)["notes"]
    empty = [n for n in notes if "got nothing" in n]
    assert empty == ["Steps 1–20: replicas 2, 3 got nothing (an empty batch, which still joins the all-reduce)."]
    assert split.empty_replicas([[1, 0], [1, 0], [1, 1], [0, 1], [0, 1], [1, 0]]) == [
        ("steps 1–2", "Replica 1"),
        ("steps 4–5", "Replica 0"),
        ("step 6", "Replica 1"),
    ]


@pytest.mark.slow
def test_fashion_rows_are_the_rows_training_reads_at_each_step(fmnist, tmp_path, monkeypatch):
    from distcore import controller
    from distcore.config import TrainConfig

    result = plan(1000, 64, 2, shuffle_seed=3)
    assert result["steps"][0] == [list(range(32)), list(range(32, 64))]  # positions, as before
    rows = result["rows"]
    assert sorted(i for step in rows for ids in step for i in ids) == list(range(1000))
    assert "row numbers in the order training's epoch 1 reads them (shuffled with seed 3" in " ".join(result["notes"])

    # What a real run reads: the examples each pipeline it builds starts with, as it builds it.
    read, distribute = [], controller.inputs.distribute

    def recording(strategy, make_examples, **kw):
        read.append(np.array([image for image, _ in make_examples().take(64).as_numpy_iterator()]))
        return distribute(strategy, make_examples, **kw)

    monkeypatch.setattr(controller.inputs, "distribute", recording)
    config = TrainConfig(devices=cpus(2), seed=3, train_examples=1000, test_examples=100, max_steps=1)
    controller.Controller(config, tmp_path / "run").run()
    trained = read[-1]  # the test set's pipeline is built first, the epoch's last
    assert (trained == fmnist.train_images[rows[0][0] + rows[0][1]]).all()
    assert not (trained == fmnist.train_images[:64]).all()  # shuffled
    with pytest.raises(DistcoreError, match="Fashion-MNIST training rows"):
        SplitConfig(examples=60001, global_batch=64, devices=cpus(2), shuffle_seed=0)
    with pytest.raises(DistcoreError, match="are for the toy dataset"):
        SplitConfig(examples=400, global_batch=64, devices=cpus(2), shuffle_seed=0, files=2)


@pytest.mark.slow
def test_drop_remainder_drops_the_partial_batch():
    result = plan(6, 4, 2, drop_remainder=True)
    assert result["steps"] == [[[0, 1], [2, 3]]]
    assert any("dropped the last 2" in n for n in result["notes"])


@pytest.mark.slow
def test_function_api_batches_per_replica():
    # The input function batches by 2 (4 / 2 replicas); whole batches go to replicas in turn.
    assert plan(6, 4, 2, api="function")["steps"] == [[[0, 1], [2, 3]], [[4, 5], []]]


@pytest.mark.slow
def test_file_backed_ids_arrive_in_file_order():
    result = plan(12, 4, 2, files=3, policy="file")
    assert [i for step in result["steps"] for ids in step for i in ids] == list(range(12))


def test_function_api_refuses_an_uneven_batch():
    with pytest.raises(DistcoreError, match="divide evenly"):
        plan(8, 4, 3, api="function")


@pytest.mark.slow
def test_64_step_8_replica_plan():
    result = plan(512, 8, 8)
    assert len(result["steps"]) == 64 and all(len(step) == 8 for step in result["steps"])


@pytest.mark.parametrize("kw", [{}, {"files": 3, "policy": "file"}])
@pytest.mark.slow
def test_a_plan_can_leave_its_used_iterator_to_the_caller(kw):
    # The app's planner answers first and drops the iterator afterwards (its teardown can block).
    spent = []
    result = split.plan(SplitConfig(examples=12, global_batch=4, devices=cpus(2), **kw), spent=spent)
    assert result["steps"] == plan(12, 4, 2, **kw)["steps"]
    assert len(spent) == 1 and hasattr(spent[0], "get_next")
    with pytest.raises(StopIteration):
        next(spent[0])  # the plan read it to the end
    spent.clear()
    assert plan(6, 4, 2)["steps"] == SEED_TABLES[0][1]


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(n=st.integers(1, 40), g=st.integers(1, 12), r=st.integers(1, 5), drop=st.booleans())
@pytest.mark.slow
def test_every_id_arrives_once_in_order(n, g, r, drop):
    """Whatever the sizes: each global batch is G consecutive ids, split in order over the replicas."""
    if g > n:
        with pytest.raises(DistcoreError):
            plan(n, g, r)
        return
    result = plan(n, g, r, drop_remainder=drop)
    seen = [i for step in result["steps"] for ids in step for i in ids]
    expected = n - n % g if drop else n
    assert seen == list(range(expected))
    assert all(len(step) == r for step in result["steps"])
    assert all(sum(len(ids) for ids in step) <= g for step in result["steps"])


@pytest.mark.slow
def test_cli_split_json_prints_the_seed_table():
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "distcore",
            "split",
            "--examples",
            "6",
            "--global-batch",
            "4",
            "--replicas",
            "2",
            "--json",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    assert json.loads(out.stdout)["steps"] == [[[0, 1], [2, 3]], [[4], [5]]]


@pytest.mark.parametrize("kw", [{}, {"api": "function"}, {"files": 3, "policy": "file"}])
@pytest.mark.slow
def test_one_replica_gets_every_batch_whole_and_the_notes_say_how(kw):
    one = plan(6, 4, 1, **kw)
    assert one["steps"] == [[[0, 1, 2, 3]], [[4, 5]]]
    assert "PER_REPLICA" in " ".join(one["notes"])
    assert "PER_REPLICA" not in " ".join(plan(6, 4, 2, **kw)["notes"])


@pytest.mark.parametrize("policy,files", [("auto", 0), ("data", 0), ("file", 3), ("off", 0), ("auto", 3)])
@pytest.mark.slow
def test_with_trainings_map_after_the_batch_every_policy_cuts_it_the_same_way(policy, files):
    result = plan(150, 64, 2, policy=policy, files=files)
    assert [len(ids) for ids in result["steps"][-1]] == [11, 11]  # TensorFlow's own split
    note = result["notes"][-1]
    assert "partial step 3 (22 examples) became 11/11" in note and "legacy rebatch" in note
    assert "under every shard policy" in note and "split --no-map" in note


# What training really receives decides what the split shows. Training maps after the batch: OFF
# and FILE cut 1000 examples on 3 replicas 22/22/20 and 14/14/12, no empty replica; a pipeline
# that ends at batch() cuts 22/21/21 with a last step of 22/18/0, "replica 2 got nothing".
@pytest.mark.parametrize("policy", ["off", "file"])
@pytest.mark.slow
def test_split_shows_the_pieces_training_gets(fmnist, tmp_path, monkeypatch, policy):
    from distcore import controller
    from distcore.config import TrainConfig

    received, distribute = [], controller.inputs.distribute

    def recording(strategy, make_examples, **kw):
        dist = distribute(strategy, make_examples, **kw)
        received.append([[len(y) for _, y in step] for step in training_pieces(strategy, dist)])
        return dist

    monkeypatch.setattr(controller.inputs, "distribute", recording)
    config = TrainConfig(devices=cpus(3), train_examples=1000, test_examples=100, max_steps=1, policy=policy)
    controller.Controller(config, tmp_path / "run").run()
    monkeypatch.undo()  # the planner below calls inputs.distribute too
    trained = received[-1]  # the test set's pipeline is built first, the epoch's last
    files = 3 if policy == "file" else 0
    assert split.piece_sizes(plan(1000, 64, 3, policy=policy, files=files)) == trained
    assert trained[0] == [22, 22, 20] and trained[-1] == [14, 14, 12]
    ends_at_batch = plan(1000, 64, 3, policy=policy, files=files, map_after_batch=False)
    assert split.piece_sizes(ends_at_batch)[-1] == [22, 18, 0]  # the same data, the pipeline cut at batch()


# The policy note does not say a policy "changes nothing" in one worker when the plan under it
# shows FILE and OFF cutting the partial batch 22/0 and AUTO and DATA 11/11 (a pipeline that
# ends at batch(), as the guide's examples do).
@pytest.mark.parametrize(
    "policy,files,last,says",
    [
        ("auto", 0, [11, 11], "legacy rebatch"),
        ("data", 0, [11, 11], "legacy rebatch"),
        ("file", 3, [22, 0], "fixed per-replica sizes (32/32)"),
        ("off", 0, [22, 0], "fixed per-replica sizes (32/32)"),
        ("auto", 3, [22, 0], "fixed per-replica sizes (32/32)"),
    ],
)
@pytest.mark.slow
def test_policy_note_says_how_this_plan_cut_the_partial_batch(policy, files, last, says):
    result = plan(150, 64, 2, policy=policy, files=files, map_after_batch=False)
    assert [len(ids) for ids in result["steps"][-1]] == last  # TensorFlow's own split
    note = result["notes"][-1]
    assert f"partial step 3 (22 examples) became {last[0]}/{last[1]}" in note and says in note
    assert "changes nothing" not in note and "still decides" in note


@pytest.mark.parametrize(
    "policy,files,pieces,says",
    [
        ("data", 0, [22, 22, 20], "legacy rebatch"),
        ("off", 0, [22, 21, 21], "fixed per-replica sizes (22/21/21)"),
    ],
)
@pytest.mark.slow
def test_policy_note_on_a_batch_that_does_not_divide(policy, files, pieces, says):
    result = plan(128, 64, 3, policy=policy, files=files, map_after_batch=False)
    assert [[len(ids) for ids in step] for step in result["steps"]] == [pieces, pieces]
    assert f"each full global batch became {'/'.join(map(str, pieces))}" in result["notes"][-1]
    assert says in result["notes"][-1]


@pytest.mark.slow
def test_policy_note_when_both_rebatches_agree():
    assert "changes nothing in this plan" in plan(128, 64, 2, policy="off")["notes"][-1]
    assert split.how_cut([3, 2], []) == split.SAME
    assert split.how_cut([3, 3], [[1, 4]]) == ""  # neither of TensorFlow's patterns: no story


def worker_plan(steps, api="dataset", policy="auto", files=0, global_batch=4, examples=10, drop=False):
    """One worker's plan of a 2-worker cluster, as `split --workers 2` returns it (its steps from real runs)."""
    return {
        "steps": steps,
        "replicas": 2,
        "global_batch": global_batch,
        "policy": policy,
        "api": api,
        "files": files,
        "workers": 2,
        "examples": examples,
        "drop_remainder": drop,
    }


def test_cluster_notes_for_the_function_api_name_the_input_functions_sharding():
    # What `split --workers 2 --examples 10 --global-batch 4 --api function` returns.
    plans = [
        worker_plan([[[0, 2]], [[4, 6]], [[8]]], api="function"),
        worker_plan([[[1, 3]], [[5, 7]], [[9]]], api="function"),
    ]
    notes = " ".join(split.cluster_notes(plans))
    assert "DATA sharding" not in notes and "fell back" not in notes
    assert "does not apply the shard policy" in notes and "every 2nd id" in notes
    assert "not used by distribute_datasets_from_function" in split.policy_note(plans[0])


@pytest.mark.parametrize("policy", ["auto", "file"])
def test_file_sharding_is_not_called_data_when_its_ids_happen_to_fit_each_global_batch(policy):
    # `split --workers 2 --files 4 --examples 10 --global-batch 4` (files 0-1, 2-4, 5-6, 7-9):
    # TensorFlow gave worker 0 files 0 and 2. Every id still lies in its step's window of 4.
    plans = [
        worker_plan([[[0, 1]], [[5, 6]], [[]]], policy=policy, files=4),
        worker_plan([[[2, 3]], [[4, 7]], [[8, 9]]], policy=policy, files=4),
    ]
    notes = " ".join(split.cluster_notes(plans))
    assert "DATA" not in notes and "fell back" not in notes
    assert "FILE sharding (worker 0: file(s) 0, 2; worker 1: file(s) 1, 3)" in notes


def test_data_policy_with_files_is_data_sharding():
    plans = [
        worker_plan([[[0, 1]], [[4, 5]], [[8]]], policy="data", files=4),
        worker_plan([[[2, 3]], [[6, 7]], [[9]]], policy="data", files=4),
    ]
    notes = " ".join(split.cluster_notes(plans))
    assert "that is DATA sharding" in notes and "FILE" not in notes and "fell back" not in notes


def test_worker_policy_note_does_not_claim_the_data_was_divided():
    note = split.policy_note(worker_plan([[[0, 1]]], policy="off", files=2))
    assert "divides the data" not in note and "whether and how" in note


def test_file_sharding_error_asks_for_at_least_as_many_files_as_workers():
    config = SplitConfig(examples=12, global_batch=4, devices=("cpu:0",), policy="file", files=1, workers=2)
    text = split.explain_tf_error(config, ValueError("Could not apply FILE based sharding"))
    assert "at least as many files as workers" in text and "more files than workers" not in text


def test_tensorflows_whole_advice_is_kept_and_off_is_answered():
    # TensorFlow's advice is cut at a sentence's end, not at "... small files such that", and its
    # "DATA or OFF" comes with the note that training refuses OFF across workers.
    said = (
        "Could not apply FILE based sharding: the dataset only has 1 file(s), which is not enough for the "
        "required 2 shards/workers. If you are using datasets with distribution strategy, consider setting "
        "the auto sharding policy to either DATA or OFF using the `experimental_distribute.auto_shard_policy` "
        "option of `tf.data.Options()`. Or, split your input files into a larger number of small files such "
        "that number of files is greater than number of shards/workers."
    )
    config = SplitConfig(examples=12, global_batch=4, devices=("cpu:0",), policy="auto", files=1, workers=2)
    text = split.explain_tf_error(config, ValueError(said))
    assert said in text and "not OFF, which TensorFlow also suggests" in text
    long = "First sentence. " + "x" * 900
    assert split.tf_message(ValueError(long)) == "First sentence."
    assert split.tf_message(ValueError("y" * 900)) == "y" * 799 + "…"


def test_file_sharding_of_the_fashion_rows_is_not_sent_to_source_files_they_refuse():
    # The error does not say "write it to source files (--files F)", which these rows refuse, in
    # the app either, nor show TensorFlow's `{{function_node ...}}` and a goo.gle link.
    config = SplitConfig(examples=60, global_batch=4, devices=("cpu:0",), policy="file", workers=2, shuffle_seed=0)
    err = ValueError(
        "{{function_node __wrapped__AutoShardDataset_device_/job:worker/replica:0/task:0/device:CPU:0}} "
        "Found an unshardable source dataset: goo.gle/debugonly \nname: ..."
    )
    text = split.explain_tf_error(config, err)
    assert text.startswith("TensorFlow refused this plan: ValueError: Found an unshardable source dataset (FILE")
    assert "--files" not in text and "toy ids with at least as many source files as workers" in text
    toy = SplitConfig(examples=60, global_batch=4, devices=("cpu:0",), policy="file", workers=2)
    assert "Source files in the app, --files F in the CLI" in split.explain_tf_error(toy, err)


def test_each_worker_note_is_true_of_that_worker_and_the_cluster_counts_the_dropped():
    # `split --workers 2 --examples 7 --global-batch 4 --drop-remainder`: 4 of the 7 reach the
    # workers, 3 are dropped, not "dropped the last 5" (7 minus one worker's 2) in both workers' notes.
    plans = [worker_plan([[[0, 1]]], examples=7, drop=True), worker_plan([[[2, 3]]], examples=7, drop=True)]
    for p in plans:
        notes = " ".join(split.describe(p))
        assert "dropped the last" not in notes and "of 7 examples" not in notes
        assert "cluster notes" in notes
    assert "drop_remainder left out 3 of the 7 examples (ids 4–6)" in " ".join(split.cluster_notes(plans))


def test_file_sharding_with_drop_remainder_says_why_workers_got_nothing():
    # `split --workers 3 --examples 14 --global-batch 6 --policy auto --files 4 --drop-remainder`:
    # TensorFlow gave workers 1 and 2 files of 4 and 3 ids, fewer than a batch of 6, so both got
    # nothing. The notes read "worker 1: file(s) ;" and blamed a partial batch.
    empty = [[[]], [[]], [[]]]
    plans = [
        worker_plan([[[0, 1]], [[2, 10]], [[11, 12]]], policy="auto", files=4, global_batch=6, examples=14, drop=True)
    ] + [worker_plan(empty, policy="auto", files=4, global_batch=6, examples=14, drop=True) for _ in range(2)]
    notes = " ".join(split.cluster_notes(plans))
    assert "worker 0: file(s) 0, 3; worker 1: no ids reached it; worker 2: no ids reached it" in notes
    assert "drop_remainder left out 8 of the 14 examples (ids 3–9, 13)" in notes
    assert "by the global batch (6) and drops its last partial batch" in notes


# Worker plans as `split --workers 2 --examples 10 --global-batch 3 --policy data` (and `--policy file
# --files 2`) return them: TensorFlow cuts a global batch of 3 into pieces of 2 and 1; under FILE each
# worker takes both pieces of its own batches in turn. The notes said every share "is 1" (3 // 2).
UNEVEN = {
    "data": [[[[0, 1]], [[3, 4]], [[6, 7]], [[9]]], [[[2]], [[5]], [[8]], [[]]]],
    "file": [[[[0, 1]], [[2]], [[3, 4]], [[]]], [[[5]], [[6, 7]], [[8]], [[9]]]],
}


@pytest.mark.parametrize("policy", ["data", "file"])
def test_partial_steps_of_a_cluster_are_read_off_every_workers_pieces(policy):
    plans = [
        worker_plan(steps, policy=policy, files=2 if policy == "file" else 0, global_batch=3)
        for steps in UNEVEN[policy]
    ]
    for p in plans:
        notes = " ".join(split.describe(p))
        assert "share of a global batch" not in notes and "partial batch" not in notes
    cluster = split.cluster_notes(plans)
    assert [n for n in cluster if "partial" in n] == [
        "Step 4 is a partial global batch (1 of 3), cut 1/0."
        if policy == "data"
        else "Step 4 is a partial global batch (1 of 3), cut 0/1."
    ]
    assert "Each full global batch of 3 was cut" in " ".join(cluster)
    empty = 1 if policy == "data" else 0
    assert "Step 4: this worker's replica 0 got nothing" in " ".join(split.describe(plans[empty]))


def test_cluster_steps_holding_more_than_a_global_batch_are_called_so():
    # `split --workers 2 --files 2 --examples 20 --global-batch 5 --policy file` (these are the ids
    # TensorFlow gave): steps 1 and 3 carry 3+3 = 6 examples, more than a global batch, not full batches of 5.
    plans = [
        worker_plan(
            [[[0, 1, 2]], [[3, 4]], [[5, 6, 7]], [[8, 9]]], policy="file", files=2, global_batch=5, examples=20
        ),
        worker_plan(
            [[[10, 11, 12]], [[13, 14]], [[15, 16, 17]], [[18, 19]]],
            policy="file",
            files=2,
            global_batch=5,
            examples=20,
        ),
    ]
    notes = split.cluster_notes(plans)
    assert [n for n in notes if "hold" in n] == [
        "Step 1 holds 6 examples, more than a global batch of 5, cut 3/3.",
        "Step 3 holds 6 examples, more than a global batch of 5, cut 3/3.",
    ]
    assert any(n.endswith("so what the workers send at one step need not add up to 5.") for n in notes)
    assert not any("Each full global batch" in n for n in notes)
    merged = {
        "steps": [[a[0], b[0]] for a, b in zip(plans[0]["steps"], plans[1]["steps"])],
        "global_batch": 5,
        "replicas": 2,
        "notes": notes,
    }
    from distcore import plots

    summary = plots.split_summary(merged)
    assert "blue = piece of a full global batch (or of a step holding more: see the notes)" in summary
    # Not "4 global batches of 5": steps 1 and 3 hold 6.
    assert "20 examples → 4 steps (global batch 5) on 2 replicas" in summary
    figure = plots.split_figure(merged)
    assert figure.layout.title.text.startswith("4 steps (global batch 5) over 2 replicas")
    assert list(figure.data[0].y) == [
        "step 1 (holds 6)",
        "step 2 (partial 4/5)",
        "step 3 (holds 6)",
        "step 4 (partial 4/5)",
    ]
    assert "except where each worker batches its own files (FILE)" in split.describe(plans[0])[0]


def test_a_run_of_partial_cluster_steps_is_one_note():
    # FILE with one worker's files running out first: worker 1 gives empty pieces from step 3 on.
    plans = [
        worker_plan([[[0, 1]], [[2, 3]], [[4, 5]], [[6, 7]]], policy="file", files=2),
        worker_plan([[[8, 9]], [[10, 11]]], policy="file", files=2),
    ]
    partial = [n for n in split.cluster_notes(plans) if "partial" in n]
    assert partial == ["Steps 3–4 are partial global batches (2 of 4), cut 2/0."]


def test_one_id_over_two_workers_is_a_full_global_batch():
    # `--examples 1 --global-batch 1 --workers 2`: worker 0 got id 0; the notes said its share "is 0".
    plans = [worker_plan([[[0]]], global_batch=1, examples=1), worker_plan([[[]]], global_batch=1, examples=1)]
    assert "is 0" not in " ".join(split.describe(plans[0]))
    cluster = " ".join(split.cluster_notes(plans))
    assert "partial" not in cluster and "Each full global batch of 1 was cut 1/0" in cluster


@pytest.mark.parametrize(
    "args,kw,pieces,per_replica",
    [
        ((4, 4, 5), {}, [1, 1, 1, 1, 0], None),  # not 0: four replicas got 1
        (
            (10, 4, 3),
            {"policy": "file", "files": 3, "map_after_batch": False},
            [2, 1, 1],
            None,
        ),  # not 1: replica 0 got 2
        ((10, 4, 3), {"policy": "file", "files": 3}, [2, 2, 0], None),
        # The app's batch note gives both as its example of 4 over 3 replicas, not 2/2/0 only.
        ((10, 4, 3), {"policy": "off", "drop_remainder": True}, [2, 1, 1], None),
        ((10, 4, 3), {"policy": "off"}, [2, 2, 0], None),
        ((6, 4, 2), {}, [2, 2], 2),
        ((8, 4, 2), {"api": "function"}, [2, 2], 2),
    ],
)
@pytest.mark.slow
def test_per_replica_batch_is_what_a_full_global_batch_gave(args, kw, pieces, per_replica):
    result = plan(*args, **kw)
    assert (result["per_replica_batch"], result.get("full_batch_pieces")) == (per_replica, pieces)


@pytest.mark.slow
def test_a_plan_made_in_one_process_says_so_whatever_workers_was_asked():
    # The planner passes "workers": 2 through, but runs one process with 2 replicas:
    # it says "replicas": 2 and "workers": 1, not 4 replicas and "per_replica_batch": 1 beside
    # steps of two pieces of 2.
    result = plan(6, 4, 2, workers=2)
    assert result["steps"] == SEED_TABLES[0][1]
    assert (result["replicas"], result["workers"], result["per_replica_batch"]) == (2, 1, 2)
    assert "ran in one process" in result["notes"][0]
    assert not any("one of 2 workers" in n for n in result["notes"])


def test_a_cluster_step_of_nothing_is_not_called_a_partial_batch():
    # `split --workers 3 --files 4 --examples 23 --global-batch 4 --policy file` (these are the
    # ids TensorFlow gave): at step 3 every worker takes the empty piece of its own batch, which
    # is a step of no example, not "a partial global batch (0 of 4), cut 0/0/0".
    plans = [
        worker_plan([[[0, 1]], [[2, 3]], [[]], [[4, 17]]], policy="file", files=4, global_batch=4, examples=23),
        worker_plan([[[5, 6]], [[7, 8]], [[]], [[9]]], policy="file", files=4, global_batch=4, examples=23),
        worker_plan([[[11, 12]], [[13, 14]], [[]], [[15]]], policy="file", files=4, global_batch=4, examples=23),
    ]
    notes = split.cluster_notes(plans)
    assert (
        "Step 3 carries no example at all: every replica's piece is empty, and it still runs (an all-reduce of "
        "nothing)." in notes
    )
    assert not any("(0 of 4)" in n for n in notes)
    from distcore import plots

    merged = {
        "steps": [[a[0], b[0], c[0]] for a, b, c in zip(*(p["steps"] for p in plans))],
        "global_batch": 4,
        "replicas": 3,
        "notes": notes,
    }
    assert "Step 3 carries no example: every replica's piece is empty." in plots.split_summary(merged)
