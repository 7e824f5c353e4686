"""Synthetic paired image-caption embeddings: the embedded default dataset (every output says "synthetic").

The generator imitates the statistics of zero-shot CLIP embeddings that matter for hubness (calibration:
``scripts/calibrate_synthetic.py``, :mod:`hubnorm_companion.calibration`, results in ``data/calibration_synthetic.md``).
It is *not* real data: numbers computed on it illustrate the methods and must be labelled "synthetic".

Two generative models
---------------------
Both build embeddings in canonical coordinates and then turn them by a fixed random rotation (a product of
:data:`N_REFLECTIONS` Householder reflections, so no coordinate is special), then L2-normalise: coordinate 0 is
the image-cloud centre ``u_I``, coordinate 1 the part of the caption-cloud centre ``u_T`` orthogonal to it
(``u_I . u_T = modality_cos``: the modality gap of CLIP, Liang et al. 2022), the next ``r = latent_dim``
coordinates the semantic subspace ``P`` shared by both modalities, the remaining ``d - r - 2`` the
modality-specific ("noise") subspace. ``n_topics`` topic centres ``c_k`` have Zipf popularity
``p_k ∝ (k + 1) ** -topic_zipf``. Per image ``i``: a topic ``t_i ~ Categorical(p)`` and a latent content
``z_i``; per caption ``j`` of image ``i`` (``captions_per_image`` each, image-major: caption ``j`` belongs to image
``j // captions_per_image``) the latent ``z_i + sqrt(caption_noise) e_j`` with a description error
``e_j = sqrt(caption_shared) s_i + sqrt(1 - caption_shared) n_j``: part of the error (``s_i``) is *common to the
captions of an image* (annotators mention the same salient things and miss the same details), so the captions of
an image are not independent views of it; this is what makes image-to-text retrieval as hard as real CLIP's.

**"clustered"** (the presets ``flickr30k`` and ``coco``; ``data/calibration_synthetic.md`` compares them with
real CLIP embeddings statistic by statistic). Real contrastive embeddings are anisotropic (an effective
dimension of 30-45 out of 512), their density varies strongly from region to region (crowded themes and
isolated images), and their hubs are local as much as global (the k-occurrence of an image follows its
centrality only loosely). The model draws:

* a semantic space with a power-law spectrum: topic centres ``c_k = lambda^(1/2) * N(0, I_r)`` with
  ``lambda_l ∝ l ** -spectrum_decay``; the content of an image ``z_i = (c_t + s_t * mu^(1/2) * N(0, I_r)) /
  sqrt(1 + s_t**2)``, with the within-topic ("detail") spectrum ``mu_l ∝ l ** -detail_decay`` and a spread
  ``s_t`` that varies by topic (``topic_spread`` times a log-normal of log-sd ``topic_spread_sigma``): some
  topics are tight (near-duplicates, local hubs), others diffuse;
* modality-specific parts in the noise subspace with a power-law spectrum (``noise_decay``; images and captions
  use different leading directions), themselves clustered: a share ``image_style_share`` of an image's noise is
  one of ``n_styles`` "style" centres (photography, setting), ``text_style_share`` of a caption's one of as many
  "phrasing" centres; the weight of an image's noise varies from image to image (log-sd ``image_noise_sigma``:
  prototypical and atypical images), the description error of an image's captions from image to image
  (log-sd ``caption_noise_sigma``: unambiguous and ambiguous images);
* small per-item pulls across the gap (``bias_std`` for images towards ``u_T``, ``caption_bias_std`` for
  captions towards ``u_I``);
* ``x_i = normalize(sqrt(image_mean) u_I + g_i u_T + sqrt(image_semantic) P z_i + sqrt(image_noise * nu_i) xi_i)``,
  ``y_j = normalize(sqrt(text_mean) u_T + b_j u_I + sqrt(text_semantic / w_j) P (z_i + sqrt(cn_i) e_j)
  + sqrt(text_noise) zeta_j)``, the errors ``e_j`` drawn with the detail spectrum, with the weight
  ``w_j = (1 + caption_noise) ** (1 - gamma) * (1 + cn_i) ** gamma`` (``gamma = caption_error_norm``): at 0 every
  caption's semantic part is scaled by the preset's mean error, so a noisier caption's semantic part is longer and,
  after normalisation, its cosine to its image and its mean cosine to the other images fall together; at 1 by its
  own error, which keeps the length of the semantic part about constant (in real CLIP embeddings the two cosines
  are about uncorrelated: statistic ``cap_match_rho`` of :func:`hubnorm.geometry.embedding_statistics`). With
  ``caption_semantic_sigma`` > 0 the semantic part is multiplied by ``l_j = exp(sigma * N(0, 1) - sigma**2 / 2)``
  (``sigma = caption_semantic_sigma``; one draw per caption from a stream of its own, so the other draws keep their
  bytes): how much a caption says about its image, apart from its error. A longer semantic part raises a caption's
  cosine to its image and, after normalisation, lowers its mean cosine to the other images (a specific caption); a
  shorter one does the reverse (a generic caption). The fitted presets (``flickr30k``, ``coco`` and the text-audio
  geometry ``audiocaps-clap``) are fitted with both; at 0 (the default) they leave a caption as described above.

Hubs and anti-hubs are not planted: they emerge from this geometry, as in real data. The free parameters were
fitted to statistics of the raw embeddings only (``scripts/calibrate_synthetic.py --fit``); no normalizer and no
claim of a paper is part of the fit.

**"isotropic"** (the earlier presets, kept as ``flickr30k-isotropic`` and ``coco-isotropic``, byte for byte):
unit latent contents ``z_i ∝ sqrt(w) c_{t_i} + sqrt(1 - w) v_i`` (``v_i`` uniform on the sphere,
``w = topic_weight``), isotropic modality noise, and one global *genericity* per image,
``g_i = hub_scale * exp(hub_sigma * N(0, 1) - hub_sigma**2 / 2) + bias_std * N(0, 1)``, its pull towards the
caption centre ``u_T`` that adds about ``sqrt(text_mean) * g_i`` to its score with *every* caption: its hubs are
global by construction (k-occurrence follows centrality almost deterministically), and its training and test
splits are exchangeable draws of one distribution. ``x_i = normalize(sqrt(image_mean) u_I + g_i u_T +
sqrt(image_semantic) P z_i + sqrt(image_noise / d) xi_i)``, ``y_j = normalize(sqrt(text_mean) u_T +
sqrt(text_semantic / (1 + caption_noise)) P (z_i + sqrt(caption_noise) e_j) + sqrt(text_noise / d) zeta_j)``
with ``s_i, n_j ~ N(0, I_r / r)``.

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
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Dict, Optional, Sequence, Tuple

import numpy as np

if TYPE_CHECKING:   # imported where the containers are built: the presets load without torch (run_all.sh's runner)
    from .embeddings import EmbeddingDataset, EmbeddingSplit

__all__ = [
    "GeneratorConfig", "PRESETS", "MODELS", "make_dataset", "generate_split", "iter_split_chunks",
    "topic_relevance",
    "geometry_stats",
]

#: Images per independent random stream. Fixed: changing it changes the data.
RNG_BLOCK = 256

_SPLIT_CODES = {"train": 1, "val": 2, "test": 3}

#: The generative models (module docstring).
MODELS = ("clustered", "isotropic")

@dataclass(frozen=True)
class GeneratorConfig:
    """Every knob of the generator (see the module docstring for the model)."""

    name: str = "custom"
    model: str = "isotropic"
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
    # clustered model only (model="clustered"): anisotropy, density that varies by topic, heterogeneous items
    spectrum_decay: float = 1.0
    detail_decay: float = 1.0
    topic_spread: float = 1.0
    topic_spread_sigma: float = 0.0
    noise_decay: float = 0.0
    image_noise_sigma: float = 0.0
    caption_noise_sigma: float = 0.0
    caption_bias_std: float = 0.0
    caption_error_norm: float = 0.0
    caption_semantic_sigma: float = 0.0
    n_styles: int = 32
    style_zipf: float = 1.0
    image_style_share: float = 0.0
    text_style_share: float = 0.0

    def __post_init__(self):
        if self.model not in MODELS:
            raise ValueError(f"model must be one of {list(MODELS)}; got {self.model!r}")
        for f in ("dim", "latent_dim", "captions_per_image", "n_topics", "n_styles"):
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
                  "text_noise", "caption_noise", "hub_scale", "hub_sigma", "bias_std", "spectrum_decay", "detail_decay",
                  "topic_spread", "topic_spread_sigma", "noise_decay", "image_noise_sigma", "caption_noise_sigma",
                  "caption_bias_std", "caption_semantic_sigma",
                  "style_zipf"):
            v = getattr(self, f)
            if not np.isfinite(v) or v < 0:
                raise ValueError(f"{f} must be a finite number >= 0; got {v!r}")
        for f in ("topic_weight", "caption_shared", "image_style_share", "text_style_share"):
            v = getattr(self, f)
            if not 0 <= v <= 1:
                raise ValueError(f"{f} must be in [0, 1]; got {v!r}")
        if not -1 <= self.caption_error_norm <= 1:
            raise ValueError(f"caption_error_norm must be in [-1, 1]; got {self.caption_error_norm!r}")
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


#: The "clustered" model's parameters fitted to statistics of real CLIP embeddings and published full-size
#: statistics (``scripts/calibrate_synthetic.py --fit <preset>``; ``data/calibration_synthetic.md``), one set per
#: preset: Flickr30k against Flickr8k / ViT-B/32 (100 x 5) and Flickr30k's published numbers, COCO against COCO
#: val2017 / ViT-B/16 (500 x 1) and COCO's published numbers.
_CLUSTERED = dict(model="clustered", latent_dim=64, n_topics=300, n_styles=32, image_mean=0.56, text_mean=0.5,
                  hub_scale=0.0)
_FITTED = {
    "flickr30k": dict(spectrum_decay=0.3309, detail_decay=0.5472, noise_decay=0.4632, topic_zipf=0.5235,
                  topic_spread=2.049, topic_spread_sigma=1.067, image_noise_sigma=0.3351, caption_noise_sigma=0.664,
                  image_semantic=0.2363, image_noise=0.2712, text_semantic=0.3888, text_noise=0.1806,
                  caption_noise=2.02, caption_shared=0.6103, modality_cos=0.3408, bias_std=0.015,
                  caption_bias_std=0.0077, image_style_share=0.8214, text_style_share=0.8594,
                  caption_error_norm=-0.2913, caption_semantic_sigma=0.2322),
    "coco": dict(spectrum_decay=0.5758, detail_decay=0.6281, noise_decay=0.417, topic_zipf=0.479,
             topic_spread=3.5609, topic_spread_sigma=1.2821, image_noise_sigma=0.1202, caption_noise_sigma=0.9471,
             image_semantic=0.1995, image_noise=0.329, text_semantic=0.3438, text_noise=0.1988, caption_noise=3.7259,
             caption_shared=0.1572, modality_cos=0.3521, bias_std=0.0155, caption_bias_std=0.0057,
             image_style_share=0.8002, text_style_share=0.8294, caption_error_norm=0.4026,
             caption_semantic_sigma=0.2646),
    # the text-audio geometry of LAION-CLAP on AudioCaps: the audio presets of hubnorm.media build on it
    "audiocaps-clap": dict(spectrum_decay=0.4578, detail_decay=0.7226, noise_decay=1.2879, topic_zipf=0.4743,
                           topic_spread=0.3686, topic_spread_sigma=0.9182, image_noise_sigma=0.6465,
                           caption_noise_sigma=0.8537, image_semantic=2.596, image_noise=0.0675, text_semantic=2.3839,
                           text_noise=0.0124, caption_noise=3.836, caption_shared=0.5953, modality_cos=-0.2627,
                           bias_std=0.1184, caption_bias_std=0.1631, image_style_share=0.4592,
                           text_style_share=0.6725, image_mean=0.3677, text_mean=0.441, caption_error_norm=-0.0997,
                           caption_semantic_sigma=0.0015),
}

#: The generator's presets. ``flickr30k`` and ``coco`` (the defaults): the "clustered" model, calibrated to
#: statistics of real CLIP embeddings at matched sizes and to the published full-size statistics of zero-shot CLIP
#: ViT-B/32 (``data/calibration_synthetic.md``). ``flickr30k-isotropic`` and ``coco-isotropic``: the earlier
#: "isotropic" model (one global pull of every image towards the caption centre), kept unchanged (same bytes).
PRESETS: Dict[str, GeneratorConfig] = {
    "flickr30k": GeneratorConfig(name="flickr30k", n_train_images=10000, n_val_images=1000, n_test_images=1000,
                                 **_CLUSTERED, **_FITTED["flickr30k"]),
    "coco": GeneratorConfig(name="coco", n_train_images=20000, n_val_images=5000, n_test_images=5000,
                            **_CLUSTERED, **_FITTED["coco"]),
    "audiocaps-clap": GeneratorConfig(name="audiocaps-clap", n_train_images=10000, n_val_images=975,
                                      n_test_images=975, **{**_CLUSTERED, **_FITTED["audiocaps-clap"]}),
    "flickr30k-isotropic": GeneratorConfig(name="flickr30k-isotropic", n_train_images=10000, n_val_images=1000,
                                           n_test_images=1000, hub_scale=0.0065, bias_std=0.011, caption_noise=3.5,
                                           topic_weight=0.3, caption_shared=0.45),
    "coco-isotropic": GeneratorConfig(name="coco-isotropic", n_train_images=20000, n_val_images=5000,
                                      n_test_images=5000, hub_scale=0.004, bias_std=0.012, caption_noise=4.3,
                                      topic_weight=0.3, caption_shared=0.45),
}


@dataclass(frozen=True)
class MediaPreset:
    """One synthetic video or audio preset (module docstring)."""

    name: str
    modality: str
    dataset: str            # the dataset key of the published rows (dbsn_pan2025.csv)
    model: str              # the published model whose raw numbers it is calibrated to
    n_train: int
    train_captions: int
    n_test: int
    test_captions: int
    base: str = "flickr30k"
    overrides: Dict[str, float] = field(default_factory=dict)
    #: whether ``model`` was trained on ``dataset``'s training split (CLIP4Clip on MSR-VTT and on DiDeMo, as DBSN
    #: reproduces it) rather than applied zero-shot (CLAP): a bank drawn from that split is then data the model has
    #: fitted, while the preset's training split is drawn like its test split
    trained_on_dataset: bool = False

    @property
    def model_label(self) -> str:
        """``"CLIP4Clip, trained on msr-vtt"`` or ``"zs CLAP, zero-shot"``: how the published numbers were made."""
        return f"{self.model}, " + (f"trained on {self.dataset}" if self.trained_on_dataset else "zero-shot")

    @property
    def directions(self) -> Tuple[str, str]:
        from .retrieval import MODALITY_LETTERS   # here: the presets load without torch

        m = MODALITY_LETTERS[self.modality]
        return f"t2{m}", f"{m}2t"


#: The video-text and text-audio presets (:mod:`hubnorm.media`'s module docstring): the clustered model with a
#: dataset's sizes and captions per item, on the base geometry ``base`` with a few parameters refitted
#: (``overrides``). Parameters refitted per preset, on top of its base geometry (``flickr30k`` or
#: ``audiocaps-clap``; everything else is the base preset's):
#: exactly what ``scripts/calibrate_synthetic.py --fit-media msrvtt didemo audiocaps clotho --maxfev 60`` wrote into
#: ``data/calibration_synthetic.csv`` (column "fitted parameters"; ``tests/test_media_presets.py`` compares them).
_MEDIA_FITTED = {
    "msrvtt": dict(caption_noise=4.169, caption_bias_std=0.01223, bias_std=0.003729),
    "didemo": dict(caption_noise=4.136, caption_bias_std=0.0137),
    "audiocaps": dict(caption_noise=2.884),
    "clotho": dict(caption_noise=10.12),
}

MEDIA_PRESETS: Dict[str, MediaPreset] = {
    "msrvtt": MediaPreset("msrvtt", "video", "msr-vtt", "CLIP4Clip", 9000, 20, 1000, 1,
                          overrides=_MEDIA_FITTED["msrvtt"], trained_on_dataset=True),
    "didemo": MediaPreset("didemo", "video", "didemo", "CLIP4Clip", 8395, 1, 1004, 1,
                          overrides=_MEDIA_FITTED["didemo"], trained_on_dataset=True),
    "audiocaps": MediaPreset("audiocaps", "audio", "audiocaps", "zs CLAP", 49838, 1, 975, 5,
                             base="audiocaps-clap",
                             overrides=_MEDIA_FITTED["audiocaps"]),
    "clotho": MediaPreset("clotho", "audio", "clotho", "zs CLAP", 3839, 5, 1045, 5, base="audiocaps-clap",
                          overrides=_MEDIA_FITTED["clotho"]),
}



# ---------------------------------------------------------------------------------------------- geometry
#: Householder reflections of the final random rotation.
N_REFLECTIONS = 4


@dataclass
class _Geometry:
    centres: np.ndarray      # (K, r) topic centres (unit for "isotropic"; scaled by the spectrum for "clustered")
    popularity: np.ndarray   # (K,)
    reflections: np.ndarray  # (N_REFLECTIONS, d) unit vectors: rotation = product of Householder reflections
    spread: Optional[np.ndarray] = None        # (K,) within-topic spread ("clustered")
    semantic_sd: Optional[np.ndarray] = None   # (r,) sqrt of the semantic spectrum, sum of squares 1 ("clustered")
    noise_sd: Optional[np.ndarray] = None      # (d - r - 2,) sqrt of the modality-noise spectrum, sum of squares 1
    detail_sd: Optional[np.ndarray] = None     # (r,) sqrt of the within-topic ("detail") spectrum, sum of squares 1
    image_styles: Optional[np.ndarray] = None  # (S, d - r - 2) image "style" centres in the noise subspace
    text_styles: Optional[np.ndarray] = None   # (S, d - r - 2) caption "phrasing" centres in the noise subspace
    style_popularity: Optional[np.ndarray] = None  # (S,)


def _rng(seed: int, *key: int) -> np.random.Generator:
    return np.random.default_rng(np.random.SeedSequence(seed, spawn_key=tuple(int(k) for k in key)))


def _power_spectrum_sd(n: int, decay: float) -> np.ndarray:
    """sqrt of a power-law spectrum ``l ** -decay`` (l = 1..n) whose squares sum to 1."""
    lam = np.arange(1, n + 1, dtype=np.float64) ** -float(decay)
    return np.sqrt(lam / lam.sum())


def generator_geometry(cfg: GeneratorConfig, seed: int) -> _Geometry:
    """The seeded random geometry (topic centres, population, reflection) shared by every split of a seed."""
    rng = _rng(seed, 0)
    pop = (np.arange(cfg.n_topics) + 1.0) ** -cfg.topic_zipf
    pop /= pop.sum()
    if cfg.model == "clustered":
        sem = _power_spectrum_sd(cfg.latent_dim, cfg.spectrum_decay)
        centres = rng.standard_normal((cfg.n_topics, cfg.latent_dim)) * sem
        centres -= pop @ centres  # popularity-weighted mean 0: no semantic offset of the clouds
        spread = cfg.topic_spread * np.exp(cfg.topic_spread_sigma * rng.standard_normal(cfg.n_topics)
                                           - cfg.topic_spread_sigma ** 2 / 2)
        refl = rng.standard_normal((N_REFLECTIONS, cfg.dim))
        refl /= np.linalg.norm(refl, axis=1, keepdims=True)
        noise = _power_spectrum_sd(cfg.dim - cfg.latent_dim - 2, cfg.noise_decay)
        detail = _power_spectrum_sd(cfg.latent_dim, cfg.detail_decay)
        dn = cfg.dim - cfg.latent_dim - 2
        img_styles = rng.standard_normal((cfg.n_styles, dn)) * noise
        txt_styles = rng.standard_normal((cfg.n_styles, dn)) * noise[::-1]
        spop = (np.arange(cfg.n_styles) + 1.0) ** -cfg.style_zipf
        return _Geometry(centres, pop, refl.astype(np.float32), spread, sem, noise, detail, img_styles, txt_styles,
                         spop / spop.sum())
    centres = rng.standard_normal((cfg.n_topics, cfg.latent_dim))
    centres -= pop @ centres  # popularity-weighted mean 0: no semantic offset of the clouds
    centres /= np.linalg.norm(centres, axis=1, keepdims=True)
    refl = rng.standard_normal((N_REFLECTIONS, cfg.dim))
    refl /= np.linalg.norm(refl, axis=1, keepdims=True)
    return _Geometry(centres, pop, refl.astype(np.float32))


def _block(cfg: GeneratorConfig, geo: _Geometry, seed: int, split_code: int, block: int, n_img: int):
    """One RNG block of ``n_img`` images of ``cfg.model`` in canonical coordinates (see the module docstring)."""
    if cfg.model == "clustered":
        return _block_clustered(cfg, geo, seed, split_code, block, n_img)
    return _block_isotropic(cfg, geo, seed, split_code, block, n_img)


def _block_clustered(cfg: GeneratorConfig, geo: _Geometry, seed: int, split_code: int, block: int, n_img: int):
    """One RNG block of the "clustered" model (canonical coordinates, unrotated, unnormalised, float32)."""
    rng = _rng(seed, split_code, block)
    r, d, c = cfg.latent_dim, cfg.dim, cfg.captions_per_image
    rho = cfg.modality_cos
    u_txt = (rho, np.sqrt(max(0.0, 1 - rho ** 2)))
    topics = rng.choice(cfg.n_topics, size=n_img, p=geo.popularity)
    s_t = geo.spread[topics]
    z = geo.centres[topics] + s_t[:, None] * (rng.standard_normal((n_img, r)) * geo.detail_sd)
    z /= np.sqrt(1.0 + s_t ** 2)[:, None]
    g = np.exp(cfg.hub_sigma * rng.standard_normal(n_img) - cfg.hub_sigma ** 2 / 2)
    g = cfg.hub_scale * g + cfg.bias_std * rng.standard_normal(n_img)
    nu = np.exp(cfg.image_noise_sigma * rng.standard_normal(n_img) - cfg.image_noise_sigma ** 2 / 2)
    dn = d - r - 2
    img = np.empty((n_img, d), np.float32)
    img[:, 0] = np.sqrt(cfg.image_mean) + g * u_txt[0]
    img[:, 1] = g * u_txt[1]
    img[:, 2:r + 2] = np.sqrt(cfg.image_semantic) * z
    img[:, r + 2:] = rng.standard_normal((n_img, dn), dtype=np.float32)
    img[:, r + 2:] *= geo.noise_sd[None, :].astype(np.float32)
    a = cfg.image_style_share  # the image's "style" (photography, setting): a cluster of the modality noise
    img[:, r + 2:] = np.sqrt(a) * geo.image_styles[rng.choice(cfg.n_styles, size=n_img, p=geo.style_popularity)] \
        + np.sqrt(1 - a) * img[:, r + 2:]
    img[:, r + 2:] *= np.sqrt(cfg.image_noise * nu)[:, None].astype(np.float32)
    m = n_img * c
    shared = rng.standard_normal((n_img, r)) * geo.detail_sd
    indep = rng.standard_normal((m, r)) * geo.detail_sd
    sh = cfg.caption_shared
    e = np.sqrt(sh) * np.repeat(shared, c, axis=0) + np.sqrt(1 - sh) * indep
    # how ambiguous an image is: its captions' description error varies from image to image
    cn = cfg.caption_noise * np.exp(cfg.caption_noise_sigma * np.repeat(rng.standard_normal(n_img), c)
                                    - cfg.caption_noise_sigma ** 2 / 2)
    zc = np.repeat(z, c, axis=0) + np.sqrt(cn)[:, None] * e
    cap = np.empty((m, d), np.float32)
    b = cfg.caption_bias_std * rng.standard_normal(m)  # a caption's pull towards the image-cloud centre u_I
    cap[:, 0] = np.sqrt(cfg.text_mean) * u_txt[0] + b
    cap[:, 1] = np.sqrt(cfg.text_mean) * u_txt[1]
    semantic = np.sqrt(cfg.text_semantic / (1 + cfg.caption_noise))
    if cfg.caption_error_norm:  # how far a caption's own description error, not the preset's mean, sets its weight
        semantic = semantic * ((1 + cfg.caption_noise) / (1 + cn)) ** (cfg.caption_error_norm / 2)
        semantic = semantic[:, None]
    if cfg.caption_semantic_sigma:  # how much a caption says about its image, apart from its error: its own stream
        sig = cfg.caption_semantic_sigma
        length = np.exp(sig * _rng(seed, split_code, block, 1).standard_normal(m) - sig ** 2 / 2)
        semantic = semantic * length[:, None]
    cap[:, 2:r + 2] = semantic * zc
    cap[:, r + 2:] = rng.standard_normal((m, dn), dtype=np.float32)
    cap[:, r + 2:] *= geo.noise_sd[::-1].astype(np.float32)  # text noise: other leading directions than image noise
    a = cfg.text_style_share  # the caption's phrasing (length, template): a cluster of the modality noise
    cap[:, r + 2:] = np.sqrt(a) * geo.text_styles[rng.choice(cfg.n_styles, size=m, p=geo.style_popularity)] \
        + np.sqrt(1 - a) * cap[:, r + 2:]
    cap[:, r + 2:] *= np.float32(np.sqrt(cfg.text_noise))
    return img, cap, topics, z, g


def _block_isotropic(cfg: GeneratorConfig, geo: _Geometry, seed: int, split_code: int, block: int, n_img: int):
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
    from .embeddings import EmbeddingSplit

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
    """The synthetic dataset ``preset`` ("coco" or "flickr30k") with splits "train", "val" and "test"; or a
    video/audio preset of :data:`MEDIA_PRESETS` ("msrvtt", "didemo", "audiocaps", "clotho": its base geometry, its
    dataset's sizes and captions per item; splits "train" and "test").

    Args:
        preset: name of a calibrated preset in :data:`PRESETS` or :data:`MEDIA_PRESETS`.
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
    if not isinstance(preset, str) or (preset not in PRESETS and preset not in MEDIA_PRESETS):
        raise ValueError(f"unknown synthetic preset {preset!r}; valid presets: {sorted(PRESETS)} (image-text) and "
                         f"{sorted(MEDIA_PRESETS)} (video-text, text-audio)")
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or seed < 0:
        raise ValueError(f"seed must be a non-negative integer; got {seed!r}")
    if preset in MEDIA_PRESETS:
        return _media_dataset(preset, seed=seed, n_train_images=n_train_images, n_test_images=n_test_images, dim=dim,
                              chunk_size=chunk_size, **overrides)
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
    from .embeddings import EmbeddingDataset

    return EmbeddingDataset(name=f"synthetic-{preset}", source="synthetic", splits=splits, meta=meta)


def _first(n_items: int, per_item: int, keep: int) -> np.ndarray:
    """The first ``keep`` captions of each of ``n_items`` items that have ``per_item`` each (item-major order)."""
    return (np.arange(n_items)[:, None] * per_item + np.arange(keep)[None, :]).ravel()


def _media_dataset(preset: str, *, seed: int, n_train_images: Optional[int], n_test_images: Optional[int],
                   dim: int, chunk_size: Optional[int], **overrides) -> EmbeddingDataset:
    """A video/audio preset of :data:`MEDIA_PRESETS` as an embeddings dataset: its base geometry with its overrides,
    drawn with the larger of its captions per item and cut to the first ``test_captions`` / ``train_captions`` of
    each item; splits "test" and "train" (none with ``n_train_images=0``), no "val"."""
    p = MEDIA_PRESETS[preset]
    n_train = p.n_train if n_train_images is None else n_train_images
    n_test = p.n_test if n_test_images is None else n_test_images
    taken = set(overrides) & {"captions_per_image", "n_val_images", *p.overrides}
    if taken:
        raise ValueError(f"{sorted(taken)} are set by the {preset!r} preset (captions per item, no validation split, "
                         "its fitted parameters); they cannot be overridden")
    per = max(p.train_captions, p.test_captions)
    ds = make_dataset(p.base, seed=seed, n_train_images=n_train, n_test_images=n_test, n_val_images=0,
                      captions_per_image=per, dim=dim, chunk_size=chunk_size, **p.overrides, **overrides)
    keep = {"test": p.test_captions, "train": p.train_captions}
    ds.splits = {k: v.subset_captions(_first(v.n_images, per, keep[k])) for k, v in ds.splits.items()}
    ds.name = f"synthetic-{preset}"
    ds.meta.update(preset=preset, modality=p.modality, dataset=p.dataset, model=p.model, base=p.base,
                   description=f"synthetic embeddings (preset {preset!r}: {p.modality}-text, the {p.base!r} geometry "
                               f"with {p.dataset}'s sizes, calibrated to the raw numbers of {p.model_label}); not real data")
    return ds


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
