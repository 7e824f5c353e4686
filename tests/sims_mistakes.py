"""A catalogue of realistic mistakes with released score matrices (issue 44): each turns a right sims folder into a
wrong one, as people do by hand. ``tests/test_sims_checks.py`` asserts that every one is refused with a message
naming it; ``benchmarks/probe_sims_mistakes.py`` counts the outcomes (clear error, warned, silent) into a report.

A folder is given as a spec: ``{"mats": {role: array}, "labels" or "mask", "modalities", "extra": manifest
fields}``, written by :func:`hubnorm.data.sims.write_sims` (or by hand, for manifest mistakes)."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from hubnorm.data.sims import write_sims


def _unit(x):
    return x / np.linalg.norm(x, axis=1, keepdims=True)


def right_spec(seed: int = 0, n_items: int = 200, per_item: int = 2, d: int = 64, n_bank: int = 400):
    """A right folder: test captions x test items, banks drawn the same way (each modality in its own cone, as
    CLIP-family embeddings are), every role present."""
    rng = np.random.default_rng(seed)
    mu_item, mu_text = _unit(rng.standard_normal((2, d)))

    def draw(n, per):
        items = _unit(_unit(rng.standard_normal((n, d))) + 0.8 * mu_item)
        caps = _unit(items.repeat(per, axis=0) + 0.9 * _unit(rng.standard_normal((n * per, d))) + 0.8 * mu_text)
        return items, caps

    items, caps = draw(n_items, per_item)
    bank_items, bank_caps = draw(n_bank, 1)
    emb = {"items": items, "caps": caps, "bank_items": bank_items, "bank_caps": bank_caps}
    return {"mats": _mats(emb), "labels": np.arange(n_items).repeat(per_item), "modalities": ["text", "video"],
            "extra": {}, "emb": emb, "rng": rng}


def _mats(e):
    return {"test": e["caps"] @ e["items"].T, "bank_rows": e["bank_caps"] @ e["items"].T,
            "bank_cols": e["bank_items"] @ e["caps"].T, "bank_rows_x_bank_cols": e["bank_caps"] @ e["bank_items"].T}


def write_spec(folder: Path, spec) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    kw = {"labels": spec["labels"]} if spec.get("labels") is not None else {"mask": spec["mask"]}
    path = write_sims(folder, spec["mats"], modalities=tuple(spec["modalities"]), dataset="probe", model="probe",
                      **kw)
    if spec["extra"]:
        man = json.loads(path.read_text())
        man.update(spec["extra"])
        path.write_text(json.dumps(man))
    return path


# ------------------------------------------------------------------------------------------------ the mistakes
def _square(spec):
    """One caption per item (so the test matrix is square)."""
    e = spec["emb"]
    keep = np.arange(0, len(e["caps"]), 2)
    e = dict(e, caps=e["caps"][keep])
    spec["emb"], spec["mats"], spec["labels"] = e, _mats(e), np.arange(len(keep))
    return spec


def transposed_square(spec):
    spec = _square(spec)
    spec["mats"]["test"] = spec["mats"]["test"].T.copy()
    return spec


def transposed_square_with_banks_transposed_too(spec):
    spec = _square(spec)
    m = spec["mats"]
    m["test"] = m["test"].T.copy()
    m["bank_rows"], m["bank_cols"] = m["bank_cols"], m["bank_rows"]
    return spec


def modalities_swapped(spec):
    spec["modalities"] = ["video", "text"]
    return spec


def modalities_swapped_audio(spec):
    spec["modalities"] = ["audio", "text"]
    return spec


def shift(k):
    def mistake(spec):
        spec["labels"] = np.roll(spec["labels"], k)
        return spec
    mistake.__name__ = f"positives_shifted_by_{k:+d}_rows"
    return mistake


def positives_shuffled(spec):
    spec["labels"] = spec["rng"].permutation(spec["labels"])
    return spec


def positives_of_another_split(spec):
    spec["labels"] = spec["rng"].integers(0, spec["mats"]["test"].shape[1], size=len(spec["labels"]))
    return spec


def labels_off_by_one_in_value(spec):
    spec["labels"] = (spec["labels"] + 1) % spec["mats"]["test"].shape[1]
    return spec


def labels_one_based(spec):
    """1-based labels (MATLAB, R): the last caption's label is out of range, so it is refused before any statistic;
    the ones that are not (a wrap-around by hand) are the off-by-one case above."""
    spec["labels"] = spec["labels"] + 1
    return spec


def test_rows_shuffled(spec):
    m = spec["mats"]
    m["test"] = m["test"][spec["rng"].permutation(m["test"].shape[0])]
    return spec


def test_columns_shuffled(spec):
    m = spec["mats"]
    m["test"] = m["test"][:, spec["rng"].permutation(m["test"].shape[1])]
    return spec


def distances_instead_of_similarities(spec):
    spec["mats"] = {k: 2.0 - 2.0 * v for k, v in spec["mats"].items()}
    return spec


def test_distances_banks_similarities(spec):
    spec["mats"]["test"] = 2.0 - 2.0 * spec["mats"]["test"]
    return spec


def bank_rows_of_another_split(spec):
    e, rng = spec["emb"], spec["rng"]
    other = _unit(_unit(rng.standard_normal(e["items"].shape)) + 0.8 * _unit(e["items"].mean(0, keepdims=True)))
    spec["mats"]["bank_rows"] = e["bank_caps"] @ other.T
    return spec


def bank_rows_columns_permuted(spec):
    m = spec["mats"]
    m["bank_rows"] = m["bank_rows"][:, spec["rng"].permutation(m["bank_rows"].shape[1])]
    return spec


def bank_rows_columns_reversed(spec):
    spec["mats"]["bank_rows"] = spec["mats"]["bank_rows"][:, ::-1].copy()
    return spec


def bank_cols_columns_permuted(spec):
    m = spec["mats"]
    m["bank_cols"] = m["bank_cols"][:, spec["rng"].permutation(m["bank_cols"].shape[1])]
    return spec


def bank_rows_from_another_model(spec):
    e, rng = spec["emb"], spec["rng"]
    q, _ = np.linalg.qr(rng.standard_normal((e["caps"].shape[1],) * 2))
    spec["mats"]["bank_rows"] = (e["bank_caps"] @ q) @ e["items"].T
    return spec


def bank_rows_are_the_test_queries(spec):
    spec["mats"]["bank_rows"] = spec["mats"]["test"].copy()
    return spec


def bank_cols_are_the_test_items(spec):
    spec["mats"]["bank_cols"] = spec["mats"]["test"].T.copy()
    del spec["mats"]["bank_rows_x_bank_cols"]   # (its bank items would no longer be the bank's)
    return spec


def bank_rows_are_the_test_queries_shuffled(spec):
    m = spec["mats"]
    m["bank_rows"] = m["test"][spec["rng"].permutation(m["test"].shape[0])]
    return spec


def importer_test_and_bank_swapped(spec):
    """The importer's test and train-test arguments swapped (equal sizes, so no shape tells)."""
    m = spec["mats"]
    n = m["test"].shape[0]
    m["test"], m["bank_rows"] = m["bank_rows"][:n].copy(), m["test"].copy()
    return spec


def synthetic_as_string(spec):
    spec["extra"] = {"synthetic": "false"}
    return spec


def synthetic_as_number(spec):
    spec["extra"] = {"synthetic": 0}
    return spec


def dataset_as_number(spec):
    spec["extra"] = {"dataset": 1000}
    return spec


def matrix_name_not_a_string(spec):
    spec["extra"] = {"matrices": {"test": ["test.npy"]}}
    return spec


def checksums_not_a_mapping(spec):
    spec["extra"] = {"checksums": ["abc"]}
    return spec


def labels_as_floats(spec):
    spec["labels"] = spec["labels"].astype(np.float64)
    return spec


def mask_transposed(spec):
    labels = spec.pop("labels")
    mask = np.zeros(spec["mats"]["test"].shape, dtype=bool)
    mask[np.arange(len(labels)), labels] = True
    spec["labels"], spec["mask"] = None, mask.T.copy()
    return spec


def nan_in_a_bank(spec):
    spec["mats"]["bank_rows"] = spec["mats"]["bank_rows"].copy()
    spec["mats"]["bank_rows"][3, 4] = np.nan
    return spec


def test_matrix_non_square_transposed(spec):
    spec["mats"]["test"] = spec["mats"]["test"].T.copy()
    return spec


def bank_with_other_items_count(spec):
    spec["mats"]["bank_rows"] = spec["mats"]["bank_rows"][:, :-5].copy()
    return spec


#: (mistake, what the refusal's message must contain)
MISTAKES = [
    (transposed_square, "looks transposed"),
    (transposed_square_with_banks_transposed_too, "does not describe the bank items"),
    (modalities_swapped, "Swap 'modalities'"),
    (modalities_swapped_audio, "Swap 'modalities'"),
    (shift(1), "look shifted"),
    (shift(-1), "look shifted"),
    (shift(2), "look shifted"),
    (shift(7), "at chance level"),
    (positives_shuffled, "at chance level"),
    (positives_of_another_split, "has no positive|at chance level"),
    (labels_off_by_one_in_value, "look shifted|at chance level"),
    (labels_one_based, "must lie in"),
    (test_rows_shuffled, "at chance level"),
    (test_columns_shuffled, "at chance level|does not describe"),
    (distances_instead_of_similarities, "at chance level"),
    (test_distances_banks_similarities, "at chance level"),
    (bank_rows_of_another_split, "does not describe the test items"),
    (bank_rows_columns_permuted, "does not describe the test items"),
    (bank_rows_columns_reversed, "does not describe the test items"),
    (bank_cols_columns_permuted, "does not describe the test items"),
    (bank_rows_from_another_model, "does not describe the test items"),
    (bank_rows_are_the_test_queries, "holds the test queries"),
    (bank_cols_are_the_test_items, "holds the test queries"),
    (bank_rows_are_the_test_queries_shuffled, "holds the test queries"),
    (importer_test_and_bank_swapped, "at chance level"),
    (synthetic_as_string, "'synthetic' must be true or false"),
    (synthetic_as_number, "'synthetic' must be true or false"),
    (dataset_as_number, "'dataset' must be a non-empty string"),
    (matrix_name_not_a_string, "must map each role to a file name"),
    (checksums_not_a_mapping, "'checksums' must map file names"),
    (labels_as_floats, "must be 400 integers"),
    (mask_transposed, "must be a boolean"),
    (nan_in_a_bank, "non-finite score"),
    (test_matrix_non_square_transposed, "items but test.npy has"),
    (bank_with_other_items_count, "items but"),
]
