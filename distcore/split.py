"""Split plans: which example ids each replica receives at each step.

Nothing here re-implements TensorFlow's batching rules: `plan()` builds a
dataset of example ids, distributes it with the real `tf.distribute` API the
user chose, iterates it and records what arrived on every replica. `describe()`
then puts the result into words (pure Python, no TensorFlow).
"""

from __future__ import annotations

import bisect
import contextlib
import os
import re
import tempfile
from pathlib import Path

from .config import DistcoreError, SplitConfig, without_node_names

# TensorFlow's C++ log lines worth showing next to a plan (the rest is start-up noise).
_INTERESTING = ("shard", "autoshard", "partial", "rebatch", "fall back", "fallback")


def plan(config: SplitConfig, strategy=None, *, spent: list | None = None) -> dict:
    """Run the distributed pipeline for `config` and return the plan as plain data.

    Dropping the used multi-device iterator can block in TensorFlow's C++ teardown for
    a while (0.01-4.8 s measured for 8 devices), after the plan is complete. A caller
    that passes a list in `spent` gets the iterator appended to it instead, so it can
    answer first and drop the list afterwards.

    `replicas` and `workers` are what ran (a planner asked for 2 workers still runs one
    process). `full_batch_pieces` is how TensorFlow cut the first full global batch;
    `per_replica_batch` is set only when every replica got the same size (else None).
    """
    import tensorflow as tf

    from . import devices, inputs

    with capture_fd2() as captured:
        strategy = strategy or devices.make_strategy(config.devices)
        with tempfile.TemporaryDirectory() as tmp:
            make_examples = id_source(config, Path(tmp))
            # Shaped like training's pipeline, which maps (normalises) each batch: a map after a
            # batch that keeps its partial last one hides the batch size from TensorFlow, which
            # then cuts batches into other pieces under FILE and OFF (rebatch_note).
            transform = (lambda ids: ids) if config.map_after_batch else None
            try:
                dist = inputs.distribute(
                    strategy,
                    make_examples,
                    global_batch=config.global_batch,
                    api=config.api,
                    policy=config.policy,
                    drop_remainder=config.drop_remainder,
                    transform=transform,
                    prefetch=False,
                )
                steps = []
                iterator = iter(dist)
                for batch in iterator:
                    local = strategy.experimental_local_results(batch)
                    steps.append([v.numpy().reshape(-1).tolist() for v in local])  # numpy: no eager op per piece
                if spent is not None:
                    spent.append(iterator)
                del iterator
            except tf.errors.OpError as err:
                raise DistcoreError(explain_tf_error(config, err)) from None
    replicas = strategy.num_replicas_in_sync
    workers = replicas // len(strategy.extended.worker_devices)
    # One worker of several holds only its part of each global batch (cluster_notes sees them all).
    pieces = None if workers > 1 else first_full(piece_sizes({"steps": steps}), config.global_batch)
    result = {
        "steps": steps,
        "replicas": replicas,
        "devices": list(config.devices),
        "global_batch": config.global_batch,
        "per_replica_batch": per_replica_batch(config.api, config.global_batch, replicas, pieces),
        "full_batch_pieces": pieces,
        "examples": config.examples,
        "policy": config.policy,
        "api": config.api,
        "drop_remainder": config.drop_remainder,
        "map_after_batch": config.map_after_batch,
        "files": config.files,
        "workers": workers,
        "plain_iterator": inputs.one_cpu_replica(strategy),
        "tf_messages": [line for line in captured() if any(k in line.lower() for k in _INTERESTING)],
    }
    if config.shuffle_seed is not None:
        order = row_order(config.examples, config.shuffle_seed)
        result["rows"] = [[[order[i] for i in ids] for ids in step] for step in steps]
        result["shuffle_seed"] = config.shuffle_seed
    result["notes"] = one_process_note(config.workers, result) + describe(result)
    return result


def row_order(examples: int, seed: int) -> list[int]:
    """The training set's row numbers in the order epoch 1 reads them (position -> row),
    from the shuffle training itself runs. Batching and sharding see positions, not contents,
    so position p of the plan is row order[p]."""
    import tensorflow as tf

    from . import inputs

    with inputs.seeded(seed):  # as training: a shuffle's order also follows the global seed
        ds = inputs.shuffled(tf.data.Dataset.range(examples), examples, seed, 0)
    return next(iter(ds.batch(examples))).numpy().tolist()


def per_replica_batch(api: str, global_batch: int, replicas: int, pieces: list[int] | None) -> int | None:
    """What each replica gets from a full global batch, when that is one number.

    G // replicas is true only for the function API (its input function batches by it and G
    divides evenly); experimental_distribute_dataset's pieces can differ (1/1/1/1/0, 2/1/1).
    """
    if api == "function":
        return global_batch // replicas
    return pieces[0] if pieces and len(set(pieces)) == 1 else None


def one_process_note(asked: int, result: dict) -> list[str]:
    """A plan asked for with W workers but run without a cluster (the planner) is a one-worker plan."""
    if asked == 1 or result["workers"] > 1:
        return []
    return [
        f"You asked for {asked} workers, but this plan ran in one process with no cluster, so it is a "
        f"one-worker plan: its {result['replicas']} replica(s) share every global batch of "
        f"{result['global_batch']} and nothing is divided between workers. `split --workers {asked}` "
        "runs real worker processes."
    ]


def id_source(config: SplitConfig, tmp: Path):
    """A function returning an unbatched dataset of int64 example ids 0..N-1.

    With `files` > 0 the ids are written into that many TFRecord files (contiguous
    ranges, like the seed's "file 1 holds 0..5") so FILE sharding has files to split.
    """
    import tensorflow as tf

    from . import inputs

    def whole(ds):  # as training's input does
        return inputs.whole_global_batches(ds, config.examples, config.global_batch, config.api, config.drop_remainder)

    if not config.files:
        return lambda: whole(tf.data.Dataset.range(config.examples))
    bounds = file_bounds(config.examples, config.files)
    names = []
    for f in range(config.files):
        name = str(tmp / f"ids-{f:03d}.tfrecord")
        with tf.io.TFRecordWriter(name) as writer:
            for i in range(bounds[f], bounds[f + 1]):
                writer.write(str(i).encode())
        names.append(name)

    def make():
        ds = tf.data.Dataset.from_tensor_slices(names)
        ds = ds.interleave(tf.data.TFRecordDataset, cycle_length=1, deterministic=True)
        return whole(ds.map(lambda r: tf.strings.to_number(r, tf.int64)))

    return make


@contextlib.contextmanager
def capture_fd2():
    """Copy what TensorFlow's C++ runtime writes to file descriptor 2 while the block runs."""
    with tempfile.TemporaryFile(mode="w+b") as sink:
        saved = os.dup(2)
        lines: list[str] = []
        try:
            os.dup2(sink.fileno(), 2)
            yield lambda: lines
        finally:
            os.dup2(saved, 2)
            os.close(saved)
            sink.seek(0)
            text = sink.read().decode("utf-8", "replace")
            lines.extend(line.strip() for line in text.splitlines() if line.strip())


def describe(result: dict) -> list[str]:
    """Plain-English notes on a plan: partial batches, empty replicas, policy effects."""
    replicas, g = result["replicas"], result["global_batch"]
    workers = result.get("workers", 1)
    notes = []
    if workers > 1:
        # TensorFlow's pieces of a global batch can differ (3 over 2 workers: 2 and 1, and under
        # FILE a worker takes both in turn), so one worker's plan cannot tell a full step from a
        # partial one: cluster_notes adds up every worker's pieces.
        notes.append(
            f"This is one of {workers} workers: it feeds {replicas // workers} of the {replicas} "
            f"replicas. At each step the replicas of all workers take their pieces together: one "
            f"global batch of {g}, except where each worker batches its own files (FILE), and then a "
            "step can hold more. Pieces can differ in size, so this worker's steps alone do not show "
            "whether a step was full: the cluster notes add up every worker's pieces."
        )
    if result.get("plain_iterator"):
        notes.append(
            "One CPU replica: it gets every batch whole, whichever API. distcore reads them through "
            "distribute_datasets_from_function with PER_REPLICA input kept on the host "
            "(tf.distribute.InputOptions): the same batches, from a plain tf.data iterator."
        )
    elif result["api"] == "dataset":
        notes.append(
            f"experimental_distribute_dataset: the dataset is batched by the global batch ({g}) and "
            f"TensorFlow re-batches every global batch into {replicas} per-replica pieces."
        )
    else:
        notes.append(
            f"distribute_datasets_from_function: the input function batches by the per-replica "
            f"batch ({g // replicas}) and TensorFlow hands whole batches to the replicas in turn."
        )
    if g % replicas and result["api"] == "dataset":
        notes.append(f"A global batch of {g} does not divide evenly over {replicas} replicas: piece sizes differ.")
    notes += delivery_notes(result)
    steps_sizes = piece_sizes(result)
    for number, sizes in enumerate(steps_sizes, start=1):
        if workers == 1 and sum(sizes) < g:
            notes.append(f"Step {number} is a partial batch ({sum(sizes)} of {g}), split {slashed(sizes)}.")
    for steps, who in empty_replicas(steps_sizes):
        who = "this worker's " + who.lower() if workers > 1 else who.lower()
        notes.append(f"{steps.capitalize()}: {who} got nothing (an empty batch, which still joins the all-reduce).")
    return notes + rows_note(result) + [policy_note(result)]


def rows_note(result: dict) -> list[str]:
    if not result.get("rows"):
        return []
    return [
        f"The cells show the training data's row numbers in the order training's epoch 1 reads them (shuffled "
        f"with seed {result['shuffle_seed']}; each epoch has its own order). The "
        "notes count positions in that order (0 = the first example read)."
    ]


def empty_replicas(sizes: list[list[int]]) -> list[tuple[str, str]]:
    """("steps 1–2000", "Replicas 2, 3") for each run of consecutive steps that left the same
    replicas empty: a batch of 2 on 4 replicas says so once, not in 2,000 notes."""
    empty = [(number, [str(r) for r, size in enumerate(row) if size == 0]) for number, row in enumerate(sizes, 1)]
    runs = step_runs(
        [(number, ("Replica " if len(e) == 1 else "Replicas ") + ", ".join(e)) for number, e in empty if e]
    )
    return [(f"step {a}" if a == b else f"steps {a}–{b}", who) for a, b, who in runs]


def step_runs(facts: list[tuple[int, str]]) -> list[list]:
    """(step, fact) pairs -> [first step, last step, fact], consecutive steps with the same
    fact merged."""
    runs = []
    for number, fact in facts:
        if runs and runs[-1][2] == fact and runs[-1][1] == number - 1:
            runs[-1][1] = number
        else:
            runs.append([number, number, fact])
    return runs


def delivery_notes(result: dict) -> list[str]:
    """How many examples arrived, and what drop_remainder left out, as far as this plan can see."""
    steps, n = result["steps"], result["examples"]
    seen = sum(len(ids) for step in steps for ids in step)
    if result.get("workers", 1) == 1:
        notes = [f"{len(steps)} step(s) delivered {seen} of {n} examples."]
        if result["drop_remainder"] and seen < n:
            notes.append(f"drop_remainder dropped the last {n - seen} example(s).")
        return notes
    # One worker sees only the ids it read, not which ones another worker received.
    notes = [
        f"{len(steps)} step(s) delivered {seen} example(s) to this worker; whether and how the shard "
        f"policy divided the {n} examples between the workers is in the cluster notes."
    ]
    if result["drop_remainder"]:
        notes.append(
            "drop_remainder is on: TensorFlow leaves out a last batch that would be partial; the "
            "cluster notes count the examples that reached no worker."
        )
    return notes


def tf_message(err) -> str:
    """The first line of TensorFlow's error, without its internals: the op's `{{function_node ...}}`
    and the `goo.gle/debug...` link that stands for a debug dump."""
    first = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
    first = re.sub(r":?\s*goo\.gle/\S+", "", without_node_names(first)).strip()
    return shortened(first) or type(err).__name__


def shortened(text: str, limit: int = 800) -> str:
    """`text` whole, or cut after its last full sentence within `limit` characters: a cut at
    400 would stop TensorFlow's advice mid-sentence ("... small files such that")."""
    if len(text) <= limit:
        return text
    end = text.rfind(". ", 0, limit)
    return text[: end + 1] if end > 0 else text[: limit - 1] + "…"


def explain_tf_error(config: SplitConfig, err) -> str:
    text = f"TensorFlow refused this plan: {type(err).__name__}: {tf_message(err)}"
    if config.policy == "file" and not config.files and config.shuffle_seed is not None:
        # The advice for the toy ids (source files) is refused for these rows (config.py).
        text += (
            " (FILE sharding hands out whole input files, and the Fashion-MNIST rows are shown from "
            "memory, which has no files. Training refuses FILE across workers too. To see what FILE does "
            "across workers, use the toy ids with at least as many source files as workers; or use the "
            "DATA or AUTO policy.)"
        )
    elif config.policy == "file" and not config.files:
        text += (
            " (FILE sharding hands out whole input files, but this dataset is made in memory and "
            "reads no files: write it to source files (Source files in the app, --files F in the CLI), "
            "or use the DATA or AUTO policy.)"
        )
    elif config.policy in ("file", "auto") and config.workers > config.files:
        auto = (
            "AUTO shards by FILE when the data comes from files, and does not fall back to DATA "
            "when there are too few: "
            if config.policy == "auto"
            else ""
        )
        text += (
            f" ({auto}FILE sharding hands out whole files: {config.files} file(s) cannot be split over "
            f"{config.workers} workers, so TensorFlow stops. "
            "Use at least as many files as workers, or the DATA policy; "
            "not OFF, which TensorFlow also suggests: every worker would read every example, and training "
            "refuses it across workers.)"
        )
    return text


def cluster_notes(plans: list[dict]) -> list[str]:
    """What the shard policy did across workers, read off the ids each worker received;
    then the cluster's full and partial global batches, and what drop_remainder left out."""
    seen = [sorted(i for step in p["steps"] for ids in step for i in ids) for p in plans]
    notes = [
        f"Worker {w} received {len(ids)} example(s) in {len(p['steps'])} step(s)."
        for w, (p, ids) in enumerate(zip(plans, seen))
    ]
    return notes + sharding_notes(plans, seen) + cluster_step_notes(plans) + dropped_note(plans, seen)


def sharding_notes(plans: list[dict], seen: list[list[int]]) -> list[str]:
    every = [i for ids in seen for i in ids]
    repeated = len(every) - len(set(every))
    if repeated:
        return [
            f"{repeated} example(s) reached more than one worker: with this policy each worker "
            "reads data the others also read (OFF: everything)."
        ]
    if plans[0]["api"] == "function":
        return [function_sharding_note(seen)]
    notes = ["No example reached two workers: the policy divided the data between them."]
    g, policy, files = plans[0]["global_batch"], plans[0]["policy"], plans[0]["files"]
    if files and policy != "data":
        # AUTO tries FILE first, and distcore's id files always give it files to shard (too few
        # is TensorFlow's error, not a fallback). Ids alone cannot always tell FILE from DATA:
        # with files of 2 ids, G=4 and 2 workers, both give worker 0 [0,1] [4,5] …
        read = files_read(plans[0]["examples"], files, seen)
        if sum(map(len, read)) > len({f for r in read for f in r}):
            return notes  # a file split between workers: not what FILE does, so no story
        notes.append(
            "Each worker read whole files of its own: that is FILE sharding ("
            + "; ".join(
                f"worker {w}: " + (f"file(s) {id_ranges(f)}" if f else "no ids reached it") for w, f in enumerate(read)
            )
            + "). A worker's steps come from its files only, so when its files run out its pieces "
            "shrink or come empty."
        )
    elif all(g * k <= i < g * (k + 1) for p in plans for k, step in enumerate(p["steps"]) for ids in step for i in ids):
        text = "Every worker took its piece of each global batch in turn: that is DATA sharding."
        if policy == "auto":
            text += (
                " AUTO found no input files to shard and fell back to DATA. The r1.15 API reference "
                "promised a warning; TensorFlow 2.21 logs it only at verbose level 2 "
                "(TF_CPP_VMODULE=auto_shard=2), and the ids show it."
            )
        notes.append(text)
    return notes


def file_bounds(examples: int, files: int) -> list[int]:
    """Where each id file starts and ends: file f holds ids bounds[f] .. bounds[f+1]-1."""
    import numpy as np

    return np.linspace(0, examples, files + 1).astype(int).tolist()


def files_read(examples: int, files: int, seen: list[list[int]]) -> list[list[int]]:
    """The files each worker received ids from."""
    bounds = file_bounds(examples, files)
    return [sorted({bisect.bisect_right(bounds, i) - 1 for i in ids}) for ids in seen]


def cluster_steps(plans: list[dict]) -> list[list[int]]:
    """Piece sizes of each step of the cluster, worker 0's replicas first. All workers take a step
    together, so step k's global batch is every worker's step k (TensorFlow gives a worker that
    has run out empty pieces; a shorter plan is padded the same way)."""
    sizes = [piece_sizes(p) for p in plans]
    rows = max(len(s) for s in sizes)
    padded = [s + [[0] * len(s[0] if s else [0])] * (rows - len(s)) for s in sizes]
    return [[n for s in padded for n in s[k]] for k in range(rows)]


def cluster_step_notes(plans: list[dict]) -> list[str]:
    g = plans[0]["global_batch"]
    steps = cluster_steps(plans)
    cuts = list(dict.fromkeys(slashed(s) for s in steps if sum(s) == g))
    notes = (
        [
            f"Each full global batch of {g} was cut {' or '.join(cuts)} over the {len(steps[0])} replicas "
            "(worker 0's first)."
        ]
        if cuts
        else []
    )
    partial = step_runs([(k, f"({sum(s)} of {g}), cut {slashed(s)}") for k, s in enumerate(steps, 1) if 0 < sum(s) < g])
    notes += [
        f"Step {a} is a partial global batch {fact}." if a == b else f"Steps {a}–{b} are partial global batches {fact}."
        for a, b, fact in partial
    ]
    # Under FILE every worker can take the empty piece of its own batch at the same turn: a
    # step of nothing, which still runs: it is named so, not "a partial global batch (0 of 4)".
    empty = step_runs([(k, "") for k, s in enumerate(steps, 1) if sum(s) == 0])
    notes += [
        f"Step {a} carries no example at all: every replica's piece is empty, and it still runs (an "
        "all-reduce of nothing)."
        if a == b
        else f"Steps {a}–{b} carry no example at all: every replica's "
        "piece is empty, and they still run (all-reduces of nothing)."
        for a, b, _ in empty
    ]
    # Under FILE each worker batches its own files by G and hands a batch out over several
    # steps, in every replica's piece size in turn: workers at the same turn can send 3+3 of
    # G=5, and such steps are not full but more than a global batch.
    over = step_runs(
        [
            (k, f"{sum(s)} examples, more than a global batch of {g}, cut {slashed(s)}")
            for k, s in enumerate(steps, 1)
            if sum(s) > g
        ]
    )
    notes += [f"Step {a} holds {fact}." if a == b else f"Steps {a}–{b} each hold {fact}." for a, b, fact in over]
    if over:
        notes.append(
            "Each worker batched the examples of its own files by the global batch and handed each "
            "batch out over several steps, in the replicas' piece sizes in turn, so what the workers "
            f"send at one step need not add up to {g}."
        )
    return notes


def dropped_note(plans: list[dict], seen: list[list[int]]) -> list[str]:
    """The ids no worker received: only the cluster can count them (each worker sees its own)."""
    n = plans[0]["examples"]
    missing = sorted(set(range(n)).difference(*seen))
    if not (plans[0]["drop_remainder"] and missing):
        return []
    kind = "positions" if plans[0].get("rows") else "ids"  # with Fashion-MNIST rows, the notes count positions
    if plans[0]["api"] == "dataset" and plans[0]["files"] and plans[0]["policy"] != "data":
        why = (
            f"each worker batches what its own files hold by the global batch ({plans[0]['global_batch']}) "
            "and drops its last partial batch, so what they held beyond whole global batches (all of it, "
            "when less than one) never arrived"
        )
    else:
        why = "because they would have made a partial batch"
    return [
        f"drop_remainder left out {len(missing)} of the {n} examples ({kind} {id_ranges(missing)}): no "
        f"worker received them, {why}."
    ]


def id_ranges(ids: list[int]) -> str:
    """Sorted ids as runs: [4, 5, 6, 9] -> '4–6, 9'."""
    runs: list[list[int]] = []
    for i in ids:
        if runs and i == runs[-1][1] + 1:
            runs[-1][1] = i
        else:
            runs.append([i, i])
    return ", ".join(str(a) if a == b else f"{a}–{b}" for a, b in runs)


def function_sharding_note(seen: list[list[int]]) -> str:
    """distribute_datasets_from_function: the input function's own shard(), not the policy."""
    workers = len(seen)
    text = (
        "No example reached two workers: distribute_datasets_from_function does not apply the shard "
        "policy; distcore's input function shards the ids itself with "
        "dataset.shard(num_input_pipelines, input_pipeline_id)"
    )
    if all(i % workers == w for w, ids in enumerate(seen) for i in ids):
        text += f", so each worker took every {ordinal(workers)} id (worker w: ids w, w+{workers}, …)"
    return text + "."


def ordinal(n: int) -> str:
    return {2: "2nd", 3: "3rd"}.get(n, f"{n}th")


def policy_note(result: dict) -> str:
    policy = result["policy"].upper()
    if result.get("workers", 1) > 1 and result["api"] == "dataset":
        return (
            f"Shard policy {policy} decides whether and how the data is divided between the "
            f"{result['workers']} workers; the ids each worker received show what it did."
        )
    if result["api"] == "function":
        return (
            f"Shard policy {policy} is not used by distribute_datasets_from_function: the input "
            "function shards itself with InputContext (num_input_pipelines, input_pipeline_id)."
        )
    if result["replicas"] == 1:
        return (
            f"Shard policy {policy} decides how data is divided between *workers*; with one worker "
            "and one replica there is nothing to divide, so it changes nothing here."
        )
    return rebatch_note(result)


def rebatch_note(result: dict) -> str:
    """One worker, several replicas, experimental_distribute_dataset: how TensorFlow cut each
    global batch into per-replica pieces, and whether the policy had a say. Says what this plan shows."""
    policy, g = result["policy"].upper(), result["global_batch"]
    sizes = piece_sizes(result)
    full = first_full(sizes, g)
    partial = [(n, s) for n, s in enumerate(sizes, start=1) if sum(s) < g]
    seen = [f"each full global batch became {slashed(full)}"] if full else []
    seen += [
        f"the partial step {n} ({sum(s)} example{'' if sum(s) == 1 else 's'}) became {slashed(s)}" for n, s in partial
    ]
    hidden = batch_size_hidden(result)
    text = (
        f"Shard policy {policy}: in one process (one worker) no data is divided between workers"
        + ("" if hidden else ", but the policy still decides how a global batch is cut into per-replica pieces")
        + f". Here {' and '.join(seen)}."
    )
    story = how_cut(full, [s for _, s in partial], hidden) if full else ""
    return f"{text} {story}" if story else text


def batch_size_hidden(result: dict) -> bool:
    """A map follows a batch that may be partial, as in training: TensorFlow cannot read the
    batch size through it (tf.data's compute_batch_size gives -1), whatever the policy."""
    return result.get("map_after_batch", True) and not result["drop_remainder"]


FIXED_SIZES = (
    "That is TensorFlow's rebatch to fixed per-replica sizes ({}), filled in order, so a partial "
    "batch fills the first replicas and the last ones can get little or nothing: what it does "
    "under FILE and OFF sharding, and under AUTO when it shards by file."
)
LEGACY = (
    "That is the legacy rebatch, which cuts every batch, a partial one too, into pieces of "
    "ceil(size / replicas), the last replica(s) getting what is left"
)
OWN_SIZE = (
    LEGACY + ": under DATA sharding (and AUTO when the input reads no files, so it falls back to "
    "DATA) tf.data's auto-shard rewrite puts it in place of the rebatch to fixed per-replica sizes."
)
OWN_SIZE_MAPPED = (
    LEGACY + ". A map follows the batch here, as training's normalisation does, and TensorFlow "
    "cannot read a fixed batch size through it unless drop_remainder is on (even when, as may be the case "
    "here, every batch happens to be full), so it cuts batches this way under every shard policy. "
    "A pipeline that ends at batch() gets fixed per-replica "
    "sizes, filled in order, under FILE and OFF, and under AUTO when it shards by file: "
    "see `split --no-map` in the CLI (the app's plans always have the map)."
)
SAME = (
    "TensorFlow's two ways of cutting a batch (fixed per-replica sizes filled in order, and pieces of "
    "ceil(size / replicas)) give the same pieces here, so the policy changes nothing in this plan."
)


def how_cut(full: list[int], partial: list[list[int]], hidden: bool = False) -> str:
    """Which of TensorFlow's two rebatches this plan's piece sizes show ('' if they contradict both);
    `hidden`: the batch size was hidden from TensorFlow (batch_size_hidden)."""
    replicas = len(full)
    fixed, own = False, False
    for sizes in [full, *partial]:
        total = sum(sizes)
        as_fixed = cut_evenly(full) and sizes == fill(full, total)
        as_own = sizes == fill([-(-total // replicas)] * replicas, total)
        fixed |= as_fixed and not as_own
        own |= as_own and not as_fixed
        if not (as_fixed or as_own):
            return ""
    if fixed != own:
        return FIXED_SIZES.format(slashed(full)) if fixed else OWN_SIZE_MAPPED if hidden else OWN_SIZE
    return "" if fixed else SAME


def piece_sizes(plan: dict) -> list[list[int]]:
    """Each step's per-replica piece sizes."""
    return [[len(ids) for ids in step] for step in plan.get("steps") or []]


def first_full(sizes: list[list[int]], global_batch: int) -> list[int] | None:
    """The piece sizes of the first full global batch (None if every step is partial)."""
    return next((s for s in sizes if sum(s) == global_batch), None)


def slashed(sizes: list[int]) -> str:
    return "/".join(map(str, sizes))


def fill(pieces: list[int], total: int) -> list[int]:
    """`total` examples poured into `pieces` in order."""
    filled = []
    for piece in pieces:
        filled.append(min(piece, total))
        total -= filled[-1]
    return filled


def cut_evenly(sizes: list[int]) -> bool:
    return max(sizes) - min(sizes) <= 1
