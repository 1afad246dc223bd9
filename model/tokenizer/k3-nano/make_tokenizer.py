"""Build k3-nano's byte-level BPE vocabulary from corpus.txt (run once; the outputs are committed).

    /tmp/v/bin/python model/tokenizer/k3-nano/make_tokenizer.py

Writes vocab.json (tokens in id order, their GGUF token types, the control-token ids) and merges.txt
(one merge per line, "left right", in rank order). The vocabulary is GPT-2-style byte-level BPE:
ids 0..255 are the 256 byte symbols (byte b -> id b), then the tokens the merges create, then
<|bos|>, <|eos|>, <|pad|>, 320 entries in all (k3-nano's vocab_size).

The trainer is a plain greedy BPE: split the text the way GPT-2's pre-tokenizer does (the
`tokenizers` ByteLevel pre-tokenizer), count adjacent symbol pairs weighted by word frequency, merge
the most frequent pair (ties: the pair that sorts first), repeat until the vocabulary is full.
Deterministic: same corpus, same files.
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

from tokenizers import pre_tokenizers

from sparkops.tokenizer import byte_symbols  # GPT-2's 256 byte stand-ins

HERE = Path(__file__).resolve().parent
VOCAB_SIZE = 320
CONTROL = ("<|bos|>", "<|eos|>", "<|pad|>")


def train(text: str, n_tokens: int) -> tuple[list[str], list[str]]:
    """(new tokens, merges) until the byte symbols plus the new tokens number `n_tokens`."""
    pre = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    words = Counter(piece for piece, _ in pre.pre_tokenize_str(text))
    splits = {w: list(w) for w in words}
    vocab = set(byte_symbols())
    new_tokens, merges = [], []
    while len(vocab) < n_tokens:
        pairs: Counter = Counter()
        for w, freq in words.items():
            s = splits[w]
            for a, b in zip(s, s[1:]):
                pairs[(a, b)] += freq
        if not pairs:
            raise SystemExit("corpus too small for the vocabulary size")
        (a, b), _ = min(pairs.items(), key=lambda kv: (-kv[1], kv[0]))
        merges.append(f"{a} {b}")
        if a + b not in vocab:
            vocab.add(a + b)
            new_tokens.append(a + b)
        for w, s in splits.items():
            i, out = 0, []
            while i < len(s):
                if i + 1 < len(s) and s[i] == a and s[i + 1] == b:
                    out.append(a + b)
                    i += 2
                else:
                    out.append(s[i])
                    i += 1
            splits[w] = out
    return new_tokens, merges


def main() -> None:
    text = (HERE / "corpus.txt").read_text(encoding="utf-8")
    new_tokens, merges = train(text, VOCAB_SIZE - len(CONTROL))
    tokens = [*byte_symbols(), *new_tokens, *CONTROL]
    assert len(tokens) == VOCAB_SIZE and len(set(tokens)) == VOCAB_SIZE
    normal, control = 1, 3  # GGUF token types (gguf.TokenType.NORMAL / CONTROL)
    vocab = {
        "model": "gpt2",
        "pre": "gpt-2",
        "tokens": tokens,
        "token_types": [normal] * (VOCAB_SIZE - len(CONTROL)) + [control] * len(CONTROL),
        "bos_token_id": VOCAB_SIZE - 3,
        "eos_token_id": VOCAB_SIZE - 2,
        "pad_token_id": VOCAB_SIZE - 1,
    }
    (HERE / "vocab.json").write_text(json.dumps(vocab, ensure_ascii=False, indent=1) + "\n", encoding="utf-8")
    (HERE / "merges.txt").write_text("".join(m + "\n" for m in merges), encoding="utf-8")
    print(f"{len(new_tokens)} tokens from {len(merges)} merges; vocab {len(tokens)}")


if __name__ == "__main__":
    main()
