"""Synthetic paired image-caption embeddings: the embedded default dataset (every output says "synthetic").

The generator mimics the geometry of zero-shot CLIP ViT-B/32 embeddings closely enough that the hubness
reduction methods behave as in the papers (calibration: ``scripts/calibrate_synthetic.py``, results in
``data/calibration_synthetic.md``). It is *not* real data: numbers computed on it illustrate the methods and
must be labelled "synthetic".

Generative model
----------------
Fixed geometry (drawn once per ``seed``): two unit "modality" directions ``u_I`` and ``u_T`` with
``u_I . u_T = modality_cos`` (the centres of the image and caption clouds: the modality gap of CLIP, Liang et
al. 2022), an ``r``-dimensional semantic subspace ``P`` (``r = latent_dim``) orthogonal to both, and the
modality-noise subspace (the remaining ``d - r - 2`` dimensions). The model is built in these canonical
coordinates and then turned by a fixed random rotation (a product of :data:`N_REFLECTIONS` Householder
reflections, so no coordinate is special). ``n_topics`` unit topic centres ``c_k`` (centred) have Zipf
popularity ``p_k ∝ (k + 1) ** -topic_zipf``.

Per image ``i`` (independently per split):

* topic ``t_i ~ Categorical(p)``; unit latent content ``z_i ∝ sqrt(w) c_{t_i} + sqrt(1 - w) v_i``, ``v_i``
  uniform on the unit sphere of R^r, ``w = topic_weight`` (images of one topic look alike; popular topics crowd
  the gallery);
* genericity ``g_i = hub_scale * exp(hub_sigma * N(0, 1) - hub_sigma**2 / 2) + bias_std * N(0, 1)``: the image's
  pull towards the caption-cloud centre ``u_T``. It adds about ``sqrt(text_mean) * g_i`` to the image's score with
  *every* caption: the log-normal tail makes a few hubs, the Gaussian part hubs and anti-hubs that a bank of
  captions reveals (what NNN, IS and SN correct);
* embedding ``x_i = normalize(sqrt(image_mean) u_I + g_i u_T + sqrt(image_semantic) P z_i + sqrt(image_noise / d) xi_i)``,
  ``xi_i`` standard normal in the noise subspace (image-only "modality" noise).

Per caption ``j`` of image ``i`` (``captions_per_image`` each, image-major: caption ``j`` belongs to image
``j // captions_per_image``):

* latent ``z_i + sqrt(caption_noise) e_j`` with description error
  ``e_j = sqrt(caption_shared) s_i + sqrt(1 - caption_shared) n_j``, ``s_i, n_j ~ N(0, I_r / r)``: a caption
  describes its image imperfectly, and part of the error (``s_i``) is *common to the image's captions*: the
  annotators of one image mention the same salient things and miss the same details, so the captions of an image
  are not independent views of it;
* embedding ``y_j = normalize(sqrt(text_mean) u_T + sqrt(text_semantic / (1 + caption_noise)) P (z_i + sqrt(caption_noise) e_j)
  + sqrt(text_noise / d) zeta_j)``, ``zeta_j`` standard normal in the noise subspace.

Why ``caption_shared``: every single caption has the same marginal distribution whatever its value, so the expected
t2i R@1 (one caption against all images), the pair cosines and the image hubs do not depend on it. Image-to-text
retrieval does: an image query succeeds when *any one* of its ``captions_per_image`` captions ranks first, so
independent caption errors (``caption_shared = 0``) make i2t far easier than real CLIP's (synthetic Flickr30k i2t
R@1 about 89 against the published 79.3, while t2i matches); errors shared by the captions of an image fail
together, as real captions do. One value (0.45) brings i2t R@1 of both presets to the published zero-shot CLIP
values (calibration report).

The weights ``image_* / text_*`` set the squared norms of the modality mean, the semantic content and the
modality noise, hence the matched / unmatched cosines and the modality gap (calibrated on real CLIP ViT-B/32
embeddings). Text-to-image accuracy is set by ``caption_noise`` against the spread of the images (``topic_weight``,
``latent_dim``), image-to-text accuracy in addition by ``caption_shared``; hubness (k-occurrence skewness) by ``hub_scale`` / ``hub_sigma``; the NNN and IS/SN gains by
``bias_std`` (how much of the ranking error is a per-image offset).

Graded relevance (for listwise metrics): :func:`topic_relevance` gives ``rel(caption j, image i) = 1`` when
``i`` is the caption's image and otherwise the latent similarity ``clip(cos(z_{image(j)}, z_i), 0, 1)`` (high
within a topic, about 0 across topics), or a topic-only version.

Determinism: every split draws from its own random stream (``SeedSequence(seed, spawn_key=(split, block))``) in
fixed blocks of :data:`RNG_BLOCK` images, so the same seed gives the same bytes, a split does not depend on the
sizes of the other splits, and ``chunk_size`` (images per vectorised step) never changes the result.
Generation streams block by block into preallocated float32 arrays, so banks of 500k captions fit in memory
(0.5M x 512 float32 = 1 GB).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Dict, Optional, Sequence

import numpy as np

from .embeddings import EmbeddingDataset, EmbeddingSplit

__all__ = [
    "GeneratorConfig", "PRESETS", "REAL_CLIP_GEOMETRY", "make_dataset", "generate_split", "iter_split_chunks",
    "topic_relevance",
    "geometry_stats",
]

#: Images per independent random stream. Fixed: changing it changes the data.
RNG_BLOCK = 256

_SPLIT_CODES = {"train": 1, "val": 2, "test": 3}

#: Geometry of real CLIP embeddings measured with :func:`geometry_stats` on real CLIP ViT-B/32 embeddings (Flickr8k, 100 images x 5 captions)
#: (used by the calibration script when that folder is absent). Source: Flickr8k 100 images x 5 captions, OpenAI
#: CLIP ViT-B/32 (github.com/Chia213/Search-Engine, commit 7a3fb8ba), and COCO val2017 500 pairs, CLIP ViT-B/16
#: (github.com/Weixin-Liang/Modality-Gap, commit 8e20cb24).
REAL_CLIP_GEOMETRY = {
    "flickr8k-100x5-clip-vitb32": {"matched_cos": 0.3253, "unmatched_cos": 0.1751, "modality_gap": 0.8430,
                                   "image_image_cos": 0.5558, "caption_caption_cos": 0.5027},
    "coco-val2017-500-clip-vitb16": {"matched_cos": 0.3099, "unmatched_cos": 0.1616, "modality_gap": 0.8514},
}


@dataclass(frozen=True)
class GeneratorConfig:
    """Every knob of the generator (see the module docstring for the model)."""

    name: str = "custom"
    dim: int = 512
    latent_dim: int = 64
    captions_per_image: int = 5
    n_train_images: int = 20000
    n_val_images: int = 5000
    n_test_images: int = 5000
    # topics
    n_topics: int = 100
    topic_zipf: float = 1.0
    topic_weight: float = 0.5
    # modality geometry (squared weights before normalisation)
    modality_cos: float = 0.334
    image_mean: float = 0.56
    image_semantic: float = 0.10
    image_noise: float = 0.34
    text_mean: float = 0.50
    text_semantic: float = 0.40
    text_noise: float = 0.10
    caption_noise: float = 0.5
    caption_shared: float = 0.0
    # hubs
    hub_scale: float = 0.10
    hub_sigma: float = 0.6
    bias_std: float = 0.0

    def __post_init__(self):
        for f in ("dim", "latent_dim", "captions_per_image", "n_topics"):
            v = getattr(self, f)
            if not isinstance(v, (int, np.integer)) or isinstance(v, bool) or v < 1:
                raise ValueError(f"{f} must be a positive integer; got {v!r}")
        for f in ("n_train_images", "n_val_images", "n_test_images"):
            v = getattr(self, f)
            if not isinstance(v, (int, np.integer)) or isinstance(v, bool) or v < 0:
                raise ValueError(f"{f} must be a non-negative integer; got {v!r}")
        if self.n_test_images < 1:
            raise ValueError(f"n_test_images must be at least 1; got {self.n_test_images}")
        if self.latent_dim + 2 > self.dim:
            raise ValueError(f"latent_dim + 2 must be <= dim; got latent_dim={self.latent_dim}, dim={self.dim}")
        for f in ("topic_zipf", "image_mean", "image_semantic", "image_noise", "text_mean", "text_semantic",
                  "text_noise", "caption_noise", "hub_scale", "hub_sigma", "bias_std"):
            v = getattr(self, f)
            if not np.isfinite(v) or v < 0:
                raise ValueError(f"{f} must be a finite number >= 0; got {v!r}")
        for f in ("topic_weight", "caption_shared"):
            v = getattr(self, f)
            if not 0 <= v <= 1:
                raise ValueError(f"{f} must be in [0, 1]; got {v!r}")
        if not -1 <= self.modality_cos <= 1:
            raise ValueError(f"modality_cos must be in [-1, 1]; got {self.modality_cos}")
        if self.image_mean + self.image_semantic + self.image_noise + self.hub_scale <= 0:
            raise ValueError("image_mean, image_semantic, image_noise and hub_scale are all 0: images would be 0 vectors")
        if self.text_mean + self.text_semantic + self.text_noise <= 0:
            raise ValueError("text_mean, text_semantic and text_noise are all 0: captions would be 0 vectors")

    def replace(self, **changes) -> "GeneratorConfig":
        return dataclasses.replace(self, **changes)

    def to_dict(self) -> Dict[str, object]:
        return dataclasses.asdict(self)


#: Presets calibrated to zero-shot CLIP ViT-B/32 in both directions (see ``data/calibration_synthetic.md``).
PRESETS: Dict[str, GeneratorConfig] = {
    "coco": GeneratorConfig(name="coco", n_train_images=20000, n_val_images=5000, n_test_images=5000,
                            hub_scale=0.004, bias_std=0.012, caption_noise=4.3, topic_weight=0.3,
                            caption_shared=0.45),
    "flickr30k": GeneratorConfig(name="flickr30k", n_train_images=10000, n_val_images=1000, n_test_images=1000,
                                 hub_scale=0.0065, bias_std=0.011, caption_noise=3.5, topic_weight=0.3,
                                 caption_shared=0.45),
}


# ---------------------------------------------------------------------------------------------- geometry
#: Householder reflections of the final random rotation.
N_REFLECTIONS = 4


@dataclass
class _Geometry:
    centres: np.ndarray      # (K, r) unit topic centres
    popularity: np.ndarray   # (K,)
    reflections: np.ndarray  # (N_REFLECTIONS, d) unit vectors: rotation = product of Householder reflections


def _rng(seed: int, *key: int) -> np.random.Generator:
    return np.random.default_rng(np.random.SeedSequence(seed, spawn_key=tuple(int(k) for k in key)))


def generator_geometry(cfg: GeneratorConfig, seed: int) -> _Geometry:
    """The seeded random geometry (topic centres, population, reflection) shared by every split of a seed."""
    rng = _rng(seed, 0)
    centres = rng.standard_normal((cfg.n_topics, cfg.latent_dim))
    pop = (np.arange(cfg.n_topics) + 1.0) ** -cfg.topic_zipf
    pop /= pop.sum()
    centres -= pop @ centres  # popularity-weighted mean 0: no semantic offset of the clouds
    centres /= np.linalg.norm(centres, axis=1, keepdims=True)
    refl = rng.standard_normal((N_REFLECTIONS, cfg.dim))
    refl /= np.linalg.norm(refl, axis=1, keepdims=True)
    return _Geometry(centres, pop, refl.astype(np.float32))


def _block(cfg: GeneratorConfig, geo: _Geometry, seed: int, split_code: int, block: int, n_img: int):
    """One RNG block of ``n_img`` images in canonical coordinates (unrotated, unnormalised, float32).

    Canonical coordinates: 0 = u_I, 1 = the part of u_T orthogonal to u_I, 2 .. r+1 = the semantic subspace P,
    the rest = modality noise (orthogonal to all of the above).
    """
    rng = _rng(seed, split_code, block)
    r, d, c = cfg.latent_dim, cfg.dim, cfg.captions_per_image
    rho = cfg.modality_cos
    u_txt = (rho, np.sqrt(max(0.0, 1 - rho ** 2)))
    topics = rng.choice(cfg.n_topics, size=n_img, p=geo.popularity)
    w = cfg.topic_weight
    v = rng.standard_normal((n_img, r))
    v /= np.linalg.norm(v, axis=1, keepdims=True)
    z = np.sqrt(w) * geo.centres[topics] + np.sqrt(1 - w) * v
    z /= np.linalg.norm(z, axis=1, keepdims=True)
    g = np.exp(cfg.hub_sigma * rng.standard_normal(n_img) - cfg.hub_sigma ** 2 / 2)
    g = cfg.hub_scale * g + cfg.bias_std * rng.standard_normal(n_img)
    img = np.empty((n_img, d), np.float32)
    img[:, 0] = np.sqrt(cfg.image_mean) + g * u_txt[0]
    img[:, 1] = g * u_txt[1]
    img[:, 2:r + 2] = np.sqrt(cfg.image_semantic) * z
    img[:, r + 2:] = rng.standard_normal((n_img, d - r - 2), dtype=np.float32)
    img[:, r + 2:] *= np.float32(np.sqrt(cfg.image_noise / d))
    e = rng.standard_normal((n_img * c, r)) / np.sqrt(r)
    cap = np.empty((n_img * c, d), np.float32)
    cap[:, r + 2:] = rng.standard_normal((n_img * c, d - r - 2), dtype=np.float32)
    cap[:, r + 2:] *= np.float32(np.sqrt(cfg.text_noise / d))
    # drawn after the other draws, so caption_shared = 0 gives the bytes of the model without it
    shared = rng.standard_normal((n_img, r)) / np.sqrt(r)  # description error common to an image's captions
    s = cfg.caption_shared
    e = np.sqrt(s) * np.repeat(shared, c, axis=0) + np.sqrt(1 - s) * e
    zc = np.repeat(z, c, axis=0) + np.sqrt(cfg.caption_noise) * e
    cap[:, 0] = np.sqrt(cfg.text_mean) * u_txt[0]
    cap[:, 1] = np.sqrt(cfg.text_mean) * u_txt[1]
    cap[:, 2:r + 2] = np.sqrt(cfg.text_semantic / (1 + cfg.caption_noise)) * zc
    return img, cap, topics, z, g


def _rotate_normalize(x: np.ndarray, geo: _Geometry) -> None:
    """In place: apply the fixed random rotation (Householder reflections) and L2-normalise every row.

    Only row-wise elementwise reductions are used, so a row's result never depends on the other rows.
    """
    for v in geo.reflections:
        x -= (2 * (x * v).sum(axis=1, keepdims=True)) * v
    x /= np.sqrt((x * x).sum(axis=1, keepdims=True))


def iter_split_chunks(cfg: GeneratorConfig, split: str, n_images: int, *, seed: int = 0,
                      chunk_size: Optional[int] = None, _geo: Optional[_Geometry] = None):
    """Generate a split chunk by chunk: yields ``(i0, i1, images, captions, topics, latent, genericity)`` for the
    images ``i0:i1`` (captions ``i0 * c : i1 * c``, ``c = captions_per_image``), final (rotated, unit-norm) float32.

    The chunks concatenate to :func:`generate_split`'s arrays, byte for byte, whatever ``chunk_size`` is (images per
    chunk, rounded up to a multiple of :data:`RNG_BLOCK`; default 4096): use it to stream splits too large for
    memory (the rehearsal cache of ``python -m hubnorm.data rehearse``).
    """
    if split not in _SPLIT_CODES:
        raise ValueError(f"split must be one of {sorted(_SPLIT_CODES)}; got {split!r}")
    n_images = _check_size(n_images, f"n_{split}_images", minimum=1)
    geo = generator_geometry(cfg, seed) if _geo is None else _geo
    chunk = 4096 if chunk_size is None else _check_size(chunk_size, "chunk_size", minimum=1)
    blocks_per_chunk = -(-chunk // RNG_BLOCK)
    n_blocks = -(-n_images // RNG_BLOCK)
    for b0 in range(0, n_blocks, blocks_per_chunk):
        b1 = min(n_blocks, b0 + blocks_per_chunk)
        parts = [_block(cfg, geo, seed, _SPLIT_CODES[split], b, min(n_images, (b + 1) * RNG_BLOCK) - b * RNG_BLOCK)
                 for b in range(b0, b1)]
        img, cap, t, z, g = (np.concatenate(x) for x in zip(*parts))
        _rotate_normalize(img, geo)
        _rotate_normalize(cap, geo)
        yield b0 * RNG_BLOCK, min(n_images, b1 * RNG_BLOCK), img, cap, t, z.astype(np.float32), g.astype(np.float32)


def generate_split(cfg: GeneratorConfig, split: str, n_images: int, *, seed: int = 0,
                   chunk_size: Optional[int] = None, _geo: Optional[_Geometry] = None) -> EmbeddingSplit:
    """One split of ``n_images`` images (and ``captions_per_image`` captions each) from ``cfg``.

    ``chunk_size`` (images per vectorised step, rounded up to a multiple of :data:`RNG_BLOCK`; default 4096)
    bounds the temporary memory: the result is the same for every value.
    """
    if split not in _SPLIT_CODES:
        raise ValueError(f"split must be one of {sorted(_SPLIT_CODES)}; got {split!r}")
    n_images = _check_size(n_images, f"n_{split}_images", minimum=1)
    c = cfg.captions_per_image
    images = np.empty((n_images, cfg.dim), np.float32)
    captions = np.empty((n_images * c, cfg.dim), np.float32)
    topics = np.empty(n_images, np.int64)
    latent = np.empty((n_images, cfg.latent_dim), np.float32)
    generic = np.empty(n_images, np.float32)
    for i0, i1, img, cap, t, z, g in iter_split_chunks(cfg, split, n_images, seed=seed, chunk_size=chunk_size,
                                                       _geo=_geo):
        images[i0:i1], captions[i0 * c:i1 * c] = img, cap
        topics[i0:i1], latent[i0:i1], generic[i0:i1] = t, z, g
    c2i = np.repeat(np.arange(n_images, dtype=np.int64), c)
    extras = {"topic": topics, "latent": latent, "genericity": generic, "caption_topic": topics[c2i]}
    return EmbeddingSplit(images=images, captions=captions, caption_to_image=c2i, extras=extras)


def _check_size(v, name: str, minimum: int = 0) -> int:
    if isinstance(v, bool) or not isinstance(v, (int, np.integer)):
        raise ValueError(f"{name} must be an integer >= {minimum}; got {v!r}")
    if v < minimum:
        raise ValueError(f"{name} must be an integer >= {minimum}; got {v}")
    return int(v)


def make_dataset(preset: str = "coco", *, seed: int = 0, n_train_images: Optional[int] = None,
                 n_test_images: Optional[int] = None, dim: int = 512, chunk_size: Optional[int] = None,
                 **overrides) -> EmbeddingDataset:
    """The synthetic dataset ``preset`` ("coco" or "flickr30k") with splits "train", "val" and "test".

    Args:
        preset: name of a calibrated preset in :data:`PRESETS`.
        seed: random seed (same seed, same bytes).
        n_train_images: training images (the reference banks; ``captions_per_image`` captions each); preset default
            when None. 0 gives no "train" split.
        n_test_images: test images; preset default when None. The "val" split (hyperparameter selection, NNN
            App. B) has the same size as the test split unless ``n_val_images`` is overridden.
        dim: embedding dimension.
        chunk_size: images per vectorised generation step (memory only; never changes the data).
        **overrides: any other :class:`GeneratorConfig` field (e.g. ``hub_scale=0.2``, ``n_val_images=500``).
    Returns:
        an :class:`~hubnorm.datasets.EmbeddingDataset` with ``source="synthetic"``, ``name="synthetic-<preset>"`` and
        ``meta`` holding ``synthetic=True``, the preset, the seed and the full config. Each split's ``extras`` has
        per-image ``"topic"``, ``"latent"`` (latent content z), ``"genericity"`` (hub strength g) and per-caption
        ``"caption_topic"``.
    """
    if not isinstance(preset, str) or preset not in PRESETS:
        raise ValueError(f"unknown synthetic preset {preset!r}; valid presets: {sorted(PRESETS)}")
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or seed < 0:
        raise ValueError(f"seed must be a non-negative integer; got {seed!r}")
    base = PRESETS[preset]
    unknown = set(overrides) - {f.name for f in dataclasses.fields(GeneratorConfig)} 
    if unknown:
        raise ValueError(f"unknown generator option(s) {sorted(unknown)}; valid: "
                         f"{sorted(f.name for f in dataclasses.fields(GeneratorConfig) if f.name != 'name')}")
    if "name" in overrides:
        raise ValueError("name is set by the preset; it cannot be overridden")
    changes = dict(overrides)
    changes["dim"] = _check_size(dim, "dim", minimum=1)
    if n_train_images is not None:
        changes["n_train_images"] = _check_size(n_train_images, "n_train_images")
    if n_test_images is not None:
        changes["n_test_images"] = _check_size(n_test_images, "n_test_images", minimum=1)
        changes.setdefault("n_val_images", changes["n_test_images"])
    cfg = base.replace(**changes)
    geo = generator_geometry(cfg, int(seed))
    splits = {}
    for split, n in (("train", cfg.n_train_images), ("val", cfg.n_val_images), ("test", cfg.n_test_images)):
        if n > 0:
            splits[split] = generate_split(cfg, split, n, seed=int(seed), chunk_size=chunk_size, _geo=geo)
    meta = {"synthetic": True, "preset": preset, "seed": int(seed), "config": cfg.to_dict(),
            "description": f"synthetic embeddings (preset {preset!r}, calibrated to zero-shot CLIP ViT-B/32); "
                           "not real data"}
    return EmbeddingDataset(name=f"synthetic-{preset}", source="synthetic", splits=splits, meta=meta)


# ---------------------------------------------------------------------------------------------- relevance
def topic_relevance(split: EmbeddingSplit, direction: str = "t2i", *, kind: str = "latent",
                    same_topic: float = 0.5, queries: Optional[Sequence[int]] = None,
                    targets: Optional[Sequence[int]] = None) -> np.ndarray:
    """Graded relevance (m x n, float32 in [0, 1]) of a synthetic split, from its latents; ground-truth pairs = 1.

    t2i: rows are captions, columns images; i2t: rows images, columns captions. ``kind="latent"``: the clipped
    cosine of the latent contents of the two images involved, ``max(0, cos(z_a, z_b))``; ``kind="topic"``:
    ``same_topic`` for pairs of the same topic, else 0. ``queries`` / ``targets`` restrict to index subsets (the
    full COCO test matrix is 25k x 5k).
    """
    if direction not in ("t2i", "i2t"):
        raise ValueError(f"direction must be 't2i' or 'i2t'; got {direction!r}")
    if kind not in ("latent", "topic"):
        raise ValueError(f"kind must be 'latent' or 'topic'; got {kind!r}")
    if not 0 <= same_topic <= 1:
        raise ValueError(f"same_topic must be in [0, 1]; got {same_topic}")
    need = ("topic",) if kind == "topic" else ("latent",)
    for key in need:
        if key not in split.extras:
            raise ValueError(f"split has no extras[{key!r}]: topic_relevance needs a split from hubnorm.synthetic")
    c2i = split.caption_to_image
    cap_img = c2i if direction == "t2i" else np.arange(split.n_images)   # image behind each row
    tgt_img = np.arange(split.n_images) if direction == "t2i" else c2i   # image behind each column
    rows = np.arange(cap_img.size) if queries is None else np.asarray(queries, dtype=np.int64)
    cols = np.arange(tgt_img.size) if targets is None else np.asarray(targets, dtype=np.int64)
    a, b = cap_img[rows], tgt_img[cols]
    if kind == "latent":
        z = split.extras["latent"].astype(np.float32)
        z = z / np.linalg.norm(z, axis=1, keepdims=True)
        rel = np.clip(z[a] @ z[b].T, 0.0, 1.0)
    else:
        t = split.extras["topic"]
        rel = np.where(t[a][:, None] == t[b][None, :], np.float32(same_topic), np.float32(0))
    rel = rel.astype(np.float32)
    rel[a[:, None] == b[None, :]] = 1.0
    return rel


def geometry_stats(images: np.ndarray, captions: np.ndarray, caption_to_image: np.ndarray) -> Dict[str, float]:
    """Mean cosine of matched and of unmatched (caption, image) pairs, and the modality gap
    ``||mean(images) - mean(captions)||`` (Liang et al. 2022). Exact, in O((m + n) d): the sum over all pairs is
    ``sum(captions) . sum(images)``. Assumes one image per caption (``caption_to_image``) and unit rows."""
    images = np.asarray(images, np.float64)
    captions = np.asarray(captions, np.float64)
    c2i = np.asarray(caption_to_image, dtype=np.int64)
    m, n = len(captions), len(images)
    pos = np.einsum("ij,ij->i", captions, images[c2i])
    total = float(captions.sum(0) @ images.sum(0))
    return {"matched_cos": float(pos.mean()), "unmatched_cos": (total - float(pos.sum())) / (m * n - m),
            "modality_gap": float(np.linalg.norm(images.mean(0) - captions.mean(0)))}
