"""Unit checks of hubnorm_tools.profiles (``check_profiles``, ``load_profiles``, :class:`Profiles`'
``notebook`` / ``offers``, ``offered_by_text``) aimed at what its mutation run found unchecked: the runner's tests
that read the profiles file in this process start run_all.sh in a Jupyter kernel (deselected in mutation runs), so
the baseline reached no function of the module.

Every check starts from one small, valid profiles document (:func:`_doc`, written here by hand, not the package's
file) and breaks one key at a time: each guard is checked by its whole message (the key it names, what the key
must be, and the value it got), and each accepted boundary (an empty results folder, a parameter that is not a
string, a notebook entry without ``needs`` or ``uses``) is checked to pass. What a valid document becomes
(:class:`Profile`, :class:`Preparation`, :class:`NotebookNeeds`, the own-source offers) is compared field by field
with hand-written values; the package's own file is loaded too (its path recorded, its paper profiles rehearsing the
rehearsal section's names).

Mutation run (``--tests tests/test_own_data.py`` [+ this file]): 0 of 581 (0%, no selected test reached the module)
-> 579 killed of 581 (99.7%). The 2 survivors are equivalent mutants (no behaviour can tell them apart):
- ``Profiles.offers``: ``own_source.split(":", 1)`` -> ``split(":", 2)`` / ``split(":")``: only the first part (the
  kind) is read.
"""

from __future__ import annotations

import copy
import re

import pytest

from hubnorm_tools.profiles import (PROFILES_FILE, NotebookNeeds, Preparation, Profile, Profiles, check_profiles,
                                   load_profiles, offered_by_text)

NEED_LINE = "needs embeddings; a sims: folder holds score matrices only ({offered_by} runs on it)"


def _doc() -> dict:
    """A small valid profiles document (a fresh copy on every call)."""
    return copy.deepcopy({
        "paper_parameters": {"fast": False},
        "needs": {"embeddings": NEED_LINE, "latents": "needs latents"},
        "preparations": {
            "caption-embeddings": {"what": "sentence embeddings", "start": "encoding {source}",
                                   "command": ["{python}", "-m", "hubnorm.data", "encode-texts", "{source}"]},
            "other": {"what": "other prep", "start": "other start", "command": ["true"]}},
        "profiles": {
            "default": {"results": "", "parameters": {"n": 3, "grid": ["{rehearsal_tag}"]},
                        "offers": ["embeddings", "latents"], "prepares": []},
            "rehearse-x": {"results": "rehearse-x", "rehearse": ["dsx"],
                           "parameters": {"source": "cache:flickr30k:synthetic-rehearsal:{rehearsal_tag}", "k": 1},
                           "offers": ["embeddings"], "prepares": ["caption-embeddings", "other"]}},
        "own_source": {"offers": {"sims": ["latents"], "local": []}},
        "notebooks": {"default": {"needs": ["embeddings"], "uses": ["other"]},
                      "06": {"needs": ["embeddings", "latents"]},
                      "07": {"uses": ["caption-embeddings"]},
                      "08": {}},
        "rehearsal": {"dsx": {"preset": "flickr30k", "splits": {"test": [10, 55]}}},
    })


def _check(doc, path: str = ""):
    """check_profiles of a :func:`_doc` document: its ``rehearsal`` entry is passed as the rehearsal sizes."""
    if isinstance(doc, dict) and "rehearsal" in doc:
        doc = dict(doc)
        return check_profiles(doc, path, {"rehearsal": doc.pop("rehearsal")})
    return check_profiles(doc, path)


def _fails(doc, message: str) -> None:
    """_check(doc) raises a ValueError whose whole text is ``message``."""
    with pytest.raises(ValueError, match="^" + re.escape(message) + "$"):
        _check(doc)


# ------------------------------------------------------------------------------------------ a valid document
def test_a_valid_document_becomes_the_checked_profiles():
    p = _check(_doc(), "/some/profiles.yaml")
    assert isinstance(p, Profiles) and p.path == "/some/profiles.yaml"
    assert p.needs == {"embeddings": NEED_LINE, "latents": "needs latents"}
    assert p.preparations == {
        "caption-embeddings": Preparation("caption-embeddings", "sentence embeddings", "encoding {source}",
                                          ("{python}", "-m", "hubnorm.data", "encode-texts", "{source}")),
        "other": Preparation("other", "other prep", "other start", ("true",))}
    assert p.profiles == {
        "default": Profile("default", "", {"n": 3, "grid": ["{rehearsal_tag}"]}, ("embeddings", "latents"), (), ()),
        "rehearse-x": Profile("rehearse-x", "rehearse-x",
                              {"source": "cache:flickr30k:synthetic-rehearsal:{rehearsal_tag}", "k": 1},
                              ("embeddings",), ("caption-embeddings", "other"), ("dsx",))}
    assert all(type(v) is tuple for prof in p.profiles.values() for v in (prof.offers, prof.prepares, prof.rehearse))
    assert p.own_source_offers == {"sims": ("latents",), "local": ()}
    assert p.default_notebook == NotebookNeeds(("embeddings",), ("other",))
    assert p.notebooks == {"06": NotebookNeeds(("embeddings", "latents"), ("other",)),   # uses: the default's
                           "07": NotebookNeeds(("embeddings",), ("caption-embeddings",)),   # needs: the default's
                           "08": NotebookNeeds(("embeddings",), ("other",))}
    assert p.rehearsal == {"dsx": {"preset": "flickr30k", "splits": {"test": (10, 55)}}}


def test_the_checked_profiles_are_copies_not_the_document():
    doc = _doc()
    p = _check(doc)
    doc["needs"]["embeddings"] = "changed"
    doc["profiles"]["default"]["parameters"]["n"] = 99
    assert p.needs["embeddings"] == NEED_LINE and p.profiles["default"].parameters == {"n": 3,
                                                                                        "grid": ["{rehearsal_tag}"]}


def test_path_defaults_to_empty_and_paper_parameters_may_be_absent():
    doc = _doc()
    del doc["paper_parameters"]
    p = _check(doc)
    assert p.path == ""


def test_notebook_by_number_prefix_else_the_default():
    p = _check(_doc())
    assert p.notebook("06_cross_encoder_reranking") == NotebookNeeds(("embeddings", "latents"), ("other",))
    assert p.notebook("07_rsc") == NotebookNeeds(("embeddings",), ("caption-embeddings",))
    assert p.notebook("03_k_ablation") is p.default_notebook
    assert p.notebook("60_not_06") is p.default_notebook   # the first two characters, not any two
    # the dataclass's own default entry: embeddings only, no preparation
    bare = Profiles({}, {}, {}, {}, {}, {})
    assert bare.notebook("01_x") == NotebookNeeds(("embeddings",), ()) and bare.path == ""


def test_offers_of_a_profile_and_of_an_own_source_run():
    p = _check(_doc())
    assert p.offers("default") == ("embeddings", "latents")
    assert p.offers("rehearse-x") == ("embeddings",)
    assert p.offers("default", "sims:/data/my-sims") == ("latents",)    # the own_source entry of its kind
    assert p.offers("default", "sims") == ("latents",)
    assert p.offers("default", "local:/a:b") == ()
    assert p.offers("rehearse-x", "cache:coco:m:p") == ("embeddings",)   # kind not listed: the profile's
    assert p.offers("rehearse-x", "") == ("embeddings",)
    assert p.offers("rehearse-x", None) == ("embeddings",)
    with pytest.raises(KeyError):
        p.offers("nope")


def test_offered_by_text():
    assert offered_by_text([]) == "no notebook"
    assert offered_by_text(["08"]) == "notebook 08"
    assert offered_by_text(["00", "08"]) == "notebooks 00, 08"
    assert offered_by_text(["00", "03", "08"]) == "notebooks 00, 03, 08"


def test_load_profiles_reads_the_package_file_and_a_given_file(tmp_path):
    p = load_profiles()
    assert p.path == str(PROFILES_FILE)
    assert p.profiles["default"].results == "" and p.profiles["default"].rehearse == ()
    assert set(p.profiles["rehearse-coco"].rehearse) <= set(p.rehearsal)
    yaml = pytest.importorskip("yaml")
    path = tmp_path / "profiles.yaml"
    doc = _doc()
    del doc["rehearsal"]   # a file holds no rehearsal sizes: a profile rehearses the library's datasets
    doc["profiles"]["rehearse-x"]["rehearse"] = ["coco"]
    path.write_text(yaml.safe_dump(doc), encoding="utf-8")
    q = load_profiles(path)
    assert q.path == str(path) and q == check_profiles(doc, str(path))
    assert set(q.rehearsal) == {"flickr30k", "coco"}
    assert load_profiles(str(path)).path == str(path)


# ------------------------------------------------------------------------------------------------ top level
def test_top_level_keys():
    _fails(["needs"], "profiles file: (top level) must be a mapping; got ['needs']")
    doc = _doc()
    del doc["needs"], doc["notebooks"]
    _fails(doc, "profiles file: (top level) lacks the key(s) ['needs', 'notebooks']")
    doc = _doc()
    doc["zeta"] = doc["alpha"] = 1
    _fails(doc, "profiles file: (top level) has unknown key(s) ['alpha', 'zeta']; known: ['needs', 'notebooks', "
                "'own_source', 'paper_parameters', 'preparations', 'profiles']")
    doc = _doc()
    del doc["own_source"]
    doc["zeta"] = 1   # missing is reported before unknown
    _fails(doc, "profiles file: (top level) lacks the key(s) ['own_source']")
    doc = _doc()
    sizes = {"rehearsal": doc.pop("rehearsal")}
    doc["rehearsal"] = sizes["rehearsal"]   # the rehearsal sizes are the library's, never a section of this file
    with pytest.raises(ValueError, match=r"^profiles file: \(top level\) has unknown key\(s\) \['rehearsal'\]"):
        check_profiles(doc, "", sizes)


# ------------------------------------------------------------------------------------------------ needs
@pytest.mark.parametrize("needs", [{}, ["embeddings"], None])
def test_needs_must_be_a_non_empty_mapping(needs):
    doc = _doc()
    doc["needs"] = needs
    _fails(doc, f"profiles file: needs must map each need to the line printed when a run does not offer it; "
                f"got {needs!r}")


@pytest.mark.parametrize("line", ["", "  \n", 3, None])
def test_a_need_line_must_be_a_non_blank_string(line):
    doc = _doc()
    doc["needs"]["latents"] = line
    _fails(doc, f"profiles file: needs.latents must be the line printed when a notebook is skipped for lack of it; "
                f"got {line!r}")


# ------------------------------------------------------------------------------------------------ preparations
def test_preparations():
    doc = _doc()
    doc["preparations"] = ["caption-embeddings"]
    _fails(doc, "profiles file: preparations must be a mapping; got ['caption-embeddings']")
    doc = _doc()
    doc["preparations"] = {}
    doc["profiles"]["rehearse-x"]["prepares"] = []
    doc["notebooks"] = {"default": {"needs": ["embeddings"], "uses": []}}
    assert _check(doc).preparations == {}   # no preparation at all is fine
    doc = _doc()
    del doc["preparations"]["other"]["command"]
    _fails(doc, "profiles file: preparations.other lacks the key(s) ['command']")
    doc = _doc()
    doc["preparations"]["other"]["when"] = "now"
    _fails(doc, "profiles file: preparations.other has unknown key(s) ['when']; known: ['command', 'start', 'what']")
    doc = _doc()
    doc["preparations"]["other"] = "true"
    _fails(doc, "profiles file: preparations.other must be a mapping; got 'true'")


@pytest.mark.parametrize("field", ["what", "start"])
@pytest.mark.parametrize("value", ["", "   ", 5, ["x"]])
def test_a_preparation_text_must_be_a_non_empty_string(field, value):
    doc = _doc()
    doc["preparations"]["other"][field] = value
    _fails(doc, f"profiles file: preparations.other.{field} must be a non-empty string; got {value!r}")


@pytest.mark.parametrize("command", ["true", [], ["true", 1], ("true",), None])
def test_a_preparation_command_must_be_an_argv(command):
    doc = _doc()
    doc["preparations"]["other"]["command"] = command
    _fails(doc, f"profiles file: preparations.other.command must be a non-empty list of strings (an argv); "
                f"got {command!r}")


# ------------------------------------------------------------------------------------------------ profiles
def test_rehearsal_section_is_checked_by_the_rehearsal_module():
    doc = _doc()
    doc["rehearsal"]["dsx"]["splits"]["test"] = [10, 49]
    _fails(doc, "rehearsal sizes: rehearsal.dsx.splits.test has 49 captions for 10 images; the generator makes "
                "between 5 and 6 captions per image")


def test_profiles_must_be_a_mapping_with_default():
    doc = _doc()
    del doc["profiles"]["default"]
    _fails(doc, "profiles file: profiles must be a mapping of profile names that includes 'default'; "
                "got ['rehearse-x']")
    doc = _doc()
    doc["profiles"] = ["default"]
    _fails(doc, "profiles file: profiles must be a mapping of profile names that includes 'default'; got ['default']")
    doc = _doc()
    doc["profiles"] = None
    _fails(doc, "profiles file: profiles must be a mapping of profile names that includes 'default'; got None")


@pytest.mark.parametrize("name", ["-x", ".x", "a b", "a/b", "", 5])
def test_a_profile_name_must_be_a_plain_name(name):
    doc = _doc()
    doc["profiles"][name] = doc["profiles"]["rehearse-x"]
    _fails(doc, f"profiles file: profiles.{name} must be named with letters, digits, '.', '_' or '-'; got {name!r}")


def test_plain_profile_names_are_accepted():
    doc = _doc()
    for name in ("a", "A.b_c-9", "9x"):
        doc["profiles"][name] = copy.deepcopy(doc["profiles"]["rehearse-x"])
    assert {"a", "A.b_c-9", "9x"} <= set(_check(doc).profiles)


def test_profile_keys():
    doc = _doc()
    del doc["profiles"]["rehearse-x"]["prepares"]
    _fails(doc, "profiles file: profiles.rehearse-x lacks the key(s) ['prepares']")
    doc = _doc()
    doc["profiles"]["rehearse-x"]["notebooks"] = []
    _fails(doc, "profiles file: profiles.rehearse-x has unknown key(s) ['notebooks']; known: ['offers', "
                "'parameters', 'prepares', 'rehearse', 'results']")
    doc = _doc()
    doc["profiles"]["rehearse-x"] = []
    _fails(doc, "profiles file: profiles.rehearse-x must be a mapping; got []")


@pytest.mark.parametrize("results", [None, 3, "a/b", "-x", " "])
def test_results_must_be_a_folder_name(results):
    doc = _doc()
    doc["profiles"]["rehearse-x"]["results"] = results
    _fails(doc, "profiles file: profiles.rehearse-x.results must be a folder name under the results root ('' for "
                f"the root itself); got {results!r}")


def test_a_non_default_profile_may_write_to_the_root():
    doc = _doc()
    doc["profiles"]["rehearse-x"]["results"] = ""
    assert _check(doc).profiles["rehearse-x"].results == ""


@pytest.mark.parametrize("parameters", [["fast"], None, {1: "x"}, {"a": 1, 2: "x"}])
def test_parameters_must_map_names_to_values(parameters):
    doc = _doc()
    doc["profiles"]["rehearse-x"]["parameters"] = parameters
    _fails(doc, "profiles file: profiles.rehearse-x.parameters must be a mapping of notebook parameter names to "
                f"values; got {parameters!r}")


def test_offers_prepares_and_rehearse_are_lists_of_known_names():
    doc = _doc()
    doc["profiles"]["rehearse-x"]["offers"] = "embeddings"
    _fails(doc, "profiles file: profiles.rehearse-x.offers must be a list of names; got 'embeddings'")
    doc = _doc()
    doc["profiles"]["rehearse-x"]["offers"] = ["embeddings", 7]
    _fails(doc, "profiles file: profiles.rehearse-x.offers must be a list of names; got ['embeddings', 7]")
    doc = _doc()
    doc["profiles"]["rehearse-x"]["offers"] = ["embeddings", "images"]
    _fails(doc, "profiles file: profiles.rehearse-x.offers[1] must be one of ['embeddings', 'latents']; got 'images'")
    doc = _doc()
    doc["profiles"]["rehearse-x"]["offers"] = ["latents", "embeddings", "latents"]
    _fails(doc, "profiles file: profiles.rehearse-x.offers must not repeat a name; got ['latents', 'embeddings', "
                "'latents']")
    doc = _doc()
    doc["profiles"]["rehearse-x"]["prepares"] = ["nope"]
    _fails(doc, "profiles file: profiles.rehearse-x.prepares[0] must be one of ['caption-embeddings', 'other']; "
                "got 'nope'")
    doc = _doc()
    doc["profiles"]["rehearse-x"]["rehearse"] = ["dsx", "paper-x"]   # a run profile's name is not a dataset
    _fails(doc, "profiles file: profiles.rehearse-x.rehearse[1] must be one of ['dsx']; got 'paper-x'")


def test_rehearsal_tag_needs_a_rehearsal():
    doc = _doc()
    del doc["profiles"]["rehearse-x"]["rehearse"]
    _fails(doc, "profiles file: profiles.rehearse-x.parameters.source uses {rehearsal_tag} but the profile "
                "rehearses nothing; got 'cache:flickr30k:synthetic-rehearsal:{rehearsal_tag}'")
    doc = _doc()
    doc["profiles"]["rehearse-x"]["rehearse"] = []
    _fails(doc, "profiles file: profiles.rehearse-x.parameters.source uses {rehearsal_tag} but the profile "
                "rehearses nothing; got 'cache:flickr30k:synthetic-rehearsal:{rehearsal_tag}'")
    doc = _doc()   # no {rehearsal_tag} in a string: nothing to rehearse is fine (the default's list value has one)
    del doc["profiles"]["rehearse-x"]["rehearse"]
    doc["profiles"]["rehearse-x"]["parameters"]["source"] = "cache:flickr30k:m:p"
    assert _check(doc).profiles["rehearse-x"].rehearse == ()


def test_default_profile_writes_to_the_root_and_rehearses_nothing():
    doc = _doc()
    doc["profiles"]["default"]["results"] = "default"
    _fails(doc, "profiles file: profiles.default must write to the results root itself (results: '') and rehearse "
                f"nothing; got {doc['profiles']['default']!r}")
    doc = _doc()
    doc["profiles"]["default"]["rehearse"] = ["dsx"]
    _fails(doc, "profiles file: profiles.default must write to the results root itself (results: '') and rehearse "
                f"nothing; got {doc['profiles']['default']!r}")


# ------------------------------------------------------------------------------------------------ own_source
def test_own_source():
    doc = _doc()
    doc["own_source"] = {}
    _fails(doc, "profiles file: own_source lacks the key(s) ['offers']")
    doc = _doc()
    doc["own_source"]["extra"] = 1
    _fails(doc, "profiles file: own_source has unknown key(s) ['extra']; known: ['offers']")
    doc = _doc()
    doc["own_source"]["offers"] = ["sims"]
    _fails(doc, "profiles file: own_source.offers must map source kinds to what their runs offer; got ['sims']")
    doc = _doc()
    doc["own_source"]["offers"]["blip"] = []
    _fails(doc, "profiles file: own_source.offers.blip must be a source kind ['synthetic', 'cache', 'local', "
                "'sims']; got 'blip'")
    doc = _doc()
    doc["own_source"]["offers"]["cache"] = ["images"]
    _fails(doc, "profiles file: own_source.offers.cache[0] must be one of ['embeddings', 'latents']; got 'images'")
    doc = _doc()
    doc["own_source"]["offers"] = {k: ["embeddings"] for k in ("synthetic", "cache", "local", "sims")}
    assert set(_check(doc).own_source_offers) == {"synthetic", "cache", "local", "sims"}


# ------------------------------------------------------------------------------------------------ notebooks
@pytest.mark.parametrize("notebooks", [["default"], {"06": {}}, None])
def test_notebooks_must_be_a_mapping_with_default(notebooks):
    doc = _doc()
    doc["notebooks"] = notebooks
    _fails(doc, "profiles file: notebooks must be a mapping of notebook numbers ('06') that includes 'default'; "
                f"got {notebooks!r}")


def test_notebook_entries():
    doc = _doc()
    del doc["notebooks"]["default"]["uses"]
    _fails(doc, "profiles file: notebooks.default lacks the key(s) ['uses']")
    doc = _doc()
    doc["notebooks"]["default"]["needs"] = ["images"]
    _fails(doc, "profiles file: notebooks.default.needs[0] must be one of ['embeddings', 'latents']; got 'images'")
    doc = _doc()
    doc["notebooks"]["default"]["uses"] = ["nope"]
    _fails(doc, "profiles file: notebooks.default.uses[0] must be one of ['caption-embeddings', 'other']; "
                "got 'nope'")
    doc = _doc()
    doc["notebooks"]["06"]["skip"] = True
    _fails(doc, "profiles file: notebooks.06 has unknown key(s) ['skip']; known: ['needs', 'uses']")
    doc = _doc()
    doc["notebooks"]["06"]["needs"] = ["latents", "images"]
    _fails(doc, "profiles file: notebooks.06.needs[1] must be one of ['embeddings', 'latents']; got 'images'")
    doc = _doc()
    doc["notebooks"]["07"]["uses"] = ["other", "nope"]
    _fails(doc, "profiles file: notebooks.07.uses[1] must be one of ['caption-embeddings', 'other']; got 'nope'")


@pytest.mark.parametrize("num", ["6", "006", "a6", "06x", "x06", 6])
def test_a_notebook_key_is_a_quoted_two_digit_number(num):
    doc = _doc()
    doc["notebooks"][num] = {}
    _fails(doc, f"profiles file: notebooks.{num} must be a notebook's two-digit number in quotes (e.g. \"06\"); "
                f"got {num!r}")


def test_a_preparation_field_must_be_a_parameter_of_every_profile_that_prepares_it():
    doc = _doc()
    doc["preparations"]["other"]["command"] = ["{python}", "enc", "{source}", "--precision", "{text_precision}"]
    _fails(doc, "profiles file: profiles.rehearse-x.parameters must set text_precision (the command of preparation "
                "'other' uses them); got " + repr(doc["profiles"]["rehearse-x"]["parameters"]))
    doc["profiles"]["rehearse-x"]["parameters"]["text_precision"] = "amp_bf16"
    assert _check(doc).preparations["other"].command[-1] == "{text_precision}"


def test_the_shipped_preparations_are_filled_from_the_paper_parameters():
    from hubnorm_tools.profiles import load_profiles
    p = load_profiles()
    cmd = p.preparations["caption-embeddings"].command
    assert cmd[-2:] == ("--precision", "{text_precision}")
    for name in ("paper-flickr30k", "paper-coco", "rehearse-flickr30k", "rehearse-coco"):
        assert p.profiles[name].parameters["text_precision"] == "amp_bf16", name
