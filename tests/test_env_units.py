"""``hubnorm._env``: the one rule for on/off environment variables (``HUBNORM_FORBID_SYNTHETIC``,
``HUBNORM_PROGRESS``): the on and off spellings, the default when unset or empty, and a clear error for anything
else, at each place that reads one."""

from __future__ import annotations

import pytest

from hubnorm import media
from hubnorm._env import OFF, ON, env_switch, forbid_synthetic
from hubnorm.progress import progress


@pytest.mark.parametrize("value", [*ON, "TRUE", " Yes ", "On\n"])
def test_on_values(value, monkeypatch):
    monkeypatch.setenv("HUBNORM_X", value)
    assert env_switch("HUBNORM_X") is True and env_switch("HUBNORM_X", default=True) is True


@pytest.mark.parametrize("value", [*OFF, "FALSE", " no ", "Off"])
def test_off_values(value, monkeypatch):
    monkeypatch.setenv("HUBNORM_X", value)
    assert env_switch("HUBNORM_X") is False and env_switch("HUBNORM_X", default=True) is False


@pytest.mark.parametrize("default", [True, False])
def test_unset_or_empty_is_the_default(default, monkeypatch):
    monkeypatch.delenv("HUBNORM_X", raising=False)
    assert env_switch("HUBNORM_X", default=default) is default
    for empty in ("", "   "):
        monkeypatch.setenv("HUBNORM_X", empty)
        assert env_switch("HUBNORM_X", default=default) is default


@pytest.mark.parametrize("value", ["2", "ture", "y", "enable", "1 1"])
def test_anything_else_names_the_variable(value, monkeypatch):
    monkeypatch.setenv("HUBNORM_X", value)
    with pytest.raises(ValueError, match=rf"^environment variable HUBNORM_X={value!r} is not an on/off switch"):
        env_switch("HUBNORM_X")


def test_forbid_synthetic_names_what_was_requested(monkeypatch):
    monkeypatch.delenv("HUBNORM_FORBID_SYNTHETIC", raising=False)
    forbid_synthetic("anything")   # off: nothing happens
    monkeypatch.setenv("HUBNORM_FORBID_SYNTHETIC", "true")
    with pytest.raises(RuntimeError, match=r"^synthetic data \(preset 'msrvtt'\) requested while "
                                           r"HUBNORM_FORBID_SYNTHETIC is set"):
        media.make_media("msrvtt", n_train=0, n_test=10)


def test_progress_switch(monkeypatch, capsys):
    monkeypatch.delenv("HUBNORM_PROGRESS_FILE", raising=False)
    monkeypatch.setenv("HUBNORM_PROGRESS", "off")
    assert progress(range(3), desc="x").disable
    monkeypatch.setenv("HUBNORM_PROGRESS", "yes")
    bar = progress(range(3), desc="x")
    assert not bar.disable
    bar.close()
    monkeypatch.setenv("HUBNORM_PROGRESS", "maybe")
    with pytest.raises(ValueError, match="HUBNORM_PROGRESS='maybe' is not an on/off switch"):
        progress(range(3), desc="x")
