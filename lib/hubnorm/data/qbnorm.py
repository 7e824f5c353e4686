"""Import QB-Norm's released similarity matrices (pickles) into a ``sims:`` folder, once, on explicit request.

QB-Norm (Bogolin et al., CVPR 2022) releases, per dataset, pickled numpy arrays: the "training captions x test
videos" similarity matrix (its query bank), the "test captions x test videos" matrix (the evaluated scores), and
optionally the test query masks (one boolean per test caption row; False marks a padded row, e.g. MSR-VTT videos
with 19 instead of 20 captions). Rows are grouped by video: test caption row ``i`` belongs to video
``i // (rows / videos)``.

**Unpickling runs code.** A pickle can execute arbitrary code when it is loaded, so this importer runs only when
asked explicitly (``python -m hubnorm.data import-qbnorm ... --allow-pickle``, or
``import_qbnorm(..., allow_pickle=True)``), says so, records the sha256 of every pickle it read and of every file it
wrote, and writes plain ``.npy`` matrices that everything else reads with ``allow_pickle=False``. No notebook and no
loader ever unpickles. Import only files you trust.

What it writes (:mod:`hubnorm.data.sims`): ``test`` (valid test caption rows x test videos), ``bank_rows``
(training captions x test videos), the positives as one video index per kept caption row, modalities
``[text, video]`` (or as given, e.g. ``[text, audio]``), and a ``source`` record (the pickles' names, sizes and
checksums, the masks applied).
"""

from __future__ import annotations

import os
import pickle
from pathlib import Path
from typing import Optional, Sequence, Union

import numpy as np

from .cache import sha256_file as sha256
from .sims import SimsError, write_sims

PathLike = Union[str, os.PathLike]

WARNING = ("hubnorm.data import-qbnorm unpickles the files you name: a pickle runs code when it is loaded. "
           "Import only files you trust (QB-Norm's releases from their authors); they are converted once to plain "
           ".npy files that hubnorm reads without unpickling.")


def _unpickle(path: Path, what: str) -> np.ndarray:
    if not path.is_file():
        raise SimsError(f"{path} ({what}) is missing: pass the path of QB-Norm's pickle")
    try:
        with open(path, "rb") as f:
            obj = pickle.load(f)  # noqa: S301 - explicit, opt-in import (module docstring)
    except (pickle.UnpicklingError, EOFError, AttributeError, ImportError, ValueError) as exc:
        raise SimsError(f"{path} ({what}) is not a readable pickle ({type(exc).__name__}: {exc}): it may be truncated; "
                        "download it again") from None
    if hasattr(obj, "detach"):
        obj = obj.detach().cpu().numpy()
    if not isinstance(obj, np.ndarray):
        raise SimsError(f"{path} ({what}) holds a {type(obj).__name__}, not a numpy array: QB-Norm's files are "
                        "pickled numpy arrays; convert it to one")
    return obj


def import_qbnorm(sims_test: PathLike, sims_train_test: PathLike, out: PathLike, *,
                  query_masks: Optional[PathLike] = None, allow_pickle: bool = False,
                  modalities: Sequence[str] = ("text", "video"), dataset: Optional[str] = None,
                  model: Optional[str] = None, overwrite: bool = False) -> Path:
    """Convert QB-Norm's pickles to a sims folder at ``out`` (module docstring); returns the manifest path.

    Refuses (``PermissionError``) unless ``allow_pickle=True``: unpickling runs code."""
    if allow_pickle is not True:
        raise PermissionError("import_qbnorm unpickles its inputs, and a pickle runs code when loaded: pass "
                              "allow_pickle=True (CLI: --allow-pickle) only for files you trust")
    out = Path(out)
    if out.exists() and any(out.iterdir()) and not overwrite:
        raise SimsError(f"{out} exists and is not empty: choose a new folder (or pass overwrite=True / --overwrite)")
    paths = {"sims_test": Path(sims_test), "sims_train_test": Path(sims_train_test)}
    if query_masks is not None:
        paths["query_masks"] = Path(query_masks)
    test = _unpickle(paths["sims_test"], "test captions x test videos")
    bank = _unpickle(paths["sims_train_test"], "training captions x test videos")
    for arr, p in ((test, paths["sims_test"]), (bank, paths["sims_train_test"])):
        if arr.ndim != 2 or arr.dtype.kind != "f" or 0 in arr.shape:
            raise SimsError(f"{p} must hold a non-empty 2-D float matrix; got shape {arr.shape}, dtype {arr.dtype}")
        if not np.isfinite(arr).all():
            r, c = np.argwhere(~np.isfinite(arr))[0]
            raise SimsError(f"{p} holds a non-finite score at row {r}, column {c}: recompute the matrix")
    n_caps, n_items = test.shape
    if bank.shape[1] != n_items:
        raise SimsError(f"{paths['sims_train_test']} has {bank.shape[1]} columns but {paths['sims_test']} has {n_items} "
                        "test items: both must have the test items as columns, in the same order")
    if n_caps % n_items:
        raise SimsError(f"{paths['sims_test']} has {n_caps} rows for {n_items} items: QB-Norm's layout groups the same "
                        "number of caption rows per item (pad with query masks); this matrix does not")
    per_item = n_caps // n_items
    labels = np.arange(n_items, dtype=np.int64).repeat(per_item)
    keep = np.ones(n_caps, dtype=bool)
    if "query_masks" in paths:
        mask = _unpickle(paths["query_masks"], "test query masks")
        if mask.size != n_caps:
            raise SimsError(f"{paths['query_masks']} has {mask.size} entries but {paths['sims_test']} has {n_caps} "
                            "caption rows: the query mask needs one entry per test caption row")
        keep = mask.reshape(-1).astype(bool)
        if keep.dtype != bool or not np.isin(mask, (0, 1)).all():
            raise SimsError(f"{paths['query_masks']} must be 0/1 (or boolean) per caption row")
    lost = np.setdiff1d(np.arange(n_items), labels[keep])
    if lost.size:
        raise SimsError(f"{paths.get('query_masks')}: item {lost[0]} has no valid caption row after masking; the mask "
                        "does not match the matrices")
    source = {"importer": "hubnorm.data.qbnorm", "layout": "QB-Norm pickles", "captions_per_item": per_item,
              "rows_kept": int(keep.sum()), "rows_masked": int((~keep).sum()),
              "inputs": {k: {"name": p.name, "bytes": p.stat().st_size, "sha256": sha256(p)} for k, p in paths.items()}}
    if out.exists() and overwrite:
        for f in out.iterdir():
            if f.is_file():
                f.unlink()
    return write_sims(out, {"test": np.ascontiguousarray(test[keep]), "bank_rows": bank},
                      modalities=tuple(modalities), labels=labels[keep], dataset=dataset, model=model,
                      extra={"source": source})


__all__ = ["import_qbnorm", "WARNING"]
