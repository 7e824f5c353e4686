"""``hubnorm.data.blip_offline`` in small pieces: :func:`offline_processor`'s vocabulary written out here in full
(special tokens, caption words, characters and their ``##`` continuations, in that order, the repeated "a" once), a
given vocabulary kept in order with its repeats dropped, lower-casing and letter-by-letter WordPiece, the length limit
and the image side (size, BLIP's mean/std) at their defaults and as given, and the fingerprint against sha1 of the
JSON written here; :func:`small_blip_config`'s every field at its defaults and as given.

Survivors judged equivalent (no test can tell them apart):
- ``path.write_text(..., encoding="utf-8")``: ``encoding`` dropped, ``None`` or ``"UTF-8"`` (the same codec; the
  locale's encoding is UTF-8 where the tests run, and the default vocabulary is ASCII).
- ``Path(d) / "vocab.txt"`` -> ``"XXvocab.txtXX"`` or ``"VOCAB.TXT"``: ``BertTokenizer`` reads the file it is given,
  whatever its name.
- ``BertTokenizer(..., do_lower_case=True, ...)``: the argument dropped (``True`` is its default).
- ``BlipImageProcessor(image_mean=..., image_std=...)``: either dropped (2 mutants: its defaults are the same OpenAI
  CLIP mean and std).
- ``small_blip_config``: ``encoder_hidden_size=hidden`` dropped or renamed (``BlipConfig`` sets the text config's
  ``encoder_hidden_size`` to the vision hidden size itself), ``pad_token_id=0`` dropped or renamed (0 is
  ``BlipTextConfig``'s default).
"""

from __future__ import annotations

import hashlib
import json

import pytest

pytest.importorskip("transformers")

from hubnorm.data.blip_offline import offline_processor, small_blip_config  # noqa: E402

_SPECIAL = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "[DEC]", "[ENC]"]
_WORDS = ("a an the of in on at with and is are to two three man woman men women person people child boy girl "
          "dog cat horse bird car bus street water beach snow grass field table room red blue green white black "
          "yellow brown small large young old playing sitting standing walking running riding holding wearing "
          "looking front near next top down up shirt hat ball bike building tree sky road group").split()
_CHARS = list("abcdefghijklmnopqrstuvwxyz0123456789.,'-!?")


def _vocab_in_order(tok):
    return [t for t, _ in sorted(tok.vocab.items(), key=lambda kv: kv[1])]


@pytest.fixture
def default():
    # per test, not per module: mutmut runs for a mutant only the tests that called the function themselves
    return offline_processor()


def test_the_default_vocabulary_is_written_out_in_order(default):
    # "a" is both a caption word and a character: kept once, where it comes first
    expected = _SPECIAL + _WORDS + [c for c in _CHARS if c != "a"] + ["##" + c for c in _CHARS]
    assert len(expected) == len(set(expected)) == 162
    assert _vocab_in_order(default.tokenizer) == expected
    assert len(default.tokenizer) == 162


def test_the_default_tokenizer_lower_cases_and_spells_unknown_words(default):
    tok = default.tokenizer
    assert tok.tokenize("A Dog RIDING xyz") == ["a", "dog", "riding", "x", "##y", "##z"]
    assert tok.tokenize("two-3!") == ["two", "-", "3", "!"]
    assert tok.model_max_length == 35
    ids = tok(["a dog " * 40], truncation=True)["input_ids"][0]
    assert len(ids) == 35 and ids[0] == 2 and ids[-1] == 3                 # [CLS] ... [SEP]


def test_the_default_image_side_and_fingerprint(default):
    img = default.image_processor
    assert (img.size["height"], img.size["width"]) == (384, 384)
    assert list(img.image_mean) == [0.48145466, 0.4578275, 0.40821073]
    assert list(img.image_std) == [0.26862954, 0.26130258, 0.27577711]
    vocab = _SPECIAL + _WORDS + [c for c in _CHARS if c != "a"] + ["##" + c for c in _CHARS]
    want = hashlib.sha1(json.dumps([vocab, 384, 35]).encode()).hexdigest()[:12]
    assert default.hubnorm_fingerprint == want and len(want) == 12


def test_a_given_vocabulary_keeps_its_order_without_repeats():
    vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "zeta", "alpha", "zeta", "##a", "alpha", "b"]
    proc = offline_processor(48, vocab=vocab, max_length=7)
    kept = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "zeta", "alpha", "##a", "b"]
    assert _vocab_in_order(proc.tokenizer) == kept
    assert proc.tokenizer.tokenize("ZETA Alpha ba") == ["zeta", "alpha", "b", "##a"]
    assert proc.tokenizer.model_max_length == 7
    assert (proc.image_processor.size["height"], proc.image_processor.size["width"]) == (48, 48)
    want = hashlib.sha1(json.dumps([kept, 48, 7]).encode()).hexdigest()[:12]
    assert proc.hubnorm_fingerprint == want


def test_the_fingerprint_changes_with_each_input(default):
    prints = {default.hubnorm_fingerprint, offline_processor(383).hubnorm_fingerprint,
              offline_processor(max_length=34).hubnorm_fingerprint,
              offline_processor(vocab=_SPECIAL + _WORDS).hubnorm_fingerprint}
    assert len(prints) == 4


def test_the_small_config_at_its_defaults():
    cfg = small_blip_config()
    t, v = cfg.text_config, cfg.vision_config
    assert (t.vocab_size, t.hidden_size, t.num_hidden_layers, t.num_attention_heads) == (128, 32, 2, 2)
    assert (t.intermediate_size, t.encoder_hidden_size, t.max_position_embeddings) == (64, 32, 64)
    assert (t.pad_token_id, t.bos_token_id, t.sep_token_id, t.eos_token_id) == (0, 2, 3, 3)
    assert (v.hidden_size, v.num_hidden_layers, v.num_attention_heads, v.intermediate_size) == (32, 2, 2, 64)
    assert (v.image_size, v.patch_size) == (32, 8)
    assert (cfg.projection_dim, cfg.image_text_hidden_size) == (16, 16)


def test_the_small_config_as_given():
    cfg = small_blip_config(50, image_size=24, patch_size=6, hidden=12, layers=3, heads=4)
    t, v = cfg.text_config, cfg.vision_config
    assert (t.vocab_size, t.hidden_size, t.num_hidden_layers, t.num_attention_heads) == (50, 12, 3, 4)
    assert (t.intermediate_size, t.encoder_hidden_size) == (24, 12)
    assert (v.hidden_size, v.num_hidden_layers, v.num_attention_heads, v.intermediate_size) == (12, 3, 4, 24)
    assert (v.image_size, v.patch_size) == (24, 6)
