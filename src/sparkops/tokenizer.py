"""Text <-> token ids: byte-level BPE (GGUF tokenizer model "gpt2") through the `tokenizers` library.

`TokenizerData` is the tokenizer as GGUF metadata holds it (tokens, token types, merges, control
ids); `Tokenizer` runs it. Byte-level BPE encodes any UTF-8 text and decodes it back exactly
(every byte has a symbol), so decode(encode(s)) == s.

Vocabularies sparkops ships or makes:
- k3-nano: a real 320-entry BPE trained on a paragraph of English (model/tokenizer/k3-nano/,
  built by make_tokenizer.py there): 256 byte symbols, 61 merged tokens, <|bos|> <|eos|> <|pad|>.
- any larger vocabulary (the 48B preset's 163840): the same BPE, padded with `<|unused_N|>` tokens
  (token type UNUSED) up to the vocab size, with the control tokens at the config's bos/eos/pad ids.
  Text encodes with the small BPE; a random model's output ids mostly decode to `<|unused_N|>`, so
  `generate` always prints something readable.
- tokenizer model "none" (a foreign file without a vocabulary): decode prints ids as `<N>`;
  encode refuses with a clear error.
"""

from __future__ import annotations

import functools
import json
from dataclasses import dataclass, field
from typing import Any

from .errors import BadInput
from .paths import model_dir

NORMAL, UNKNOWN, CONTROL, USER_DEFINED, UNUSED, BYTE = 1, 2, 3, 4, 5, 6  # gguf.TokenType values


@functools.cache
def byte_symbols() -> tuple[str, ...]:
    """GPT-2's printable stand-in for every byte value, indexed by the byte.

    Bytes that are printable Latin-1 ('!'..'~', '¡'..'¬', '®'..'ÿ') stand for themselves; the other 68
    get the characters 256, 257, ... in byte order. Byte-level BPE tokens are strings over these 256.
    """
    keep = {*range(ord("!"), ord("~") + 1), *range(0xA1, 0xAC + 1), *range(0xAE, 0xFF + 1)}
    out, extra = [], 0
    for b in range(256):
        if b in keep:
            out.append(chr(b))
        else:
            out.append(chr(256 + extra))
            extra += 1
    return tuple(out)


@functools.cache
def _byte_of() -> dict[str, int]:
    return {ch: b for b, ch in enumerate(byte_symbols())}


@dataclass(frozen=True)
class TokenizerData:
    model: str  # "gpt2" or "none"
    vocab_size: int
    tokens: tuple[str, ...] = ()
    token_types: tuple[int, ...] = ()
    merges: tuple[str, ...] = ()
    pre: str | None = None
    bos_token_id: int | None = None
    eos_token_id: int | None = None
    pad_token_id: int | None = None
    add_bos: bool = False
    source: str = field(default="", compare=False)  # where it came from (an asset, a file)
    extra: dict = field(default_factory=dict, compare=False)

    def __post_init__(self) -> None:
        if self.model not in ("gpt2", "none"):
            raise BadInput(f"tokenizer model '{self.model}' is not supported (sparkops reads 'gpt2' byte-level "
                           f"BPE and 'none'); re-create the file with `sparkops convert`/`synth`")
        if self.model == "gpt2":
            if len(self.tokens) != self.vocab_size or len(self.token_types) != self.vocab_size:
                raise BadInput(f"tokenizer{' from ' + self.source if self.source else ''}: {len(self.tokens)} "
                               f"tokens and {len(self.token_types)} token types for a vocabulary of {self.vocab_size}")
            for which in ("bos_token_id", "eos_token_id", "pad_token_id"):
                v = getattr(self, which)
                if v is not None and not 0 <= v < self.vocab_size:
                    raise BadInput(f"tokenizer: {which} {v} is outside the vocabulary (0..{self.vocab_size - 1})")

    # -- GGUF metadata -----------------------------------------------------------------------------
    def to_kv(self) -> list[tuple[str, Any, str]]:
        """(key, value, kind) with kind in 'str', 'u32', 'bool', 'str[]', 'i32[]' for the GGUF writer."""
        kv: list[tuple[str, Any, str]] = [("tokenizer.ggml.model", self.model, "str")]
        if self.model == "gpt2":
            kv += [("tokenizer.ggml.pre", self.pre or "gpt-2", "str"),
                   ("tokenizer.ggml.tokens", list(self.tokens), "str[]"),
                   ("tokenizer.ggml.token_type", list(self.token_types), "i32[]"),
                   ("tokenizer.ggml.merges", list(self.merges), "str[]")]  # llama.cpp needs the key
        for key, v in (("tokenizer.ggml.bos_token_id", self.bos_token_id),
                       ("tokenizer.ggml.eos_token_id", self.eos_token_id),
                       ("tokenizer.ggml.padding_token_id", self.pad_token_id)):
            if v is not None:
                kv.append((key, v, "u32"))
        kv.append(("tokenizer.ggml.add_bos_token", self.add_bos, "bool"))
        return kv

    @classmethod
    def from_kv(cls, values: dict[str, Any], vocab_size: int, where: str) -> "TokenizerData":
        """From a file's key/values; `vocab_size` is the model's (for model 'none')."""
        model = values.get("tokenizer.ggml.model")
        if model is None:
            raise BadInput(f"{where}: metadata key 'tokenizer.ggml.model' is missing (llama.cpp requires it too); "
                           f"re-create the file with `sparkops convert` or `sparkops synth`")
        ids = {f: int(values[k]) for f, k in (("bos_token_id", "tokenizer.ggml.bos_token_id"),
                                              ("eos_token_id", "tokenizer.ggml.eos_token_id"),
                                              ("pad_token_id", "tokenizer.ggml.padding_token_id")) if k in values}
        if model == "none":
            return cls("none", vocab_size, source=where, **ids)
        if model != "gpt2":
            raise BadInput(f"{where}: tokenizer model '{model}' is not supported (sparkops reads 'gpt2' and "
                           f"'none')")
        tokens = values.get("tokenizer.ggml.tokens")
        if not tokens:
            raise BadInput(f"{where}: tokenizer model 'gpt2' needs 'tokenizer.ggml.tokens', which is missing")
        types = values.get("tokenizer.ggml.token_type") or [NORMAL] * len(tokens)
        merges = values.get("tokenizer.ggml.merges") or []
        return cls("gpt2", len(tokens), tuple(tokens), tuple(int(t) for t in types),
                   tuple(m for m in merges if m), values.get("tokenizer.ggml.pre"),
                   add_bos=bool(values.get("tokenizer.ggml.add_bos_token", False)), source=where, **ids)


# ----------------------------------------------------------------------------------------------
# The vocabularies sparkops ships
# ----------------------------------------------------------------------------------------------

@functools.cache
def load_asset(name: str = "k3-nano") -> TokenizerData:
    """A vocabulary under model/tokenizer/<name>/ (vocab.json + merges.txt)."""
    folder = model_dir() / "tokenizer" / name
    try:
        vocab = json.loads((folder / "vocab.json").read_text(encoding="utf-8"))
        merges = [ln for ln in (folder / "merges.txt").read_text(encoding="utf-8").split("\n") if ln]
    except FileNotFoundError as exc:
        raise BadInput(f"tokenizer asset '{name}' is missing ({exc.filename}); "
                       f"run model/tokenizer/{name}/make_tokenizer.py") from None
    return TokenizerData("gpt2", len(vocab["tokens"]), tuple(vocab["tokens"]), tuple(vocab["token_types"]),
                         tuple(merges), vocab.get("pre"), vocab.get("bos_token_id"), vocab.get("eos_token_id"),
                         vocab.get("pad_token_id"), source=f"model/tokenizer/{name}")


def byte_bpe_for(vocab_size: int, bos: int | None = None, eos: int | None = None,
                 pad: int | None = None) -> TokenizerData:
    """k3-nano's byte-level BPE sized to `vocab_size`: padded with <|unused_N|> (type UNUSED), with the
    control tokens at bos/eos/pad (default: the last three ids)."""
    base = load_asset("k3-nano")
    normal = [t for t, ty in zip(base.tokens, base.token_types) if ty == NORMAL]  # bytes + merged tokens
    ids = {"bos": bos, "eos": eos, "pad": pad}
    defaults = {"bos": vocab_size - 3, "eos": vocab_size - 2, "pad": vocab_size - 1}
    ids = {k: defaults[k] if v is None else int(v) for k, v in ids.items()}
    if vocab_size < len(normal) + 3:
        raise BadInput(f"a byte-level vocabulary needs at least {len(normal) + 3} entries, the model has {vocab_size}")
    for k, v in ids.items():
        if not len(normal) <= v < vocab_size:
            raise BadInput(f"{k} token id {v} must lie in {len(normal)}..{vocab_size - 1} (after the byte and "
                           f"merged tokens) for the synthesized byte-level vocabulary")
    if len(set(ids.values())) != 3:
        raise BadInput(f"bos/eos/pad token ids must differ, got {ids}")
    tokens = [*normal] + [f"<|unused_{i}|>" for i in range(len(normal), vocab_size)]
    types = [NORMAL] * len(normal) + [UNUSED] * (vocab_size - len(normal))
    for k, v in ids.items():
        tokens[v] = f"<|{k}|>"
        types[v] = CONTROL
    return TokenizerData("gpt2", vocab_size, tuple(tokens), tuple(types), base.merges, base.pre,
                         ids["bos"], ids["eos"], ids["pad"], source=f"{base.source} padded to {vocab_size}")


# ----------------------------------------------------------------------------------------------
# Running it
# ----------------------------------------------------------------------------------------------

class Tokenizer:
    """encode(text) -> ids, decode(ids) -> text."""

    def __init__(self, data: TokenizerData):
        self.data = data
        self._tok = _build(data) if data.model == "gpt2" else None
        self._token_bytes: dict[int, bytes] | None = None

    @property
    def vocab_size(self) -> int:
        return self.data.vocab_size

    @property
    def bos_id(self) -> int | None:
        return self.data.bos_token_id

    @property
    def eos_id(self) -> int | None:
        return self.data.eos_token_id

    def encode(self, text: str, add_bos: bool | None = None) -> list[int]:
        if self._tok is None:
            raise BadInput("this model has no vocabulary (tokenizer model 'none'): pass token ids instead of text")
        ids = self._tok.encode(text, add_special_tokens=False).ids
        if (self.data.add_bos if add_bos is None else add_bos) and self.bos_id is not None:
            ids = [self.bos_id, *ids]
        return ids

    def decode(self, ids, skip_special: bool = True) -> str:
        """Text of `ids`; control tokens are dropped (skip_special) or shown as their names.

        Ids outside the vocabulary, and every id of a 'none' tokenizer, print as `<N>`. Bytes that do
        not form valid UTF-8 (a character cut between tokens) print as U+FFFD.
        """
        ids = [int(i) for i in ids]
        if self._tok is None:
            return "".join(f"<{i}>" for i in ids)
        out = bytearray()
        for i in ids:
            if not 0 <= i < self.vocab_size:
                out += f"<{i}>".encode()
            elif self.data.token_types[i] == CONTROL:
                if not skip_special:
                    out += self.data.tokens[i].encode()
            else:
                out += self._bytes(i)
        return out.decode("utf-8", errors="replace")

    def _bytes(self, i: int) -> bytes:
        """The bytes token i stands for (characters outside the byte alphabet count as their UTF-8)."""
        if self._token_bytes is None:
            self._token_bytes = {}
        b = self._token_bytes.get(i)
        if b is None:
            table = _byte_of()
            b = b"".join(bytes([table[ch]]) if ch in table else ch.encode() for ch in self.data.tokens[i])
            self._token_bytes[i] = b
        return b

    def token_text(self, i: int) -> str:
        return self.decode([i], skip_special=False)


def _build(data: TokenizerData):
    """A `tokenizers.Tokenizer` for a byte-level BPE vocabulary."""
    from tokenizers import Tokenizer as HFTokenizer
    from tokenizers import models, pre_tokenizers

    vocab: dict[str, int] = {}
    for i, t in enumerate(data.tokens):
        vocab.setdefault(t, i)  # a duplicated string (some real vocabularies have them) encodes to its first id
    merges = []
    for m in data.merges:
        a, sep, b = m.partition(" ")
        if not sep or a + b not in vocab:
            raise BadInput(f"tokenizer{' from ' + data.source if data.source else ''}: merge '{m}' does not make a "
                           f"token of the vocabulary")
        merges.append((a, b))
    tok = HFTokenizer(models.BPE(vocab=vocab, merges=merges, fuse_unk=False))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    return tok  # decoding is ours (Tokenizer.decode): it also handles control and unused tokens


def load_tokenizer(source: Any) -> Tokenizer:
    """The tokenizer of a model: ModelWeights (from its file's metadata), a GGUF path, TokenizerData,
    or a ModelConfig / preset name (sparkops' byte-level BPE sized to its vocabulary, as synth writes it)."""
    from pathlib import Path

    from .config import ModelConfig, load_preset
    from .weights import ModelWeights

    if isinstance(source, Tokenizer):
        return source
    if isinstance(source, TokenizerData):
        return Tokenizer(source)
    if isinstance(source, ModelWeights):
        data = source.metadata.get("tokenizer")
        if isinstance(data, TokenizerData):
            return Tokenizer(data)
        source = source.config
    if isinstance(source, (str, Path)) and (str(source).endswith(".gguf") or Path(source).is_file()):
        from .gguf.reader import field_values, open_gguf

        values = field_values(open_gguf(source))
        vocab = int(values.get("kimi-linear.vocab_size") or len(values.get("tokenizer.ggml.tokens") or []))
        return Tokenizer(TokenizerData.from_kv(values, vocab, str(source)))
    if isinstance(source, str):
        source = load_preset(source)
    if isinstance(source, ModelConfig):
        return Tokenizer(byte_bpe_for(source.vocab_size, source.bos_token_id, source.eos_token_id,
                                      source.pad_token_id))
    raise BadInput(f"cannot find a tokenizer for {source!r}")
