"""Byte-level BPE: any text round-trips; the shipped vocabulary is what its script makes."""

from __future__ import annotations

import importlib.util

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sparkops.errors import BadInput
from sparkops.paths import model_dir
from sparkops.tokenizer import CONTROL, UNUSED, Tokenizer, TokenizerData, byte_bpe_for, load_asset, load_tokenizer

NANO = Tokenizer(load_asset("k3-nano"))
BIG = Tokenizer(byte_bpe_for(163840, 163584, 163586, 163839))


@settings(max_examples=300, deadline=None)
@given(st.text())
def test_any_text_round_trips(text):
    ids = NANO.encode(text)
    assert all(0 <= i < 317 for i in ids)  # never a control token from text
    assert NANO.decode(ids) == text


@settings(max_examples=50, deadline=None)
@given(st.text(alphabet=st.characters(codec="utf-8"), min_size=1))
def test_round_trips_with_the_padded_vocabulary(text):
    assert BIG.decode(BIG.encode(text)) == text


def test_the_bpe_merges():
    ids = NANO.encode(" the experts and the model")
    assert len(ids) < len(" the experts and the model")  # merges fire
    assert NANO.encode(" the") == [NANO.data.tokens.index("Ġthe")]
    assert NANO.encode("<|bos|>") != [NANO.bos_id]  # control tokens never come from text


def test_control_and_unused_tokens():
    d = NANO.data
    assert d.vocab_size == 320 and (d.bos_token_id, d.eos_token_id, d.pad_token_id) == (317, 318, 319)
    assert [d.token_types[i] for i in (317, 318, 319)] == [CONTROL] * 3
    ids = [NANO.bos_id, *NANO.encode("hi"), NANO.eos_id]
    assert NANO.decode(ids) == "hi"
    assert NANO.decode(ids, skip_special=False) == "<|bos|>hi<|eos|>"
    assert BIG.data.token_types[5000] == UNUSED and BIG.decode([5000]) == "<|unused_5000|>"
    assert BIG.decode([163584, *BIG.encode("ok")]) == "ok" and BIG.decode([999999]) == "<999999>"


def test_padded_vocabulary_equals_the_asset_at_320():
    assert byte_bpe_for(320) == load_asset("k3-nano")
    with pytest.raises(BadInput, match="bos"):
        byte_bpe_for(320, bos=5)


def test_none_tokenizer():
    t = Tokenizer(TokenizerData("none", 10))
    assert t.decode([1, 2]) == "<1><2>"
    with pytest.raises(BadInput, match="token ids"):
        t.encode("text")


def test_metadata_round_trip():
    kv = {k: v for k, v, _ in NANO.data.to_kv()}
    back = TokenizerData.from_kv(kv, 320, "x")
    assert (back.tokens, back.token_types, back.merges, back.bos_token_id, back.pad_token_id) == \
        (NANO.data.tokens, NANO.data.token_types, NANO.data.merges, 317, 319)
    with pytest.raises(BadInput, match="tokenizer.ggml.model"):
        TokenizerData.from_kv({}, 320, "x.gguf")
    with pytest.raises(BadInput, match="llama"):
        TokenizerData.from_kv({"tokenizer.ggml.model": "llama"}, 320, "x.gguf")


def test_load_tokenizer_from_a_file_and_from_weights(nano_q8):
    from sparkops.gguf.reader import load_gguf

    for source in (nano_q8, load_gguf(nano_q8), "k3-nano"):
        t = load_tokenizer(source)
        assert t.data.tokens == NANO.data.tokens and t.decode(t.encode("Kimi")) == "Kimi"


def test_shipped_vocabulary_is_what_the_script_makes():
    folder = model_dir() / "tokenizer" / "k3-nano"
    spec = importlib.util.spec_from_file_location("make_tokenizer", folder / "make_tokenizer.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    new_tokens, merges = mod.train((folder / "corpus.txt").read_text(encoding="utf-8"), 317)
    assert merges == list(load_asset("k3-nano").merges)
    assert [*mod.byte_symbols(), *new_tokens] == list(load_asset("k3-nano").tokens[:317])
