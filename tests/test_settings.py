"""The one list of settings (distcore.settings): the docs' table and the code's reads agree with it."""

import re

import pytest

from conftest import ROOT
from distcore import settings

DECLARED = {s.name for s in settings.SETTINGS}
INTERNAL = {s.name for s in settings.INTERNAL}
# Reads of one variable by name: os.environ.get("X"), os.environ["X"], os.getenv("X"), settings.get("X"),
# "X" in os.environ (a write, os.environ["X"] = ..., is no read).
READS = re.compile(
    r"""(?:environ\.get|getenv|settings\.get)\(\s*["']([A-Za-z_][A-Za-z0-9_]*)["']"""
    r"""|environ\[\s*["']([A-Za-z_][A-Za-z0-9_]*)["']\s*\](?!\s*=[^=])"""
    r"""|["']([A-Za-z_][A-Za-z0-9_]*)["']\s+(?:not\s+)?in\s+os\.environ"""
)


def source_files():
    """distcore's modules and the app's (app.py, webapp/): everything that runs as distcore."""
    return [*sorted((ROOT / "distcore").glob("*.py")), ROOT / "app.py", *sorted((ROOT / "webapp").glob("**/*.py"))]


def docs_table_names() -> list[str]:
    """The first cells, in backticks, of docs/settings.md's table headed `| variable | default | meaning |`."""
    path = ROOT / "docs" / "settings.md"
    assert path.is_file(), "docs/settings.md is missing: it documents every setting in distcore/settings.py"
    lines = path.read_text(encoding="utf-8").splitlines()
    header = [
        i
        for i, line in enumerate(lines)
        if re.fullmatch(r"\|\s*variable\s*\|\s*default\s*\|\s*meaning\s*\|", line.strip())
    ]
    assert len(header) == 1, "docs/settings.md needs one table headed | variable | default | meaning |"
    names = []
    for line in lines[header[0] + 1 :]:
        if not line.strip().startswith("|"):
            break
        first = line.strip().strip("|").split("|")[0].strip()
        if re.fullmatch(r":?-+:?", first):
            continue  # the separator row
        match = re.fullmatch(r"`([A-Za-z_][A-Za-z0-9_]*)`", first)
        assert match, f"docs/settings.md: a row's first cell is not a variable name in backticks: {line!r}"
        names.append(match.group(1))
    return names


def test_each_setting_is_declared_once_with_a_meaning():
    names = [s.name for s in settings.SETTINGS + settings.INTERNAL]
    assert len(names) == len(set(names))
    for setting in settings.SETTINGS + settings.INTERNAL:
        assert re.fullmatch(r"[A-Z][A-Z0-9_]*", setting.name) and setting.meaning.strip(), setting
        assert setting.default is None or isinstance(setting.default, str), setting


def test_the_docs_table_lists_exactly_the_declared_settings():
    names = docs_table_names()
    assert len(names) == len(set(names)), "docs/settings.md lists a variable twice"
    assert set(names) == DECLARED, (
        f"only in docs/settings.md: {sorted(set(names) - DECLARED)}; "
        f"only in distcore/settings.py: {sorted(DECLARED - set(names))}"
    )


def test_every_variable_the_code_reads_is_declared():
    read = {}
    for path in source_files():
        if not path.is_file():
            continue
        for match in READS.finditer(path.read_text(encoding="utf-8")):
            name = next(group for group in match.groups() if group)
            read.setdefault(name, set()).add(path.relative_to(ROOT).as_posix())
    undeclared = {name: sorted(where) for name, where in read.items() if name not in DECLARED | INTERNAL}
    assert not undeclared, f"declare these in distcore/settings.py (read in): {undeclared}"
    assert {"DISTCORE_RUNS_DIR", "DISTCORE_DATA_DIR", "TF_CONFIG"} <= set(read)  # the pattern finds reads


def test_every_distcore_variable_named_in_distcore_is_declared():
    named = {}
    for path in sorted((ROOT / "distcore").glob("*.py")):
        for name in re.findall(r"\bDISTCORE_[A-Z0-9_]*[A-Z0-9]\b", path.read_text(encoding="utf-8")):
            named.setdefault(name, set()).add(path.name)
    undeclared = {name: sorted(where) for name, where in named.items() if name not in DECLARED | INTERNAL}
    assert not undeclared, f"declare these in distcore/settings.py (named in): {undeclared}"


def test_get_gives_the_environment_else_the_default(monkeypatch):
    monkeypatch.delenv("DISTCORE_MAX_JOBS", raising=False)
    assert settings.get("DISTCORE_MAX_JOBS") == "2"
    monkeypatch.setenv("DISTCORE_MAX_JOBS", "")
    assert settings.get("DISTCORE_MAX_JOBS") == ""  # set but empty is the environment's value, as before
    monkeypatch.setenv("DISTCORE_MAX_JOBS", "5")
    assert settings.get("DISTCORE_MAX_JOBS") == "5"
    monkeypatch.delenv("DISTCORE_RUNS_DIR", raising=False)
    assert settings.get("DISTCORE_RUNS_DIR") is None  # worked out by runs.runs_root
    with pytest.raises(KeyError, match="not a declared setting"):
        settings.get("DISTCORE_NO_SUCH_THING")
