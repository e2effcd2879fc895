"""vLLM's metrics lines read in columns (diag.parse.serving's line forms) give what the
regex of the same form gives: the same numbers, and the same lines rejected."""

# ruff: noqa: E501  (real log lines are long)
from __future__ import annotations

import random
import re

import pytest

from diag.parse import serving
from diag.parse.serving import ServingFigures, _Bytes, _match_form, _offsets, scan_chunk

np = pytest.importorskip("numpy")

_NUM = rb"[0-9]{1,12}(?:\.[0-9]{1,8})?"
# the regexes the forms stand for (vllm/v1/metrics/loggers.py, vllm/v1/spec_decode/metrics.py)
THROUGHPUT = re.compile(
    rb"Avg prompt throughput: (" + _NUM + rb") tokens/s, Avg generation throughput: ("
    + _NUM + rb") tokens/s, Running: ([0-9]{1,12}) reqs, Waiting: ([0-9]{1,12}) reqs, "
    rb"GPU KV cache usage: (" + _NUM + rb")%"
)
SPEC = re.compile(
    rb"SpecDecoding metrics: Mean acceptance length: (" + _NUM + rb"), Accepted throughput: "
    + _NUM + rb" tokens/s, Drafted throughput: " + _NUM + rb" tokens/s, Accepted: "
    rb"([0-9]{1,15}) tokens, Drafted: ([0-9]{1,15}) tokens, Per-position acceptance rate: "
    rb"((?:" + _NUM + rb"(?:, )?){1,64}), Avg Draft acceptance rate: (" + _NUM + rb")%"
)


def _num(rng: random.Random, frac: bool = True) -> str:
    """A number as vLLM prints it, now and then of an odd shape."""
    r = rng.random()
    if r < 0.75:
        i = str(rng.randint(0, 10 ** rng.randint(1, 4)))
        return i + (f".{rng.randint(0, 99):0{rng.randint(1, 3)}d}" if frac and rng.random() < 0.7 else "")
    return rng.choice((
        "1" * 12, "1" * 13, "12.123456789", "3.14159265", "0.", ".5", "1.2.3", "", "-1",
        "9" * 12 + ".99999999", "1e5", "007", "7" * 15, "7" * 16,
    ))


def _throughput(rng: random.Random) -> str:
    return (f"(APIServer pid=1) INFO 03-10 16:22:{rng.randint(10, 59)} [loggers.py:123] Engine 000: "
            f"Avg prompt throughput: {_num(rng)} tokens/s, Avg generation throughput: {_num(rng)} "
            f"tokens/s, Running: {_num(rng, False)} reqs, Waiting: {_num(rng, False)} reqs, GPU KV "
            f"cache usage: {_num(rng)}%, Prefix cache hit rate: {_num(rng)}%")


def _plain(rng: random.Random) -> str:
    return f"{rng.randint(0, 1)}.{rng.randint(0, 999):03d}"


def _spec(rng: random.Random, k: int | None = None) -> str:
    # (the list is kept to shapes the regex reads without exponential backtracking: a
    # list the regex must give up on, 65 numbers or a doubled space, takes it minutes)
    k = k if k is not None else rng.choice((1, 3, 5))
    pos = ", ".join(_plain(rng) for _ in range(k))
    return (f"(APIServer pid=1) INFO 03-10 16:22:10 [metrics.py:100] SpecDecoding metrics: Mean "
            f"acceptance length: {_num(rng)}, Accepted throughput: {_num(rng)} tokens/s, Drafted "
            f"throughput: {_num(rng)} tokens/s, Accepted: {_num(rng, False)} tokens, Drafted: "
            f"{_num(rng, False)} tokens, Per-position acceptance rate: {pos}, Avg Draft "
            f"acceptance rate: {_num(rng)}%")


@pytest.mark.parametrize("seed", range(40))
@pytest.mark.parametrize("form", ["throughput", "spec"])
def test_form_reads_what_the_regex_reads(seed: int, form: str) -> None:
    rng = random.Random(seed)
    make, rx, steps = ((_throughput, THROUGHPUT, serving._VLLM_THROUGHPUT_FORM) if form == "throughput"
                       else (_spec, SPEC, serving._VLLM_SPEC_FORM))
    for line in (make(rng) for _ in range(30)):
        data = line.encode()
        want = rx.match(data, data.index(steps[0]))  # type: ignore[arg-type]
        ok, cols = _match_form(_Bytes(data), _offsets(data, steps[0]), steps)  # type: ignore[arg-type]
        assert bool(ok[0]) == (want is not None), line
        if want is None:
            continue
        groups = want.groups()
        if form == "throughput":
            assert [c[0] for c in cols] == [float(g) for g in groups]
        else:
            lens, _, _, acc, drafted, steps_n, rate = (c[0] for c in cols)
            per = groups[3]
            assert (lens, acc, drafted, rate) == (float(groups[0]), float(groups[1]),
                                                  float(groups[2]), float(groups[4]))
            assert steps_n == per.count(b", ") + (0 if per.endswith(b", ") else 1)


def test_columns_equal_the_regex_read_of_a_chunk() -> None:
    rng = random.Random(3)
    lines = [_throughput(rng) if i % 2 else _spec(rng) for i in range(3000)]
    good = [ln for ln in lines if (THROUGHPUT if "Avg prompt" in ln else SPEC).search(ln.encode())]
    data = ("\n".join(good) + "\n").encode()
    fig = ServingFigures()
    scan_chunk(fig, data, "x.log", 0)
    thr = THROUGHPUT.findall(data)
    spec = SPEC.findall(data)
    assert fig.gen_throughput.n == len(thr) and fig.spec_reports == len(spec)
    assert fig.gen_throughput.total == sum(float(t[1]) for t in thr)
    assert fig.kv_usage.max == max(float(t[4]) * 0.01 for t in thr)
    assert fig.accept_len.total == sum(float(s[0]) for s in spec)
    assert fig.accepted == sum(int(s[1]) for s in spec)
    assert fig.accept_rate.total == sum(float(s[4]) / 100.0 for s in spec)


def _spec_line(k: int, sep: str = ", ") -> str:
    return ("(APIServer pid=1) INFO 03-10 16:22:10 [metrics.py:100] SpecDecoding metrics: Mean "
            "acceptance length: 2.11, Accepted throughput: 37.10 tokens/s, Drafted throughput: "
            "90.00 tokens/s, Accepted: 371 tokens, Drafted: 900 tokens, Per-position acceptance "
            f"rate: {sep.join(['0.512'] * k)}, Avg Draft acceptance rate: 41.2%")


def test_per_position_list_of_64_is_read_65_is_not() -> None:
    for k, ok_want in ((64, True), (65, False)):
        data = _spec_line(k).encode()
        steps = serving._VLLM_SPEC_FORM
        ok, cols = _match_form(_Bytes(data), _offsets(data, steps[0]), steps)  # type: ignore[arg-type]
        assert bool(ok[0]) == ok_want
        if ok_want:
            assert cols[5][0] == 64


def test_a_line_the_regex_would_backtrack_on_is_read_at_once() -> None:
    import time

    line = _spec_line(65)  # the old regex of the whole line: 4**64 ways to give up
    data = ("\n".join([line] * 200) + "\n").encode()
    t0 = time.process_time()
    scan_chunk(ServingFigures(), data, "x.log", 0)
    assert time.process_time() - t0 < 5


def _native_or_skip():  # type: ignore[no-untyped-def]
    from diag.parse import native

    nat = native.load()
    if nat is None:
        pytest.skip("the compiled scanner is not available")
    return nat


@pytest.mark.parametrize("seed", range(20))
@pytest.mark.parametrize("form", ["throughput", "spec"])
def test_compiled_form_reads_what_the_numpy_form_reads(seed: int, form: str) -> None:
    """The scanner's line forms (dg_form) against the numpy reader: the same rows
    rejected, the same values to the bit (odd numbers, more than 15 digits, lists of 64
    and 65, truncated lines at the chunk's end)."""
    nat = _native_or_skip()
    rng = random.Random(seed)
    make, steps = ((_throughput, serving._VLLM_THROUGHPUT_FORM) if form == "throughput"
                   else (_spec, serving._VLLM_SPEC_FORM))
    lines = [make(rng) for _ in range(200)]
    if form == "spec":
        lines += [_spec_line(64), _spec_line(65), _spec_line(3, ",  ")]
    for line in lines:
        data = line.encode()
        q = _offsets(data, steps[0])  # type: ignore[arg-type]
        ok, cols = _match_form(_Bytes(data), q, steps)  # type: ignore[arg-type]
        got = nat.form(data, q, steps)
        assert (got is not None) == bool(ok.all()), line
        if got is not None:
            for a, b in zip(got, cols, strict=True):
                assert a.astype(np.float64).tobytes() == np.asarray(b, dtype=np.float64).tobytes()
        cut = data[: rng.randint(len(steps[0]), len(data))]  # type: ignore[arg-type]
        q = _offsets(cut, steps[0])  # type: ignore[arg-type]
        ok, cols = _match_form(_Bytes(cut), q, steps)  # type: ignore[arg-type]
        got = nat.form(cut, q, steps)
        assert (got is not None) == bool(ok.all()), cut
    # a chunk of many good rows: the same columns
    good = [ln.encode() for ln in lines
            if nat.form(ln.encode(), _offsets(ln.encode(), steps[0]), steps) is not None]  # type: ignore[arg-type]
    data = b"\n".join(good * 3) + b"\n"
    q = _offsets(data, steps[0])  # type: ignore[arg-type]
    ok, cols = _match_form(_Bytes(data), q, steps)  # type: ignore[arg-type]
    got = nat.form(bytearray(data), q, steps)
    assert bool(ok.all()) and got is not None
    for a, b in zip(got, cols, strict=True):
        assert a.astype(np.float64).tobytes() == np.asarray(b, dtype=np.float64).tobytes()


def test_compiled_form_many_long_numbers() -> None:
    """More numbers of over 15 digits than one call reports: all read by float()."""
    nat = _native_or_skip()
    steps = (b"X: ", "num", b";")
    vals = [f"{i:012d}.{i % 99999999:08d}" for i in range(1000)]
    data = "".join(f"X: {v};\n" for v in vals).encode()
    got = nat.form(data, _offsets(data, b"X: "), steps)
    assert got is not None and got[0].tolist() == [float(v) for v in vals]


@pytest.mark.parametrize("seed", range(6))
def test_sparse_labels_read_at_their_offsets_as_the_regex_reads_them(seed: int) -> None:
    """_read_at (compiled when many offsets) against the label's regex over the chunk:
    the same count, sum (in order) and max, to the bit; an offset with no number after
    its label sends the chunk to the Python reader, with the same result."""
    _native_or_skip()
    rng = random.Random(seed)
    label = "GPU KV cache usage: "
    nums = ["0", "7", "12.5", "3.", "123456789012345", "1234567890123.123456789",
            "99.99999999", "0.1", "5e3", ".5", "00012.000"]
    lines = []
    for _ in range(rng.choice((40, 300))):
        num = rng.choice(nums) if rng.random() < 0.97 or seed % 2 else "x"
        lines.append(f"INFO stats: Running: 3 reqs, {label}{num}%, more")
    data = ("\n".join(lines) + "\n").encode()
    at = np.array([m.start() for m in re.finditer(re.escape(label.encode()), data)],
                  dtype=np.int64)
    rx = re.compile(re.escape(label.encode()) + b"(" + serving._BNUM + b")")
    want = serving._read_re(rx, data, 0.01)
    got = serving._read_at(data, at, len(label), 0.01)
    assert got[0] == want[0]
    assert np.float64(got[1]).tobytes() == np.float64(want[1]).tobytes()
    assert got[2] == want[2]


@pytest.mark.parametrize("seed", range(6))
def test_accept_figures_read_at_their_offsets_as_numpy_reads_them(seed: int) -> None:
    """SGLang's accept len / rate numbers read as a compiled line form (many offsets)
    against the numpy reader (``_numbers_at``): the same columns, to the bit and in
    order; an offset with no number after its label sends the label to numpy."""
    _native_or_skip()
    rng = random.Random(seed)
    nums = ["0", "7", "2.19", "3.", "123456789012345", "1234567890123.123456789",
            "99.99999999", "0.1", "5e3", ".5", "00012.000", "1.123456789"]
    lines = []
    for _ in range(rng.choice((40, 300))):
        a = rng.choice(nums) if rng.random() < 0.97 or seed % 2 else "x"
        lines.append(f"[x] Decode batch, accept len: {a}, accept rate: {rng.choice(nums)}, "
                     "cuda graph: True")
    data = ("\n".join(lines) + "\n").encode()
    labs = (b"accept len: ", b"accept rate: ")
    arr = np.frombuffer(data, dtype=np.uint8)
    at = [np.array([m.start() for m in re.finditer(re.escape(lab), data)], dtype=np.int64)
          for lab in labs]
    got = serving._label_numbers(arr, data, labs, at)
    for lab, pos, vals in zip(labs, at, got, strict=True):
        want = serving._numbers_at(arr, data, pos + len(lab))
        want = want[~np.isnan(want)]
        assert vals.astype(np.float64).tobytes() == want.tobytes()
