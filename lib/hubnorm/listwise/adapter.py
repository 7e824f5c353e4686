"""The adapter analog of Li et al.'s Tables V-VII: a residual linear map per modality trained on *frozen*
embeddings with the triplet and/or Smooth-NDCG losses (:mod:`.losses`), and :func:`adapter_study`, the loss
ablation of the notebook (triplet, S-NDCG, triplet + S-NDCG at several temperatures) evaluated with NDCG@K next to
R@K. An analog of fine-tuning, **not** a reproduction of the paper's models (VSE++ with BUTD features and a GRU,
trained end to end).
"""

from __future__ import annotations

import contextlib
import math
from dataclasses import dataclass, field
from typing import Callable, Dict, Mapping, Optional, Sequence, Tuple

import numpy as np
import pandas as pd
import torch

from ..evaluation import ndcg_at_k
from ..registry import make_normalizer
from ..retrieval import Positives, build_tasks
from .losses import smooth_ndcg, smooth_ndcg_loss, triplet_loss
from .metrics import evaluate_listwise
from .validation import check_relevance, check_tau, index_array, unit_rows

__all__ = ["LinearAdapter", "LOSSES", "AdapterRun", "train_adapter", "drawn_images", "adapter_study"]

RelevanceFn = Callable[[np.ndarray, np.ndarray], np.ndarray]


class LinearAdapter(torch.nn.Module):
    """Residual linear maps on frozen embeddings: ``f(x) = normalize(x + x A)`` for images and ``normalize(y + y B)``
    for captions, ``A = B = 0`` at the start (identity). An analog of fine-tuning, not the paper's models."""

    def __init__(self, dim: int, dtype: torch.dtype = torch.float32):
        super().__init__()
        if isinstance(dim, bool) or not isinstance(dim, (int, np.integer)) or dim < 1:
            raise ValueError(f"dim must be a positive integer; got {dim!r}")
        self.dim = int(dim)
        self.image_map = torch.nn.Parameter(torch.zeros(self.dim, self.dim, dtype=dtype))
        self.text_map = torch.nn.Parameter(torch.zeros(self.dim, self.dim, dtype=dtype))

    def images(self, x: torch.Tensor) -> torch.Tensor:
        return torch.nn.functional.normalize(x + x @ self.image_map, dim=-1)

    def texts(self, y: torch.Tensor) -> torch.Tensor:
        return torch.nn.functional.normalize(y + y @ self.text_map, dim=-1)

    @torch.no_grad()
    def transform(self, images, captions):
        """Adapted (images, captions) as numpy arrays (the adapter's dtype) with unit rows."""
        dtype = self.image_map.dtype
        x = torch.as_tensor(np.asarray(images)).to(dtype)
        y = torch.as_tensor(np.asarray(captions)).to(dtype)
        return self.images(x).numpy(), self.texts(y).numpy()


#: Loss configurations of the ablation (paper Tables V-VII): name -> (triplet weight, S-NDCG weight).
LOSSES = {"triplet": (1.0, 0.0), "sndcg": (0.0, 1.0), "triplet+sndcg": (1.0, 1.0)}


@dataclass
class AdapterRun:
    """A trained adapter and its training log (one row per logged step)."""

    adapter: LinearAdapter
    history: pd.DataFrame
    config: Dict[str, object] = field(default_factory=dict)


@contextlib.contextmanager
def _torch_threads(n: Optional[int]):
    if n is None:
        yield
        return
    old = torch.get_num_threads()
    torch.set_num_threads(int(n))
    try:
        yield
    finally:
        torch.set_num_threads(old)


def _positive_ints(**values) -> None:
    """The training schedule's counts (steps, batch_size, log_every) are positive integers, else a ValueError."""
    for name, v in values.items():
        if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < 1:
            raise ValueError(f"{name} must be a positive integer; got {v!r}")


def _draw(gen: torch.Generator, n_images: int, counts: np.ndarray, batch_size: int):
    """One training batch: ``batch_size`` distinct images and, for each, the position of one of its captions among
    its own (``counts``: captions per image)."""
    b_img = torch.randperm(n_images, generator=gen)[:batch_size].numpy()
    pick = (torch.rand(batch_size, generator=gen, dtype=torch.float64).numpy() * counts[b_img]).astype(np.int64)
    return b_img, pick


def drawn_images(caption_to_image, *, steps: int = 300, batch_size: int = 128, seed: int = 0) -> np.ndarray:
    """The training images :func:`train_adapter` draws with these ``steps``, ``batch_size`` and ``seed`` (sorted,
    each once): its batches come from the same seeded generator, so relevance needs only these images and their
    captions (:func:`hubnorm.listwise.batch_relevance_fn`'s ``images``: at Flickr30k's 29,000 training images,
    300 steps of 128 images reach about 2 in 3)."""
    _positive_ints(steps=steps, batch_size=batch_size)
    c2i = index_array(caption_to_image, "caption_to_image")
    counts = np.bincount(c2i)
    if batch_size > counts.size:
        raise ValueError(f"batch_size {batch_size} exceeds the number of training images {counts.size}")
    if (counts == 0).any():
        raise ValueError(f"image {int(np.flatnonzero(counts == 0)[0])} has no caption")
    gen = torch.Generator().manual_seed(int(seed))
    return np.unique(np.concatenate([_draw(gen, counts.size, counts, batch_size)[0] for _ in range(steps + 1)]))


def train_adapter(
    images,
    captions,
    caption_to_image,
    *,
    relevance_fn: Optional[RelevanceFn] = None,
    loss: str = "triplet+sndcg",
    tau: float = 0.01,
    margin: float = 0.2,
    sndcg_weight: float = 1.0,
    steps: int = 300,
    batch_size: int = 128,
    lr: float = 1e-4,
    seed: int = 0,
    log_every: int = 10,
    num_threads: Optional[int] = 1,
    dtype: str = "float64",
) -> AdapterRun:
    """Train a :class:`LinearAdapter` on frozen (training) embeddings with triplet and/or Smooth-NDCG losses.

    Each step draws ``batch_size`` distinct images and one random caption of each (seeded ``torch.Generator``),
    scores ``S = f(V) g(T)^T`` and minimises ``w_t * triplet(S) + w_s * sndcg_weight * S-NDCG(S, R)`` with Adam, where
    ``(w_t, w_s) = LOSSES[loss]`` and ``R = relevance_fn(image_idx, caption_idx)`` is the in-batch relevance in
    i2t orientation (``R[a, b]`` = relevance of caption ``b`` to image ``a``; ground truth 1).

    The log (every ``log_every`` steps, before the update) holds the losses and the batch's smooth NDCG at ``tau``
    and true NDCG (:func:`hubnorm.ndcg_at_k` over the whole batch list), both averaged over the two directions,
    and their gap ``approx_error`` (paper Fig. 6-7). ``lr`` defaults to 1e-4: the full ``d x d`` maps start at 0 and
    larger Adam steps overshoot (1e-3 cost about 6 R@1 points on the synthetic Flickr30k preset).

    Deterministic for a given ``seed`` on a given machine (CPU; ``num_threads`` pins torch's intra-op threads
    during training, 1 by default). ``dtype`` "float64" (default) keeps the differences between CPUs (summation
    order of their vector units) at the 1e-15 level, so the rounded recall of the trained adapter is the same
    everywhere; "float32" is about twice as fast and drifts by ~1e-6 over a few hundred Adam steps.
    """
    if dtype not in ("float32", "float64"):
        raise ValueError(f"dtype must be 'float32' or 'float64'; got {dtype!r}")
    np_dtype = np.dtype(dtype)
    torch_dtype = torch.float64 if dtype == "float64" else torch.float32
    if loss not in LOSSES:
        raise ValueError(f"loss must be one of {sorted(LOSSES)}; got {loss!r}")
    tau = check_tau(tau)
    w_trip, w_sndcg = LOSSES[loss]
    if w_sndcg and relevance_fn is None:
        raise ValueError(f"loss {loss!r} needs relevance_fn(image_idx, caption_idx) -> in-batch relevance")
    _positive_ints(steps=steps, batch_size=batch_size, log_every=log_every)
    if batch_size < 2:
        raise ValueError("batch_size must be at least 2 (in-batch negatives)")
    if not (math.isfinite(lr) and lr > 0):
        raise ValueError(f"lr must be a finite number > 0; got {lr!r}")
    img = torch.as_tensor(unit_rows(images, "images", np_dtype))
    cap = torch.as_tensor(unit_rows(captions, "captions", np_dtype))
    if img.shape[1] != cap.shape[1]:
        raise ValueError(f"images have dimension {img.shape[1]} but captions {cap.shape[1]}")
    c2i = index_array(caption_to_image, "caption_to_image", img.shape[0])
    if c2i.size != cap.shape[0]:
        raise ValueError(f"caption_to_image has {c2i.size} entries but there are {cap.shape[0]} captions")
    groups = Positives.from_groups(c2i, img.shape[0])  # raises if an image has no caption
    counts = np.diff(groups.indptr)
    if batch_size > img.shape[0]:
        raise ValueError(f"batch_size {batch_size} exceeds the number of training images {img.shape[0]}")

    rows = []
    with _torch_threads(num_threads):
        torch.manual_seed(seed)
        gen = torch.Generator().manual_seed(int(seed))
        adapter = LinearAdapter(img.shape[1], dtype=torch_dtype)
        opt = torch.optim.Adam(adapter.parameters(), lr=lr)
        for step in range(steps + 1):
            b_img, pick = _draw(gen, img.shape[0], counts, batch_size)   # the draws of drawn_images
            b_cap = groups.indices[groups.indptr[b_img] + pick]
            s = adapter.images(img[b_img]) @ adapter.texts(cap[b_cap]).T
            rel = None
            if relevance_fn is not None:
                rel = torch.as_tensor(np.asarray(relevance_fn(b_img, b_cap), dtype=np_dtype))
                rel = check_relevance(rel, s.shape, s)
            l_trip = triplet_loss(s, margin)
            if w_sndcg:
                l_sndcg = smooth_ndcg_loss(s, rel, tau)
                total = w_trip * l_trip + w_sndcg * sndcg_weight * l_sndcg
            else:
                l_sndcg, total = None, l_trip
            if step % log_every == 0 or step == steps:
                row = {"step": step, "loss": float(total.detach()), "triplet": float(l_trip.detach())}
                if rel is not None:
                    if l_sndcg is None:
                        with torch.no_grad():
                            l_sndcg = smooth_ndcg_loss(s, rel, tau)
                    row["sndcg"] = float(l_sndcg.detach())
                    sd = s.detach().double()
                    rd = rel.double()
                    smooth = 0.5 * float(smooth_ndcg(sd, rd, tau).mean() + smooth_ndcg(sd.T, rd.T, tau).mean())
                    true = 0.5 * float(ndcg_at_k(sd, rd, batch_size).mean() + ndcg_at_k(sd.T, rd.T, batch_size).mean())
                    row.update(smooth_ndcg=smooth, true_ndcg=true, approx_error=abs(smooth - true))
                rows.append(row)
            if step == steps:
                break
            opt.zero_grad()
            total.backward()
            opt.step()
    config = {"loss": loss, "tau": tau, "margin": margin, "sndcg_weight": sndcg_weight, "steps": steps,
              "batch_size": batch_size, "lr": lr, "seed": seed, "dtype": dtype}
    adapter.eval()
    return AdapterRun(adapter=adapter, history=pd.DataFrame(rows), config=config)


def adapter_study(train, test, relevance: Mapping[str, np.ndarray], relevance_fn: RelevanceFn, *,
                  taus: Sequence[float] = (0.1, 0.01, 0.001), tau: float = 0.01,
                  ndcg_ks: Sequence[int] = (5, 10, 20), recall_ks: Sequence[int] = (1, 5, 10),
                  **train_kwargs) -> Tuple[Dict[str, AdapterRun], pd.DataFrame]:
    """The loss ablation of Li et al. (Tables V-VII) as an adapter analog, evaluated on ``test``.

    Trains one adapter per configuration on the frozen ``train`` split (:class:`hubnorm.EmbeddingSplit`):
    ``"triplet"``, ``"sndcg (tau=<tau>)"`` and ``"triplet+sndcg (tau=t)"`` for every ``t`` in ``taus``
    (``train_kwargs`` go to :func:`train_adapter`: steps, batch_size, lr, margin, seed, ...). Each adapted test
    split and the untouched one (``"zero-shot (no adapter)"``) are scored with the raw cosine and evaluated
    with :func:`evaluate_listwise` against ``relevance`` (``{"t2i": ..., "i2t": ...}`` of the test split).
    ``relevance_fn(image_idx, caption_idx)`` gives the in-batch relevance of the training split (i2t).

    Returns ``(runs, frame)``: ``{name: AdapterRun}`` and the tidy frame (``direction, method, metric, K,
    value``) with ``method`` the configuration's name.
    """
    for name, split in (("train", train), ("test", test)):
        if not all(hasattr(split, a) for a in ("images", "captions", "caption_to_image")):
            raise TypeError(f"{name} must be an EmbeddingSplit (images, captions, caption_to_image); "
                            f"got {type(split).__name__}")
    kw = dict(ndcg_ks=ndcg_ks, recall_ks=recall_ks)
    raw = {"zero-shot (no adapter)": make_normalizer("raw")}
    frames = [evaluate_listwise(build_tasks(test.images, test.captions, test.caption_to_image), relevance, raw, **kw)]
    configs = [("triplet", tau), ("sndcg", tau)] + [("triplet+sndcg", t) for t in taus]
    runs: Dict[str, AdapterRun] = {}
    for loss, t in configs:
        name = loss if loss == "triplet" else f"{loss} (tau={t:g})"
        run = train_adapter(train.images, train.captions, train.caption_to_image, relevance_fn=relevance_fn,
                            loss=loss, tau=t, **train_kwargs)
        runs[name] = run
        img, cap = run.adapter.transform(test.images, test.captions)
        tasks = build_tasks(img, cap, test.caption_to_image)
        frames.append(evaluate_listwise(tasks, relevance, {name: make_normalizer("raw")}, **kw))
    return runs, pd.concat(frames, ignore_index=True)
