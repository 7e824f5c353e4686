"""A BLIP processor and a tiny BLIP config built without downloads (tests, latency measurements, the BLIP encoder's
offline mode). They live in the data layer because the BLIP ITC encoder (:mod:`hubnorm.data.encoders.blip`) needs
them; :mod:`hubnorm.rerank.blip` re-exports them for the ITM cross-encoder."""

from __future__ import annotations

import hashlib
import json
import tempfile
from pathlib import Path
from typing import Optional, Sequence

__all__ = ["offline_processor", "small_blip_config"]

#: Special tokens of BLIP's BERT tokenizer ([DEC] / [ENC] are BLIP additions).
_SPECIAL = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "[DEC]", "[ENC]"]
_WORDS = ("a an the of in on at with and is are to two three man woman men women person people child boy girl "
          "dog cat horse bird car bus street water beach snow grass field table room red blue green white black "
          "yellow brown small large young old playing sitting standing walking running riding holding wearing "
          "looking front near next top down up shirt hat ball bike building tree sky road group").split()


def offline_processor(image_size: int = 384, *, vocab: Optional[Sequence[str]] = None, max_length: int = 35):
    """A :class:`~transformers.BlipProcessor` built without downloads.

    Image side: ``BlipImageProcessor`` resizing to ``image_size`` x ``image_size`` with BLIP's (CLIP's) mean/std.
    Text side: a lower-casing WordPiece ``BertTokenizer`` from a vocabulary written to a temporary folder: the
    special tokens, a few common caption words, the characters ``a-z0-9`` and their ``##`` continuations (so every
    word tokenises, letter by letter in the worst case). It is *not* BLIP's 30,524-token vocabulary: pair it with
    random weights (tests, latency) or a config whose ``vocab_size`` is at least ``len(tokenizer)``.
    """
    from transformers import BertTokenizer, BlipImageProcessor, BlipProcessor

    if vocab is None:
        chars = list("abcdefghijklmnopqrstuvwxyz0123456789.,'-!?")
        vocab = _SPECIAL + _WORDS + chars + ["##" + c for c in chars]
    vocab = list(dict.fromkeys(vocab))
    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / "vocab.txt"
        path.write_text("\n".join(vocab) + "\n", encoding="utf-8")
        tok = BertTokenizer(str(path), do_lower_case=True, model_max_length=max_length)
    img = BlipImageProcessor(size={"height": image_size, "width": image_size},
                             image_mean=[0.48145466, 0.4578275, 0.40821073],
                             image_std=[0.26862954, 0.26130258, 0.27577711])
    proc = BlipProcessor(image_processor=img, tokenizer=tok)
    proc.hubnorm_fingerprint = hashlib.sha1(json.dumps([vocab, image_size, max_length]).encode()).hexdigest()[:12]
    return proc


def small_blip_config(vocab_size: int = 128, *, image_size: int = 32, patch_size: int = 8, hidden: int = 32,
                      layers: int = 2, heads: int = 2):
    """A tiny BLIP config (random-init tests): same module graph as the base model, a few thousand parameters."""
    from transformers import BlipConfig

    text = dict(vocab_size=vocab_size, hidden_size=hidden, num_hidden_layers=layers, num_attention_heads=heads,
                intermediate_size=2 * hidden, encoder_hidden_size=hidden, max_position_embeddings=64,
                pad_token_id=0, bos_token_id=2, sep_token_id=3, eos_token_id=3)
    vision = dict(hidden_size=hidden, num_hidden_layers=layers, num_attention_heads=heads, intermediate_size=2 * hidden,
                  image_size=image_size, patch_size=patch_size)
    return BlipConfig(text_config=text, vision_config=vision, projection_dim=16, image_text_hidden_size=16)
