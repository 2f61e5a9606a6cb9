"""BERT's uncased WordPiece tokenizer, written out for the dataset build (datasets/build.py):
the pre-tokenizer (clean, lower-case, strip accents, split punctuation), greedy
longest-match-first WordPiece, and [CLS] ... [SEP] ids. The build checks it against the
``tokenizers`` package where that is installed."""

from __future__ import annotations

import unicodedata
from pathlib import Path


def load_vocab(path: Path) -> dict[str, int]:
    lines = Path(path).read_text(encoding="utf-8").splitlines()
    return {token: i for i, token in enumerate(lines)}


def _is_punctuation(ch: str) -> bool:
    cp = ord(ch)
    if 33 <= cp <= 47 or 58 <= cp <= 64 or 91 <= cp <= 96 or 123 <= cp <= 126:
        return True
    return unicodedata.category(ch).startswith("P")


def basic_tokens(text: str) -> list[str]:
    """BERT's uncased pre-tokenizer: clean, lower-case, strip accents, split punctuation."""
    text = "".join(
        " " if ch.isspace() else ch
        for ch in text
        if ord(ch) not in (0, 0xFFFD)
        and unicodedata.category(ch) not in ("Cc", "Cf")
        or ch in "\t\n\r"
    )
    text = unicodedata.normalize("NFD", text.lower())
    text = "".join(ch for ch in text if unicodedata.category(ch) != "Mn")
    tokens: list[str] = []
    for word in text.split():
        current = ""
        for ch in word:
            if _is_punctuation(ch):
                tokens += [current] if current else []
                tokens.append(ch)
                current = ""
            else:
                current += ch
        tokens += [current] if current else []
    return tokens


def wordpiece(token: str, vocab: dict[str, int]) -> list[int]:
    """Greedy longest-match-first WordPiece; [UNK] when a word cannot be covered."""
    if len(token) > 100:
        return [vocab["[UNK]"]]
    ids, start = [], 0
    while start < len(token):
        end = len(token)
        while end > start:
            piece = token[start:end] if start == 0 else "##" + token[start:end]
            if piece in vocab:
                ids.append(vocab[piece])
                break
            end -= 1
        else:
            return [vocab["[UNK]"]]
        start = end
    return ids


def tokenize(text: str, vocab: dict[str, int], max_length: int = 256) -> list[int]:
    """[CLS] + WordPiece ids + [SEP], truncated to ``max_length``."""
    ids = [i for token in basic_tokens(text) for i in wordpiece(token, vocab)]
    return [vocab["[CLS]"], *ids[: max_length - 2], vocab["[SEP]"]]
