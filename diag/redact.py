"""The redactor: one object applied, on the way in, to every text that leaves the host.

A :class:`Redactor` masks secrets in log lines, command lines, environment variables and
JSON-like structures (analysis, snapshot) before anything is written. It counts what it
masked per kind (``summary()``), never keeping a value. Masks look like
``<redacted:KIND>``; quoted values keep their quotes, so a redacted
``server_args={'api_key': '<redacted:field>'}`` still parses with ``ast.literal_eval``.

What is masked (kinds):

- ``hf_token`` Hugging Face tokens (``hf_...``); ``openai_key`` / ``anthropic_key``
  (``sk-...``, ``sk-ant-...``); ``aws_access_key`` (``AKIA...``); ``github_token``
  (``ghp_``, ``gho_``, ``ghu_``, ``ghs_``, ``ghr_``, ``github_pat_``); ``jwt``;
  ``google_api_key`` (``AIza...``); ``slack_token`` (``xoxb-...``); ``private_key``
  (the body of a PEM ``-----BEGIN ... PRIVATE KEY-----`` block);
- ``bearer`` (``Bearer X``) and ``authorization`` (the value of an ``Authorization:``
  header); ``url_password`` (``scheme://user:PASS@host``);
- ``flag``: the value of a command-line flag whose name has a secret word
  (``--api-key V``, ``--api-key=V``, ``--hf-token``, ``--password``, ...);
- ``env``: the value of an environment variable whose name contains TOKEN, KEY, SECRET,
  PASSWORD or CREDENTIAL (``HF_TOKEN=...`` in text, or a mapping of variables);
- ``field``: the value of a keyword / dict field whose name has a secret word
  (``api_key='x'``, ``'admin_api_key': 'x'``, ``"token": "x"``);
- with ``redact_hosts``: ``hostname`` and ``ip``, each distinct host or address mapped to
  the same mask everywhere (``host-1``, ``ip-1``). Loopback and ``0.0.0.0`` stay.

Hostnames are learned from the local host name, from names given by the caller, and from
the contexts logs name hosts in (NCCL line prefixes, ``--host``, ``host=``, URLs);
``learn_hosts`` lets a caller pre-scan a text so that a host first named late in a log is
masked from its first line.
"""

from __future__ import annotations

import dataclasses
import re
import socket
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence

__all__ = [
    "HINT_WORDS",
    "HOST_HINT_RE",
    "HOST_HINT_WORDS",
    "MASK_PREFIX",
    "Redactor",
    "SHAPE_HINT_RE",
    "WRAP_TAIL_RE",
    "is_secret_env_name",
    "is_secret_name",
    "looks_like_token",
]

MASK_PREFIX = "<redacted"

# Words that make a field, flag or key=value name secret (matched as whole words).
_SECRET_WORDS = frozenset(
    {
        "token",
        "key",
        "keys",
        "apikey",
        "apikeys",
        "secret",
        "secrets",
        "password",
        "passwords",
        "passwd",
        "passphrase",
        "credential",
        "credentials",
        "auth",
        "authorization",
        "cookie",
    }
)
# Substrings that make an environment variable name secret (the rule).
_SECRET_ENV_PARTS = ("TOKEN", "KEY", "SECRET", "PASSWORD", "PASSWD", "CREDENTIAL", "AUTH")

_WORD_SPLIT = re.compile(r"[^A-Za-z0-9]+|(?<=[a-z0-9])(?=[A-Z])")
_ENV_NAME = re.compile(r"[A-Z][A-Z0-9_]*\Z")


def is_secret_name(name: str) -> bool:
    """A field or flag name (``api_key``, ``--hf-token``, ``adminApiKey``) that holds a
    secret: one of its words is a secret word."""
    if _ENV_NAME.match(name) and is_secret_env_name(name):
        return True
    words, secret = _name_words(name)
    if (
        secret <= {"key", "keys"}
        and not words.isdisjoint(_PLAIN_KEY_WORDS)
        and words.isdisjoint({"api", "access", "private", "signing", "encryption", "ssh"})
    ):
        return False  # torch's 'dispatch key: XPU', a cache or sort key: names, not secrets
    return bool(secret)


def _name_words(name: str) -> tuple[set[str], set[str]]:
    """A name's words, lower case (``adminApiKey``: admin, api, key), and its secret words."""
    words = {w.lower() for w in _WORD_SPLIT.split(name) if w}
    return words, words & _SECRET_WORDS


# words that make a "token" field a number of tokens (max_total_num_token, num_tokens,
# max_prefill_tokens, context_len_tokens), never a credential
_COUNT_WORDS = frozenset(
    {"num", "max", "min", "total", "count", "len", "size", "per", "new", "prefill", "decode",
     "input", "output", "cached", "context", "batch", "chunk",
     # SGLang's DSV4 memory calculation (0.5.14+): 'full_token=9637888', the full-attention
     # pool's token count beside its sliding-window one
     "full", "swa"}
)


# a key path: lower-case segments under slashes, one a word ("mooncake-store/mooncake/
# master_view"); a credential has capitals, digits or no slash
_IDENT = re.compile(r"[a-z]+(?:_[a-z0-9]+)+")  # a snake_case name: a key's, never a secret
_SHORT_KEY = re.compile(r"[A-Za-z0-9_.:-]{1,4}")
# a key made of fields, its first one's name and '=' ("module_key=backend=;uri=;dtype_q=...",
# FlashInfer's module keys; the value stops at the ';'): a description, never a secret
_NESTED_FIELD = re.compile(r"[a-z][a-z0-9_]{0,30}=")
_KEY_PATH = re.compile(r"(?=[^/]*[a-z]{3})[a-z0-9_.-]+(?:/[a-z0-9_.-]+)+/?")


# a word of prose (no digit, no capital, no symbol, short): never a credential's shape
_PROSE_WORD = re.compile(r"[a-z]{3,15}")


def _prose_plain_key(text: str, start: int) -> bool:
    """The word before a bare ``key`` (one space apart) makes it a lookup key."""
    i = start - 1
    if i < 1 or text[i] != " ":
        return False
    j = i
    while j > 0 and text[j - 1].isalpha():
        j -= 1
    return text[j:i].lower() in _PLAIN_KEY_WORDS


# Words that make "key" a lookup key rather than a credential (torch's DispatchKey names in
# c10/core/DispatchKey.cpp's 'dispatch key: XPU' messages; cache, sort and hash keys).
_PLAIN_KEY_WORDS = frozenset(
    {"dispatch", "cache", "sort", "hash", "lookup", "partition", "routing", "shard", "dict"}
)


def is_secret_env_name(name: str) -> bool:
    """An environment variable whose value is masked whatever it looks like."""
    upper = name.upper()
    return any(part in upper for part in _SECRET_ENV_PARTS)


# Prefilter: a text with none of these words (any case) cannot hold a secret pattern
# below; every pattern needs one of them (a secret name has a secret word, a token its
# prefix). ``hints`` runs the same test over a batch of lines at once (Aho-Corasick).
HINT_WORDS: tuple[str, ...] = (
    "hf_", "sk-", "akia", "asia", "agpa", "aida", "aroa", "ghp_", "gho_", "ghu_", "ghs_",
    "ghr_", "github_pat", "bearer", "auth", "://", "token", "key", "secret", "passw",
    "passphrase", "credential", "cookie", "eyj", "aiza", "xox", "private key-----",
    "npm_", "ya29.", "sig=", "glpat-", "k_live_",
)  # fmt: skip
# Secrets with no word to find them by (a bare AWS secret access key: 40 characters of
# base64) are found by shape; the polars prefilter uses the loose form, text() the strict.
SHAPE_HINT_RE = r"[A-Za-z0-9/+]{40}"
# With redact_hosts: a line may name a host or address (or a context hosts are learned in).
HOST_HINT_WORDS: tuple[str, ...] = ("://", "host", "node", "addr")
HOST_HINT_RE = r"\d{1,3}\.\d{1,3}\.\d{1,3}\.\d{1,3}|::|(?:[0-9A-Fa-f]{1,4}:){5}|:\d+:\d+ \["
_HOST_HINT = re.compile(HOST_HINT_RE)


def _has_hint(text: str) -> bool:
    low = text.lower()
    return any(word in low for word in HINT_WORDS) or _AWS_SECRET.search(text) is not None


_URL_PASSWORD = re.compile(
    r"(?P<head>\b[A-Za-z][A-Za-z0-9+.-]*://[^:/@\s'\"]*:)(?P<val>[^@/\s'\"]+)(?P<tail>@)"
)
_AUTH_HEADER = re.compile(
    r"(?P<head>(?i:\b(?:proxy-)?authorization)['\"]?\s*[:=]\s*['\"]?"
    r"(?:(?i:bearer|basic|token|digest)\s+)?)(?P<val>[^\s'\",;}]+)"
)
_BEARER = re.compile(r"(?P<head>(?i:\bbearer)\s+)(?P<val>[A-Za-z0-9._~+/=-]{6,})")
# Names worth a look (the callbacks decide with is_secret_name): the regex engine skips
# the hundreds of other key=value pairs of an args line without a Python call.
_SECRET_WORD = r"(?i:token|key|secret|passw|passphrase|credential|auth|cookie)"
# --flag VALUE, --flag=VALUE, and list reprs: '--flag', 'VALUE'
_FLAG = re.compile(
    rf"(?<![\w-])(?P<name>--(?=[A-Za-z])[\w-]*?{_SECRET_WORD}[\w-]*)"
    r"(?P<sep>=|[ \t]+|['\"],[ \t]*['\"])"
    r"(?P<val>'[^'\n]*'|\"[^\"\n]*\"|[^\s'\",\]]+)"
)
# (kind, pattern, literals one of which the text must hold for the pattern to match)
_TOKENS: tuple[tuple[str, re.Pattern[str], tuple[str, ...]], ...] = (
    ("hf_token", re.compile(r"\bhf_[A-Za-z0-9]{20,}"), ("hf_",)),
    ("anthropic_key", re.compile(r"\bsk-ant-[A-Za-z0-9_-]{16,}"), ("sk-ant-",)),
    ("openai_key", re.compile(r"\bsk-[A-Za-z0-9_-]{16,}"), ("sk-",)),
    (
        "aws_access_key",
        re.compile(r"\b(?:AKIA|ASIA|AGPA|AIDA|AROA)[0-9A-Z]{16}\b"),
        ("AKIA", "ASIA", "AGPA", "AIDA", "AROA"),
    ),
    (
        "github_token",
        re.compile(r"\b(?:gh[pousr]_[A-Za-z0-9]{30,}|github_pat_[A-Za-z0-9_]{30,})"),
        ("ghp_", "gho_", "ghu_", "ghs_", "ghr_", "github_pat_"),
    ),
    ("google_api_key", re.compile(r"\bAIza[0-9A-Za-z_-]{35}"), ("AIza",)),
    ("gcp_oauth_token", re.compile(r"\bya29\.[0-9A-Za-z_-]{20,}"), ("ya29.",)),
    ("npm_token", re.compile(r"\bnpm_[A-Za-z0-9]{30,}"), ("npm_",)),
    ("gitlab_token", re.compile(r"\bglpat-[A-Za-z0-9_-]{20,}"), ("glpat-",)),
    ("stripe_key", re.compile(r"\b[sr]k_live_[0-9A-Za-z]{20,}"), ("k_live_",)),
    ("slack_token", re.compile(r"\bxox[abposr]-[A-Za-z0-9-]{10,}"), ("xox",)),
    (
        "jwt",
        re.compile(r"\beyJ[A-Za-z0-9_-]{8,}\.eyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}"),
        ("eyJ",),
    ),
)
# A bare AWS secret access key: 40 characters of base64 with upper, lower and digits
# (a git sha is hex: lower case only), not part of a longer run.
_AWS_SECRET = re.compile(r"(?<![A-Za-z0-9/+=])[A-Za-z0-9/+]{40}(?![A-Za-z0-9/+=])")
# Azure SAS: the signature of a shared access signature URL (``...&sig=BASE64%3D``)
_SAS_SIG = re.compile(r"(?P<head>(?i:[?&;\s'\"]sig=))(?P<val>[A-Za-z0-9%/+=]{16,})")
# A token cut by a hard wrap: its known prefix and a start at the end of one line, the
# rest at the start of the next. The tail must look random (mixed case or digits).
_TOKEN_PREFIX = (
    r"(?:hf_|sk-ant-|sk-|gh[pousr]_|github_pat_|AKIA|ASIA|AIza|xox[abposr]-|eyJ|npm_|ya29\.)"
)
_WRAP_TAIL = re.compile(
    rf"(?<![A-Za-z0-9_])(?P<tok>{_TOKEN_PREFIX}(?P<rest>[A-Za-z0-9_.+/=-]{{4,}}))\s*$"
)
_WRAP_HEAD = re.compile(r"^[A-Za-z0-9_.+/=-]{1,200}")
_WRAPPED = re.compile(
    rf"(?<![A-Za-z0-9_])(?P<tok>{_TOKEN_PREFIX}[A-Za-z0-9_.+/=-]{{4,}})[ \t]*\r?\n"
    r"(?P<head>[A-Za-z0-9_.+/=-]{1,200})"
)
WRAP_TAIL_RE = rf"{_TOKEN_PREFIX}[A-Za-z0-9_.+/=-]{{4,}}\s*$"


def _random_looking(text: str) -> bool:
    """Mixed case, or letters and digits: the tail of a token, not a word like hf_transfer."""
    upper = any(c.isupper() for c in text)
    lower = any(c.islower() for c in text)
    digit = any(c.isdigit() for c in text)
    return (upper and lower) or ((upper or lower) and digit)


# a class name made of words (vLLM's model classes: "AscendQwen3VLMoeForConditionalGeneration"
# is 40 letters and digits): capitalised words, short acronyms and numbers only, mostly
# lower case; a random key almost never splits so
_CAMEL_NAME = re.compile(r"(?:[A-Z][a-z]{2,}|[A-Z]{1,4}(?=[A-Z][a-z]|\d|$)|\d{1,3})+")
_CAMEL_WORD = re.compile(r"[A-Z][a-z]{2,}")


def _aws_secret_like(text: str) -> bool:
    if (
        _CAMEL_NAME.fullmatch(text)
        and len(_CAMEL_WORD.findall(text)) >= 3
        and sum(c.islower() for c in text) * 10 >= len(text) * 6
    ):
        return False
    return (
        any(c.isupper() for c in text)
        and any(c.islower() for c in text)
        and any(c.isdigit() for c in text)
    )


_ALNUM_RUN = re.compile(r"[A-Za-z0-9]{16,}")
_TOKEN_CHARS = re.compile(r"[A-Za-z0-9_.+=~:-]{16,}")
_HEX_RUN = re.compile(r"[0-9a-fA-F]{32,}")


def looks_like_token(value: str) -> bool:
    """An environment value that is a credential by its shape whatever the variable is
    called: a known token form, or one unbroken random-looking run of 16+ characters."""
    v = value.strip().strip("'\"")
    if not v or " " in v or "/" in v or not _TOKEN_CHARS.fullmatch(v):
        return bool(v) and any(
            any(n in v for n in needles) and pat.search(v) for _k, pat, needles in _TOKENS
        )
    if any(any(n in v for n in needles) and pat.search(v) for _k, pat, needles in _TOKENS):
        return True
    if _HEX_RUN.search(v):
        return True
    return any(
        any(c.isupper() for c in run) and any(c.islower() for c in run)
        and any(c.isdigit() for c in run)
        for run in _ALNUM_RUN.findall(v)
    )


_SECRET_WORD_RE = re.compile(_SECRET_WORD)
_NAME_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_.-")
# A field at a known position: quote, name, operator, value. Fields read
# name=VALUE, name: VALUE, 'name': 'VALUE', "name": "VALUE", name='VALUE', and lists
# 'api_key': ['a', 'b'] (vLLM's non-default args); see Redactor._fields. An ``==``
# (a comparison in a traceback's source line) is no field.
_FIELD_AT = re.compile(
    r"(?P<q>['\"]?)(?P<name>[A-Za-z_][A-Za-z0-9_.-]*)(?P=q)"
    r"(?P<op>\s*=(?!=)\s*|\s*:(?:\s+|(?=['\"\[(])))"
    r"(?P<val>'(?:[^'\\]|\\.)*'|\"(?:[^\"\\]|\\.)*\""
    r"|\[(?:[^\[\]'\"\n]|'(?:[^'\\\n]|\\.)*'|\"(?:[^\"\\\n]|\\.)*\")*\]"
    r"|\((?:[^()'\"\n]|'(?:[^'\\\n]|\\.)*'|\"(?:[^\"\\\n]|\\.)*\")*\)"
    r"|[^\s,;)}\]&'\"]+)"
)
_QUOTED = re.compile(r"'(?:[^'\\]|\\.)*'|\"(?:[^\"\\]|\\.)*\"")

_NAMED_VALUES = frozenset({"repr", "value", "val"})
# PEM private keys: a whole block in one text, or, in a stream of lines, every line from
# the BEGIN line to the END line (the body lines have nothing else to recognise them by).
_PEM_BEGIN = "PRIVATE KEY-----"
_PEM_BLOCK = re.compile(
    r"(?P<head>-----BEGIN [A-Z0-9 ]*PRIVATE KEY-----)(?P<val>.*?)(?P<tail>-----END [A-Z0-9 ]*"
    r"PRIVATE KEY-----|\Z)",
    re.S,
)
_INT_LIST = re.compile(r"[\d\s,\[\]()-]+")  # [311], [[1, 2], [3]]: token ids
_NUMBER = re.compile(r"[-+]?\d+(?:\.\d+)?[%A-Za-z]{0,3}\.?")  # (a count ending a sentence)
_FRACTION = re.compile(r"[-+]?\d{1,6}\.\d{1,6}")
_INT = re.compile(r"-?\d{1,9}")
_SPECIAL_TOKEN = re.compile(r"<\|?[\w.\-]{1,40}\|?>")
_CHOICES = re.compile(r"[|,/]")
# None, a bool, an empty container; the placeholders of "no value" in other languages and
# shells (JavaScript's undefined, Go's and Ruby's nil, SQL's NULL) and the frameworks' own
# "no key" word (vLLM's and SGLang's docs: --api-key EMPTY)
_NOT_SECRET_VALUES = frozenset(
    {"", "None", "none", "null", "True", "False", "true", "false", "{}", "[]", "()",
     "undefined", "nil", "NULL", "Null", "NONE", "unset", "UNSET", "EMPTY", "empty"}
)


def _plain_value(name: str, inner: str, *, quoted: bool, colon: bool) -> bool:
    """Whether the value of a field with a secret name (``inner``: its quotes off) has no
    secret's shape and stays; ``colon``: the field reads ``name: value``. Each form has a
    line in tests/test_redact.py's NEGATIVE."""
    if inner in _NOT_SECRET_VALUES or inner.startswith("$"):
        return True  # None, a bool, an empty container; a shell variable
    if "\\(" in inner or "\\)" in inner or "[^" in inner:
        # a regular expression's escaped group or negated class: a sed/grep script that
        # edits the variable (bash -x's trace of `sed 's/\(.*HF_TOKEN="\)[^"]*/.../'`)
        return True
    words, secret = _name_words(name)
    key_only = bool(secret) and secret <= {"key", "keys"}  # a lookup key, a store's key
    if key_only and (
        _IDENT.fullmatch(inner) or _SHORT_KEY.fullmatch(inner) or _NESTED_FIELD.fullmatch(inner)
    ):
        # a key's name (vLLM's MultiModalFieldElem key='pixel_values'), or a prefix of a
        # few characters (torch inductor's cache key = "a" + pickler.get_hash(...),
        # _inductor/codecache.py): no credential is that short
        return True
    if quoted:
        return False
    # the only secret word is token(s): a tokenizer's field or function, a count of tokens
    tokens = secret <= {"token", "tokens"}
    if _NUMBER.fullmatch(inner) and (colon or (tokens and not words.isdisjoint(_COUNT_WORDS))):
        # a count in a log line ("#new-token: 6"), or in a field named for a count of
        # tokens (SGLang 0.1's "max_total_num_token=52656"): never a secret
        return True
    if tokens and (
        # a fraction in a field about tokens (SGLang 0.5.16's
        # "tbo_token_distribution_threshold=0.48"): a ratio
        _FRACTION.fullmatch(inner)
        # a vocabulary's token: its id ("mask_token_id=12") or a special token's text
        # ("mask_token=<|MASK|>", "pad_token=<pad>")
        or (_INT.fullmatch(inner) and not words.isdisjoint({"id", "ids", "index"}))
        or _SPECIAL_TOKEN.fullmatch(inner)
        # a function's message after its name ("_fix_v5_add_bos_eos_token: skipping
        # /path"): a lower-case word of prose, no token's shape
        or (colon and _PROSE_WORD.fullmatch(inner))
    ):
        return True
    return (
        "(" in inner  # code in a traceback (next_token_ids = batch.sample(...))
        or inner.startswith("{")  # a dict opens: its own fields are read one by one
        or inner == name  # code passing a variable on (auth=auth)
        # a store's key path (Mooncake's "Master view key: mooncake-store/mooncake/
        # master_view", an etcd or S3 prefix): lower-case words under slashes
        or (key_only and _KEY_PATH.fullmatch(inner) is not None)
    )


# Hosts and addresses (only with redact_hosts).
_IPV4 = re.compile(
    r"(?<![\d.])(?:(?:25[0-5]|2[0-4]\d|1\d\d|[1-9]?\d)\.){3}(?:25[0-5]|2[0-4]\d|1\d\d|[1-9]?\d)"
    r"(?![\d.]*\d)"
)
_IPV6 = re.compile(r"(?<![\w:.])(?:[0-9A-Fa-f]{0,4}:){2,7}[0-9A-Fa-f]{0,4}(?![\w:])")
_KEEP_IPS = frozenset({"0.0.0.0", "127.0.0.1", "255.255.255.255", "::", "::1"})
_HOSTNAME = r"[A-Za-z][A-Za-z0-9-]*(?:\.[A-Za-z0-9-]+)*"
_HOST_CONTEXTS = (
    # NCCL: host:pid:tid [dev] NCCL ...
    re.compile(rf"(?:^|\||\) )\s*(?P<host>{_HOSTNAME}):\d+:\d+ \[\d+\]"),
    # host=..., hostname: ..., master_addr=..., 'dist_init_addr': '...' (not prose such
    # as nvidia-smi's legend "NODE = Connection traversing ...")
    re.compile(
        rf"(?i:\b(?:host|hostname|node|nodename|node_name|master_addr|dist_init_addr|"
        rf"head_node|ip_address|addr))['\"]?(?:=|:\s*)['\"]?(?P<host>{_HOSTNAME})"
    ),
    re.compile(rf"--(?:host|dist-init-addr|master-addr|node-ip-address)[= ](?P<host>{_HOSTNAME})"),
    re.compile(rf"\b[a-z][a-z0-9+.-]*://(?:[^@/\s]*@)?(?P<host>{_HOSTNAME})"),
)
_PUBLIC_TLDS = frozenset({"com", "org", "io", "ai", "net", "dev", "co", "edu", "gov", "md", "py"})
_NOT_HOSTS = frozenset(
    {
        "localhost",
        "none",
        "null",
        "true",
        "false",
        "huggingface.co",
        "github.com",
        "pypi.org",
        "download.pytorch.org",
        "docs.vllm.ai",
        "docs.sglang.ai",
        "docs.python.org",
    }
)


def _mask(kind: str) -> str:
    return f"{MASK_PREFIX}:{kind}>"


def _is_mask(value: str) -> bool:
    return MASK_PREFIX in value


_CLEAN_MAX = 1 << 16  # clean texts a redactor remembers (then all forgotten at once)


class Redactor:
    """Masks secrets (and, optionally, hosts) in everything handed to it.

    One instance per bundle: its counts and its host masks cover every member, so the
    same host gets the same mask in the logs, the snapshot and the manifest."""

    def __init__(self, *, redact_hosts: bool = False, hosts: Iterable[str] = ()) -> None:
        self.redact_hosts = redact_hosts
        self._counts: Counter[str] = Counter()
        self._host_masks: dict[str, str] = {}  # first label (lower) -> host-N
        self._hosts: set[str] = set()
        self._ip_masks: dict[str, str] = {}
        self._host_re: re.Pattern[str] | None = None
        self._pem_open = False  # (stream mode) inside a private key block
        self._pem_hint_open = False
        self._wrap_open = False  # (stream mode) the last line ended in a cut token
        self._wrap_hint_open = False
        self._clean: set[str] = set()  # texts that come out unchanged (see ``text``)
        if redact_hosts:
            try:
                local = socket.gethostname()
            except OSError:  # pragma: no cover - no hostname at all
                local = ""
            for host in (local, *hosts):
                self.add_host(host)

    # -- bookkeeping ------------------------------------------------------------------

    def summary(self) -> dict[str, int]:
        """How many values of each kind were masked (never the values)."""
        return dict(sorted(self._counts.items()))

    @property
    def total(self) -> int:
        return sum(self._counts.values())

    def _hit(self, kind: str) -> str:
        self._counts[kind] += 1
        return _mask(kind)

    # -- hosts ------------------------------------------------------------------------

    def add_host(self, host: str) -> None:
        """Mask this host name (and its short name) from now on."""
        if host in self._hosts:
            return
        host = host.strip().strip(".")
        if not host or host.lower() in _NOT_HOSTS or _IPV4.fullmatch(host):
            return
        if not any(c.isalpha() for c in host) or len(host) < 2:
            return
        if "." in host and host.rsplit(".", 1)[-1].lower() in _PUBLIC_TLDS:
            return  # a public site (docs.nvidia.com), not one of the user's hosts
        short = host.split(".", 1)[0]
        key = short.lower()
        if key in _NOT_HOSTS:
            return
        if key not in self._host_masks:
            self._host_masks[key] = f"host-{len(self._host_masks) + 1}"
        new = {host, short} - self._hosts
        if new:
            self._hosts |= new
            self._host_re = None  # rebuilt (once) when next needed

    def _host_pattern(self) -> re.Pattern[str] | None:
        if self._host_re is None and self._hosts:
            alternation = "|".join(
                re.escape(h) for h in sorted(self._hosts, key=lambda h: (-len(h), h))
            )
            self._host_re = re.compile(rf"(?<![\w.-])(?:{alternation})(?![\w-])", re.I)
        return self._host_re

    def learn_hosts(self, text: str) -> None:
        """Find host names in the contexts logs name them, to mask them everywhere."""
        if not self.redact_hosts:
            return
        low = text.lower()
        gates = (
            " [" in text,  # host:pid:tid [dev] NCCL
            "host" in low or "node" in low or "addr" in low,
            "--" in text,
            "://" in text,
        )
        for gate, pattern in zip(gates, _HOST_CONTEXTS, strict=True):
            if not gate:
                continue
            for match in pattern.finditer(text):
                host = match.group("host")
                if "." in host and host.rsplit(".", 1)[-1].isdigit():
                    continue  # an address or a version, not a name
                self.add_host(host)

    def host_mask(self, host: str) -> str:
        """The mask of one host (learning it), or the host itself without redact_hosts."""
        if not self.redact_hosts:
            return host
        if _IPV4.fullmatch(host):
            return self._ip(host)
        self.add_host(host)
        return self._host_masks.get(host.split(".", 1)[0].lower(), host)

    def _ip(self, ip: str) -> str:
        if ip in _KEEP_IPS or ip.startswith("127."):
            return ip
        if ip not in self._ip_masks:
            self._ip_masks[ip] = f"ip-{len(self._ip_masks) + 1}"
        self._counts["ip"] += 1
        return self._ip_masks[ip]

    def _ip6(self, match: re.Match[str]) -> str:
        text = match.group(0)
        groups = text.split(":")
        if text in _KEEP_IPS or ("::" not in text and len(groups) < 6):
            return text
        if not any(c in "abcdefABCDEF" for c in text) and "::" not in text:
            return text
        if text.strip(":") == "":
            return text
        return self._ip(text)

    def _host_sub(self, match: re.Match[str]) -> str:
        self._counts["hostname"] += 1
        return self._host_masks.get(match.group(0).split(".", 1)[0].lower(), "host-?")

    def _hosts_text(self, text: str) -> str:
        pattern = self._host_pattern()
        if pattern is not None:
            text = pattern.sub(self._host_sub, text)
        text = _IPV4.sub(lambda m: self._ip(m.group(0)), text)
        if "::" in text or text.count(":") >= 5:
            text = _IPV6.sub(self._ip6, text)
        return text

    # -- text -------------------------------------------------------------------------

    def _flag_sub(self, match: re.Match[str]) -> str:
        value = match.group("val")
        if not is_secret_name(match.group("name")[2:]) or _is_mask(value):
            return match.group(0)
        if value.startswith("-") and match.group("sep") != "=":
            return match.group(0)  # the next flag, not a value
        if value.strip("'\"") in _NOT_SECRET_VALUES:
            return match.group(0)  # "--api-key EMPTY" (the frameworks' docs), None, ...
        if value.lstrip("[") == match.group("name")[2:].upper().replace("-", "_"):
            # argparse's usage: the flag's metavar ("--api-key API_KEY", an optional value's
            # "--hf-token [HF_TOKEN]")
            return match.group(0)
        return match.group("name") + match.group("sep") + self._hit("flag")

    def _field_sub(self, match: re.Match[str]) -> str:
        name = match.group("name")
        value = match.group("val")
        if not is_secret_name(name) or _is_mask(value) or "authorization" in name.lower():
            return match.group(0)  # (Authorization headers have their own pattern)
        if name.endswith(("Error", "Exception", "Warning")):
            return match.group(0)  # an exception and its message (KeyError: 'lm_head.weight')
        if value[:1] in ("[", "(") and len(value) >= 2:  # a list of secrets: mask each item
            inner = value[1:-1].strip()
            if not inner or inner in _NOT_SECRET_VALUES:
                return match.group(0)
            if all(x.strip() in _NOT_SECRET_VALUES for x in _CHOICES.split(inner)):
                # a usage text's choices ("TOKENIZERS_PARALLELISM=(true | false)", Hugging
                # Face tokenizers' fork warning) or a list of flags: nothing to hide
                return match.group(0)
            if _INT_LIST.fullmatch(inner) and not any(
                w in name.lower() for w in ("pass", "secret", "cred", "pin")
            ):
                return match.group(0)  # a list of ints (new_token_ids=[311]): token ids
            mask = _mask("field")
            masked = _QUOTED.sub(lambda m: m.group(0)[0] + mask + m.group(0)[0], inner)
            if masked == inner:  # no quoted items: mask it all
                masked = mask
            self._counts["field"] += 1
            q = match.group("q")
            return f"{q}{name}{q}{match.group('op')}{value[0]}{masked}{value[-1]}"
        quote = value[0] if value[:1] in ("'", '"') else ""
        inner = value[1:-1] if quote else value
        if _plain_value(name, inner, quoted=bool(quote), colon=":" in match.group("op")):
            return match.group(0)
        kind = "env" if _ENV_NAME.match(name) and "=" in match.group("op") else "field"
        q = match.group("q")
        return f"{q}{name}{q}{match.group('op')}{quote}{self._hit(kind)}{quote}"

    def text(self, text: str, *, learn: bool = True, stream: bool = False) -> str:
        """Redact one text (a line, a message, a rendered report). ``learn=False`` skips
        learning hosts from it (the caller has pre-scanned it with ``learn_hosts``).
        ``stream=True``: the text is the next line of one log (see ``end_stream``), so a
        private key block spread over lines is masked line by line."""
        if stream or self.redact_hosts:
            return self._text(text, learn=learn, stream=stream)
        # (speed) without hosts or a stream the result depends on the text alone: a text
        # that came out unchanged, with nothing counted, is remembered as clean (a report
        # repeats its keys, its sources, its messages)
        clean = self._clean
        if text in clean:
            return text
        before = sum(self._counts.values())
        out = self._text(text, learn=learn, stream=False)
        if out == text and sum(self._counts.values()) == before:
            if len(clean) >= _CLEAN_MAX:
                clean.clear()
            clean.add(text)
        return out

    def _text(self, text: str, *, learn: bool, stream: bool) -> str:
        if stream and self._pem_open:
            if "-----END" in text and _PEM_BEGIN in text:
                self._pem_open = False
                return text
            return _mask("private_key")
        if _PEM_BEGIN in text and "-----BEGIN" in text:
            if stream and "-----END" not in text:
                self._pem_open = True
                self._counts["private_key"] += 1
                return text
            text = _PEM_BLOCK.sub(self._pem_sub, text)
        tail_cut = False
        if stream:
            if self._wrap_open:  # the rest of a token the previous line's wrap cut
                head = _WRAP_HEAD.match(text)
                if head is not None:
                    text = self._hit("wrapped_token") + text[head.end() :]
            tail = _WRAP_TAIL.search(text)
            tail_cut = tail is not None and _random_looking(tail.group("rest"))
            self._wrap_open = tail_cut
        elif "\n" in text and _WRAPPED.search(text) is not None:
            text = _WRAPPED.sub(self._wrapped_sub, text)
        low = text.lower()
        shaped = _AWS_SECRET.search(text) is not None
        if shaped or any(word in low for word in HINT_WORDS):
            if "://" in text:
                text = _URL_PASSWORD.sub(self._url_sub, text)
            if "authorization" in low:
                text = _AUTH_HEADER.sub(self._auth_sub, text)
            if "bearer" in low:
                text = _BEARER.sub(self._bearer_sub, text)
            if "--" in text:
                text = _FLAG.sub(self._flag_sub, text)
            text = self._fields(text)
            for kind, pattern, needles in _TOKENS:
                if any(needle in text for needle in needles):
                    text = pattern.sub(self._token_sub(kind), text)
            if "sig=" in low:
                text = _SAS_SIG.sub(self._sas_sub, text)
            if shaped:
                text = _AWS_SECRET.sub(self._aws_secret_sub, text)
        if tail_cut:
            tail = _WRAP_TAIL.search(text)
            if tail is not None and not _is_mask(tail.group("tok")):
                mask = self._hit("wrapped_token")
                text = text[: tail.start("tok")] + mask + text[tail.end("tok") :]
        if self.redact_hosts:
            if learn:
                self.learn_hosts(text)
            text = self._hosts_text(text)
        return text

    def _fields(self, text: str) -> str:
        """Mask the values of secret fields (see ``_FIELD_AT``): only the names that hold
        a secret word are looked at, not every key=value of a long line."""
        parts: list[str] = []
        done = 0
        scanned = 0  # each name is looked at once, however many secret words it holds
        for word in _SECRET_WORD_RE.finditer(text):
            start, end = word.start(), word.end()
            if start < max(done, scanned):
                continue
            while start > scanned and text[start - 1] in _NAME_CHARS:
                start -= 1
            while end < len(text) and text[end] in _NAME_CHARS:
                end += 1
            scanned = end
            while start < end and not (text[start].isalpha() or text[start] == "_"):
                start += 1  # a name starts with a letter or _
            if not is_secret_name(text[start:end]):
                continue
            if text[start:end].lower() in ("key", "keys") and _prose_plain_key(text, start):
                continue  # 'dispatch key: XPU' (torch's dispatcher messages)
            at = start - 1 if start > 0 and text[start - 1] in "'\"" else start
            match = _FIELD_AT.match(text, at)
            if match is None and at != start:  # a quote that does not close the name
                at = start
                match = _FIELD_AT.match(text, at)
            if match is None or match.end("name") != end:
                continue
            parts.append(text[done:at])
            parts.append(self._field_sub(match))
            done = match.end()
        if not parts:
            return text
        parts.append(text[done:])
        return "".join(parts)

    def hints(self, lines: Sequence[bytes], *, stream: bool = False) -> list[bool]:
        """For a batch of raw lines: which ones ``text`` might change. A line marked
        False comes out of ``text`` unchanged, so a caller may copy it as it is. With
        ``stream``, the batch continues one log (as ``text(stream=True)`` reads it): the
        lines of a private key block are all marked."""
        if not lines:
            return []
        flags = self._hints(lines)
        if stream:
            # the line after one that ends in a cut token holds the token's rest
            tails = self._tails(lines)
            if self._wrap_hint_open:
                flags[0] = True
            for i, tail in enumerate(tails[:-1]):
                if tail:
                    flags[i + 1] = True
            self._wrap_hint_open = tails[-1]
        if stream and (self._pem_hint_open or any(b"PRIVATE KEY-----" in line for line in lines)):
            for i, line in enumerate(lines):
                if self._pem_hint_open:
                    flags[i] = True
                    if b"-----END" in line and b"PRIVATE KEY-----" in line:
                        self._pem_hint_open = False
                elif b"-----BEGIN" in line and b"PRIVATE KEY-----" in line:
                    flags[i] = True
                    self._pem_hint_open = b"-----END" not in line
        return flags

    @staticmethod
    def _tails(lines: Sequence[bytes]) -> list[bool]:
        import polars as pl

        series = pl.Series([line.decode("utf-8", "replace") for line in lines], dtype=pl.Utf8)
        return [bool(hit) for hit in series.str.contains(WRAP_TAIL_RE).to_list()]

    def _hints(self, lines: Sequence[bytes]) -> list[bool]:
        import polars as pl

        # (invalid UTF-8 becomes U+FFFD here: the hint words are ASCII, so none is lost)
        series = pl.Series([line.decode("utf-8", "replace") for line in lines], dtype=pl.Utf8)
        mask = series.str.contains_any(list(HINT_WORDS), ascii_case_insensitive=True)
        mask = mask | series.str.contains(SHAPE_HINT_RE)
        if self.redact_hosts:
            words = [*HOST_HINT_WORDS, *sorted(self._hosts)]
            mask = (
                mask
                | series.str.contains_any(words, ascii_case_insensitive=True)
                | series.str.contains(HOST_HINT_RE)
            )
        return [bool(hit) for hit in mask.to_list()]

    def _wrapped_sub(self, match: re.Match[str]) -> str:
        if not _random_looking(match.group("tok")[4:] + match.group("head")):
            return match.group(0)
        mask = self._hit("wrapped_token")
        return mask + match.string[match.end("tok") : match.start("head")] + mask

    def _sas_sub(self, match: re.Match[str]) -> str:
        return match.group("head") + self._hit("azure_sas")

    def _aws_secret_sub(self, match: re.Match[str]) -> str:
        if not _aws_secret_like(match.group(0)):
            return match.group(0)
        return self._hit("aws_secret_key")

    def _pem_sub(self, match: re.Match[str]) -> str:
        return match.group("head") + self._hit("private_key") + match.group("tail")

    def end_stream(self) -> None:
        """The log being streamed ended: forget any open private key block."""
        self._pem_open = False
        self._pem_hint_open = False
        self._wrap_open = False
        self._wrap_hint_open = False

    def _token_sub(self, kind: str) -> Callable[[re.Match[str]], str]:
        def sub(_match: re.Match[str]) -> str:
            return self._hit(kind)

        return sub

    def _url_sub(self, match: re.Match[str]) -> str:
        if _is_mask(match.group("val")):
            return match.group(0)
        return match.group("head") + self._hit("url_password") + match.group("tail")

    def _auth_sub(self, match: re.Match[str]) -> str:
        if _is_mask(match.group("val")):
            return match.group(0)
        return match.group("head") + self._hit("authorization")

    def _bearer_sub(self, match: re.Match[str]) -> str:
        if _is_mask(match.group("val")):
            return match.group(0)
        return match.group("head") + self._hit("bearer")

    def lines(self, lines: Iterable[str]) -> Iterator[str]:
        """Redact a stream of lines, one at a time (nothing is buffered)."""
        try:
            for line in lines:
                yield self.text(line, stream=True)
        finally:
            self.end_stream()

    def argv(self, argv: Sequence[str]) -> list[str]:
        """Redact a command line: ``--api-key VALUE`` masks the next element too."""
        out: list[str] = []
        mask_next = False
        for arg in argv:
            if mask_next and not _is_mask(arg):
                mask_next = False
                if not arg.startswith("-") or arg == "-":
                    out.append(self._hit("flag"))
                    continue
            mask_next = False
            if arg.startswith("--") and "=" not in arg and is_secret_name(arg[2:]):
                mask_next = True
                out.append(self.text(arg))
                continue
            if "=" in arg and not arg.startswith("-"):
                name, _, value = arg.partition("=")
                if _ENV_NAME.match(name) and value and (
                    is_secret_env_name(name) or looks_like_token(value)
                ):
                    out.append(f"{name}={self._hit('env')}")
                    continue
            out.append(self.text(arg))
        return out

    def env(self, env: Mapping[str, str]) -> dict[str, str]:
        """Redact environment variables: secret names masked whole, others as text."""
        out: dict[str, str] = {}
        for name, value in env.items():
            if value and (is_secret_env_name(name) or looks_like_token(value)):
                out[self.text(name)] = self._hit("env")
            else:
                out[self.text(name)] = self.text(value)
        return out

    def value(self, obj: object, *, key: str | None = None) -> object:
        """Redact a JSON-like structure: strings as text, lists of strings as command
        lines, values under a secret key masked whole."""
        if isinstance(obj, str):
            if (
                key is not None
                and obj not in _NOT_SECRET_VALUES
                and not _is_mask(obj)
                and is_secret_name(key)
            ):
                return self._hit("field")
            return self.text(obj)
        if isinstance(obj, Mapping):
            # a named value ({"name": "api_key", "repr": "'x'"}: py-spy --locals, env
            # lists of {"name": .., "value": ..}) is masked by its name
            name = obj.get("name")
            secret_named = isinstance(name, str) and is_secret_name(name)
            return {
                self.text(str(k)) if isinstance(k, str) else k: (
                    self.value(v, key=name if secret_named and k in _NAMED_VALUES else str(k))
                )
                for k, v in obj.items()
            }
        if isinstance(obj, (list, tuple)):
            if obj and all(isinstance(item, str) for item in obj):
                return self.argv([str(item) for item in obj])
            return [self.value(item) for item in obj]
        return obj



def redact_tree(obj: object, redactor: Redactor | None = None) -> object:
    """A copy of an analysis (any tree of dataclasses, mappings, tuples, lists and strings)
    with every string redacted as :meth:`Redactor.text` does, and every value under a
    secret key masked whole (:meth:`Redactor.value`): what the terminal, Markdown and
    Perfetto views render from, as ``--json`` and bundles are. Unchanged parts are shared."""
    r = redactor if redactor is not None else Redactor()
    return _redact_node(obj, r, None)


def _redact_node(obj: object, r: Redactor, key: str | None) -> object:
    if isinstance(obj, str):
        new = r.value(obj, key=key) if key is not None else r.text(obj, learn=False)
        return obj if new == obj else new
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        changes = {}
        for f in dataclasses.fields(obj):
            if not f.init:
                continue
            value = getattr(obj, f.name)
            new = _redact_node(value, r, None)
            if new is not value:
                changes[f.name] = new
        return dataclasses.replace(obj, **changes) if changes else obj
    if isinstance(obj, Mapping):
        items = {k: _redact_node(v, r, str(k)) for k, v in obj.items()}
        if all(items[k] is v for k, v in obj.items()):
            return obj
        return items
    if isinstance(obj, (tuple, list)):
        seq = [_redact_node(x, r, None) for x in obj]
        if all(a is b for a, b in zip(seq, obj, strict=True)):
            return obj
        if isinstance(obj, list):
            return seq
        if hasattr(obj, "_fields"):  # a namedtuple
            return type(obj)._make(seq)  # type: ignore[attr-defined]
        return tuple(seq)
    return obj
