"""Unit checks of hubnorm.data.paths (where downloaded data and cached embeddings live), aimed at what its mutation run
found unchecked: ``repo_root`` on a checkout-like layout and off one (``__file__`` pointed at a scratch tree),
``_env_folder``'s two guards by their own messages (blank, a file) and its ``~`` expansion, the precedence argument >
environment variable > checkout > ``~/.cache/hubnorm`` of ``data_root`` and ``cache_root`` (an empty variable counts
as unset, a blank one is an error), the folders ``annotations_dir`` and ``images_dir`` build on them, and ``slug``.

Mutation run (``--tests tests/test_data_cache_units.py tests/test_own_data.py`` [+ this file]): 36 of 95 killed (38%;
21 reached by no test, among them every mutant of ``repo_root`` and of the installed-package fall-backs) -> 95 of 95;
no survivor was judged equivalent.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from hubnorm.data import paths
from hubnorm.data.paths import annotations_dir, cache_root, data_root, images_dir, slug


@pytest.fixture
def env(monkeypatch, tmp_path):
    """No HUBNORM_DATA / HUBNORM_CACHE, HOME in a scratch folder."""
    monkeypatch.delenv("HUBNORM_DATA", raising=False)
    monkeypatch.delenv("HUBNORM_CACHE", raising=False)
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    return monkeypatch


def _module_file(root: Path, lib: str = "lib", pyproject: bool = True) -> Path:
    """A fake ``<root>/<lib>/hubnorm/data/paths.py`` (and ``<root>/pyproject.toml``)."""
    folder = root / lib / "hubnorm" / "data"
    folder.mkdir(parents=True)
    (folder / "paths.py").write_text("")
    if pyproject:
        (root / "pyproject.toml").write_text("[project]\n")
    return folder / "paths.py"


# ------------------------------------------------------------------------------------------------ repo_root
def test_repo_root_is_the_checkout_holding_lib(monkeypatch, tmp_path):
    monkeypatch.setattr(paths, "__file__", str(_module_file(tmp_path / "repo")))
    assert paths.repo_root() == (tmp_path / "repo").resolve()


def test_repo_root_needs_a_lib_folder_and_a_pyproject(monkeypatch, tmp_path):
    monkeypatch.setattr(paths, "__file__", str(_module_file(tmp_path / "a", lib="site-packages")))
    assert paths.repo_root() is None
    monkeypatch.setattr(paths, "__file__", str(_module_file(tmp_path / "b", pyproject=False)))
    assert paths.repo_root() is None
    # a pyproject one level too high or too low does not count
    (tmp_path / "pyproject.toml").write_text("")
    (tmp_path / "b" / "lib" / "pyproject.toml").write_text("")
    assert paths.repo_root() is None


# ------------------------------------------------------------------------------------------------ _env_folder
def test_env_folder_guards(env, tmp_path):
    env.setenv("HUBNORM_DATA", " \t ")
    with pytest.raises(ValueError, match=r"^HUBNORM_DATA is set but blank: unset it or set it to a folder$"):
        paths._env_folder("HUBNORM_DATA")
    afile = tmp_path / "afile"
    afile.write_text("x")
    env.setenv("HUBNORM_CACHE", str(afile))
    with pytest.raises(ValueError) as err:
        paths._env_folder("HUBNORM_CACHE")
    assert str(err.value) == (f"HUBNORM_CACHE={str(afile)!r} is a file, not a folder: point it at a folder "
                              "(created when missing)")


def test_env_folder_returns_existing_or_missing_folders_expanded(env, tmp_path):
    env.setenv("HUBNORM_DATA", str(tmp_path))
    assert paths._env_folder("HUBNORM_DATA") == tmp_path
    env.setenv("HUBNORM_DATA", str(tmp_path / "not" / "yet"))
    assert paths._env_folder("HUBNORM_DATA") == tmp_path / "not" / "yet"
    env.setenv("HUBNORM_DATA", "~/d")
    assert paths._env_folder("HUBNORM_DATA") == tmp_path / "home" / "d"
    (tmp_path / "home" / "f").write_text("")
    env.setenv("HUBNORM_DATA", "~/f")   # the file check sees the expanded path
    with pytest.raises(ValueError, match="is a file, not a folder"):
        paths._env_folder("HUBNORM_DATA")


# ------------------------------------------------------------------------------------------------ roots
@pytest.mark.parametrize("root,var,checkout,installed", [
    (data_root, "HUBNORM_DATA", ("data", "raw"), (".cache", "hubnorm", "data")),
    (cache_root, "HUBNORM_CACHE", ("cache",), (".cache", "hubnorm", "embeddings")),
])
def test_root_precedence(env, tmp_path, root, var, checkout, installed):
    home = tmp_path / "home"
    env.setattr(paths, "repo_root", lambda: tmp_path / "repo")
    assert root() == tmp_path.joinpath("repo", *checkout)
    env.setattr(paths, "repo_root", lambda: None)
    assert root() == home.joinpath(*installed)
    env.setenv(var, "")                       # empty: as if unset
    assert root() == home.joinpath(*installed)
    env.setenv(var, str(tmp_path / "env"))
    assert root() == tmp_path / "env"
    assert root(tmp_path / "arg") == tmp_path / "arg"      # the argument wins
    assert root(str(tmp_path / "arg")) == tmp_path / "arg"
    assert root("~/x") == home / "x"
    assert isinstance(root(str(tmp_path)), Path)
    env.setenv(var, "  ")
    with pytest.raises(ValueError, match=f"{var} is set but blank"):
        root()
    assert root(tmp_path / "arg") == tmp_path / "arg"      # not read when an argument is given


def test_roots_read_their_own_variable(env, tmp_path):
    env.setattr(paths, "repo_root", lambda: None)
    env.setenv("HUBNORM_DATA", str(tmp_path / "d"))
    env.setenv("HUBNORM_CACHE", str(tmp_path / "c"))
    assert data_root() == tmp_path / "d" and cache_root() == tmp_path / "c"


def test_annotations_and_images_dirs(env, tmp_path):
    assert annotations_dir(tmp_path) == tmp_path / "annotations"
    assert images_dir("coco", tmp_path) == tmp_path / "coco" / "images"
    assert images_dir("flickr30k", str(tmp_path)) == tmp_path / "flickr30k" / "images"
    env.setenv("HUBNORM_DATA", str(tmp_path / "d"))
    assert annotations_dir() == tmp_path / "d" / "annotations"
    assert images_dir("flickr8k") == tmp_path / "d" / "flickr8k" / "images"


# ------------------------------------------------------------------------------------------------ slug
@pytest.mark.parametrize("text,expected", [
    ("hf-hub:org/name", "hf-hub_org_name"),
    ("ViT-B/32", "ViT-B_32"),
    ("a.b_c@d+e-f9", "a.b_c@d+e-f9"),      # the characters kept
    ("a :/ b", "a_b"),                     # a run of others is one underscore
    ("__x y__", "x_y"),                    # stripped of underscores at both ends
    ("-x-", "-x-"),                        # only underscores are stripped
    ("Xx:", "Xx"),
    ("é", "none"),
    ("", "none"),
    ("///", "none"),
    (12, "12"),
    (None, "None"),
])
def test_slug(text, expected):
    assert slug(text) == expected
