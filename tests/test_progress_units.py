"""progress: unit tests of where a bar goes and the defaults it is drawn with.

No real bar is drawn: ``progress._tqdm`` is replaced by :class:`FakeBar`, which records what it is given (a drawn
tqdm bar can hang in mutmut's forked test process).

Equivalent mutants left (mutation run of this file with tests/test_companion_protocol_units.py):
- progress_stream ``os.environ.get("HUBNORM_PROGRESS_FILE", "")`` -> default ``None`` or no default (2): an unset
  variable is falsy either way, and only ``if not path`` reads it.
- progress ``os.environ.get("HUBNORM_PROGRESS", "1")`` -> default ``None``, no default or ``"XX1XX"`` (3): only
  ``== "0"`` reads it, and none of these equals "0".
"""

import io
import sys

import pytest

from hubnorm import progress as pm


class FakeBar:
    def __init__(self, iterable=None, **kwargs):
        self.iterable, self.kwargs = iterable, kwargs


@pytest.fixture
def bars(monkeypatch):
    monkeypatch.setattr(pm, "_tqdm", FakeBar)
    monkeypatch.delenv("HUBNORM_PROGRESS", raising=False)
    monkeypatch.delenv("HUBNORM_PROGRESS_FILE", raising=False)
    monkeypatch.setattr(pm, "_FILES", {})
    yield
    for fh in pm._FILES.values():
        fh.close()


def test_progress_stream_is_stderr_without_a_side_file(monkeypatch, bars):
    err = io.StringIO()
    monkeypatch.setattr(sys, "stderr", err)
    assert pm.progress_stream() is err
    monkeypatch.setenv("HUBNORM_PROGRESS_FILE", "")
    assert pm.progress_stream() is err and pm._FILES == {}


def test_progress_stream_appends_to_the_side_file_opened_once(tmp_path, monkeypatch, bars):
    side = tmp_path / "p.log"
    side.write_text("before\n")
    monkeypatch.setenv("HUBNORM_PROGRESS_FILE", str(side))
    fh = pm.progress_stream()
    assert pm.progress_stream() is fh and pm._FILES == {str(side): fh}
    assert fh.mode == "a" and fh.encoding == "utf-8"
    fh.write("é\n")
    fh.flush()
    assert side.read_text(encoding="utf-8") == "before\né\n"
    fh.close()
    again = pm.progress_stream()                         # a closed file is opened again
    assert again is not fh and not again.closed and pm._FILES[str(side)] is again


def test_progress_stream_says_when_the_side_file_cannot_be_opened(tmp_path, monkeypatch, bars):
    bad = tmp_path / "missing-folder" / "p.log"
    monkeypatch.setenv("HUBNORM_PROGRESS_FILE", str(bad))
    with pytest.raises(ValueError, match=r"HUBNORM_PROGRESS_FILE='.*p\.log' cannot be opened for appending \(.*\): "
                                         "point it at a writable file or unset it") as info:
        pm.progress_stream()
    assert isinstance(info.value.__cause__, OSError) and pm._FILES == {}


def test_close_files_closes_and_forgets_every_side_file(tmp_path, monkeypatch, bars):
    handles = []
    for name in ("a.log", "b.log"):
        monkeypatch.setenv("HUBNORM_PROGRESS_FILE", str(tmp_path / name))
        handles.append(pm.progress_stream())
    pm._close_files()
    assert all(fh.closed for fh in handles) and pm._FILES == {}


def test_progress_on_stderr_with_the_default_settings(monkeypatch, bars):
    err = io.StringIO()
    monkeypatch.setattr(sys, "stderr", err)
    items = [1, 2]
    bar = pm.progress(items)
    assert bar.iterable is items
    assert bar.kwargs == {"desc": "", "total": None, "disable": False, "file": err, "mininterval": 2.0, "ncols": 100,
                          "leave": False, "dynamic_ncols": False}
    bar = pm.progress(desc="d", total=7, mininterval=0, ncols=50, leave=True, dynamic_ncols=True, unit="it")
    assert bar.iterable is None
    assert bar.kwargs == {"desc": "d", "total": 7, "disable": False, "file": err, "mininterval": 0, "ncols": 50,
                          "leave": True, "dynamic_ncols": True, "unit": "it"}


def test_progress_in_a_side_file_leaves_its_last_state(tmp_path, monkeypatch, bars):
    monkeypatch.setenv("HUBNORM_PROGRESS_FILE", str(tmp_path / "p.log"))
    monkeypatch.setenv("HUBNORM_PROGRESS", "1")
    bar = pm.progress(range(3))
    assert bar.kwargs["file"] is pm._FILES[str(tmp_path / "p.log")] and bar.kwargs["leave"] is True
    own = io.StringIO()
    bar = pm.progress(range(3), file=own)                # a stream of the caller's: not the side file
    assert bar.kwargs["file"] is own and bar.kwargs["leave"] is False


@pytest.mark.parametrize("how", ["env", "argument"])
def test_a_silenced_bar_opens_no_stream(tmp_path, monkeypatch, bars, how):
    monkeypatch.setenv("HUBNORM_PROGRESS_FILE", str(tmp_path / "missing-folder" / "p.log"))   # would raise if opened
    if how == "env":
        monkeypatch.setenv("HUBNORM_PROGRESS", "0")
        bar = pm.progress(range(2))
    else:
        monkeypatch.setenv("HUBNORM_PROGRESS", "1")
        bar = pm.progress(range(2), disable=True)
    assert bar.kwargs["disable"] is True and "file" not in bar.kwargs and bar.kwargs["leave"] is True
    assert bar.kwargs["mininterval"] == 2.0 and bar.kwargs["ncols"] == 100 and bar.kwargs["dynamic_ncols"] is False


@pytest.mark.parametrize("value, disabled", [("0", True), ("false", True), ("off", True), ("1", False),
                                             ("yes", False), ("", False)])
def test_the_on_off_rule_of_hubnorm_progress(monkeypatch, bars, value, disabled):
    err = io.StringIO()
    monkeypatch.setattr(sys, "stderr", err)
    monkeypatch.setenv("HUBNORM_PROGRESS", value)
    assert pm.progress(range(1)).kwargs["disable"] is disabled


def test_the_module_exports_two_names():
    assert pm.__all__ == ["progress", "progress_stream"]
