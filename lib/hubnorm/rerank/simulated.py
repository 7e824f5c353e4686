"""A *simulated* cross-encoder for synthetic data (every result made with it must say "simulated").

Real cross-encoders (BLIP ITM, OSCAR) need images and captions; the synthetic datasets of
:mod:`hubnorm.synthetic` only have embeddings, but they keep the latent truth in ``EmbeddingSplit.extras``:
which image a caption describes and each image's latent content ``z``. The simulated cross-encoder scores a
(query, target) pair from that truth, not from the embeddings, so its errors are independent of the
bi-encoder's (as for a separately trained cross-encoder)::

    logit = pos_logit * [same image] + rel_weight * max(0, cos(z_query, z_target)) + noise * eps(pair)
            + target_bias * beta(target)
    score = sigmoid(logit)          # a match probability, like softmax(itm_logits)[:, 1]

``z`` of a caption is the latent of its image. ``eps(pair) ~ N(0, 1)`` is a deterministic function of
(``seed``, query id, target id) (a SplitMix64 hash, then the inverse normal CDF): the same pair always gets
the same score, whatever the batch, order or k. ``beta(target) ~ N(0, 1)`` is an optional per-target
"popularity" bias (0 by default: this cross-encoder has no hubs of its own; raise it to study NNN on a biased
cross-encoder).

Defaults ``pos_logit=0.2, rel_weight=4.5, noise=1.0`` (chosen on the flickr30k preset, seed 0, t2i): the latent
relevance carries most of the signal and the same-image term is small against the pair noise, so the simulated
cross-encoder is far from perfect, and how it compares with the bi-encoder depends on the direction and on the
candidates it is given. Notebook 06 measures it: its Table 8 prints R@K of the cross-encoder over the whole gallery
("k = all") beside reranking the raw bi-encoder's top-k, in both directions. Reranking the top-k filters out
unrelated targets whose pair noise happens to be large, but loses the positives beyond rank k; which of the two
weighs more depends on the direction and the data, so whether reranking beats the whole gallery is read from that
table, not assumed.

Its cost is not its own (microseconds): :attr:`cost_per_pair_s` is the per-pair cost it stands for, passed by the
caller (None when not given); notebook 06 passes the measured per-pair cost of the real BLIP ITM base architecture
(``benchmarks/reports/cross_encoder_latency.csv``, read by :mod:`hubnorm_companion.rerank_cost`) through
:func:`hubnorm_companion.rerank_study.make_cross_encoder`.
"""

from __future__ import annotations

from typing import Optional

import numpy as np
from scipy.special import ndtri

from ..embeddings import EmbeddingSplit
from .base import CrossEncoder

__all__ = ["SimulatedCrossEncoder", "pair_noise"]

_SPLIT_CODES = {"train": 1, "val": 2, "test": 3, "distractors": 4}
_M1, _M2, _G = np.uint64(0xBF58476D1CE4E5B9), np.uint64(0x94D049BB133111EB), np.uint64(0x9E3779B97F4A7C15)


def _mix(x: np.ndarray) -> np.ndarray:
    """SplitMix64 finaliser on uint64 arrays (wrap-around arithmetic)."""
    with np.errstate(over="ignore"):
        z = x + _G
        z = (z ^ (z >> np.uint64(30))) * _M1
        z = (z ^ (z >> np.uint64(27))) * _M2
        return z ^ (z >> np.uint64(31))


def pair_noise(seed: int, a: np.ndarray, b: Optional[np.ndarray] = None) -> np.ndarray:
    """Standard normal values that are a deterministic function of (seed, a[p]) or (seed, a[p], b[p])."""
    h = _mix(_mix(np.full(np.shape(a), np.uint64(seed))) ^ np.asarray(a, dtype=np.uint64))
    if b is not None:
        with np.errstate(over="ignore"):
            h = _mix(h ^ (np.asarray(b, dtype=np.uint64) * _M2))
    u = ((h >> np.uint64(11)).astype(np.float64) + 0.5) / 2.0 ** 53
    return ndtri(u)


class SimulatedCrossEncoder(CrossEncoder):
    """Latent-truth cross-encoder over fixed query and target items (see module docstring).

    Args:
        query_latent, target_latent: (m, r) / (n, r) latent contents (captions: their image's latent).
        query_image, target_image: integer "image identity" of every item; a pair is a match when they are equal
            (use distinct offsets for items of different splits so that they never match).
        query_uid, target_uid: unique integer ids feeding the noise hash (default: derived from image identity
            and position).
        direction: ``"t2i"`` or ``"i2t"`` (checked by :func:`~hubnorm.rerank.rerank`).
    """

    kind = "simulated"

    def __init__(self, query_latent, target_latent, query_image, target_image, *, direction: str = "t2i",
                 seed: int = 0, pos_logit: float = 0.2, rel_weight: float = 4.5, noise: float = 1.0,
                 target_bias: float = 0.0, query_uid=None, target_uid=None, query_keys=None, target_keys=None,
                 name: str = "", cache_dir=None, cost_per_pair_s: Optional[float] = None):
        if direction not in ("t2i", "i2t"):
            raise ValueError(f"direction must be 't2i' or 'i2t'; got {direction!r}")
        for pname, v in (("pos_logit", pos_logit), ("rel_weight", rel_weight), ("noise", noise),
                         ("target_bias", target_bias)):
            if not np.isfinite(v) or v < 0:
                raise ValueError(f"{pname} must be a finite number >= 0; got {v!r}")
        zq = np.asarray(query_latent, dtype=np.float64)
        zt = np.asarray(target_latent, dtype=np.float64)
        if zq.ndim != 2 or zt.ndim != 2 or zq.shape[1] != zt.shape[1]:
            raise ValueError(f"latents must be 2-D with the same width; got {zq.shape} and {zt.shape}")
        self.zq = zq / np.linalg.norm(zq, axis=1, keepdims=True)
        self.zt = zt / np.linalg.norm(zt, axis=1, keepdims=True)
        self.query_image = np.asarray(query_image, dtype=np.int64)
        self.target_image = np.asarray(target_image, dtype=np.int64)
        if self.query_image.shape != (len(zq),) or self.target_image.shape != (len(zt),):
            raise ValueError("query_image / target_image need one entry per query / target")
        self.query_uid = (np.arange(len(zq), dtype=np.int64) if query_uid is None
                          else np.asarray(query_uid, dtype=np.int64))
        self.target_uid = (np.arange(len(zt), dtype=np.int64) + (1 << 40) if target_uid is None
                           else np.asarray(target_uid, dtype=np.int64))
        self.direction = direction
        self.seed, self.pos_logit, self.rel_weight, self.noise, self.target_bias = (
            int(seed), float(pos_logit), float(rel_weight), float(noise), float(target_bias))
        self.model_id = (f"simulated-ce{(':' + name) if name else ''}:seed={self.seed}:pos={self.pos_logit:g}:"
                         f"rel={self.rel_weight:g}:noise={self.noise:g}:bias={self.target_bias:g}")
        self.cost_per_pair_s = None if cost_per_pair_s is None else float(cost_per_pair_s)
        qk = [f"q{u}" for u in self.query_uid.tolist()] if query_keys is None else query_keys
        tk = [f"t{u}" for u in self.target_uid.tolist()] if target_keys is None else target_keys
        super().__init__(qk, tk, cache_dir=cache_dir)

    # ------------------------------------------------------------------ constructors
    @classmethod
    def from_split(cls, split: EmbeddingSplit, direction: str = "t2i", *, split_name: str = "test",
                   **kwargs) -> "SimulatedCrossEncoder":
        """Queries and targets of one synthetic split (the test tasks of ``EmbeddingDataset.tasks``)."""
        return cls.from_splits(split, split, direction, query_split_name=split_name,
                               target_split_name=split_name, **kwargs)

    @classmethod
    def from_splits(cls, query_split: EmbeddingSplit, target_split: EmbeddingSplit, direction: str = "t2i", *,
                    query_split_name: str = "train", target_split_name: str = "test",
                    distractors: Optional[EmbeddingSplit] = None, **kwargs) -> "SimulatedCrossEncoder":
        """Queries from one split, targets from another (e.g. training captions as NNN reference queries
        against the test gallery: no pair matches across splits). ``distractors``: a split whose items of the
        target modality follow the targets (a gallery enlarged with other data, as in Geigle et al. Table 5: the
        order of :meth:`hubnorm.RetrievalTask.with_distractors`); they never match a query."""
        for s in (query_split, target_split) + (() if distractors is None else (distractors,)):
            if "latent" not in s.extras:
                raise ValueError("the split has no extras['latent']: SimulatedCrossEncoder needs a split made by "
                                 "hubnorm.synthetic")
        codes = []
        for nm in (query_split_name, target_split_name):
            if nm not in _SPLIT_CODES:
                raise ValueError(f"split names must be one of {sorted(_SPLIT_CODES)}; got {nm!r}")
            codes.append(_SPLIT_CODES[nm] << 32)

        def side(split, code, modality):   # modality: 0 images, 1 captions
            if modality == 0:
                img = np.arange(split.n_images, dtype=np.int64)
            else:
                img = split.caption_to_image.astype(np.int64)
            latent = split.extras["latent"][img]
            uid = code + (modality << 31) + np.arange(img.size, dtype=np.int64)
            return latent, code + img, uid

        qm, tm = (1, 0) if direction == "t2i" else (0, 1)
        zq, iq, uq = side(query_split, codes[0], qm)
        zt, it, ut = side(target_split, codes[1], tm)
        if distractors is not None:
            zd, idd, ud = side(distractors, _SPLIT_CODES["distractors"] << 32, tm)
            zt, it, ut = np.concatenate([zt, zd]), np.concatenate([it, idd]), np.concatenate([ut, ud])
        return cls(zq, zt, iq, it, direction=direction, query_uid=uq, target_uid=ut, **kwargs)

    # ------------------------------------------------------------------ scoring
    def logits(self, query_ids: np.ndarray, target_ids: np.ndarray) -> np.ndarray:
        q = np.asarray(query_ids, dtype=np.int64)
        t = np.asarray(target_ids, dtype=np.int64)
        rel = np.clip(np.einsum("ij,ij->i", self.zq[q], self.zt[t]), 0.0, 1.0)
        same = self.query_image[q] == self.target_image[t]
        out = self.pos_logit * same + self.rel_weight * rel
        if self.noise:
            out = out + self.noise * pair_noise(self.seed, self.query_uid[q], self.target_uid[t])
        if self.target_bias:
            out = out + self.target_bias * pair_noise(self.seed + 1, self.target_uid[t])
        return out

    def _score_uncached(self, query_ids: np.ndarray, target_ids: np.ndarray) -> np.ndarray:
        return 1.0 / (1.0 + np.exp(-self.logits(query_ids, target_ids)))
