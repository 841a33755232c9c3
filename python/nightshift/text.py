"""Text to token ids exactly as the job's data preparation did it (worker/data_prep.cc).

1. at most max_len * 16 bytes of the UTF-8 text;
2. bytes that are not valid UTF-8 (by data_prep's rule: a lead byte, then the right number
   of continuation bytes; NUL too) become '?';
3. newline, carriage return and tab become a space;
4. sentencepiece pieces after bos; a classifier keeps at most max_len tokens; a language
   model at most max_len + 1 and ends with eos when there is room.
"""
from __future__ import annotations

from typing import List, Union

Text = Union[str, bytes]


def sanitize_utf8(raw: bytes) -> bytes:
    """common/format/text.h's CleanText (what data preparation applies), byte for byte."""
    out = bytearray()
    i, n_bytes = 0, len(raw)
    while i < n_bytes:
        c = raw[i]
        n = 1 if c < 0x80 else 2 if c >> 5 == 6 else 3 if c >> 4 == 14 else 4 if c >> 3 == 30 else 0
        ok = n > 0 and i + n <= n_bytes
        k = 1
        while ok and k < n:
            ok = raw[i + k] >> 6 == 2
            k += 1
        if ok and c != 0:
            out += raw[i:i + n]
            i += n
        else:
            out += b"?"
            i += 1
    return bytes(out).translate(_WHITESPACE)


_WHITESPACE = bytes.maketrans(b"\n\r\t", b"   ")


def clean_text(text: Text, max_len: int) -> bytes:
    """The bytes data_prep tokenizes: at most max_len * 16 bytes of the text, made valid UTF-8 as data_prep does."""
    raw = text.encode("utf-8", "surrogateescape") if isinstance(text, str) else bytes(text)
    return sanitize_utf8(raw[: max_len * 16])


class Tokenizer:
    """The folder's tokenizer.model with the job's special ids and length rule."""

    def __init__(self, path: str, bos_id: int, eos_id: int, max_len: int, classifier: bool):
        import sentencepiece

        self.sp = sentencepiece.SentencePieceProcessor()
        self.sp.Load(path)
        self.bos_id, self.eos_id, self.max_len, self.classifier = bos_id, eos_id, max_len, classifier

    def pieces(self, text: Text) -> List[int]:
        """The sentencepiece ids of the cleaned text, without special ids."""
        clean = clean_text(text, self.max_len)
        try:
            return list(self.sp.EncodeAsIds(clean.decode("utf-8")))
        except UnicodeDecodeError:  # overlong forms pass data_prep's check but not Python's
            return list(self.sp.EncodeAsIds(clean))

    def encode(self, text: Text) -> List[int]:
        """The ids the trainer sees: bos, the pieces cut to max_len (and eos for a language model)."""
        limit = self.max_len if self.classifier else self.max_len + 1
        ids = [self.bos_id] + self.pieces(text)[: limit - 1]
        if not self.classifier and len(ids) <= self.max_len:
            ids.append(self.eos_id)
        return ids

    def decode(self, ids: List[int]) -> str:
        """The text of sentencepiece ids."""
        return str(self.sp.DecodeIds([int(i) for i in ids]))
