"""Run profiles as data: ``profiles.yaml`` beside this module, read and checked for the runner behind ``run_all.sh``.

The file has these sections:

- ``profiles``: ``{name: {results, parameters, offers, prepares, [rehearse]}}``: the results folder under the
  results root (``""``: the root itself), the notebooks' parameters (each notebook receives the ones it declares;
  ``{rehearsal_tag}`` in a string is the rehearsal cache's tag, ``seed0``), what the run's data offers (checked
  against each notebook's ``needs``), the preparations it runs before the notebooks, and the rehearsal caches it
  writes first (datasets of the library's rehearsal sizes, :func:`hubnorm.data.rehearse.rehearsal_sizes`);
- ``own_source``: ``{offers: {kind: [...]}}``: what a ``--source`` run offers, by source kind, where it differs
  from the default profile;
- ``needs``: ``{need: line}``: the line printed when a notebook is skipped for lack of it (``{offered_by}``: the
  notebooks the run does offer enough for);
- ``preparations``: ``{name: {what, start, command}}``;
- ``notebooks``: ``{"NN": {needs, uses}}`` (by number prefix; ``default`` for every notebook not listed).

:func:`load_profiles` checks every key; an error is a :class:`ValueError` naming the key (``profiles.paper-coco.
offers[1]``) and what it must be. Nothing here knows a notebook or a profile by name. This is tooling of the
checkout (``tools/``, installed beside hubnorm by ``scripts/bootstrap.sh``), not part of the hubnorm package.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, List, Mapping, Optional, Tuple

from hubnorm.data.rehearse import read_mapping_file, rehearsal_sizes

#: The run-profiles file of run_all.sh.
PROFILES_FILE = Path(__file__).with_name("profiles.yaml")

__all__ = ["Profile", "NotebookNeeds", "Preparation", "Profiles", "load_profiles", "read_profiles_file", "PROFILES_FILE"]

#: the fields the runner fills in every preparation's command; any other ``{name}`` is a profile parameter
PREPARATION_FIELDS = {"python", "source", "notebook"}
SECTIONS = {"paper_parameters", "needs", "preparations", "profiles", "own_source", "notebooks"}
SOURCE_KINDS = ("synthetic", "cache", "local", "sims")
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")


@dataclass(frozen=True)
class Profile:
    name: str
    results: str
    parameters: Dict[str, object]
    offers: Tuple[str, ...]
    prepares: Tuple[str, ...] = ()
    rehearse: Tuple[str, ...] = ()


@dataclass(frozen=True)
class NotebookNeeds:
    needs: Tuple[str, ...]
    uses: Tuple[str, ...]


@dataclass(frozen=True)
class Preparation:
    name: str
    what: str
    start: str
    command: Tuple[str, ...]


@dataclass(frozen=True)
class Profiles:
    """The checked contents of the profiles file."""

    profiles: Dict[str, Profile]
    needs: Dict[str, str]
    preparations: Dict[str, Preparation]
    own_source_offers: Dict[str, Tuple[str, ...]]
    notebooks: Dict[str, NotebookNeeds]
    rehearsal: Dict[str, dict]
    path: str = ""
    default_notebook: NotebookNeeds = field(default_factory=lambda: NotebookNeeds(("embeddings",), ()))

    def notebook(self, name: str) -> NotebookNeeds:
        """What notebook ``name`` (e.g. ``06_cross_encoder_reranking``) needs: its entry by number prefix, else
        the ``default`` entry."""
        return self.notebooks.get(name[:2], self.default_notebook)

    def offers(self, profile: str, own_source: Optional[str] = None) -> Tuple[str, ...]:
        """What a run offers: the profile's, or for a ``--source`` run the ``own_source`` entry of its kind."""
        if own_source:
            kind = own_source.split(":", 1)[0]
            if kind in self.own_source_offers:
                return self.own_source_offers[kind]
        return self.profiles[profile].offers


def _err(key: str, what: str, got) -> ValueError:
    return ValueError(f"profiles file: {key} {what}; got {got!r}")


def _names(value, key: str, allowed=None) -> Tuple[str, ...]:
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise _err(key, "must be a list of names", value)
    for i, v in enumerate(value):
        if allowed is not None and v not in allowed:
            raise _err(f"{key}[{i}]", f"must be one of {sorted(allowed)}", v)
    if len(set(value)) != len(value):
        raise _err(key, "must not repeat a name", value)
    return tuple(value)


def _keys(value, key: str, required, optional=()) -> dict:
    if not isinstance(value, dict):
        raise _err(key, "must be a mapping", value)
    missing = sorted(set(required) - set(value))
    extra = sorted(set(value) - set(required) - set(optional))
    if missing:
        raise ValueError(f"profiles file: {key} lacks the key(s) {missing}")
    if extra:
        raise ValueError(f"profiles file: {key} has unknown key(s) {extra}; known: "
                         f"{sorted(set(required) | set(optional))}")
    return value


def check_profiles(data: Mapping, path: str = "", rehearsal: Optional[Mapping] = None) -> Profiles:
    """Check the parsed profiles file ``data``; returns :class:`Profiles`. Every error names its key.
    ``rehearsal``: the datasets' split sizes a profile may rehearse (``{"rehearsal": {...}}``, checked by
    :func:`hubnorm.data.rehearse.rehearsal_sizes`; None: the library's file)."""
    _keys(data, "(top level)", SECTIONS - {"paper_parameters"}, {"paper_parameters"})
    needs_sec = data["needs"]
    if not isinstance(needs_sec, dict) or not needs_sec:
        raise _err("needs", "must map each need to the line printed when a run does not offer it", needs_sec)
    for k, v in needs_sec.items():
        if not isinstance(v, str) or not v.strip():
            raise _err(f"needs.{k}", "must be the line printed when a notebook is skipped for lack of it", v)
    needs = dict(needs_sec)

    preps = {}
    if not isinstance(data["preparations"], dict):
        raise _err("preparations", "must be a mapping", data["preparations"])
    for name, prep in data["preparations"].items():
        key = f"preparations.{name}"
        _keys(prep, key, ("what", "start", "command"))
        for f in ("what", "start"):
            if not isinstance(prep[f], str) or not prep[f].strip():
                raise _err(f"{key}.{f}", "must be a non-empty string", prep[f])
        cmd = prep["command"]
        if not isinstance(cmd, list) or not cmd or not all(isinstance(c, str) for c in cmd):
            raise _err(f"{key}.command", "must be a non-empty list of strings (an argv)", cmd)
        preps[name] = Preparation(name, prep["what"], prep["start"], tuple(cmd))

    rehearsal = rehearsal_sizes(None if rehearsal is None else dict(rehearsal))

    if not isinstance(data["profiles"], dict) or "default" not in data["profiles"]:
        raise _err("profiles", "must be a mapping of profile names that includes 'default'",
                   sorted(data["profiles"]) if isinstance(data["profiles"], dict) else data["profiles"])
    profiles = {}
    for name, prof in data["profiles"].items():
        key = f"profiles.{name}"
        if not isinstance(name, str) or not _NAME.match(name):
            raise _err(key, "must be named with letters, digits, '.', '_' or '-'", name)
        _keys(prof, key, ("results", "parameters", "offers", "prepares"), ("rehearse",))
        results = prof["results"]
        if not isinstance(results, str) or (results and not _NAME.match(results)):
            raise _err(f"{key}.results", "must be a folder name under the results root ('' for the root itself)",
                       results)
        if not isinstance(prof["parameters"], dict) or not all(isinstance(k, str) for k in prof["parameters"]):
            raise _err(f"{key}.parameters", "must be a mapping of notebook parameter names to values",
                       prof["parameters"])
        offers = _names(prof["offers"], f"{key}.offers", needs)
        prepares = _names(prof["prepares"], f"{key}.prepares", preps)
        rehearse = _names(prof.get("rehearse", []), f"{key}.rehearse", rehearsal)
        for p, v in prof["parameters"].items():
            if isinstance(v, str) and "{rehearsal_tag}" in v and not rehearse:
                raise _err(f"{key}.parameters.{p}", "uses {rehearsal_tag} but the profile rehearses nothing", v)
        for prep in prepares:   # a preparation's {parameter} fields are the profile's parameters
            fields = set(re.findall(r"\{(\w+)\}", " ".join(preps[prep].command))) - PREPARATION_FIELDS
            missing = sorted(fields - set(prof["parameters"]))
            if missing:
                raise _err(f"{key}.parameters", f"must set {', '.join(missing)} (the command of preparation "
                           f"{prep!r} uses them)", prof["parameters"])
        profiles[name] = Profile(name, results, dict(prof["parameters"]), offers, prepares, rehearse)
    if profiles["default"].results != "" or profiles["default"].rehearse:
        raise _err("profiles.default", "must write to the results root itself (results: '') and rehearse nothing",
                   data["profiles"]["default"])

    own = _keys(data["own_source"], "own_source", ("offers",))
    if not isinstance(own["offers"], dict):
        raise _err("own_source.offers", "must map source kinds to what their runs offer", own["offers"])
    own_offers = {}
    for kind, offered in own["offers"].items():
        if kind not in SOURCE_KINDS:
            raise _err(f"own_source.offers.{kind}", f"must be a source kind {list(SOURCE_KINDS)}", kind)
        own_offers[kind] = _names(offered, f"own_source.offers.{kind}", needs)

    nbs = data["notebooks"]
    if not isinstance(nbs, dict) or "default" not in nbs:
        raise _err("notebooks", "must be a mapping of notebook numbers ('06') that includes 'default'", nbs)
    default = nbs["default"]
    _keys(default, "notebooks.default", ("needs", "uses"))
    base = NotebookNeeds(_names(default["needs"], "notebooks.default.needs", needs),
                         _names(default["uses"], "notebooks.default.uses", preps))
    notebooks = {}
    for num, entry in nbs.items():
        if num == "default":
            continue
        key = f"notebooks.{num}"
        if not isinstance(num, str) or not re.fullmatch(r"\d\d", num):
            raise _err(key, "must be a notebook's two-digit number in quotes (e.g. \"06\")", num)
        _keys(entry, key, (), ("needs", "uses"))
        notebooks[num] = NotebookNeeds(
            _names(entry["needs"], f"{key}.needs", needs) if "needs" in entry else base.needs,
            _names(entry["uses"], f"{key}.uses", preps) if "uses" in entry else base.uses)
    return Profiles(profiles, needs, preps, own_offers, notebooks, rehearsal, path, base)


def read_profiles_file(path=None) -> dict:
    """The parsed run-profiles file (``path``, default :data:`PROFILES_FILE`), a mapping; a clear error otherwise."""
    return read_mapping_file(PROFILES_FILE if path is None else path,
                             "a mapping of sections (profiles, notebooks, needs, ...)")


def load_profiles(path=None) -> Profiles:
    """Read and check the profiles file (``path``, default :data:`PROFILES_FILE`)."""
    where = PROFILES_FILE if path is None else Path(path)
    return check_profiles(read_profiles_file(path), str(where))


def offered_by_text(numbers: List[str]) -> str:
    """``notebook 08`` / ``notebooks 00, 08`` / ``no notebook``."""
    if not numbers:
        return "no notebook"
    return ("notebook " if len(numbers) == 1 else "notebooks ") + ", ".join(numbers)
