"""diag's compiled line scanner (diag/parse/_scan.c) against the Python and Hyperscan code
it stands in for: same candidate lines, labels, kinds, last key lines, UTF-8 verdicts.

Skipped where no C compiler is there (the scanner is then not used: diag falls back to
Hyperscan)."""

from __future__ import annotations

import random
from pathlib import Path

import numpy as np
import pytest

from diag.parse import native
from diag.parse.prefilter import _WITH_LINE_BEFORE, Lines, Matcher, _KeyScan

NAT = native.load()
pytestmark = pytest.mark.skipif(NAT is None, reason="no C compiler: the scanner is not built")
ROOT = Path(__file__).resolve().parents[1]

LITERALS = ("warning", "error", "traceback", "load weight begin", "capture cuda graph",
            "%|", "% completed", "oom", "[rank", "nccl warn", "process ", "—x")
LABELS = ("Decode batch", "accept len: ", "NCCL INFO", '"POST /', "Avg prompt throughput")


def _hs_matcher() -> Matcher:
    """A Matcher on Hyperscan (the scanner switched off for its construction)."""
    saved = list(native._LOADED)
    native._LOADED[:] = [None]
    try:
        m = Matcher(LITERALS, LABELS)
    finally:
        native._LOADED[:] = saved
    assert m.engine == "hyperscan"
    return m


def _pieces(rng: random.Random) -> list[bytes]:
    words = [b"INFO", b"Warning:", b"ERROR", b"eRrOr", b"load weight BEGIN", b"x", b"  ",
             b"\t", b"\r", b"\r\n", b"#1 ", b"#x", b"45%|####", b"50% Completed", b"oo",
             b"m", b"OOM", b"[RANK3]", b"Decode batch", b"decode batch", b"accept len: ",
             b"NCCL INFO", b"nccl info", b'"POST /v1', b"Avg prompt", b" throughput",
             b"\xe2\x80\x94x", b"\xe2\x80\x94X", b"\xff", b"Process 12", b"\n", b"\n",
             b"\n", b"\n ", b"\n#3", b"\n\n", b"capture cuda", b" graph"]
    return [rng.choice(words) for _ in range(rng.randint(0, 300))]


def _lines(m: Matcher, chunk: bytes) -> Lines:
    return m.lines(chunk)



def _chunk_of(
    lines: list[bytes], cap: int | None = 160
) -> tuple[bytes, list[int], list[int]]:
    """The lines as one chunk, with each line's start and its end, capped at ``cap`` bytes
    when given (the kind hashes read a line's first 160 bytes)."""
    starts, ends, at = [], [], 0
    for ln in lines:
        starts.append(at)
        ends.append(at + len(ln) if cap is None else min(at + len(ln), at + cap))
        at += len(ln) + 1
    return b"\n".join(lines) + b"\n", starts, ends

def _assert_label_offsets(chunk: bytes, label_at: dict[str, object]) -> None:
    """Every label's offsets are where it occurs in the chunk, each once, in order."""
    for lab, at in label_at.items():
        want, j = [], chunk.find(lab.encode())
        while j >= 0:
            want.append(j)
            j = chunk.find(lab.encode(), j + 1)
        assert at.tolist() == want  # type: ignore[attr-defined]


def test_candidates_equal_hyperscan_on_random_chunks() -> None:
    hs = _hs_matcher()
    nat = Matcher(LITERALS, LABELS)
    assert nat.engine == "native"
    rng = random.Random(7)
    for _ in range(1500):
        chunk = b"".join(_pieces(rng))
        if rng.random() < 0.3:
            chunk = bytearray(chunk)  # type: ignore[assignment]
        a, b = hs.lines(chunk), nat.lines(chunk)
        assert np.array_equal(a.nl, b.nl), chunk
        assert a.candidates.tolist() == b.candidates.tolist(), chunk
        assert a.present == b.present, chunk
        assert b.label_at is not None and set(b.label_at) == b.present
        _assert_label_offsets(chunk, b.label_at)


def test_candidates_equal_hyperscan_on_long_random_chunks() -> None:
    """Chunks of many parts (the lanes take parts of 32 KiB in turn, shorter near the
    chunk's end), with lines longer than a part, and labels and line-before literals on
    either side of where a line became a candidate (its rest is searched, not walked)."""
    hs = _hs_matcher()
    nat = Matcher(LITERALS, LABELS)
    rng = random.Random(17)
    for _ in range(12):
        parts: list[bytes] = []
        size = rng.choice([40 << 10, 300 << 10, 700 << 10])
        while sum(map(len, parts)) < size:
            parts += _pieces(rng)
            if rng.random() < 0.05:  # a line longer than a part
                parts.append(b"x" * rng.randint(30 << 10, 80 << 10) + b"Decode batch")
        chunk = b"".join(parts)
        a, b = hs.lines(chunk), nat.lines(chunk)
        assert a.candidates.tolist() == b.candidates.tolist()
        assert a.present == b.present
        assert b.label_at is not None
        _assert_label_offsets(chunk, b.label_at)


# literals past the scanner's 32 walked bytes (kind 3: the rest compared where the first
# 32 occur), two with the same first 32, one whose first 32 are another literal's end
LONG = ("the request queue is long; consider increasing --max-running-requests",
        "the request queue is long; consider lowering the request rate",
        "failed to load the model weights from the checkpoint",
        "weights from the checkpoint shard 3",
        "ncclsystemerror: system call (e.g. socket, malloc) or external library call failed")


def _long_pieces(rng: random.Random) -> list[bytes]:
    """A literal of LONG whole, cut short, or broken past its 32nd byte (another byte, a
    newline, a CR), in mixed case, among the short pieces."""
    out: list[bytes] = []
    for _ in range(rng.randint(0, 40)):
        lit = bytearray(rng.choice(LONG).encode())
        for i in range(len(lit)):
            if rng.random() < 0.1:
                lit[i : i + 1] = lit[i : i + 1].upper()
        roll = rng.random()
        if roll < 0.4:
            cut = rng.randint(1, len(lit) - 1)
            lit[cut:cut + 1] = rng.choice([b"\n", b"\r", b"x", b"", b" "])
        elif roll < 0.6:
            lit = lit[: rng.randint(1, len(lit))]
        out.append(bytes(lit))
        out += _pieces(rng)[:8]
    return out


def test_long_literals_equal_hyperscan_on_random_chunks() -> None:
    """Candidates past the 32 bytes the scanner walks: the same lines as Hyperscan with
    the whole literals, with labels and line-before literals around them."""
    lits = LITERALS + LONG
    saved = list(native._LOADED)
    native._LOADED[:] = [None]
    try:
        hs = Matcher(lits, LABELS)
    finally:
        native._LOADED[:] = saved
    nat = Matcher(lits, LABELS)
    assert nat.engine == "native"
    rng = random.Random(23)
    for _ in range(1500):
        chunk = b"".join(_long_pieces(rng))
        a, b = hs.lines(chunk), nat.lines(chunk)
        assert a.candidates.tolist() == b.candidates.tolist(), chunk
        assert a.present == b.present, chunk
        assert b.label_at is not None
        _assert_label_offsets(chunk, b.label_at)


def test_candidates_equal_hyperscan_on_the_corpus() -> None:
    """Every real log with diag's own literal set (the one the analyser uses)."""
    from diag.analyze import _literals
    from diag.parse.pipeline import Collected, _Run

    run = _Run(_literals(()), Collected())
    nat = run.matcher
    assert nat.engine == "native"
    saved = list(native._LOADED)
    native._LOADED[:] = [None]
    try:
        hs = Matcher(nat.literals, nat.labels, nat.complete)
    finally:
        native._LOADED[:] = saved
    logs = sorted((ROOT / "fixtures" / "real").glob("*/*/*.txt"))
    assert len(logs) > 400
    blob = bytearray()
    for p in logs:
        blob += p.read_bytes() + b"\n"
    for lo in range(0, len(blob), 1 << 20):
        chunk = bytes(blob[lo : lo + (1 << 20)])
        a, b = hs.lines(chunk), nat.lines(chunk)
        assert a.candidates.tolist() == b.candidates.tolist()
        assert a.present == b.present


def test_with_line_before_literals_mark_the_line_before() -> None:
    nat = Matcher(LITERALS, LABELS)
    assert set(_WITH_LINE_BEFORE) <= set(LITERALS)
    got = nat.lines(b"(Worker pid=3)\n 12%|#  | 1/8\nplain\n").candidates.tolist()
    assert got == [0, 1]


def test_kinds_tell_lines_apart_as_their_digitless_heads_do() -> None:
    assert NAT is not None
    rng = random.Random(3)
    # (with the bytes next to the digits, and the digits with their high bit set)
    alphabet = b"ab0123456789 :[]-.x/\xb0\xb9\xba\xaf\xff\x00\x7f"
    lines = [bytes(rng.choice(alphabet) for _ in range(rng.randint(0, 200)))
             for _ in range(5000)]
    lines += [b"[2026-01-01 10:00:%02d TP%d] WARNING long queue" % (i % 60, i % 8)
              for i in range(300)]
    chunk, starts, ends = _chunk_of(lines)
    h = NAT.kinds(chunk, np.array(starts), np.array(ends)).tolist()
    kinds = [chunk[a:b].translate(None, b"0123456789") for a, b in zip(starts, ends, strict=True)]
    by_kind: dict[bytes, int] = {}
    by_hash: dict[int, bytes] = {}
    for k, x in zip(kinds, h, strict=True):
        assert by_kind.setdefault(k, x) == x
        assert by_hash.setdefault(x, k) == k
    assert len(set(h)) == len(set(kinds))


def test_last_finds_each_keys_last_line_not_dropped() -> None:
    assert NAT is not None
    rng = random.Random(11)
    keys = [b"[TP0] ", b"[TP1] ", b"[TP10] ", b"(Worker_TP2 pid=7) ", b"P0] "]
    ac = native.Automaton(NAT, [k[::-1] for k in keys], [0] * len(keys), caseless=False,
                          special=False)
    for _ in range(400):
        lines = [b"".join(rng.choice([*keys, b"x", b"[tp0] ", b"  "])
                          for _ in range(rng.randint(0, 4)))
                 for _ in range(rng.randint(0, rng.choice((8, 30, 300))))]
        chunk = b"\n".join(lines) + (b"\n" if rng.random() < 0.5 else b"")
        nl = np.flatnonzero(np.frombuffer(chunk, dtype=np.uint8) == 10)
        n_lines = len(lines)
        dropped = np.array([rng.random() < 0.4 for _ in range(n_lines + 1)], dtype=np.uint8)
        got = ac.last(chunk, nl, dropped).tolist()
        starts = [0, *(int(x) + 1 for x in nl)]
        for ki, key in enumerate(keys):
            want = -1
            for li in range(n_lines):
                if dropped[li]:
                    continue
                a = starts[li]
                b = int(nl[li]) if li < len(nl) else len(chunk)
                j = chunk.rfind(key, a, b)
                if j >= 0:
                    want = j
            assert got[ki] == want, (chunk, key)


def test_utf8_verdict_equals_pythons_decoder() -> None:
    assert NAT is not None
    rng = random.Random(5)
    samples = [b"", b"plain", "héllo — ✓ 😀".encode(), b"\xed\xa0\x80", b"\xc0\xaf",
               b"\xe0\x80\xaf", b"\xf4\x90\x80\x80", b"\xf0\x9f\x98", b"\xc3", b"ab\x80"]
    pool = [0x41, 0x80, 0xbf, 0xc2, 0xdf, 0xe0, 0xed, 0xef, 0xf0, 0xf4, 0xf5, 0xa0, 0x9f, 0x90]
    samples += [bytes(rng.choice(pool) for _ in range(rng.randint(1, 12))) for _ in range(3000)]
    for s in samples:
        try:
            s.decode("utf-8")
            ok = True
        except UnicodeDecodeError:
            ok = False
        assert NAT.utf8_valid(s) == ok, s


def test_nonblank_equals_strip() -> None:
    assert NAT is not None
    rng = random.Random(9)
    lines = [bytes(rng.choice(b" \t\x0b\x0c\rx\x1c\xa0") for _ in range(rng.randint(0, 6)))
             for _ in range(2000)]
    chunk, starts, ends = _chunk_of(lines, cap=None)
    got = NAT.nonblank(chunk, np.array(starts), np.array(ends)).tolist()
    assert got == [bool(ln.strip()) for ln in lines]


def test_keyscan_on_the_scanner_equals_the_hyperscan_one() -> None:
    hyperscan = pytest.importorskip("hyperscan")
    rng = random.Random(2)
    keys = {"[TP0] ", "[TP1] ", "[DP0 TP1] "}
    m = Matcher(LITERALS, LABELS)
    for _ in range(200):
        lines = [rng.choice(["[TP0] a", "[TP1] b", "[DP0 TP1] c", "none", "[TP0] Decode batch",
                             "[TP1] Prefill batch x"]) for _ in range(rng.randint(1, 40))]
        chunk = ("\n".join(lines) + "\n").encode()
        found = m.lines(chunk)
        dropped = np.array([i for i in range(len(lines)) if rng.random() < 0.2],
                           dtype=np.int64)
        a = _KeyScan(hyperscan).scan(chunk, found, set(keys), set(), dropped)
        b = _KeyScan(None, NAT).scan(chunk, found, set(keys), set(), dropped)
        assert a == b, (lines, dropped)


@pytest.mark.parametrize("labels", ["matcher", "none"])
def test_keyscan_first_batch_lines_against_find(labels: str) -> None:
    """Each (key, batch kind) probe's first offset is ``chunk.find``'s, whether the
    matcher looked for the batch kinds (their absence then skips the pass) or not."""
    rng = random.Random(5)
    keys = {"[TP0] ", "[TP1] ", "[DP0 TP1] "}
    m = Matcher(LITERALS, LABELS if labels == "matcher" else ())
    for _ in range(200):
        lines = [rng.choice(["[TP0] a", "[TP1] b", "[DP0 TP1] c", "none", "[TP0] Decode batch",
                             "[TP1] Prefill batch x", "[DP0 TP1] Decode batch"])
                 for _ in range(rng.randint(1, 40))]
        chunk = ("\n".join(lines) + "\n").encode()
        found = m.lines(chunk)
        skip = {b"[TP0] Decode batch"} if rng.random() < 0.3 else set()
        scan = _KeyScan(None, NAT)
        _, first = scan.scan(chunk, found, set(keys), skip, np.empty(0, dtype=np.int64))
        want = {p: chunk.find(p) for p in scan._probes if p not in skip and p in chunk}
        assert first == want, lines


@pytest.mark.parametrize("long_keys", [False, True])
@pytest.mark.parametrize("many", [False, True])
def test_keyscan_first_batch_lines_at_the_label_offsets(many: bool, long_keys: bool) -> None:
    """The probes' first offsets read at the scanner's batch-kind offsets (few of them)
    or by one pass (many): ``chunk.find``'s, with keys that end other keys, lines that
    start with a batch kind, and probes already found skipped (``long_keys``: every key
    of 8 bytes or more, so the keys' last 8 bytes are compared first)."""
    rng = random.Random(11 + many)
    keys = {"[TP0] ", "[TP1] ", "[DP0 TP1] ", " TP1] ", "[DP10 TP1] ", "(Worker pid=7) "}
    if long_keys:
        keys = {"[DP0 TP1] ", "[DP10 TP1] ", "P10 TP1] ", "(Worker pid=7) "}
    forms = ["[TP0] a", "[TP1] b", "[DP0 TP1] c", "none", "[TP0] Decode batch",
             "[TP1] Prefill batch x", "[DP0 TP1] Decode batch", "Decode batch, #x",
             "x [DP10 TP1] Prefill batch", "y TP1] Decode batch", "[DP10 TP1] Decode batc",
             "(Worker pid=7) Decode batch", "[TP0]  Decode batch"]
    m = Matcher(LITERALS, LABELS)
    for _ in range(40 if many else 300):
        n = rng.randint(3000, 6000) if many else rng.randint(1, 60)
        lines = [rng.choice(forms) for _ in range(n)]
        chunk = ("\n".join(lines) + "\n").encode()
        found = m.lines(chunk)
        scan = _KeyScan(None, NAT)
        scan._build(keys)
        skip = {p for p in scan._probes if rng.random() < 0.2}
        _, first = scan.scan(chunk, found, set(keys), skip, np.empty(0, dtype=np.int64))
        want = {p: chunk.find(p) for p in scan._probes if p not in skip and p in chunk}
        assert first == want, lines


def test_no_compiler_means_no_scanner(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A missing compiler is no error: build() says None and diag keeps Hyperscan."""
    monkeypatch.setenv("CC", str(tmp_path / "no-such-cc"))
    assert native.build(tmp_path / "out") is None
    monkeypatch.setenv("CC", "false")  # a compiler that fails
    assert native.build(tmp_path / "out") is None
    assert not any((tmp_path / "out").glob("*.so"))


def test_find_equals_bytes_find() -> None:
    assert NAT is not None
    rng = random.Random(4)
    for _ in range(2000):
        hay = bytes(rng.choice(b"abAB(=") for _ in range(rng.randint(0, 60)))
        needle = bytes(rng.choice(b"abAB(=") for _ in range(rng.randint(1, 4)))
        for k in range(len(needle)):
            assert NAT.find(hay, needle, k) == hay.find(needle), (hay, needle, k)
    # long enough for 16 starts at a time, needles up to 24 bytes, matches near the end
    for _ in range(2000):
        hay = bytes(rng.choice(b"abAB(=") for _ in range(rng.randint(0, 400)))
        needle = bytes(rng.choice(b"abAB(=") for _ in range(rng.randint(1, 24)))
        if hay and rng.random() < 0.5:
            at = rng.randint(0, len(hay))
            hay = hay[:at] + needle + hay[at:]
        for k in {0, len(needle) - 1, rng.randrange(len(needle))}:
            assert NAT.find(hay, needle, k) == hay.find(needle), (hay, needle, k)


def test_keys_known_absent_are_not_waited_for() -> None:
    """Marking the keys a chunk lacks as absent changes no answer."""
    assert NAT is not None
    keys = [b"[TP0] ", b"[TP1] ", b"(Worker_TP2 pid=7) "]
    ac = native.Automaton(NAT, [k[::-1] for k in keys], [0] * len(keys), caseless=False,
                          special=False)
    chunk = b"x [TP1] a\n" * 50 + b"[TP0] b\n" + b"y\n" * 50
    nl = np.flatnonzero(np.frombuffer(chunk, dtype=np.uint8) == 10)
    absent = np.array([int(k not in chunk) for k in keys], dtype=np.uint8)
    assert absent.tolist() == [0, 0, 1]
    assert ac.last(chunk, nl, None, absent).tolist() == ac.last(chunk, nl).tolist()
    assert ac.last(chunk, nl, None, np.ones(3, dtype=np.uint8)).tolist() == [-1, -1, -1]


def test_kinds_portable_packing_equals_the_run_time_one() -> None:
    """dg_kinds packs a word's non-digit bytes with a byte shuffle where the CPU has one
    (SSSE3), else one by one: the same hashes either way."""
    import ctypes

    assert NAT is not None
    fn = NAT.lib.dg_kinds_plain
    fn.restype = None
    fn.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64,
                   ctypes.c_void_p]
    rng = random.Random(11)
    alphabet = b"ab0123456789 :[]-.x/\xb0\xff"
    lines = [bytes(rng.choice(alphabet) for _ in range(rng.randint(0, 220)))
             for _ in range(4000)]
    chunk, starts, ends = _chunk_of(lines)
    s, e = np.array(starts), np.array(ends)
    assert NAT.kinds(chunk, s, e).tolist() == NAT._per_line(fn, chunk, s, e, "uint64").tolist()


def _utf8(chunk: bytes) -> bool:
    try:
        chunk.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


def test_newline_pass_flags_nul_and_non_ascii() -> None:
    """The newline pass's flags (the pipeline skips its NUL count and UTF-8 check on
    plain ASCII, and its UTF-8 check on text the pass found valid): bits 0 and 1 never
    clear where the chunk holds such a byte, bit 2 never set on invalid UTF-8; exact
    with SSE2 (also for sequences across the pass's 32-byte blocks and the chunk's end)."""
    assert NAT is not None
    import platform

    exact = platform.machine().lower() in ("x86_64", "amd64")
    rng = random.Random(5)
    seqs = [s.encode() for s in ("\u00e9", "\u2588", "\U0001f600", "\u00df")]
    seqs += [b"\xed\xa0\x80", b"\xe0\x80\x80", b"\xf4\x90\x80\x80", b"\xc0\xaf"]
    for _ in range(4000):
        n = rng.randint(0, 200)
        chunk = bytearray(rng.choice(b"ab \n:") for _ in range(n))
        for _ in range(rng.randint(0, 2)):
            if chunk:
                chunk[rng.randrange(len(chunk))] = rng.choice((0, 0x80, 0xC3, 0xFF, 0x7F))
        for _ in range(rng.randint(0, 3)):
            at = rng.randint(0, len(chunk))
            chunk[at:at] = rng.choice(seqs)
        if chunk and rng.random() < 0.1:
            del chunk[-1]  # a sequence cut at the end
        nl, flags = NAT.newlines_flags(bytes(chunk))
        assert nl.tolist() == [i for i, c in enumerate(chunk) if c == 10]
        want = (1 if 0 in chunk else 0) | (2 if any(c >= 0x80 for c in chunk) else 0)
        valid = _utf8(bytes(chunk))
        assert flags & want == want
        assert not (flags & 4 and not valid), bytes(chunk)
        assert NAT.utf8_valid(bytes(chunk)) == valid
        if exact and chunk:
            assert flags == want | (4 if valid else 0), bytes(chunk)
