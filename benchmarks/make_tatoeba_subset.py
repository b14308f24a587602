"""Regenerate ``src/attnkit/data/tatoeba_en_fr.tsv.gz`` from the manythings.org Tatoeba release.

Keeps the pairs whose tokenised English and French both have at most 8 tokens
(:func:`attnkit.data.tokenize.tokenize`), in the source file's order, as the original text
(``English<TAB>French``, typographic spaces untouched); gzip with mtime 0 so the bytes are
reproducible. Prints the counts and the source's sha256 for ``TATOEBA_LICENSE.md``.

Usage: python benchmarks/make_tatoeba_subset.py [/work/shared/data/tatoeba-eng-fra/eng-fra.txt]
"""

from __future__ import annotations

import gzip
import hashlib
import io
import sys
from pathlib import Path

from attnkit.data.tokenize import tokenize

MAX_TOKENS = 8  # 10 gave 113,551 pairs but 1.97 MB gzipped; 8 keeps the file ~1.3 MB
SOURCE = Path("/work/shared/data/tatoeba-eng-fra/eng-fra.txt")
TARGET = Path(__file__).resolve().parents[1] / "src/attnkit/data/tatoeba_en_fr.tsv.gz"


def main() -> None:
    source = Path(sys.argv[1]) if len(sys.argv) > 1 else SOURCE
    raw = source.read_bytes()
    lines = raw.decode("utf-8").splitlines()
    kept = []
    for line in lines:
        english, french = line.split("\t")
        if len(tokenize(english, "en")) <= MAX_TOKENS and len(tokenize(french, "fr")) <= MAX_TOKENS:
            kept.append(f"{english}\t{french}\n")
    buffer = io.BytesIO()
    with gzip.GzipFile(filename="", mode="wb", fileobj=buffer, mtime=0, compresslevel=9) as f:
        f.write("".join(kept).encode("utf-8"))
    TARGET.write_bytes(buffer.getvalue())
    print(f"source        {source} ({len(lines)} pairs, {len(raw)} bytes)")
    print(f"source sha256 {hashlib.sha256(raw).hexdigest()}")
    print(f"kept          {len(kept)} pairs with <= {MAX_TOKENS} tokens on both sides")
    print(f"wrote         {TARGET} ({TARGET.stat().st_size} bytes)")


if __name__ == "__main__":
    main()
