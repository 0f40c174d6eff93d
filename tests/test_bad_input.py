"""Every CLI flag, given nonsense: exit status 2 and a message for people, never a traceback."""

import pytest

from distcore import cli

BAD_NUMBERS = ["0", "-1", "1.5", "nan", "inf", "x", "1e9", "99999999999"]


def run(capsys, *argv):
    code = cli.main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


CASES = [
    *[("split", "--examples", v, "--global-batch", "4") for v in BAD_NUMBERS],
    *[("split", "--examples", "16", "--global-batch", v) for v in BAD_NUMBERS],
    *[("split", "--examples", "16", "--global-batch", "4", "--replicas", v) for v in BAD_NUMBERS],
    *[("split", "--examples", "16", "--global-batch", "4", "--files", v) for v in ("-1", "x", "999", "nan")],
    *[("split", "--examples", "16", "--global-batch", "4", "--workers", v) for v in ("0", "x", "99")],
    *[
        ("split", "--examples", "16", "--global-batch", "4", "--devices", v)
        for v in ("", ",", "cpu:0,cpu:0", "tpu:0", "gpu:5", "cpu:99", "cpu:-1", "../cpu:0")
    ],
    ("split", "--examples", "4", "--global-batch", "8"),  # a batch larger than the data
    ("split", "--examples", "100000", "--global-batch", "1"),  # absurdly long plan
    *[("loss-check", "--global-batch", v) for v in BAD_NUMBERS],
    *[("loss-check", "--seed", v) for v in ("-1", "x", "nan")],
    *[("evaluate", "--run-dir", d) for d in ("/nonexistent/run", "/etc")],
    *[("cluster", "--run-dir", "/tmp/never", "--workers", v) for v in ("1", "0", "x", "99")],
]
TRAIN_FLAGS = {
    "--global-batch": BAD_NUMBERS + ["70000"],
    "--epochs": BAD_NUMBERS,
    "--max-steps": ["-1", "x", "nan"],
    "--seed": ["-1", "x", "nan", "99999999999"],
    "--steps-per-loop": BAD_NUMBERS,
    "--checkpoint-every": ["-5", "x", "nan"],
    "--learning-rate": ["0", "-1", "nan", "inf", "x", "1e9"],
    "--l2": ["-1", "nan", "inf", "x", "2"],
    "--train-examples": BAD_NUMBERS + ["70000"],
    "--test-examples": BAD_NUMBERS + ["20000"],
    "--replicas": BAD_NUMBERS,
    "--devices": ["", "cpu:0,cpu:0"],
}
CASES += [("train", "--run-dir", "RUN", flag, value) for flag, values in TRAIN_FLAGS.items() for value in values]


@pytest.mark.parametrize("argv", CASES, ids=[" ".join(c) for c in CASES])
def test_bad_value_is_refused_with_a_message(capsys, tmp_path, argv):
    argv = [str(tmp_path / "run") if a == "RUN" else a for a in argv]
    code, out, err = run(capsys, *argv)
    assert code == 2
    message = err.strip().splitlines()[-1]
    assert message.startswith("error: ") and len(message) > 20
    assert "Traceback" not in err
    assert not (tmp_path / "run" / "checkpoints").exists()  # nothing trained


def test_missing_data_folder_is_a_clear_error(capsys, tmp_path):
    code, _, err = run(
        capsys, "train", "--run-dir", str(tmp_path / "r"), "--data-dir", str(tmp_path / "none"), "--max-steps", "1"
    )
    assert code == 2 and "apt-get install dataset-fashion-mnist" in err


def test_malformed_tf_config_is_refused(capsys, tmp_path, monkeypatch):
    monkeypatch.setenv("TF_CONFIG", '{"cluster": {"worker": ["a:1"]}, "task": {"type": "worker", "index": 5}}')
    code, _, err = run(capsys, "train", "--multi-worker", "--run-dir", str(tmp_path / "r"))
    assert code == 2 and "does not name a member" in err


def test_a_run_directory_inside_a_file_is_refused(capsys, tmp_path):
    (tmp_path / "file").write_text("x")
    code, _, err = run(capsys, "train", "--run-dir", str(tmp_path / "file" / "run"), "--max-steps", "1")
    assert code == 2 and "cannot write to the run directory" in err
