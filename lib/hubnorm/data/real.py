"""Small public releases of real embeddings (``load_embeddings("real:<release>")``), fetched by pinned commit and
checked by sha256.

:data:`RELEASES` is the registry, as data: for each release the GitHub repository, every file's path, commit,
sha256 and size, the encoder, the data set, the modality of the items ("image" or "audio"), the sizes, the licence
situation and the caveats. Nothing of a release is ever committed to this repository; the files live in
``<cache root>/real/<release>/`` (:func:`hubnorm.data.paths.cache_root`, ``$HUBNORM_CACHE``).

Where a file comes from, in order (:func:`obtain_real`, :func:`fetch_real`):

1. the cache: every file is read once and its sha256 checked on every load (the files are small); a file that
   fails (corrupt, changed, truncated) is fetched again from the next source, and an error names it when none can;
2. a mirror folder (``mirror=`` or ``$HUBNORM_REAL_MIRROR``) laid out as ``<mirror>/<release.mirror>/<file>``;
3. ``<URL_BASE>/<owner>/<repo>/<commit>/<path>`` (raw GitHub), through :func:`hubnorm.data.fetch.download_file`
   (pooch, resumable, sha256-checked).

A file is read once: the bytes that were hashed are the bytes that are loaded (a file that changes while it is read
fails its checksum), through :func:`hubnorm.data.local.load_local_embeddings` (``files=``) for the image-text
releases, never unpickling. A file from a mirror or a download is written to a temporary file in the release folder,
read back and checked, then renamed into place: the cache never holds a partial or unchecked file. When no source
gives a file, :class:`RealDataUnavailable` names the release, the URL, the mirror variable and the command
``python -m hubnorm.data fetch-real <release>``.

The audio release (``audiocaps-clap``) holds one audio row per caption; the rows of one clip repeat (two encodings
of one clip differ slightly). Its gallery is one row per clip: rows whose cosine similarity is at least
:data:`AUDIO_GROUP_COS` are one clip (connected components, numbered in order of first appearance), and the first
row of each clip is its gallery item: 399 clips for 497 captions. The margin is wide (clean rows: >= 0.9998 within a
clip, <= 0.943 between clips; a threshold of 0.9999 would split 5 clips in two), and the loader checks that every two
rows of a clip agree in every encoding (>= :data:`AUDIO_GROUP_COS` clean, >= :data:`DISTORTED_GROUP_COS` distorted).
:func:`real_galleries` gives the same clips under the release's signal distortions, row ``c`` = clip ``c``.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import os
import tempfile
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, Iterable, List, Optional, Sequence, Tuple

import numpy as np

from ..embeddings import EmbeddingDataset, EmbeddingSplit
from .paths import PathLike, cache_root

#: Base of the raw-file URLs; a file's URL is ``<URL_BASE>/<owner>/<repo>/<commit>/<path>`` (tests point it at a
#: local server).
URL_BASE = "https://raw.githubusercontent.com"
#: Environment variable naming a mirror folder (``<mirror>/<release.mirror>/<file>``), read when ``mirror`` is None.
MIRROR_ENV = "HUBNORM_REAL_MIRROR"
#: Audio rows with at least this cosine similarity are one clip (module docstring).
AUDIO_GROUP_COS = 0.99
#: In a distorted encoding, the rows of one clip must still agree to at least this cosine similarity.
DISTORTED_GROUP_COS = 0.95
FETCH_COMMAND = "python -m hubnorm.data fetch-real"


@dataclass(frozen=True)
class RealFile:
    """One file of a release: its name in the cache / mirror folder, path and commit in the repository, sha256,
    size in bytes, and what it holds. ``optional`` files are fetched only when asked for."""

    name: str
    path: str
    commit: str
    sha256: str
    size: int
    holds: str
    optional: bool = False


@dataclass(frozen=True)
class RealRelease:
    """One release of real embeddings (module docstring)."""

    name: str
    label: str                 # human label of every table and figure
    repo: str                  # owner/name on GitHub
    mirror: str                # its folder name under a mirror root
    model: str
    dataset: str               # the data set, as the published tables name it
    published_dataset: str     # the nearest data set the papers report (what a gain here is set beside)
    modality: str              # of the items: "image" or "audio"
    n_items: int               # distinct images / clips
    n_captions: int
    dim: int
    licence: str
    caveats: Tuple[str, ...]
    files: Tuple[RealFile, ...]
    galleries: Dict[str, str] = field(default_factory=dict)   # audio: condition -> file of the distorted gallery

    def file(self, name: str) -> RealFile:
        for f in self.files:
            if f.name == name:
                return f
        raise ValueError(f"release {self.name!r} has no file {name!r}; its files: {[f.name for f in self.files]}")

    @property
    def required(self) -> Tuple[RealFile, ...]:
        return tuple(f for f in self.files if not f.optional)

    def url(self, f: RealFile) -> str:
        return f"{URL_BASE}/{self.repo}/{f.commit}/{f.path}"


_MG = "8e20cb24efa4c5f89aad694f2f65eb43ffc46d10"            # Weixin-Liang/Modality-Gap
_SE_EMB = "7a3fb8ba0078f54fd5e38a4c957f40f67bf2cfcf"        # Chia213/Search-Engine: the two .npy files
_SE_META = "9bdaa42851570c320d2a28c5b52d62a40a6bd7f1"       # ... metadata.csv
_SE_INFO = "72b07e88588045bb75ee9cf50ca7588ab1b66a2d"       # ... model_info.json
_AC = "4a0d568541b2f8989ff165c730595d66335538a2"            # qianshuguo/audio-text-clap
_AC_DIR = "outputs/embeddings/"
_AUDIO_SIZE = 1017984                                       # (497, 512) float32 + the .npy header

#: The releases, by name.
RELEASES: Dict[str, RealRelease] = {r.name: r for r in (
    RealRelease(
        name="coco500-clip-b16", label="real: COCO val2017, 500 pairs, CLIP ViT-B/16",
        repo="Weixin-Liang/Modality-Gap", mirror="coco-val2017-500-clip-vitb16",
        model="OpenAI CLIP ViT-B/16", dataset="coco", published_dataset="coco", modality="image", n_items=500,
        n_captions=500, dim=512,
        licence="No licence file at the pinned commit (its README shows an MIT badge, not a licence text); "
                "hubnorm fetches the file and never redistributes it.",
        caveats=("one caption per image (COCO has five): every query has a single positive",
                 "500 pairs of COCO val2017, not the Karpathy 5k test split: not comparable with the published "
                 "COCO tables",
                 "no caption texts and no image ids"),
        files=(RealFile("features_clip.npy", "Figure_1_Modality_Gap/features_clip.npy", _MG,
                        "7227280ace0f145d2c45afa8ab507a1cb280e9460aa271fe9052d08e35342adb", 2048128,
                        "(2, 500, 512) float32: [0] image rows, [1] caption rows, row i of each a pair"),
               RealFile("features_clip_random.npy", "Figure_1_Modality_Gap/features_clip_random.npy", _MG,
                        "c6a5f9ca3fba36d635fd47d20b3cdd5b9ac78dc462070240fdc2ee2786110403", 2048128,
                        "the same pairs through a randomly initialised CLIP: a control at chance level",
                        optional=True))),
    RealRelease(
        name="flickr8k-100x5-clip-b32", label="real: Flickr8k, 100 images x 5 captions, CLIP ViT-B/32",
        repo="Chia213/Search-Engine", mirror="flickr8k-100x5-clip-vitb32",
        model="openai/clip-vit-base-patch32", dataset="flickr8k", published_dataset="flickr30k", modality="image",
        n_items=100, n_captions=500,
        dim=512,
        licence="No licence stated at the pinned commits (Flickr8k has its own terms); hubnorm fetches the files "
                "and never redistributes them.",
        caveats=("image rows repeat once per caption: grouped into 100 images by metadata.csv's image_id",
                 "the first 100 images of Flickr8k's caption file, not a standard test split; a 100-image gallery "
                 "gives far higher recall than 1k or 5k galleries"),
        files=(RealFile("image_embeddings.npy", "embeddings/image_embeddings.npy", _SE_EMB,
                        "69404dccfcb7cebe5b3ad3693d29c69feb6e15f84a66867a5cf62d5a2f8104fb", 1024128,
                        "(500, 512) float32 image rows, one per caption"),
               RealFile("text_embeddings.npy", "embeddings/text_embeddings.npy", _SE_EMB,
                        "dfb333ece84f1e9aaf1037facd1d987cea692d048aa01a36f84a01791493a047", 1024128,
                        "(500, 512) float32 caption rows"),
               RealFile("metadata.csv", "embeddings/metadata.csv", _SE_META,
                        "d9891e2694b6796bbb88d7aaedcf58a364505a541da0fbf58a9f8a1a737cfe0f", 59189,
                        "image_id, image_path, caption of every row"),
               RealFile("model_info.json", "embeddings/model_info.json", _SE_INFO,
                        "149196fa1e4ba85b3643e205b7447b22d5138149a8b25989d48066a457d5e969", 120,
                        "the encoder's name and the embedding size"))),
    RealRelease(
        name="audiocaps-clap", label="real: AudioCaps test, 399 clips x 497 captions, LAION-CLAP",
        repo="qianshuguo/audio-text-clap", mirror="audiocaps-500-laion-clap",
        model="LAION-CLAP", dataset="audiocaps", published_dataset="audiocaps", modality="audio", n_items=399,
        n_captions=497, dim=512,
        licence="No licence stated at the repository's top level (its bundled LAION-CLAP code is CC0); hubnorm "
                "fetches the files and never redistributes them.",
        caveats=("text-audio: the items are audio clips, not images",
                 "497 caption rows over 399 clips (311 with one caption, 79 with two, 8 with three, 1 with four): "
                 "the repeated audio rows of a clip are grouped into one gallery item",
                 "the source sampled 500 test rows and dropped 3 unreadable clips",
                 "no caption texts, no clip ids (here clip000 ... clip398 in order of first appearance) and no "
                 "training captions: a bank comes from a split of these captions",
                 "a grouping at cosine > 0.9999 splits 5 of the clips in two (404 items): their rows agree to "
                 "0.99983 or more, and exactly in other encodings of the release",
                 "distorted galleries: the same clips re-encoded after a signal distortion; 'original' is a "
                 "second encoding of the clean audio"),
        files=tuple(RealFile(f"{stem}.npy", f"{_AC_DIR}{stem}.npy", _AC, sha, _AUDIO_SIZE, holds)
                    for stem, sha, holds in (
            ("audio_embeddings", "9a0f982dc22852c581afcbe651ca4f4330b2f4d4d396639c9c1a72d822724149",
             "(497, 512) float32 audio rows, one per caption"),
            ("text_embeddings", "c01d56e7e657dae40374891edb132570d16e0513b5e06ee9d8c216e8f7e73dab",
             "(497, 512) float32 caption rows; row i pairs with audio row i"),
            ("audio_emb_original", "2c4acff8403cdce3d140b771657656615d70731b2e4ac499f006a1c0e23a7423",
             "audio rows, a second encoding of the clean clips"),
            ("audio_emb_highpass_1000Hz", "34efd79b37dfe0c8ace7f373fad0a600646195733378a7a1785aebd5888cee08",
             "audio rows after a 1 kHz high-pass filter"),
            ("audio_emb_lowpass_4000Hz", "73b902bde9766cf0e807e5777e7be56b26159dd8886912e6c4c916339882c97e",
             "audio rows after a 4 kHz low-pass filter"),
            ("audio_emb_noisy_snr10dB", "8a115c65cb5a36e5c2c90300478deddc8fbf72df183eed70e5c304893a8ec9fc",
             "audio rows with white noise at 10 dB SNR"),
            ("audio_emb_pitch_shift", "d70cde8aca023c10f5fc9aeb2ff3fbd62a261e62bfac9c727480b3fd3222707d",
             "audio rows after a pitch shift"),
        )) + (RealFile("sim_matrix.npy", f"{_AC_DIR}sim_matrix.npy", _AC,
                       "a28b65e929ad34cd5ad5ff8ae007968fda53351ff7890161087bf9c2fa51a3b5", 988164,
                       "(497, 497) float32 audio x text cosine scores", optional=True),),
        galleries={"clean": "audio_embeddings.npy", "original": "audio_emb_original.npy",
                   "highpass_1000Hz": "audio_emb_highpass_1000Hz.npy",
                   "lowpass_4000Hz": "audio_emb_lowpass_4000Hz.npy",
                   "noisy_snr10dB": "audio_emb_noisy_snr10dB.npy", "pitch_shift": "audio_emb_pitch_shift.npy"}),
)}


class RealDataUnavailable(RuntimeError):
    """No source (cache, mirror, download) gave a verified copy of a release's file; the message says how to get it.

    ``release``: the release's name; ``reasons``: file name -> what each source said; ``brief``: file name -> the
    same in a few words; :attr:`note`: one line for logs."""

    def __init__(self, message: str, release: str, reasons: Dict[str, List[str]], brief: Dict[str, List[str]]):
        super().__init__(message)
        self.release = release
        self.reasons = reasons
        self.brief = brief

    @property
    def note(self) -> str:
        """One line: the release, what failed for its first missing file, the fix."""
        name, why = next(iter(self.brief.items()))
        more = f" and {len(self.brief) - 1} more files" if len(self.brief) > 1 else ""
        return (f"real release {self.release} unavailable: {name}{more}: {', '.join(why)}; get it with "
                f"`{FETCH_COMMAND} {self.release}` on a machine with internet, or set {MIRROR_ENV}")


@dataclass
class RealFetch:
    """What :func:`obtain_real` returns: the release, its cache folder, the verified bytes of each file (the bytes
    to load) and where each came from ("cache", "mirror" or "download")."""

    release: RealRelease
    folder: Path
    contents: Dict[str, bytes]
    sources: Dict[str, str]

    @property
    def how(self) -> str:
        """"downloaded" when any file was downloaded, else "fetched from mirror" when any came from the mirror,
        else "cached"."""
        got = set(self.sources.values())
        return "downloaded" if "download" in got else "fetched from mirror" if "mirror" in got else "cached"


def release(name: str) -> RealRelease:
    """The release ``name`` of :data:`RELEASES` (a ValueError lists the valid names)."""
    if not isinstance(name, str) or name not in RELEASES:
        raise ValueError(f"unknown real release {name!r}; valid: {sorted(RELEASES)} "
                         "(load one with hubnorm.load_embeddings('real:<release>'))")
    return RELEASES[name]


def mirror_root(mirror: Optional[PathLike] = None) -> Optional[Path]:
    """The mirror folder: ``mirror`` when given, else ``$HUBNORM_REAL_MIRROR`` when set, else None (no mirror).
    Either must name an existing folder (a ValueError names the argument or the variable and the fix)."""
    layout = "a folder holding <release folder>/<file>, e.g. coco-val2017-500-clip-vitb16/features_clip.npy"
    if mirror is not None:
        path = Path(mirror).expanduser()
        if not path.is_dir():
            raise ValueError(f"mirror={str(mirror)!r} is not a folder: pass {layout}, or mirror=None")
        return path
    value = os.environ.get(MIRROR_ENV)
    if value is None:
        return None
    if not value.strip():
        raise ValueError(f"{MIRROR_ENV} is set but blank: unset it, or set it to {layout}")
    path = Path(value).expanduser()
    if not path.is_dir():
        what = "is a file, not a folder" if path.exists() else "does not exist"
        raise ValueError(f"{MIRROR_ENV}={value!r} {what}: set it to {layout}, or unset it")
    return path


def release_folder(name: str, cache_dir: Optional[PathLike] = None) -> Path:
    """``<cache root>/real/<name>``: where release ``name``'s verified files are cached."""
    return cache_root(cache_dir) / "real" / release(name).name


def _read_checked(path: Path, f: RealFile) -> Tuple[Optional[bytes], str]:
    """The bytes of ``path`` when they have ``f``'s size and sha256 (read once), else None and why not."""
    try:
        data = path.read_bytes()
    except OSError as exc:
        return None, f"{path} cannot be read ({exc.strerror or exc})"
    if len(data) != f.size:
        return None, f"{path} has {len(data)} bytes, expected {f.size} (truncated or another file)"
    digest = hashlib.sha256(data).hexdigest()
    if digest != f.sha256:
        return None, f"checksum mismatch: {path} has sha256 {digest}, expected {f.sha256}"
    return data, ""


def _install(folder: Path, f: RealFile, data: bytes) -> Path:
    """Write verified ``data`` to ``folder / f.name`` atomically: a temporary file in ``folder``, flushed to disk,
    read back and checked, then renamed over the target (a crash leaves the old file or none, never a partial)."""
    folder.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{f.name}.", suffix=".tmp", dir=folder)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.chmod(tmp, 0o644)   # mkstemp's 0600 would hide a shared cache from other users
        back, why = _read_checked(Path(tmp), f)
        if back is None:
            raise OSError(f"writing {folder / f.name} failed: {why}")
        os.replace(tmp, folder / f.name)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return folder / f.name


@contextlib.contextmanager
def _quiet_pooch(quiet: bool):
    """pooch's "Downloading data from ..." log line, silenced when ``quiet`` (no progress wanted)."""
    import logging

    import pooch

    log = pooch.get_logger()
    level = log.level
    if quiet:
        log.setLevel(logging.WARNING)
    try:
        yield
    finally:
        log.setLevel(level)


def _download(rel: RealRelease, f: RealFile, folder: Path, progress: bool) -> Tuple[Optional[bytes], str, str]:
    """Download ``f`` into ``folder/.download`` (pooch checks the sha256; a partial download resumes), then read it
    once and check it again: the bytes returned are the bytes checked. ``(bytes or None, why not, in brief)``."""
    from .fetch import DownloadError, download_file

    staging = folder / ".download"
    url = rel.url(f)
    try:
        with _quiet_pooch(not progress):
            path = download_file(url, staging, f.name, f"sha256:{f.sha256}", progressbar=progress)
        data, why = _read_checked(path, f)
        path.unlink()
        return data, why, "download failed its sha256"
    except ImportError as exc:
        return None, f"cannot download {url}: {exc.name or exc} is not installed (pip install 'hubnorm[data]')", \
            f"download impossible ({exc.name or exc} not installed)"
    except DownloadError as exc:
        cause = type(exc.__cause__).__name__ if exc.__cause__ is not None else "error"
        checksum = "checksum mismatch" in str(exc)
        return None, str(exc).strip().splitlines()[0], ("download failed its sha256" if checksum
                                                         else f"download failed ({cause})")
    finally:
        try:
            staging.rmdir()   # only when empty: a partial download stays for the next try to resume
        except OSError:
            pass


def obtain_real(name: str, *, mirror: Optional[PathLike] = None, cache_dir: Optional[PathLike] = None,
                download: bool = True, progress: bool = True, extras: bool = False,
                files: Optional[Iterable[str]] = None) -> RealFetch:
    """Verified bytes of release ``name``'s files, cached in :func:`release_folder` (sources in the order of the
    module docstring).

    Args:
        name: a release of :data:`RELEASES`.
        mirror: a mirror folder (``<mirror>/<release.mirror>/<file>``); None reads ``$HUBNORM_REAL_MIRROR``.
        cache_dir: the cache root (default :func:`hubnorm.data.paths.cache_root`).
        download: download what neither the cache nor the mirror holds (False: never touch the network).
        progress: progress bars (and pooch's log line) for downloads.
        extras: also the release's optional files (e.g. the random-init control).
        files: exactly these files of the release (default: the required ones, plus the optional with ``extras``).
    Raises:
        RealDataUnavailable: a file could be obtained from no source (the message names each file, the URL, the
            mirror variable and the fetch command).
    """
    rel = release(name)
    if files is None:
        wanted = rel.files if extras else rel.required
    else:
        wanted = tuple(rel.file(n) for n in files)
    root, resolved = None, False   # the mirror is read (and checked) only when the cache lacks a file
    folder = release_folder(rel.name, cache_dir)
    contents: Dict[str, bytes] = {}
    sources: Dict[str, str] = {}
    reasons: Dict[str, List[str]] = {}
    brief: Dict[str, List[str]] = {}
    for f in wanted:
        why: List[str] = []      # what each source said
        short: List[str] = []    # the same in a few words
        data, how = None, None
        cached = folder / f.name
        if cached.exists():
            data, bad = _read_checked(cached, f)
            how = "cache" if data is not None else None
            if data is None:
                why.append(f"the cached copy fails: {bad}")
                short.append("cached copy failed its sha256")
        else:
            why.append(f"not cached ({cached})")
            short.append("not cached")
        if data is None:
            if not resolved:
                root, resolved = mirror_root(mirror), True
            src = None if root is None else root / rel.mirror / f.name
            if src is None:
                why.append(f"no mirror ({MIRROR_ENV} unset)")
                short.append("no mirror")
            elif not src.is_file():
                why.append(f"not in the mirror ({src})")
                short.append("not in the mirror")
            else:
                data, bad = _read_checked(src, f)
                how = "mirror" if data is not None else None
                if data is None:
                    why.append(bad)
                    short.append(f"mirror copy {src} failed its sha256")
        if data is None:
            if download:
                data, bad, said = _download(rel, f, folder, progress)
                how = "download" if data is not None else None
                if data is None:
                    why.append(bad)
                    short.append(said)
            else:
                why.append(f"downloads are off (download=False; the file is at {rel.url(f)})")
                short.append("downloads off")
        if data is None:
            reasons[f.name], brief[f.name] = why, short
            continue
        if how != "cache" and any("sha256" in w for w in short):
            warnings.warn(f"real release {rel.name}: {f.name} taken from the {how} because " + "; ".join(why),
                          RuntimeWarning, stacklevel=2)
        if how != "cache":
            _install(folder, f, data)
        contents[f.name], sources[f.name] = data, how
    if reasons:
        lines = "\n".join(f"  {n} ({rel.url(rel.file(n))}):\n      " + "\n      ".join(w) for n, w in reasons.items())
        raise RealDataUnavailable(
            f"real release {rel.name!r} ({rel.label}): {len(reasons)} file(s) could not be obtained:\n{lines}\n"
            f"Fix: on a machine with internet, run\n    {FETCH_COMMAND} {rel.name}\n(it caches the verified files in "
            f"{folder}), or copy the release's files into <mirror>/{rel.mirror}/ and set {MIRROR_ENV}=<mirror> "
            "(or pass mirror=).", rel.name, reasons, brief)
    return RealFetch(rel, folder, contents, sources)


def fetch_real(name: str, *, mirror: Optional[PathLike] = None, cache_dir: Optional[PathLike] = None,
               download: bool = True, progress: bool = True, extras: bool = False) -> Path:
    """Make sure release ``name``'s files are cached and verified (:func:`obtain_real`); returns their folder,
    ``<cache root>/real/<name>``."""
    return obtain_real(name, mirror=mirror, cache_dir=cache_dir, download=download, progress=progress,
                       extras=extras).folder


def real_status(name: str, cache_dir: Optional[PathLike] = None) -> str:
    """"cached" (every required file present with its sha256), "not cached", or "incomplete: ..." naming the
    missing or failing files. Reads the cache only."""
    rel = release(name)
    folder = release_folder(name, cache_dir)
    missing = [f.name for f in rel.required if not (folder / f.name).exists()]
    if len(missing) == len(rel.required):
        return "not cached"
    bad = [f.name for f in rel.required if f.name not in missing and _read_checked(folder / f.name, f)[0] is None]
    if missing or bad:
        return "incomplete: " + ", ".join([f"{n} missing" for n in missing] + [f"{n} fails its sha256" for n in bad])
    return "cached"


def _release_meta(rel: RealRelease, fetched: RealFetch) -> dict:
    names = sorted(fetched.contents)
    return {"release": rel.name, "label": rel.label, "model": rel.model, "dataset": rel.dataset,
            "published_dataset": rel.published_dataset,
            "modality": rel.modality, "repo": f"github.com/{rel.repo}",
            "urls": {n: rel.url(rel.file(n)) for n in names}, "commits": {n: rel.file(n).commit for n in names},
            "sha256": {n: rel.file(n).sha256 for n in names}, "sources": dict(fetched.sources),
            "licence": rel.licence, "caveats": list(rel.caveats), "folder": str(fetched.folder)}


def group_rows(x: np.ndarray, min_cos: float) -> np.ndarray:
    """Group index of each row of ``x`` (unit rows): the connected components of "cosine >= ``min_cos``", numbered
    in order of first appearance (row 0 is in group 0)."""
    x = np.asarray(x, dtype=np.float64)
    linked = (x @ x.T) >= min_cos
    parent = np.arange(len(x))

    def root(i):
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    for i, j in zip(*np.nonzero(np.triu(linked, 1))):
        a, b = root(i), root(j)
        if a != b:
            parent[max(a, b)] = min(a, b)
    roots = np.array([root(i) for i in range(len(x))])
    _, first, labels = np.unique(roots, return_index=True, return_inverse=True)
    order = np.argsort(np.argsort(first))   # renumber groups by their first row
    return order[labels].astype(np.int64)


def _npy(fetched: RealFetch, name: str) -> np.ndarray:
    try:
        return np.load(io.BytesIO(fetched.contents[name]), allow_pickle=False)
    except (ValueError, OSError, EOFError) as exc:   # pragma: no cover - the sha256 was checked
        raise ValueError(f"{fetched.folder / name} cannot be read as a .npy array ({exc})") from exc


def _audio_clips(fetched: RealFetch) -> Tuple[np.ndarray, np.ndarray, Dict[str, np.ndarray]]:
    """``(caption -> clip, first row of each clip, {condition: (rows, d) array})`` of the audio release, with the
    grouping checked in every encoding (module docstring)."""
    rel = fetched.release
    rows = {cond: _npy(fetched, fname) for cond, fname in rel.galleries.items()}
    for cond, x in rows.items():
        if x.shape != (rel.n_captions, rel.dim) or x.dtype != np.float32:
            raise ValueError(f"{rel.galleries[cond]}: expected float32 {(rel.n_captions, rel.dim)}; got {x.dtype} "
                             f"{x.shape}")
    c2clip = group_rows(rows["clean"], AUDIO_GROUP_COS)
    n = int(c2clip.max()) + 1
    if n != rel.n_items:
        raise ValueError(f"{rel.name}: grouping the audio rows at cosine >= {AUDIO_GROUP_COS} gives {n} clips, "
                         f"the registry says {rel.n_items}")
    first = np.full(n, -1, dtype=np.int64)
    for j in range(len(c2clip) - 1, -1, -1):
        first[c2clip[j]] = j
    same = c2clip[:, None] == c2clip[None, :]
    for cond, x in rows.items():
        sims = x.astype(np.float64) @ x.astype(np.float64).T
        low = sims[same].min()
        floor = AUDIO_GROUP_COS if cond == "clean" else DISTORTED_GROUP_COS
        if low < floor:
            raise ValueError(f"{rel.name}: in {rel.galleries[cond]} two rows of one clip have cosine {low:.4f} < "
                             f"{floor}: the clips are not the same in every encoding")
    return c2clip, first, rows


def release_arrays(name: str, *, first_caption: bool = False,
                   **fetch_kwargs) -> Tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The whole release ``name`` as ``(items, captions, caption_to_item)``, unsplit, float32: its distinct images
    (or clips) in order of first appearance and every caption in the release's order; ``first_caption=True`` keeps
    only the first caption of each item (then ``caption_to_item`` is ``0 .. n - 1``). What the calibration of the
    synthetic presets measures (:mod:`hubnorm_companion.calibration`); ``fetch_kwargs`` as :func:`obtain_real`."""
    rel = release(name)
    if rel.modality == "audio":
        fetched = obtain_real(name, **fetch_kwargs)
        c2i, first, rows = _audio_clips(fetched)
        items, captions = rows["clean"][first], _npy(fetched, "text_embeddings.npy")
    else:   # the local-folder reader, on the verified bytes
        from .local import read_local

        fetched = obtain_real(name, files=[f.name for f in rel.required], **fetch_kwargs)
        full, _, _ = read_local(fetched.folder, files=fetched.contents)
        items, captions, c2i = full.images, full.captions, full.caption_to_image
    c2i = np.asarray(c2i, dtype=np.int64)
    if first_caption:
        keep = np.asarray([int(np.flatnonzero(c2i == i)[0]) for i in range(len(items))])
        captions, c2i = captions[keep], np.arange(len(items))
    return items, captions, c2i


def real_galleries(name: str = "audiocaps-clap", **fetch_kwargs) -> Dict[str, np.ndarray]:
    """The audio release's clips under each condition: ``{"clean", "original", "highpass_1000Hz",
    "lowpass_4000Hz", "noisy_snr10dB", "pitch_shift"}`` -> (n_clips, d) float32, row ``c`` = clip ``c`` of
    ``load_embeddings("real:<name>")`` (a split's ``image_ids`` name its clips: :func:`clip_index` gives the rows).
    ``"clean"`` is the gallery the dataset holds; ``"original"`` a second encoding of the clean audio; the others
    the same clips re-encoded after a signal distortion (a gallery shifted away from the unchanged captions).
    ``fetch_kwargs``: ``mirror``, ``cache_dir``, ``download``, ``progress`` (:func:`obtain_real`)."""
    rel = release(name)
    if not rel.galleries:
        raise ValueError(f"release {name!r} has no distorted galleries; the audio release has: "
                         f"{sorted(n for n, r in RELEASES.items() if r.galleries)}")
    fetch_kwargs.setdefault("progress", False)
    _, first, rows = _audio_clips(obtain_real(name, **fetch_kwargs))
    return {cond: np.ascontiguousarray(x[first]) for cond, x in rows.items()}


def clip_index(image_ids: Sequence[str]) -> np.ndarray:
    """Rows of :func:`real_galleries` of the clips named ``clip000``, ``clip017``, ... (a split's ``image_ids``)."""
    ids = list(image_ids or [])
    bad = [i for i in ids if not (isinstance(i, str) and i.startswith("clip") and i[4:].isdigit())]
    if bad or not ids:
        raise ValueError(f"image_ids must be clip ids such as 'clip017' (the image_ids of a split of the audio "
                         f"release); got {bad[:3] or ids}")
    return np.asarray([int(i[4:]) for i in ids], dtype=np.int64)


def load_real(name: str, *, test_fraction: float = 0.5, seed: int = 0, val: bool = True,
              features: Optional[str] = None, mirror: Optional[PathLike] = None,
              cache_dir: Optional[PathLike] = None, download: bool = True,
              progress: bool = False) -> EmbeddingDataset:
    """Release ``name`` as an :class:`EmbeddingDataset` (``source="real"``), split into test / val / train by the
    one rule of :func:`hubnorm.data.local.split_by_images` (``test_fraction``, ``seed``, ``val``).

    Image-text releases go through :func:`hubnorm.data.local.load_local_embeddings` on the cached folder, reading
    the verified bytes; the audio release's "images" are its clips (module docstring). ``meta`` holds
    ``release``, ``label``, ``model``, ``dataset``, ``modality``, ``n_images``, ``n_captions``, ``urls``,
    ``commits``, ``sha256``, ``licence`` and ``caveats``. ``features``: another stacked file of the release
    (``"features_clip_random.npy"``: the random-init control of ``coco500-clip-b16``). ``mirror``, ``cache_dir``,
    ``download``, ``progress``: where the files come from (:func:`obtain_real`).
    """
    rel = release(name)
    where = dict(mirror=mirror, cache_dir=cache_dir, download=download, progress=progress)
    if rel.modality == "audio":
        if features is not None:
            raise ValueError(f"features= picks a stacked file of an image-text release; {name!r} has none "
                             "(its distorted galleries: hubnorm.data.real_galleries)")
        fetched = obtain_real(name, **where)
        c2clip, first, rows = _audio_clips(fetched)
        full = EmbeddingSplit(images=np.ascontiguousarray(rows["clean"][first]),
                              captions=_npy(fetched, "text_embeddings.npy"), caption_to_image=c2clip,
                              image_ids=[f"clip{c:03d}" for c in range(len(first))])
        meta = {**_release_meta(rel, fetched), "n_clips": len(first), "group_cos": AUDIO_GROUP_COS,
                "galleries": list(rel.galleries)}
        from .local import split_by_images

        return split_by_images(full, name=rel.name, meta=meta, test_fraction=test_fraction, seed=seed, val=val)
    from .local import load_local_embeddings

    stacked = [f.name for f in rel.files if f.name.startswith("features_")]
    if features is not None and features not in stacked:
        raise ValueError(f"features={features!r} is not a stacked file of {name!r}; valid: {stacked or 'none'}")
    files = [f.name for f in rel.required if f.name not in stacked] + ([features or stacked[0]] if stacked else [])
    fetched = obtain_real(name, files=files, **where)
    control = features is not None and features != stacked[0]
    ds = load_local_embeddings(fetched.folder, files=fetched.contents, features=features or "features_clip.npy",
                               name=rel.name + (f"/{Path(features).stem}" if control else ""),
                               test_fraction=test_fraction, seed=seed, val=val, check_pairs=not control)
    if (ds.meta["n_images"], ds.meta["n_captions"]) != (rel.n_items, rel.n_captions):
        raise ValueError(f"{name}: the loader found {ds.meta['n_images']} images / {ds.meta['n_captions']} captions; "
                         f"the registry says {rel.n_items} / {rel.n_captions}")
    meta = _release_meta(rel, fetched)
    if control:
        meta.update(model=f"{rel.model}, random initialisation", label=f"{rel.label} (random-init control)")
    ds.meta.update(meta)
    return ds


__all__ = ["RELEASES", "RealRelease", "RealFile", "RealFetch", "RealDataUnavailable", "URL_BASE", "MIRROR_ENV",
           "AUDIO_GROUP_COS", "release", "mirror_root", "release_folder", "obtain_real", "fetch_real", "real_status",
           "load_real", "real_galleries", "release_arrays", "clip_index", "group_rows"]
