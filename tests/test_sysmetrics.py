"""System metrics: the sampler's records, its thread's start and stop, reading them back, the
figure; and (slow) a real run's system.jsonl and TensorBoard scalars."""

import json
import time

import pytest

from distcore import plots, runs, sysmetrics


def test_sampler_writes_records_and_stops(tmp_path):
    sampler = sysmetrics.Sampler(tmp_path, interval=0.05, gpus=lambda: {"gpu_util": 50.0, "gpu_mem_bytes": 2**30})
    sampler.start()
    time.sleep(0.3)
    sampler.stop()
    sampler.stop()  # twice: nothing more
    samples = runs.read_system(tmp_path)
    assert len(samples) >= 3
    assert not sampler.thread.is_alive()
    n = len(samples)
    time.sleep(0.15)
    assert len(runs.read_system(tmp_path)) == n  # stopped with it
    first = samples[0]
    assert set(first) >= {"time", "elapsed", "cpu_percent", "rss_bytes", "gpu_util", "gpu_mem_bytes"}
    assert first["elapsed"] < 0.05 and first["rss_bytes"] > 10 * 2**20 and first["cpu_percent"] >= 0
    assert all(b["elapsed"] >= a["elapsed"] for a, b in zip(samples, samples[1:]))


def test_read_skips_torn_and_foreign_lines(tmp_path):
    good = {"time": 1.0, "elapsed": 0.0, "cpu_percent": 10.0, "rss_bytes": 1}
    (tmp_path / "system.jsonl").write_text(json.dumps(good) + '\n[1]\n{"time": "x"}\n{"time": 2.0, "ela')
    assert runs.read_system(tmp_path) == [good]
    assert runs.read_system(tmp_path / "missing") == []


def test_gpu_stats_without_gpus_is_empty():
    assert sysmetrics.nvidia_gpus() == {} or "gpu_util" in sysmetrics.nvidia_gpus()


def test_system_figure_one_run_and_overlaid():
    rows = [{"time": 10.0 + i, "elapsed": i, "cpu_percent": 150.0, "rss_bytes": 2**29} for i in range(3)]
    fig = plots.system_figure(rows)
    assert [t.name for t in fig.data] == ["CPU", "RSS"] and fig.data[1].y[0] == 512
    fig = plots.system_figure({"a": rows, "b": [{**r, "gpu_util": 9.0} for r in rows]})
    assert [t.name for t in fig.data] == ["a · CPU", "a · RSS", "b · CPU", "b · GPU", "b · RSS"]
    empty = plots.system_figure([])  # a note in both panels, and each panel drawn
    assert [a.text for a in empty.layout.annotations][-2:] == ["no samples yet"] * 2
    assert [(t.xaxis, list(t.x)) for t in empty.data] == [("x2", [])]


def test_system_lines_break_where_no_process_sampled():
    # Sampled every 2 s, stopped after 4 s, resumed 46 s later.
    rows = [{"time": 10.0 + t, "cpu_percent": 100.0, "rss_bytes": 2**20} for t in (0, 2, 4, 50, 52)]
    cpu, rss = plots.system_figure(rows).data
    assert list(cpu.x) == [0, 2, 4, 27, 50, 52] and list(cpu.y) == [100.0, 100.0, 100.0, None, 100.0, 100.0]
    assert list(rss.y) == [1.0, 1.0, 1.0, None, 1.0, 1.0]
    assert len(plots.system_figure(rows[:3]).data[0].x) == 3  # no gap, no break


def test_cost_per_sample_is_small():
    cost = sysmetrics.measure_cost(samples=50)
    assert cost["share_of_one_core"] < 0.02  # well under: about 0.00005 measured


@pytest.mark.slow
def test_a_run_records_system_metrics_into_its_events(trained_run):
    """The Controller's sampler: samples from the set-up to the end, and TensorBoard scalars."""
    from pathlib import Path

    from distcore import events

    run_dir, _ = trained_run
    samples = runs.read_system(run_dir)
    metrics = runs.read_metrics(run_dir)
    start = next(m["time"] for m in metrics if m.get("event") == "start")
    end = metrics[-1]["time"]
    assert samples[0]["time"] < start + 10  # within 10 s of the start (it samples from the set-up on)
    assert abs(samples[-1]["time"] - end) < 5  # its last sample is taken as the run ends
    gaps = [b["time"] - a["time"] for a, b in zip(samples, samples[1:])]
    assert max(gaps) < sysmetrics.INTERVAL + 3
    tags = set()
    for path in Path(run_dir, "logs").glob("events.out.tfevents.*"):
        tags |= {v.tag for e in events.read_events(path)[0] for v in e.summary.value}
    assert {"system/cpu_percent", "system/rss_bytes", "train/loss"} <= tags
