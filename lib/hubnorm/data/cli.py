"""Command line: ``python -m hubnorm.data {list,fetch,fetch-real,encode,encode-texts,verify,rehearse,
import-qbnorm} ...`` (``-h`` on each for help)."""

from __future__ import annotations

import argparse
import sys
from typing import List, Optional

EPILOG = """\
examples:
  python -m hubnorm.data list
  python -m hubnorm.data fetch coco --what annotations
  python -m hubnorm.data fetch coco --what images --split test
  python -m hubnorm.data fetch-real                              # the small real releases (real:<release>)
  python -m hubnorm.data fetch-real coco500-clip-b16 --mirror /path/to/mirror
  python -m hubnorm.data encode coco --model ViT-B-32-quickgelu --pretrained openai --split test
  python -m hubnorm.data encode flickr30k --model ViT-B-32-quickgelu --pretrained openai --split test --split train
  python -m hubnorm.data encode coco --model ViT-B-16-SigLIP --pretrained webli --split test
  python -m hubnorm.data encode coco --model blip-itm-base-coco --pretrained hf --split test
  python -m hubnorm.data verify coco --model ViT-B-32-quickgelu --pretrained openai
  python -m hubnorm.data encode-texts cache:flickr30k:ViT-B-32-quickgelu:openai   # RSC sentence embeddings (07)
  python -m hubnorm.data rehearse --dataset flickr30k          # SYNTHETIC data, real split sizes
  python -m hubnorm.data import-qbnorm --sims-test test.pkl --sims-train-test train_test.pkl \
      --out sims/msrvtt --allow-pickle                           # QB-Norm pickles -> sims:sims/msrvtt (once)

folders: data root = $HUBNORM_DATA or <repo>/data/raw; cache root = $HUBNORM_CACHE or <repo>/cache
(both gitignored). See data/README.md."""


#: the encoders' precisions (hubnorm.data.encoders.base.PRECISIONS, not imported here: it imports torch)
_PRECISIONS = ("fp32", "fp16", "bf16", "amp", "amp_bf16")


def _splits(values: Optional[List[str]], default) -> List[str]:
    """The splits of ``--split`` (repeatable, comma-separated; ``default`` when not given), each once, in the
    order given; a ``--split`` that names none is an error."""
    out: List[str] = []
    for v in values or default:
        for s in (part.strip() for part in v.split(",")):
            if s and s not in out:
                out.append(s)
    if not out:
        raise ValueError(f"--split {values!r} names no split: give one or more of test, val, train (comma-separated)")
    return out


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m hubnorm.data", description="hubnorm real-data pipeline: fetch "
                                "Karpathy-split annotations and images, encode them (open_clip: CLIP, SigLIP; transformers: BLIP), verify "
                                "caches, write synthetic rehearsal caches.",
                                epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="command",
                           metavar="{list,fetch,fetch-real,encode,encode-texts,verify,rehearse,import-qbnorm}")
    sub.required = True

    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--data-dir", help="data root (default: $HUBNORM_DATA or <repo>/data/raw)")
    common.add_argument("--cache-dir", help="embedding cache root (default: $HUBNORM_CACHE or <repo>/cache)")

    sub.add_parser("list", parents=[common], help="datasets, downloads and cached embeddings",
                   description="List the registered datasets with what is downloaded and cached.")

    f = sub.add_parser("fetch", parents=[common], help="download annotations or images (pooch, checksummed)",
                       description="Download and unpack a dataset's Karpathy annotations or images. Files already "
                       "present with the right checksum are not downloaded again; offline, the error says where "
                       "to put a file by hand. Flickr images must be placed by hand (the command says where).")
    f.add_argument("dataset", help="coco, flickr30k or flickr8k")
    f.add_argument("--what", choices=("annotations", "images", "all"), default="annotations",
                   help="what to fetch (default: annotations)")
    f.add_argument("--split", action="append", help="only the image archives these splits need (repeat or "
                   "comma-separate; default: all). COCO test/val need val2014, train needs train2014 + val2014")
    f.add_argument("--no-progress", action="store_true", help="no progress bars")

    from .real import MIRROR_ENV, RELEASES
    fr = sub.add_parser("fetch-real", help="fetch the small real embedding releases (pinned commit, sha256)",
                        description="Fetch real embedding releases (load them with hubnorm.load_embeddings("
                        "'real:<release>')) into <cache root>/real/<release>/: a cached file is checked by sha256, "
                        f"a missing or failing one is taken from the mirror (--mirror or ${MIRROR_ENV}: "
                        "<mirror>/<release folder>/<file>) or downloaded from its repository at the pinned commit, "
                        "and checked before it is cached. One line per release says where its files came from.")
    fr.add_argument("names", nargs="*", metavar="NAME", help=f"releases (default: all): {', '.join(RELEASES)}")
    fr.add_argument("--cache-dir", help="embedding cache root (default: $HUBNORM_CACHE or <repo>/cache)")
    fr.add_argument("--mirror", help=f"mirror folder (default: ${MIRROR_ENV}, when set)")
    fr.add_argument("--extras", action="store_true", help="also the optional files (random-init control, "
                    "similarity matrix)")
    fr.add_argument("--no-download", action="store_true", help="use the cache and the mirror only")
    fr.add_argument("--optional", action="store_true", help="a release that cannot be obtained (offline) prints "
                    "one NOTE line and the command still exits 0 (run_all.sh)")
    fr.add_argument("--no-progress", action="store_true", help="no progress bars")

    for name, helptext in (("encode", "encode a dataset split (open_clip or BLIP) and cache it"),
                           ("verify", "check cached embeddings (key + sha256 checksums)")):
        e = sub.add_parser(name, parents=[common], help=helptext, description=helptext + ".")
        e.add_argument("dataset", help="coco, flickr30k or flickr8k")
        e.add_argument("--model", required=True, help="open_clip model name, e.g. ViT-B-32-quickgelu (OpenAI "
                       "weights need the -quickgelu names), ViT-B-16-SigLIP or hf-hub:org/name; or a BLIP retrieval "
                       "model: blip-itm-base-coco, blip-itm-base-flickr, Salesforce/<id> or a local folder")
        e.add_argument("--pretrained", required=True, help="pretrained tag, e.g. openai, laion2b_s34b_b79k, webli; "
                       "'none' for random init (hf-hub models: none); BLIP: 'hf' (weights) or 'none'")
        e.add_argument("--family", choices=("open_clip", "blip"), help="encoder family (default: inferred from "
                       "the model name: names starting with 'blip' and BLIP folders -> blip, else open_clip)")
        e.add_argument("--split", action="append", help="split(s): train, val, test (repeat or comma-separate; "
                       "default: test" + (")" if name == "encode" else " val train, those present)"))
        if name == "encode":
            e.add_argument("--annotations", help="caption file or folder (default: <data root>/annotations)")
            e.add_argument("--images-root", help="images root (default: <data root>/<dataset>/images)")
            e.add_argument("--batch-size", type=int, default=64, help="batch size (default 64)")
            e.add_argument("--device", help="cuda / cpu (default: cuda when available)")
            e.add_argument("--precision", default="fp32", choices=_PRECISIONS,
                           help="model precision (default fp32; outputs are float32)")
            e.add_argument("--workers", type=int, default=0, help="image-loading worker processes (default 0)")
            e.add_argument("--force", action="store_true", help="re-encode even if a valid cache entry exists")
            e.add_argument("--no-progress", action="store_true", help="no progress bars")
    t = sub.add_parser("encode-texts", parents=[common], help="encode caption texts for RSC relevance (notebook 07)",
                       description="Encode the caption texts of a dataset's splits with the sentence encoder of RSC "
                       "relevance (all-MiniLM-L6-v2 unless --text-model) into the text-embedding cache "
                       "(<cache root>/encodings, content-addressed by encoder and texts), so that notebook 07 "
                       "reads them instead of encoding for minutes. Entries already cached are verified, not "
                       "re-encoded.")
    t.add_argument("source", help="an embeddings source with caption texts: cache:<dataset>:<model>:<pretrained> "
                   "(as for notebooks; the rehearsal's is cache:<dataset>:synthetic-rehearsal:seed0) or "
                   "local:<folder> (split with the loader's defaults, test_fraction 0.5 and seed 0)")
    t.add_argument("--split", action="append", help="split(s) (repeat or comma-separate; default: test train)")
    t.add_argument("--text-model", help="a local sentence-transformers folder (default: the bundled "
                   "all-MiniLM-L6-v2)")
    t.add_argument("--device", default="cpu", help="torch device for the sentence encoder (default cpu)")
    t.add_argument("--batch-size", type=int, default=64, help="sentence-encoder batch size (default 64)")
    t.add_argument("--precision", default="fp32", choices=_PRECISIONS,
                   help="sentence-encoder precision (default fp32; amp_bf16: about 0.6x the time on a CPU with native "
                   "bfloat16, cosines within 3e-5; notebook 07's text_precision must be the same to read the cache)")
    r = sub.add_parser("rehearse", help="write SYNTHETIC embeddings with a dataset's exact Karpathy split sizes",
                       description="Write synthetic embeddings (hubnorm.synthetic) with the exact Karpathy split "
                       "sizes of a dataset into a separate, labelled cache root, and print the cache: source "
                       "to run on. Use it to check a machine before downloading and encoding real data. "
                       "Everything written is labelled synthetic.")
    from .rehearse import rehearsal_sizes   # the sizes: hubnorm/data/rehearsal.yaml
    r.add_argument("--dataset", required=True, choices=tuple(rehearsal_sizes()))
    r.add_argument("--cache-dir", help="rehearsal cache root (default: <cache root>/rehearsal)")
    r.add_argument("--seed", type=int, default=0, help="generator seed (default 0)")
    r.add_argument("--scale", type=float, default=1.0, help="multiply every split size (tests; default 1)")
    r.add_argument("--split", action="append", help="split(s) to write (default: train val test)")
    r.add_argument("--force", action="store_true", help="rewrite entries that are already there")
    q = sub.add_parser("import-qbnorm", help="convert QB-Norm's pickled similarity matrices to a sims: folder (once)",
                       description="Convert QB-Norm's released pickles (test captions x test videos, training "
                       "captions x test videos, optional query masks) into a sims: folder of plain .npy matrices with "
                       "a manifest and sha256 checksums. Unpickling runs code: this command refuses to run without "
                       "--allow-pickle; import only files you trust. Nothing else in hubnorm ever unpickles.")
    q.add_argument("--sims-test", required=True, help="pickle: test captions x test videos (the evaluated scores)")
    q.add_argument("--sims-train-test", required=True, help="pickle: training captions x test videos (the query bank)")
    q.add_argument("--query-masks", help="pickle: one 0/1 entry per test caption row (rows with 0 are dropped)")
    q.add_argument("--out", required=True, help="the sims folder to write (new or empty)")
    q.add_argument("--modalities", default="text,video", help="rows,columns of the test matrix (default text,video; "
                   "text,audio for audio retrieval)")
    q.add_argument("--dataset", help="dataset name recorded in the manifest (e.g. msrvtt-1k)")
    q.add_argument("--model", help="model name recorded in the manifest (e.g. CLIP4Clip)")
    q.add_argument("--allow-pickle", action="store_true", help="required: confirm that you trust these pickles")
    q.add_argument("--overwrite", action="store_true", help="replace the files of an existing folder")
    return p


def _cmd_import_qbnorm(args) -> int:
    from .qbnorm import WARNING, import_qbnorm

    print(f"warning: {WARNING}", file=sys.stderr)
    if not args.allow_pickle:
        print("error: refusing to unpickle without --allow-pickle (a pickle runs code when loaded); rerun with "
              "--allow-pickle only for files you trust", file=sys.stderr)
        return 2
    path = import_qbnorm(args.sims_test, args.sims_train_test, args.out, query_masks=args.query_masks,
                         allow_pickle=True, modalities=tuple(m.strip() for m in args.modalities.split(",")),
                         dataset=args.dataset, model=args.model, overwrite=args.overwrite)
    print(f"wrote {path} (sha256 of inputs and outputs recorded); use the source sims:{path.parent}")
    return 0


def _cmd_list(args) -> int:
    from . import registry
    from .annotations import candidate_annotation_files
    from .cache import read_manifest, CacheError
    from .paths import cache_root, data_root, images_dir

    print(f"data root:  {data_root(args.data_dir)}")
    print(f"cache root: {cache_root(args.cache_dir)}\n")
    for name in registry.list_datasets():
        info = registry.DATASETS[name]
        print(f"{name}: {info['description']}")
        for s, (n_img, n_cap) in info["splits"].items():
            ann = next((p for p in candidate_annotation_files(name, s, args.data_dir) if p.exists()), None)
            print(f"  {s:5s} {n_img:>7,} images {'' if n_cap is None else f'/ {n_cap:,} captions':<20s} "
                  f"annotations: {ann if ann else 'missing'}")
        imgs = images_dir(name, args.data_dir)
        state = "present" if imgs.exists() and any(imgs.iterdir()) else "missing"
        how = "manual (see fetch --what images)" if info["images"] == "manual" else "fetch --what images"
        print(f"  images: {imgs} ({state}; {how})")
        droot = cache_root(args.cache_dir) / name
        for man in sorted(droot.glob("*/*/*/manifest.json")) if droot.exists() else []:
            try:
                m = read_manifest(man.parent)
                k = m["key"]
                print(f"  cached: {k['model']} / {k['pretrained']} / {k['split']}: {m['n_images']} images, "
                      f"{m['n_captions']} captions, dim {m.get('dim')} ({k.get('encoder_family', 'open_clip')})")
            except CacheError as exc:
                print(f"  cached: {man.parent}: unreadable ({exc})")
        print()
    print("resources:")
    for name, r in registry.RESOURCES.items():
        print(f"  {name:32s} {r['url']}  [{r['known_hash'] or ', '.join(r.get('accepted_hashes', [])) or 'unverified'}]")
    from .real import RELEASES, real_status, release_folder
    print("\nreal releases (load_embeddings('real:<release>'); fetch-real):")
    for name, rel in RELEASES.items():
        print(f"  {name:24s} {rel.label}\n  {'':24s} {real_status(name, args.cache_dir)}: "
              f"{release_folder(name, args.cache_dir)}")
    return 0


def _cmd_fetch_real(args) -> int:
    """One line per release; a release no source gives: exit 1 with the error, or, with ``--optional``, one NOTE
    line and exit 0."""
    from .real import RELEASES, RealDataUnavailable, obtain_real, release

    names = args.names or list(RELEASES)
    for n in names:
        release(n)   # every name checked before anything is fetched (ValueError: exit 2)
    failed = 0
    for n in names:
        try:
            got = obtain_real(n, mirror=args.mirror, cache_dir=args.cache_dir, download=not args.no_download,
                              progress=not args.no_progress, extras=args.extras)
        except RealDataUnavailable as exc:
            if args.optional:
                print(f"NOTE: {exc.note}")
            else:
                print(f"error: {exc}", file=sys.stderr)
                failed += 1
            continue
        k = len(got.contents)
        print(f"{n}: {got.how} ({k} file{'s' if k != 1 else ''}, sha256 checked) -> {got.folder}")
    return 1 if failed else 0


def _cmd_fetch(args) -> int:
    from .fetch import fetch
    paths = fetch(args.dataset, args.what, splits=_splits(args.split, ("test", "val", "train")),
                  data_dir=args.data_dir, progressbar=not args.no_progress)
    for p in paths:
        print(f"ready: {p}")
    return 0


def _cmd_encode(args) -> int:
    from .pipeline import encode_dataset
    splits = _splits(args.split, ("test",))
    ds = encode_dataset(args.dataset, args.model, args.pretrained, splits, annotations=args.annotations,
                        images_root=args.images_root, data_dir=args.data_dir, cache_dir=args.cache_dir,
                        batch_size=args.batch_size, device=args.device, precision=args.precision,
                        num_workers=args.workers, force=args.force, progress=not args.no_progress,
                        family=args.family)
    from .cache import entry_dir
    for s, sp in ds.splits.items():
        print(f"{args.dataset} {s}: {sp.n_images} images, {sp.n_captions} captions, dim {sp.images.shape[1]} -> "
              f"{entry_dir(args.dataset, args.model, args.pretrained, s, args.cache_dir)}")
    print(f"load with: hubnorm.load_embeddings(\"cache:{args.dataset}:{args.model}:{args.pretrained}\""
          + (f", cache_dir=\"{args.cache_dir}\"" if args.cache_dir else "") + ")")
    return 0


def _cmd_rehearse(args) -> int:
    from .rehearse import rehearse
    res = rehearse(args.dataset, cache_dir=args.cache_dir, seed=args.seed, scale=args.scale,
                   splits=_splits(args.split, ("train", "val", "test")), force=args.force)
    print(f"\nSYNTHETIC rehearsal cache (not real embeddings): {res['cache_dir']}")
    print(f"source: {res['spec']}" + ("" if args.cache_dir is None else f"   (with cache_dir={res['cache_dir']!r})"))
    return 0


def _load_source(source: str, **kwargs):
    """The embeddings of a ``cache:`` or ``local:`` source (the ones with caption texts), read by their loaders in
    the one table of source kinds (:mod:`.sources`)."""
    from .sources import load_source

    kind = source.partition(":")[0]
    if kind == "cache":
        return load_source(source, **kwargs)
    if kind == "local":
        return load_source(source, **{"val": False, **kwargs})   # test/train as notebook 07 reads them
    raise ValueError(f"encode-texts reads the caption texts of a 'cache:<dataset>:<model>:<pretrained>' or "
                     f"'local:<folder>' source; got {source!r} (synthetic embeddings have no caption texts)")


def _cmd_encode_texts(args) -> int:
    import time

    from .encoders.sentence import encode_texts, load_text_encoder
    if args.batch_size < 1:
        raise ValueError(f"--batch-size must be a positive integer; got {args.batch_size}")
    splits = _splits(args.split, ("test", "train"))
    kwargs = {}   # local: folders split into test/train with the loader's defaults (as notebook 07's default)
    if args.source.startswith("cache:"):
        kwargs["splits"] = tuple(splits)
        if args.cache_dir:   # one root for embeddings and text embeddings
            from pathlib import Path

            from .rehearse import REHEARSAL_MODEL
            rehearsal = args.source.split(":")[2:3] == [REHEARSAL_MODEL]
            kwargs["cache_dir"] = Path(args.cache_dir) / "rehearsal" if rehearsal else args.cache_dir
    ds = _load_source(args.source, **kwargs)
    for s in splits:   # every split checked before minutes of encoding
        if s not in ds.splits:
            raise ValueError(f"{args.source} has no split {s!r} (it has {sorted(ds.splits)}): pass --split")
        if ds.split(s).caption_texts is None:
            raise ValueError(f"split {s!r} of {args.source} has no caption texts: nothing to encode")
    enc = load_text_encoder(args.text_model, device=args.device, batch_size=args.batch_size, precision=args.precision)
    for s in splits:
        texts = ds.split(s).caption_texts
        t0 = time.perf_counter()
        emb = encode_texts(texts, enc, cache_dir=args.cache_dir, desc=f"{s} captions")
        where = enc.cache_entry_dir(texts, "text", args.cache_dir)
        print(f"{s}: {emb.shape[0]:,} captions, dim {emb.shape[1]} ({enc.name}), {time.perf_counter() - t0:.0f} s "
              f"-> {where}")
    return 0


def _cmd_verify(args) -> int:
    """Exit 0 only when at least one split was verified and none failed; 1 when a split failed or nothing is
    cached; 2 (via :func:`main`) for an unknown dataset or split."""
    from .cache import CacheError
    from .pipeline import create_command, entry_folder, repair_command, verify_split
    from .registry import check_split, dataset_info
    dataset_info(args.dataset)  # ValueError naming the known datasets
    explicit = bool(args.split)
    splits = [check_split(s, args.dataset) for s in _splits(args.split, ("test", "val", "train"))]
    bad = ok = 0
    for s in splits:
        try:
            m = verify_split(args.dataset, s, args.model, args.pretrained, cache_dir=args.cache_dir,
                             family=args.family)
            ok += 1
            print(f"OK       {args.dataset} {s}: {m['n_images']} images, {m['n_captions']} captions "
                  f"({entry_folder(args.dataset, args.model, args.pretrained, s, args.cache_dir)})")
        except CacheError as exc:
            if exc.reason == "missing" and not explicit:
                print(f"absent   {args.dataset} {s}")
                continue
            bad += 1
            print(f"FAILED   {args.dataset} {s}: {exc}\n         fix: "
                  f"{repair_command(args.dataset, args.model, args.pretrained, s, args.family)}")
    if not ok and not bad:
        print(f"nothing to verify: no cached embeddings of {args.dataset} for {args.model} / {args.pretrained} "
              f"under {entry_folder(args.dataset, args.model, args.pretrained, splits[0], args.cache_dir).parent}\n"
              f"         fix: {create_command(args.dataset, args.model, args.pretrained, splits[0], args.family)}",
              file=sys.stderr)
        return 1
    return 1 if bad else 0


def _check_device(device: Optional[str]) -> None:
    """``--device`` checked before any work: a torch device string this machine has."""
    if device is None:
        return
    import torch

    try:
        dev = torch.device(device)
    except (RuntimeError, TypeError) as exc:
        raise ValueError(f"--device {device!r} is not a torch device ({exc}); use cpu, cuda, cuda:0 or mps") from None
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise ValueError(f"--device {device!r}: CUDA is not available on this machine; use --device cpu")
    if dev.type == "mps" and not (getattr(torch.backends, "mps", None) and torch.backends.mps.is_available()):
        raise ValueError(f"--device {device!r}: MPS is not available on this machine; use --device cpu")


def _os_error(exc: OSError) -> str:
    """A one-line explanation of a failed write or read (full disk, read-only or missing folder)."""
    import errno

    where = f"{exc.filename}: " if exc.filename else ""
    hint = {errno.ENOSPC: "the disk is full: free space, or write elsewhere with --cache-dir / HUBNORM_CACHE",
            errno.EDQUOT: "the disk quota is exceeded: free space, or write elsewhere with --cache-dir",
            errno.EROFS: "the file system is read-only: write elsewhere with --cache-dir / HUBNORM_CACHE",
            errno.EACCES: "permission denied: write elsewhere with --cache-dir / HUBNORM_CACHE",
            errno.EPERM: "permission denied: write elsewhere with --cache-dir / HUBNORM_CACHE"}.get(exc.errno, "")
    return f"{where}{exc.strerror or exc}" + (f" ({hint})" if hint else "")


def main(argv: Optional[List[str]] = None) -> int:
    args = build_parser().parse_args(argv)
    from .fetch import DownloadError, ManualDownloadRequired
    try:
        _check_device(getattr(args, "device", None))
        return {"list": _cmd_list, "fetch": _cmd_fetch, "fetch-real": _cmd_fetch_real, "encode": _cmd_encode,
                "verify": _cmd_verify,
                "encode-texts": _cmd_encode_texts,
                "rehearse": _cmd_rehearse, "import-qbnorm": _cmd_import_qbnorm}[args.command](args)
    except (DownloadError, ManualDownloadRequired, FileNotFoundError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except OSError as exc:   # a full, read-only or vanished disk: a sentence, not a traceback
        print(f"error: {_os_error(exc)}", file=sys.stderr)
        return 2


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
