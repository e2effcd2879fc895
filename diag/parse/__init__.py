"""Log parsing: bytes -> lines -> records.

``reader`` (inputs, compression, archives, chunks), ``text`` (decoding, colour codes,
tqdm updates, glued lines), ``grammars`` (one line -> fields), ``records`` (continuation
lines, year inference), ``config`` (args lines via ``ast``), ``prefilter`` (the streaming
path for large inputs). ``diag.analyze`` puts them together.
"""

__all__: list[str] = []
