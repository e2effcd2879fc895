/* diag's line scanner: a multi-literal automaton (Aho-Corasick, as one dense DFA over byte
 * classes) and the per-line passes the prefilter needs, so that no line costs a call into
 * Python. Built by diag/parse/native.py with the system C compiler (at pip install, else on
 * first use, cached by this file's hash) and called through ctypes; without a compiler
 * diag uses Hyperscan.
 *
 * Over a chunk of whole lines:
 *   dg_candidates  marks the lines that hold a candidate literal (any ASCII case), the line
 *                  before a "with line before" literal, an indented line and the line before
 *                  it, a line with a carriage return inside, a line starting "#<digit>"; and
 *                  reports which case-sensitive labels occur in the chunk, and where;
 *   dg_hits        which patterns occur on which line (each pair once);
 *   dg_last        the start of each key's last occurrence on a line not marked dropped,
 *                  walking the chunk backwards with an automaton of the reversed keys;
 *   dg_kinds       a 64-bit hash of each line's kind (its first 160 bytes, digits deleted);
 *   dg_form        a line form (literals and numbers, as vLLM's metrics lines) matched at
 *                  given offsets, its numbers read into columns;
 *   dg_newlines, dg_utf8_valid, dg_nonblank, dg_find: newline offsets, strict UTF-8
 *                  validity, blank lines, a substring's first offset (memchr on a rare byte).
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#if defined(__SSE2__)
#include <emmintrin.h>
#include <immintrin.h>
#endif

#define FLAG 0x80000000u
#define MASK 0x7fffffffu

enum { OUT_CAND = 1, OUT_PREV = 2, OUT_LIST = 4, OUT_CHECK = 8 };

/* A candidate literal of kind 3 goes into the automaton by its first DG_CUT bytes only;
 * where those occur, the rest is compared (any ASCII case) before the line is a
 * candidate. The same candidates as the whole literal walked (a line holds a literal
 * where it holds its first bytes and its rest after them), with an automaton a fraction
 * of the size: the phase catalogue's whole-message literals (median 47 bytes, some over
 * 500) made most of its states. */
#define DG_CUT 32

typedef struct {
    int32_t n_states;
    int32_t n_classes;
    uint8_t cls[256];      /* byte -> class (0: a byte in no pattern) */
    uint32_t *delta;       /* n_states * n_classes; FLAG set on entries into a state with output */
    uint8_t *out;          /* per state: OUT_* bits, unioned along the failure chain */
    int32_t *own;          /* per state: first pattern ending exactly here (-1: none) */
    int32_t *next_own;     /* per pattern: next pattern ending at the same state */
    int32_t *dict;         /* per state: nearest state down its failure chain with own patterns */
    int32_t n_patterns;
    int32_t *plen;         /* per pattern: length */
    int32_t *kind;         /* per pattern: 0 candidate, 1 candidate + line before, 2 listed,
                            * 3 candidate checked past its first DG_CUT bytes (as given
                            * longer than that; else 0) */
    int32_t *bit;          /* per pattern: its index among the kind-2 patterns */
    uint8_t **pat;         /* per pattern: its bytes as given (for the case-sensitive check) */
    int32_t nl_class;      /* class of '\n' */
    int32_t cr_class;      /* class of '\r' (candidate automata only; else -1) */
    int32_t quiet_nl;      /* 1: a newline goes to the root unflagged (candidate automata:
                            * the lines' starts are tested from the newline offsets) */
    /* The tail (candidate automata with labels or line-before literals): once a line is a
     * candidate, the rest of it is not walked (on a log where most lines are candidates,
     * most bytes are there): the walk jumps to the line's end, and the patterns of kinds
     * 1 and 2 that end in that rest are found by their first bytes (16 bytes at a time)
     * and compared whole (tail_scan). */
    int32_t n_tail;        /* the tail's patterns (0: no tail) */
    int32_t *tail_pats;    /* ... grouped by first byte (a kind 1 one under both cases) */
    int32_t tail_at[257];  /* per byte b: its patterns are tail_pats[tail_at[b] .. tail_at[b+1]) */
    int32_t tail_max;      /* the longest tail pattern */
    /* a filter of the tail patterns' first two bytes (Teddy: 8 buckets of patterns, a
     * byte's bucket bits looked up per nibble with a byte shuffle, 16 starts at a time):
     * lo0, hi0 (byte 0), lo1, hi1 (byte 1) */
    uint8_t teddy[64];
    int32_t *depth;        /* per state: the length of the text it has read */
    int32_t caseless;
    uint64_t kinv;         /* ceil(2^32 / n_classes): see state_of */
} dg_ac;

/* the state whose row starts at offset s (an entry's target, state * n_classes) by a
 * multiply, not a division: s * ceil(2^32 / n) / 2^32 is s / n plus less than 1/2 when
 * s < 2^31 is a multiple of n (each label hit of the walk takes one: 5-8% of the walk of
 * a serving log, whose every line holds labels) */
static inline int32_t state_of(const dg_ac *ac, uint32_t s) {
    return (int32_t)(((uint64_t)s * ac->kinv) >> 32);
}

static uint8_t fold(uint8_t b, int caseless) {
    return (caseless && b >= 'A' && b <= 'Z') ? (uint8_t)(b + 32) : b;
}

void dg_free(dg_ac *ac) {
    if (!ac) return;
    free(ac->delta); free(ac->out); free(ac->own); free(ac->next_own); free(ac->dict);
    free(ac->plen); free(ac->kind); free(ac->bit); free(ac->tail_pats); free(ac->depth);
    if (ac->pat) {
        for (int32_t i = 0; i < ac->n_patterns; i++) free(ac->pat[i]);
        free(ac->pat);
    }
    free(ac);
}

/* the weight of the bytes whose low nibble is in lo and high nibble in hi (bit masks):
 * lower-case letters, digits and the space 16 each (common in logs), any other 1 */
static double nibble_weight(uint16_t lo, uint16_t hi) {
    double w = 0;
    for (int b = 0; b < 256; b++)
        if ((lo >> (b & 15) & 1) && (hi >> (b >> 4) & 1))
            w += ((b >= 'a' && b <= 'z') || (b >= '0' && b <= '9') || b == ' ') ? 16 : 1;
    return w;
}

/* the trie's step from state s on class c (a new state if it has no such child yet) */
static inline int32_t trie_step(int32_t *child, int32_t *sibling, int32_t *edge,
                                int32_t *depth, int32_t s, int32_t c, int32_t *states) {
    int32_t t = child[s];
    while (t >= 0 && edge[t] != c) t = sibling[t];
    if (t < 0) {
        t = (*states)++;
        edge[t] = c;
        sibling[t] = child[s];
        child[s] = t;
        depth[t] = depth[s] + 1;
    }
    return t;
}

/* the first bytes the tail files pattern p (len bytes, of kind `kind`) under, in fb: a
 * kind 1 pattern's first letter under both cases (lower first), else its first byte as
 * given; returns how many (0: not a tail pattern, kind 0 or empty) */
static int tail_bytes(const uint8_t *p, int32_t len, int32_t kind, int caseless, uint8_t *fb) {
    if (kind == 0 || kind == 3 || len <= 0) return 0;
    uint8_t lo = fold(p[0], caseless);
    if (kind == 1 && caseless && lo >= 'a' && lo <= 'z') {
        fb[0] = lo;
        fb[1] = (uint8_t)(lo - 32);
        return 2;
    }
    fb[0] = p[0];
    return 1;
}

/* state s's row of the transition function (dg_build's breadth-first pass, below): the
 * row of its failure state f copied whole (the root is its own: a missing edge stays at
 * the root), its children written over it, each child's failure state (where f goes on
 * the child's class; the root for the root's children), output and dictionary link set
 * and the child queued; the newline and CR classes flagged */
static void encode_row(dg_ac *ac, int32_t s, int32_t f, const int32_t *child,
                       const int32_t *sibling, const int32_t *edge, int32_t *fail,
                       int32_t *queue, int32_t *tail) {
    const uint32_t kk = (uint32_t)ac->n_classes;
    uint32_t *row = &ac->delta[(size_t)s * kk];
    const uint32_t *frow = &ac->delta[(size_t)f * kk];
    if (s == f) {
        uint32_t stay = (ac->out[s] ? FLAG : 0) | ((uint32_t)s * kk);
        for (uint32_t c = 0; c < kk; c++) row[c] = stay;
    } else {
        memcpy(row, frow, sizeof(uint32_t) * (size_t)kk);
    }
    for (int32_t t = child[s]; t >= 0; t = sibling[t]) {
        int32_t c = edge[t];
        int32_t ft = s == f ? s : state_of(ac, frow[c] & MASK);
        fail[t] = ft;
        ac->out[t] |= ac->out[ft];
        ac->dict[t] = ac->own[ft] >= 0 ? ft : ac->dict[ft];
        queue[(*tail)++] = t;
        row[c] = (ac->out[t] ? FLAG : 0) | ((uint32_t)t * kk);
    }
    if (ac->nl_class >= 0) row[ac->nl_class] = ac->quiet_nl ? 0 : FLAG;
    if (ac->cr_class >= 0) row[ac->cr_class] = FLAG;
}

/* patterns: n byte strings (data concatenated, lens[i] each); kinds[i]: 0-3 as above.
 * caseless: ASCII letters match either case (the check of kind 2 is case-sensitive in
 * any automaton: those are labels). special: classes of their own for '\n' and '\r'. */
dg_ac *dg_build(const uint8_t *data, const int32_t *lens, const int32_t *kinds, int32_t n,
                int32_t caseless, int32_t special) {
    dg_ac *ac = calloc(1, sizeof(dg_ac));
    if (!ac) return NULL;
    ac->n_patterns = n;
    ac->plen = malloc(sizeof(int32_t) * (n ? n : 1));
    ac->kind = malloc(sizeof(int32_t) * (n ? n : 1));
    ac->bit = malloc(sizeof(int32_t) * (n ? n : 1));
    ac->pat = calloc(n ? n : 1, sizeof(uint8_t *));
    ac->next_own = malloc(sizeof(int32_t) * (n ? n : 1));
    if (!ac->plen || !ac->kind || !ac->bit || !ac->pat || !ac->next_own) { dg_free(ac); return NULL; }
    /* byte classes */
    int used[256] = {0};
    int64_t total = 1;
    const uint8_t *p = data;
    for (int32_t i = 0; i < n; i++) {
        int32_t walked = kinds[i] == 3 && lens[i] > DG_CUT ? DG_CUT : lens[i];
        for (int32_t j = 0; j < walked; j++) used[fold(p[j], caseless)] = 1;
        total += walked;
        p += lens[i];
    }
    int32_t k = 1;
    ac->nl_class = -1;
    ac->cr_class = -1;
    for (int b = 0; b < 256; b++) {
        if (caseless && b >= 'A' && b <= 'Z') continue;
        if (used[b] || (b == '\n') || (special && b == '\r')) ac->cls[b] = (uint8_t)k++;
    }
    if (caseless)
        for (int b = 'A'; b <= 'Z'; b++) ac->cls[b] = ac->cls[b + 32];
    ac->nl_class = ac->cls['\n'];
    if (special) ac->cr_class = ac->cls['\r'];
    ac->quiet_nl = special ? 1 : 0;
    ac->caseless = caseless;
    ac->n_classes = k;
    ac->kinv = ((1ull << 32) + (uint64_t)k - 1) / (uint64_t)k;
    if (k > 255 || total > (int64_t)(MASK / 2)) { dg_free(ac); return NULL; }
    /* the trie is lists of children (below); delta, written once by the breadth-first
     * pass, needs no clearing */
    size_t cells = (size_t)total * (size_t)k;
    ac->delta = malloc(cells * sizeof(uint32_t));
    ac->out = calloc((size_t)total, 1);
    ac->own = malloc(sizeof(int32_t) * (size_t)total);
    ac->dict = malloc(sizeof(int32_t) * (size_t)total);
    ac->depth = malloc(sizeof(int32_t) * (size_t)total);
    int32_t *fail = malloc(sizeof(int32_t) * (size_t)total);
    int32_t *queue = malloc(sizeof(int32_t) * (size_t)total);
    /* each state's children, as a list (the rows are not read back to find them) */
    int32_t *child = malloc(sizeof(int32_t) * (size_t)total);    /* first child */
    int32_t *sibling = malloc(sizeof(int32_t) * (size_t)total);  /* next child of the parent */
    int32_t *edge = malloc(sizeof(int32_t) * (size_t)total);     /* class of the edge in */
#define DG_BUILD_FAIL { free(fail); free(queue); free(child); free(sibling); free(edge); \
                        dg_free(ac); return NULL; }
    if (!ac->delta || !ac->out || !ac->own || !ac->dict || !ac->depth || !fail || !queue ||
        !child || !sibling || !edge) DG_BUILD_FAIL
    for (int64_t s = 0; s < total; s++) { ac->own[s] = -1; ac->dict[s] = -1; child[s] = -1; }
    ac->depth[0] = 0;
    int32_t states = 1, listed = 0;
    p = data;
    for (int32_t i = 0; i < n; i++) {
        int32_t len = lens[i];
        int32_t kind = kinds[i] == 3 && len <= DG_CUT ? 0 : kinds[i];
        int32_t walked = kind == 3 ? DG_CUT : len;
        ac->plen[i] = len;
        ac->kind[i] = kind;
        ac->bit[i] = kind == 2 ? listed++ : -1;
        ac->pat[i] = malloc(len ? (size_t)len : 1);
        if (!ac->pat[i]) DG_BUILD_FAIL
        memcpy(ac->pat[i], p, (size_t)len);
        int32_t s = 0;
        for (int32_t j = 0; j < walked; j++) {
            s = trie_step(child, sibling, edge, ac->depth, s, ac->cls[fold(p[j], caseless)],
                          &states);
        }
        p += len;
        if (len == 0) continue;
        ac->next_own[i] = ac->own[s];
        ac->own[s] = i;
        if (kind == 0) ac->out[s] |= OUT_CAND;
        else if (kind == 1) ac->out[s] |= OUT_CAND | OUT_PREV;
        else if (kind == 3) ac->out[s] |= OUT_CHECK;
        else ac->out[s] |= OUT_LIST;
    }
    /* the tail: the kind 1 and 2 patterns by first byte (candidate automata only) */
    if (special) {
        int32_t cnt[257] = {0};
        int32_t n_tail = 0;
        p = data;
        for (int32_t i = 0; i < n; i++) {
            uint8_t fb[2];
            int m = tail_bytes(p, lens[i], kinds[i], caseless, fb);
            for (int x = 0; x < m; x++) cnt[fb[x]]++;
            n_tail += m;
            if (m && lens[i] > ac->tail_max) ac->tail_max = lens[i];
            p += lens[i];
        }
        if (n_tail) {
            ac->tail_pats = malloc(sizeof(int32_t) * (size_t)n_tail);
            if (!ac->tail_pats) DG_BUILD_FAIL
            ac->tail_at[0] = 0;
            for (int b = 0; b < 256; b++) {
                ac->tail_at[b + 1] = ac->tail_at[b] + cnt[b];
                cnt[b] = ac->tail_at[b];  /* now: the next free slot */
            }
            p = data;
            for (int32_t i = 0; i < n; i++) {
                uint8_t fb[2];
                int m = tail_bytes(p, lens[i], kinds[i], caseless, fb);
                for (int x = 0; x < m; x++) ac->tail_pats[cnt[fb[x]]++] = i;
                p += lens[i];
            }
            ac->n_tail = n_tail;
            /* the filter: each first byte a group (its patterns' second bytes, any byte
             * for a pattern of one; a kind 1 pattern's letters under both cases); while
             * more than 8, the two groups whose merging lets the fewest (byte 0, byte 1)
             * pairs more through the nibble lookups are merged (weighing lower-case
             * letters, digits and spaces, the common bytes of logs, 16 to 1) */
            int n_grp = 0;
            /* per group: the nibbles of byte 0 (low, high) and of byte 1, as bit masks */
            uint16_t lo0m[256], hi0m[256], lo1m[256], hi1m[256];
            for (int b = 0; b < 256; b++) {
                if (ac->tail_at[b] == ac->tail_at[b + 1]) continue;
                int g = n_grp++;
                lo0m[g] = (uint16_t)(1u << (b & 15));
                hi0m[g] = (uint16_t)(1u << (b >> 4));
                lo1m[g] = hi1m[g] = 0;
                for (int32_t t = ac->tail_at[b]; t < ac->tail_at[b + 1]; t++) {
                    int32_t pi = ac->tail_pats[t];
                    if (lens[pi] < 2) { lo1m[g] = hi1m[g] = 0xffff; continue; }
                    uint8_t c1 = ac->pat[pi][1], l1 = fold(c1, caseless);
                    uint8_t v[2] = {c1, c1};
                    if (kinds[pi] == 1 && caseless && l1 >= 'a' && l1 <= 'z') { v[0] = l1; v[1] = (uint8_t)(l1 - 32); }
                    for (int x = 0; x < 2; x++) {
                        lo1m[g] |= (uint16_t)(1u << (v[x] & 15));
                        hi1m[g] |= (uint16_t)(1u << (v[x] >> 4));
                    }
                }
            }
            int32_t merged[256];  /* group -> the group it went into (itself: kept) */
            for (int g = 0; g < n_grp; g++) merged[g] = g;
            for (int left = n_grp; left > 8; left--) {
                double best = 0;
                int bx = -1, by = -1;
                if (left > 32) {  /* (many first bytes: the last two kept merged) */
                    for (int g = n_grp - 1; g >= 0 && (bx < 0 || by < 0); g--)
                        if (merged[g] == g) { if (by < 0) by = g; else bx = g; }
                } else
                for (int x = 0; x < n_grp; x++) {
                    if (merged[x] != x) continue;
                    for (int y = x + 1; y < n_grp; y++) {
                        if (merged[y] != y) continue;
                        double add = nibble_weight(lo0m[x] | lo0m[y], hi0m[x] | hi0m[y]) *
                                     nibble_weight(lo1m[x] | lo1m[y], hi1m[x] | hi1m[y]) -
                                     nibble_weight(lo0m[x], hi0m[x]) * nibble_weight(lo1m[x], hi1m[x]) -
                                     nibble_weight(lo0m[y], hi0m[y]) * nibble_weight(lo1m[y], hi1m[y]);
                        if (bx < 0 || add < best) { best = add; bx = x; by = y; }
                    }
                }
                lo0m[bx] |= lo0m[by]; hi0m[bx] |= hi0m[by];
                lo1m[bx] |= lo1m[by]; hi1m[bx] |= hi1m[by];
                for (int g = 0; g < n_grp; g++) if (merged[g] == by) merged[g] = bx;
            }
            int bucket = 0;
            for (int g = 0; g < n_grp; g++) {
                if (merged[g] != g) continue;
                uint8_t bit = (uint8_t)(1u << bucket++);
                for (int x = 0; x < 16; x++) {
                    if (lo0m[g] >> x & 1) ac->teddy[x] |= bit;
                    if (hi0m[g] >> x & 1) ac->teddy[16 + x] |= bit;
                    if (lo1m[g] >> x & 1) ac->teddy[32 + x] |= bit;
                    if (hi1m[g] >> x & 1) ac->teddy[48 + x] |= bit;
                }
            }
        }
    }
    ac->n_states = states;
    /* breadth first from the root: failure links and the full transition function, each
     * row encoded as it is dequeued. Entries hold the target's row offset (state * classes: no multiply per
     * byte), FLAG set on entries into a state with output and on every entry of the
     * newline / CR classes. A state's output and dictionary link are final when it is
     * queued (its failure state is shallower, queued before it, hence final): so every
     * target of a dequeued row (its children, just queued; the rest, its failure row's
     * targets, queued before) is final, and the row is encoded in the one pass: the
     * failure row (encoded already) copied whole, the children (from their list)
     * written over it. */
    int32_t head = 0, tail = 0;
    int32_t root = 0;
    fail[root] = root;
    encode_row(ac, root, root, child, sibling, edge, fail, queue, &tail);
    while (head < tail) {
        int32_t s = queue[head++];
        encode_row(ac, s, fail[s], child, sibling, edge, fail, queue, &tail);
    }
    free(fail);
    free(queue);
    free(child);
    free(sibling);
    free(edge);
#undef DG_BUILD_FAIL
    return ac;
}

/* The candidate pass. mask: n_lines bytes, set to 1 for each candidate line (the caller
 * zeroes it); nl: offsets of the chunk's n_nl newlines. Returns the labels found as bits
 * (order among the kind-2 patterns, at most 64); lab_count / lab_at (may be NULL): each
 * label's count of occurrences and its first cap start offsets (in no particular order).
 * The chunk is cut at newlines into parts, walked LANES at a time in lock-step (one
 * automaton walk is a chain of dependent loads, several independent ones keep the core
 * busy; a lane that is done takes the next part). */
#define LANES 8
#define PART_BYTES (32 << 10)  /* about; a part ends at a newline */
#define PART_MIN (2 << 10)

typedef struct { int64_t i, end, line; uint32_t s; } lane_t;

/* where the labels occur: per label its count and its first cap positions (in no order) */
typedef struct { int64_t *count, *at; int64_t cap; } label_pos_t;

static inline void label_hit(const dg_ac *ac, int32_t pi, int64_t start, uint64_t *labels,
                             label_pos_t *pos) {
    int32_t bit = ac->bit[pi];
    *labels |= 1ull << bit;
    if (pos) {
        int64_t c = pos->count[bit]++;
        if (c < pos->cap) pos->at[(size_t)bit * pos->cap + c] = start;
    }
}

/* the tail's patterns starting at p that end past `after` and before `to` (the line's end) */
static inline void tail_at(const dg_ac *ac, const uint8_t *buf, int64_t p, int64_t to,
                           int64_t after, int64_t line, uint8_t *mask, int64_t n_lines,
                           uint64_t *labels, label_pos_t *pos) {
    uint8_t b = buf[p];
    for (int32_t t = ac->tail_at[b]; t < ac->tail_at[b + 1]; t++) {
        int32_t pi = ac->tail_pats[t], len = ac->plen[pi];
        if (p + len > to || p + len - 1 <= after) continue;
        const uint8_t *at = buf + p, *pat = ac->pat[pi];
        if (ac->kind[pi] == 2) {
            if (ac->bit[pi] >= 64) continue;
            int32_t j = 0;
            while (j < len && at[j] == pat[j]) j++;
            if (j == len) label_hit(ac, pi, p, labels, pos);
        } else if (line > 0 && line < n_lines && !mask[line - 1]) {
            int32_t j = 0;
            while (j < len && fold(at[j], ac->caseless) == fold(pat[j], ac->caseless)) j++;
            if (j == len) mask[line - 1] = 1;
        }
    }
}

#if defined(__SSE2__)
#include <tmmintrin.h>
/* the starts in [p, to) that pass the tail's filter, 16 at a time while 17 bytes can be
 * read; returns where it stopped */
__attribute__((target("ssse3"))) static int64_t tail_teddy(
        const dg_ac *ac, const uint8_t *buf, int64_t size, int64_t p, int64_t to,
        int64_t after, int64_t line, uint8_t *mask, int64_t n_lines, uint64_t *labels,
        label_pos_t *pos) {
    const __m128i lo0 = _mm_loadu_si128((const __m128i *)(const void *)ac->teddy);
    const __m128i hi0 = _mm_loadu_si128((const __m128i *)(const void *)(ac->teddy + 16));
    const __m128i lo1 = _mm_loadu_si128((const __m128i *)(const void *)(ac->teddy + 32));
    const __m128i hi1 = _mm_loadu_si128((const __m128i *)(const void *)(ac->teddy + 48));
    const __m128i nib = _mm_set1_epi8(0x0f), zero = _mm_setzero_si128();
    for (; p < to && p + 17 <= size; p += 16) {
        __m128i v0 = _mm_loadu_si128((const __m128i *)(const void *)(buf + p));
        __m128i v1 = _mm_loadu_si128((const __m128i *)(const void *)(buf + p + 1));
        __m128i r0 = _mm_and_si128(_mm_shuffle_epi8(lo0, _mm_and_si128(v0, nib)),
                                   _mm_shuffle_epi8(hi0, _mm_and_si128(_mm_srli_epi16(v0, 4), nib)));
        __m128i r1 = _mm_and_si128(_mm_shuffle_epi8(lo1, _mm_and_si128(v1, nib)),
                                   _mm_shuffle_epi8(hi1, _mm_and_si128(_mm_srli_epi16(v1, 4), nib)));
        unsigned bits = ~(unsigned)_mm_movemask_epi8(_mm_cmpeq_epi8(_mm_and_si128(r0, r1), zero))
                        & 0xffffu;
        if (to - p < 16) bits &= (1u << (to - p)) - 1u;
        while (bits) {
            int64_t q = p + __builtin_ctz(bits);
            bits &= bits - 1;
            tail_at(ac, buf, q, to, after, line, mask, n_lines, labels, pos);
        }
    }
    return p;
}
#endif

#if defined(__SSE2__)
static int have_avx2(void) {
    static int have = -1;
    if (have < 0) {
#if defined(__GNUC__) || defined(__clang__)
        __builtin_cpu_init();
        have = __builtin_cpu_supports("avx2") ? 1 : 0;
#else
        have = 0;
#endif
    }
    return have;
}
#endif

static int have_ssse3(void) {
    static int have = -1;
    if (have < 0) {
#if defined(__SSE2__) && (defined(__GNUC__) || defined(__clang__))
        __builtin_cpu_init();
        have = __builtin_cpu_supports("ssse3") ? 1 : 0;
#else
        have = 0;
#endif
    }
    return have;
}

/* The rest of a candidate line, [after + 1, to) (to: its newline, or the chunk's end): the
 * tail's patterns that end there. They start at `from` (the line's start) or later, and a
 * pattern that starts at or before `after` reads the last `read` bytes (the text the main
 * automaton's state has read: what a pattern's prefix ending at `after` is a suffix of).
 * The same reports as an automaton of those patterns walked on from the state that has
 * read the same text: a label's start, a kind 1 pattern's line before. */
static void tail_scan(const dg_ac *ac, const uint8_t *buf, int64_t size, int64_t from,
                      int64_t after, int64_t read, int64_t to, int64_t line, uint8_t *mask,
                      int64_t n_lines, uint64_t *labels, label_pos_t *pos, int ssse3) {
    int64_t p = after + 1 - read;
    if (p < after + 2 - ac->tail_max) p = after + 2 - ac->tail_max;
    if (p < from) p = from;
#if defined(__SSE2__)
    if (ssse3) p = tail_teddy(ac, buf, size, p, to, after, line, mask, n_lines, labels, pos);
#else
    (void)ssse3;
#endif
    for (; p < to; p++)
        if (ac->tail_at[buf[p]] < ac->tail_at[buf[p] + 1])
            tail_at(ac, buf, p, to, after, line, mask, n_lines, labels, pos);
}

/* whether kind 3 pattern pi, whose first DG_CUT bytes end the text at `start` +
 * DG_CUT, goes on there to its end: its rest compared in any ASCII case, on the same
 * line (a newline or a CR, where the walk goes back to the root, ends the match) */
static inline int checked_rest(const dg_ac *ac, const uint8_t *buf, int64_t size,
                               int64_t start, int32_t pi) {
    int32_t len = ac->plen[pi];
    if (start < 0 || start + len > size) return 0;
    const uint8_t *p = ac->pat[pi], *at = buf + start;
    for (int32_t j = DG_CUT; j < len; j++) {
        uint8_t b = at[j];
        if (b == '\n' || b == '\r' || fold(b, ac->caseless) != fold(p[j], ac->caseless))
            return 0;
    }
    return 1;
}

static inline void hit(const dg_ac *ac, const uint8_t *buf, int64_t size, uint8_t *mask,
                       int64_t n_lines, lane_t *L, uint8_t b, uint64_t *labels,
                       label_pos_t *pos, const int64_t *nl, int64_t n_nl, int ssse3) {
    int64_t i = L->i;
    if (b == '\n') {
        int64_t line = ++L->line;
        if (i + 1 < size && line < n_lines) {
            uint8_t nb = buf[i + 1];
            if (nb == ' ' || nb == '\t') { mask[line] = 1; mask[line - 1] = 1; }
            else if (nb == '#' && i + 2 < size && buf[i + 2] >= '0' && buf[i + 2] <= '9')
                mask[line] = 1;
        }
        return;
    }
    /* newlines are not flagged (nl given): the lane's line is brought up to position i
     * where a line is marked (a label's hit needs no line: most hits on a serving log) */
#define DG_LINE_UP                                                   \
    if (nl) {                                                        \
        while (line < n_nl && nl[line] < i) line++;                  \
        L->line = line;                                              \
    }
    int64_t line = L->line;
    if (b == '\r') {
        DG_LINE_UP
        if (i + 1 < size && buf[i + 1] != '\n' && line < n_lines) mask[line] = 1;
        return;
    }
    int32_t st = state_of(ac, L->s);
    uint8_t o = ac->out[st];
    int cand = (o & OUT_CAND) != 0;
    if (o & (OUT_LIST | OUT_CHECK)) {
        int32_t d = ac->own[st] < 0 ? ac->dict[st] : st;
        while (d >= 0) {
            for (int32_t pi = ac->own[d]; pi >= 0; pi = ac->next_own[pi]) {
                int32_t len = ac->plen[pi];
                if (ac->kind[pi] == 2) {
                    if (ac->bit[pi] < 64 && i + 1 >= len &&
                        memcmp(buf + i + 1 - len, ac->pat[pi], (size_t)len) == 0)
                        label_hit(ac, pi, i + 1 - len, labels, pos);
                } else if (ac->kind[pi] == 3 && !cand) {
                    cand = checked_rest(ac, buf, size, i + 1 - DG_CUT, pi);
                }
            }
            d = ac->dict[d];
        }
    }
    if (cand || (o & OUT_PREV)) {
        DG_LINE_UP
        if (line < n_lines) {
            if (cand) mask[line] = 1;
            if ((o & OUT_PREV) && line > 0) mask[line - 1] = 1;
        }
    }
#undef DG_LINE_UP
    /* a candidate line (with newline offsets): its rest is searched for the tail's
     * patterns, and the walk goes on from its newline (the caller's step moves past
     * L->i: the newline is walked, back to the root) */
    if (cand && line < n_lines && nl) {
        int64_t to = line < n_nl ? nl[line] : size;
        if (ac->n_tail) {
            int64_t from = line > 0 ? nl[line - 1] + 1 : 0;
            tail_scan(ac, buf, size, from, i, ac->depth[st], to, line, mask, n_lines, labels,
                      pos, ssse3);
        }
        L->i = to - 1;
        L->s = 0;
    }
}

uint64_t dg_candidates(const dg_ac *ac, const uint8_t *buf, int64_t size, const int64_t *nl,
                       int64_t n_nl, uint8_t *mask, int64_t n_lines, int64_t *lab_count,
                       int64_t *lab_at, int64_t cap) {
    label_pos_t pos_s = {lab_count, lab_at, cap};
    label_pos_t *pos = lab_count ? &pos_s : NULL;
    const uint32_t *delta = ac->delta;
    const uint8_t *cls = ac->cls;
    uint64_t labels = 0;
    /* (the chunk's first line, which no newline precedes, is tested by the caller) */
    if (size <= 0 || n_lines <= 0) return 0;
    const int64_t *qnl = ac->quiet_nl ? nl : NULL;
    const int ssse3 = ac->n_tail ? have_ssse3() : 0;
    if (qnl) {
        /* the lines' starts, from the newline offsets: an indented line (and the line
         * before it), a line starting "#<digit>" */
        for (int64_t j = 0; j < n_nl; j++) {
            int64_t i = nl[j], line = j + 1;
            if (i + 1 >= size || line >= n_lines) continue;
            uint8_t nb = buf[i + 1];
            if (nb == ' ' || nb == '\t') { mask[line] = 1; mask[line - 1] = 1; }
            else if (nb == '#' && i + 2 < size && buf[i + 2] >= '0' && buf[i + 2] <= '9')
                mask[line] = 1;
        }
    }
    /* parts: of PART_BYTES, less near the chunk's end (a 32nd of what is left, at least
     * PART_MIN: the lanes' last parts, walked one by one, are short), each ending after
     * the first newline past its length (the newline ending a part belongs to it: the
     * next part starts on the line after) */
    int64_t start = 0, start_line = 0;  /* the next part's start and first line */
#define NEXT_PART(L)                                                                  \
    {                                                                                 \
        int64_t len = (size - start) / 32, end = size, lo = n_nl;                     \
        if (len > PART_BYTES) len = PART_BYTES;                                       \
        if (len < PART_MIN) len = PART_MIN;                                           \
        if (start + len < size) {                                                     \
            int64_t want = start + len, hi = n_nl;                                    \
            lo = start_line;                                                          \
            while (lo < hi) { int64_t mid = (lo + hi) / 2; if (nl[mid] < want) lo = mid + 1; else hi = mid; } \
            if (lo < n_nl) end = nl[lo] + 1;                                          \
        }                                                                             \
        (L)->i = start; (L)->end = end; (L)->line = start_line; (L)->s = 0;           \
        start = end;                                                                  \
        start_line = lo < n_nl ? lo + 1 : n_nl;                                       \
    }
    lane_t lane[LANES];
    for (int j = 0; j < LANES; j++) {  /* (empty: each takes its first part below) */
        lane[j].i = lane[j].end = 0; lane[j].line = 0; lane[j].s = 0;
    }
    /* The 8 lanes' positions and states are locals in one lock-step loop (8 walks in
     * flight: 10-20% faster than two rounds of 4, the table's rows mostly come from L2);
     * a flagged entry (CR, output; a newline only in an automaton without quiet_nl)
     * goes through hit() with its lane, which brings the lane's line number up to its
     * position from the newline offsets, and may move the lane on to its line's end
     * (the loop then stops early enough that no lane runs past its part). Each round
     * ends when a lane's part is done; that lane takes the next part; once none is
     * left, the lanes' rests are walked one by one. */
    lane_t *A = &lane[0], *B = &lane[1], *C = &lane[2], *D = &lane[3];
    lane_t *E = &lane[4], *F = &lane[5], *G = &lane[6], *H = &lane[7];
    for (;;) {
        int full = 1;
        for (int j = 0; j < LANES; j++) {
            while (lane[j].i >= lane[j].end && start < size) NEXT_PART(&lane[j])
            if (lane[j].i >= lane[j].end) full = 0;
        }
        if (!full) break;
        int64_t steps = A->end - A->i;
        for (int j = 1; j < LANES; j++)
            if (lane[j].end - lane[j].i < steps) steps = lane[j].end - lane[j].i;
        int64_t ia = A->i, ib = B->i, ic = C->i, id = D->i;
        int64_t ie = E->i, ig = F->i, ih = G->i, ij = H->i;
        uint32_t sa = A->s, sb = B->s, sc = C->s, sd = D->s;
        uint32_t se = E->s, sf = F->s, sg = G->s, sh = H->s;
        for (int64_t n = 0; n < steps; n++) {
#define DG_STEP(L, I, S)                                                        \
            {                                                                   \
                uint8_t b = buf[I];                                             \
                uint32_t t = delta[S + cls[b]];                                 \
                S = t & MASK;                                                   \
                if (__builtin_expect(t & FLAG, 0)) {                            \
                    L->i = I; L->s = S;                                         \
                    hit(ac, buf, size, mask, n_lines, L, b, &labels, pos, qnl, n_nl, ssse3);   \
                    S = L->s;                                                   \
                    if (L->i != I) {                                            \
                        I = L->i;                                               \
                        if (n + (L->end - I) < steps) steps = n + (L->end - I); \
                    }                                                           \
                }                                                               \
                I++;                                                            \
            }
            DG_STEP(A, ia, sa) DG_STEP(B, ib, sb) DG_STEP(C, ic, sc) DG_STEP(D, id, sd)
            DG_STEP(E, ie, se) DG_STEP(F, ig, sf) DG_STEP(G, ih, sg) DG_STEP(H, ij, sh)
#undef DG_STEP
        }
        A->i = ia; B->i = ib; C->i = ic; D->i = id;
        A->s = sa; B->s = sb; C->s = sc; D->s = sd;
        E->i = ie; F->i = ig; G->i = ih; H->i = ij;
        E->s = se; F->s = sf; G->s = sg; H->s = sh;
    }
#undef NEXT_PART
    for (int j = 0; j < LANES; j++) {
        while (lane[j].i < lane[j].end) {
            uint8_t b = buf[lane[j].i];
            uint32_t t = delta[lane[j].s + cls[b]];
            lane[j].s = t & MASK;
            if (t & FLAG) hit(ac, buf, size, mask, n_lines, &lane[j], b, &labels, pos, qnl, n_nl, ssse3);
            lane[j].i++;
        }
    }
    return labels;
}

/* The start offset of each pattern's last occurrence in buf on a line whose dropped[] byte
 * is 0 (dropped may be NULL), or -1. The automaton holds the patterns reversed (built
 * case-sensitive): the chunk is walked backwards, cut at line starts into LANES parts
 * walked in lock-step (a pattern's last occurrence is the one of the highest part that
 * has one); a dropped line is jumped over whole. Stops once the answer is known for every
 * pattern. nl: offsets of the n_nl newlines. ignore (may be NULL): patterns known to be
 * absent (the caller checked): -1, and not waited for. Returns how many were found. */
typedef struct { int64_t p, lo, line; uint32_t s; int done; } back_t;

static inline void back_hit(const dg_ac *ac, const int64_t *nl, const uint8_t *dropped,
                            int64_t *found, int32_t n, int64_t first_line, back_t *L,
                            uint8_t b, uint32_t s, int j) {
    L->s = s;
    if (b == '\n') {
        /* the newline ending the line before: step onto that line */
        L->line--;
        L->s = 0;
        if (dropped && dropped[L->line]) {
            /* jump: the next byte read is the newline ending the line before it */
            L->p = (L->line > first_line ? nl[L->line - 1] : L->lo - 1) + 1;
        }
        return;
    }
    int32_t st = state_of(ac, s);
    if (ac->own[st] < 0) st = ac->dict[st];
    while (st >= 0) {
        for (int32_t pi = ac->own[st]; pi >= 0; pi = ac->next_own[pi]) {
            int64_t *f = &found[(size_t)j * n + pi];
            if (*f < 0) *f = L->p;
        }
        st = ac->dict[st];
    }
}

/* whether every pattern's answer is known: found in a part with every part above it done
 * or holding the pattern too */
static int back_known(const int64_t *found, int32_t n, const back_t *lane,
                      const uint8_t *ignore) {
    for (int32_t pi = 0; pi < n; pi++) {
        if (ignore && ignore[pi]) continue;
        for (int j = LANES - 1; j >= 0; j--) {
            if (found[(size_t)j * n + pi] >= 0) break;
            if (!lane[j].done) return 0;
        }
    }
    return 1;
}

int32_t dg_last(const dg_ac *ac, const uint8_t *buf, int64_t size, const int64_t *nl,
                int64_t n_nl, const uint8_t *dropped, const uint8_t *ignore, int64_t *out) {
    const uint32_t *delta = ac->delta;
    const uint8_t *cls = ac->cls;
    const int32_t n = ac->n_patterns;
    for (int32_t i = 0; i < n; i++) out[i] = -1;
    if (n <= 0 || size <= 0) return 0;
    if (ignore) {
        int32_t live = 0;
        for (int32_t i = 0; i < n; i++) live += !ignore[i];
        if (!live) return 0;
    }
    int64_t *found = malloc(sizeof(int64_t) * (size_t)n * LANES);
    if (!found) return -1;
    for (int64_t i = 0; i < (int64_t)n * LANES; i++) found[i] = -1;
    int64_t n_lines = (n_nl > 0 && nl[n_nl - 1] == size - 1) ? n_nl : n_nl + 1;
    /* part j: lines [first_j, first_{j+1}); lane j starts at its last byte */
    back_t lane[LANES];
    int64_t first_line[LANES + 1];
    for (int j = 0; j <= LANES; j++) first_line[j] = (n_lines * j) / LANES;
    for (int j = 0; j < LANES; j++) {
        int64_t fl = first_line[j], ll = first_line[j + 1] - 1;  /* first, last line */
        back_t *L = &lane[j];
        L->s = 0;
        L->done = ll < fl;
        if (L->done) continue;
        L->lo = fl > 0 ? nl[fl - 1] + 1 : 0;
        L->line = ll;
        /* the last line's last byte that is not its newline */
        int64_t end = ll < n_nl ? nl[ll] : size;
        L->p = end - 1;
        if (dropped && dropped[ll]) {
            /* jump to the newline ending the line before (or past the part) */
            L->p = ll > fl ? nl[ll - 1] : L->lo - 1;
        }
        if (L->p < L->lo) L->done = 1;
    }
    int32_t got = 0;
    /* one lane's step at its position P and state S (locals of the loop below); a flagged
     * entry is a newline (onto the line before, jumped over when dropped) or an output */
#define DG_BACK(J, P, S)                                                           \
    if (!lane[J].done) {                                                           \
        uint8_t b = buf[P];                                                        \
        uint32_t t = delta[S + cls[b]];                                            \
        S = t & MASK;                                                              \
        if (t & FLAG) {                                                            \
            lane[J].p = P;                                                         \
            back_hit(ac, nl, dropped, found, n, first_line[J], &lane[J], b, S, J); \
            P = lane[J].p;                                                         \
            S = lane[J].s;                                                         \
        }                                                                          \
        if (--P < lane[J].lo) lane[J].done = 1;                                    \
    }
    /* the upper parts first: a pattern found there needs nothing below */
    for (int base = LANES - 4; base >= 0; base -= 4) {
        if (back_known(found, n, lane, ignore)) break;
        int64_t p0 = lane[base].p, p1 = lane[base + 1].p, p2 = lane[base + 2].p,
                p3 = lane[base + 3].p;
        uint32_t s0 = 0, s1 = 0, s2 = 0, s3 = 0;
        for (int64_t step = 0;; step++) {
            if (lane[base].done & lane[base + 1].done & lane[base + 2].done & lane[base + 3].done)
                break;
            DG_BACK(base, p0, s0) DG_BACK(base + 1, p1, s1) DG_BACK(base + 2, p2, s2)
            DG_BACK(base + 3, p3, s3)
            if ((step & 1023) == 1023 && back_known(found, n, lane, ignore)) break;
        }
    }
#undef DG_BACK
    for (int32_t pi = 0; pi < n; pi++) {
        if (ignore && ignore[pi]) continue;
        for (int j = LANES - 1; j >= 0; j--) {
            int64_t f = found[(size_t)j * n + pi];
            if (f >= 0) { out[pi] = f; got++; break; }
        }
    }
    free(found);
    return got;
}

/* dg_last's answer by one backward walk that skips the text where no pattern can end:
 * every occurrence of a (reversed) pattern of 2 bytes or more begins, in the walk's order,
 * with one of the patterns' first two bytes (a key's last two: "] ", ") ", "]:"), so from
 * the root the walk jumps, 16 bytes at a time (SSE2), to the next place that holds such a
 * pair, runs the automaton from there, and goes back to jumping once it is back at the
 * root or at a first byte alone (then read again). Up to that place the automaton would
 * have stayed at the root or at a first byte, with no output: the answer is dg_last's
 * (the tests compare them), at a fraction of the bytes walked on a log whose keys are
 * mostly absent from a chunk (the walk then runs to the chunk's start). Lines dropped are
 * jumped over whole (no pattern holds a newline: a run of lines not dropped is walked as
 * one text). A pattern of one byte, a caseless automaton or more than 4 distinct first or
 * second bytes: dg_last itself. */
#if defined(__SSE2__)
static int64_t back_pair(const uint8_t *buf, int64_t lo, int64_t q, const uint8_t *pairs,
                         const __m128i *va, int na, const __m128i *vb, int nb) {
    /* the highest position q' in [lo + 1, q] whose byte and the byte before it are a pair */
    while (q - 16 >= lo) {
        __m128i v1 = _mm_loadu_si128((const __m128i *)(const void *)(buf + q - 15));
        __m128i v2 = _mm_loadu_si128((const __m128i *)(const void *)(buf + q - 16));
        __m128i m1 = _mm_cmpeq_epi8(v1, va[0]), m2 = _mm_cmpeq_epi8(v2, vb[0]);
        for (int i = 1; i < na; i++) m1 = _mm_or_si128(m1, _mm_cmpeq_epi8(v1, va[i]));
        for (int i = 1; i < nb; i++) m2 = _mm_or_si128(m2, _mm_cmpeq_epi8(v2, vb[i]));
        unsigned mask = (unsigned)_mm_movemask_epi8(_mm_and_si128(m1, m2));
        while (mask) {
            int bit = 31 - __builtin_clz(mask);
            int64_t at = q - 15 + bit;
            if (pairs[(size_t)buf[at] * 32 + (buf[at - 1] >> 3)] >> (buf[at - 1] & 7) & 1)
                return at;
            mask &= ~(1u << bit);
        }
        q -= 16;
    }
    for (; q >= lo + 1; q--)
        if (pairs[(size_t)buf[q] * 32 + (buf[q - 1] >> 3)] >> (buf[q - 1] & 7) & 1) return q;
    return -1;
}

int32_t dg_last_skip(const dg_ac *ac, const uint8_t *buf, int64_t size, const int64_t *nl,
                     int64_t n_nl, const uint8_t *dropped, const uint8_t *ignore,
                     int64_t *out) {
    const int32_t n = ac->n_patterns;
    if (ac->caseless || n <= 0 || size <= 0)
        return dg_last(ac, buf, size, nl, n_nl, dropped, ignore, out);
    uint8_t pairs[256 * 32];
    uint8_t in_a[256] = {0}, in_b[256] = {0};
    memset(pairs, 0, sizeof pairs);
    int na = 0, nb = 0;
    uint8_t la[4], lb[4];
    for (int32_t i = 0; i < n; i++) {
        if (ac->plen[i] < 2) return dg_last(ac, buf, size, nl, n_nl, dropped, ignore, out);
        uint8_t c1 = ac->pat[i][0], c2 = ac->pat[i][1];
        pairs[(size_t)c1 * 32 + (c2 >> 3)] |= (uint8_t)(1u << (c2 & 7));
        if (!in_a[c1]) {
            if (na == 4) return dg_last(ac, buf, size, nl, n_nl, dropped, ignore, out);
            in_a[c1] = 1; la[na++] = c1;
        }
        if (!in_b[c2]) {
            if (nb == 4) return dg_last(ac, buf, size, nl, n_nl, dropped, ignore, out);
            in_b[c2] = 1; lb[nb++] = c2;
        }
    }
    __m128i va[4], vb[4];
    for (int i = 0; i < na; i++) va[i] = _mm_set1_epi8((char)la[i]);
    for (int i = 0; i < nb; i++) vb[i] = _mm_set1_epi8((char)lb[i]);
    const uint32_t *delta = ac->delta;
    const uint8_t *cls = ac->cls;
    int32_t remaining = 0;
    for (int32_t i = 0; i < n; i++) {
        out[i] = -1;
        remaining += !(ignore && ignore[i]);
    }
    int64_t n_lines = (n_nl > 0 && nl[n_nl - 1] == size - 1) ? n_nl : n_nl + 1;
    int64_t line = n_lines - 1;
    while (line >= 0 && remaining > 0) {
        if (dropped && dropped[line]) { line--; continue; }
        int64_t first = line;  /* the run of lines not dropped: [first, line] */
        while (first > 0 && !(dropped && dropped[first - 1])) first--;
        int64_t lo = first > 0 ? nl[first - 1] + 1 : 0;
        int64_t p = (line < n_nl ? nl[line] : size) - 1;
        line = first - 1;
        while (p >= lo + 1 && remaining > 0) {
            p = back_pair(buf, lo, p, pairs, va, na, vb, nb);
            if (p < 0) break;
            uint32_t s = 0;
            for (int steps = 1;; steps++) {
                uint8_t b = buf[p];
                uint32_t t = delta[s + cls[b]];
                s = t & MASK;
                if ((t & FLAG) && b != '\n') {
                    int32_t st = state_of(ac, s);
                    if (ac->own[st] < 0) st = ac->dict[st];
                    while (st >= 0) {
                        for (int32_t pi = ac->own[st]; pi >= 0; pi = ac->next_own[pi]) {
                            if (out[pi] < 0) {
                                out[pi] = p;
                                remaining -= !(ignore && ignore[pi]);
                            }
                        }
                        st = ac->dict[st];
                    }
                }
                if (--p < lo) break;
                if (steps >= 2 && s == (delta[cls[b]] & MASK)) {
                    if (s) p++;  /* at a first byte alone: read it again from the root */
                    break;
                }
            }
        }
    }
    int32_t got = 0;
    for (int32_t i = 0; i < n; i++) {
        if (ignore && ignore[i]) out[i] = -1;
        else got += out[i] >= 0;
    }
    return got;
}
#else
int32_t dg_last_skip(const dg_ac *ac, const uint8_t *buf, int64_t size, const int64_t *nl,
                     int64_t n_nl, const uint8_t *dropped, const uint8_t *ignore,
                     int64_t *out) {
    return dg_last(ac, buf, size, nl, n_nl, dropped, ignore, out);
}
#endif

/* Which patterns occur on which line of buf (lines cut at '\n'): each (line, pattern) pair
 * once, in order of the pattern's first end on the line, into out_line / out_pat (at most
 * cap pairs written). The automaton is built without special (a newline goes to the root,
 * flagged) and holds no pattern with a newline. Returns the number of pairs (more than cap:
 * call again with room for them), or -1 when out of memory. */
int64_t dg_hits(const dg_ac *ac, const uint8_t *buf, int64_t size, int64_t *out_line,
                int32_t *out_pat, int64_t cap) {
    const uint32_t *delta = ac->delta;
    const uint8_t *cls = ac->cls;
    const int32_t n = ac->n_patterns;
    if (n <= 0 || size <= 0) return 0;
    int64_t *seen = malloc(sizeof(int64_t) * (size_t)n);  /* per pattern: last line reported */
    if (!seen) return -1;
    for (int32_t i = 0; i < n; i++) seen[i] = -1;
    int64_t line = 0, got = 0;
    uint32_t s = 0;
    for (int64_t i = 0; i < size; i++) {
        uint8_t b = buf[i];
        uint32_t t = delta[s + cls[b]];
        s = t & MASK;
        if (__builtin_expect(!(t & FLAG), 1)) continue;
        if (b == '\n') { line++; s = 0; continue; }
        int32_t st = state_of(ac, s);
        if (ac->own[st] < 0) st = ac->dict[st];
        while (st >= 0) {
            for (int32_t pi = ac->own[st]; pi >= 0; pi = ac->next_own[pi]) {
                if (seen[pi] == line) continue;
                seen[pi] = line;
                if (got < cap) { out_line[got] = line; out_pat[got] = pi; }
                got++;
            }
            st = ac->dict[st];
        }
    }
    free(seen);
    return got;
}

/* Kind hash of each line [starts[i], ends[i]): its first 160 bytes with the digits
 * deleted, hashed to 64 bits: the kept bytes are packed 8 to a word and each word mixed
 * in (xor, multiply, rotate), the count of kept bytes last, then a final avalanche. Runs
 * of 8 bytes without a digit (found with a word-wide test) are appended in one step. */
static inline uint64_t mix(uint64_t h, uint64_t w) {
    h = (h ^ w) * 0x9e3779b97f4a7c15ull;
    return (h << 29) | (h >> 35);
}

/* 0x80 in each byte of x that is an ASCII digit, 0 elsewhere (exact per byte: no carry
 * crosses a byte) */
static inline uint64_t digit_bytes(uint64_t x) {
    uint64_t y = x ^ 0x3030303030303030ull;  /* digits become bytes 0..9 */
    uint64_t t = (y & 0x7f7f7f7f7f7f7f7full) + 0x7676767676767676ull;  /* bit 7: >= 10 */
    return ~(t | y) & 0x8080808080808080ull;
}

/* the kept bytes of word x (those not marked in the digit mask d) packed low, and how
 * many: one by one (portable), or with one byte shuffle (SSSE3, chosen at run time) */
static inline uint64_t pack_plain(uint64_t x, uint64_t d, unsigned *nk) {
    uint64_t packed = 0;
    unsigned k = 0;
    for (uint64_t keep = ~d & 0x8080808080808080ull; keep; keep &= keep - 1, k++)
        packed |= ((x >> (__builtin_ctzll(keep) - 7)) & 0xff) << (8 * k);
    *nk = k;
    return packed;
}

#define KINDS_BODY(PACK)                                                                \
    for (int64_t i = 0; i < n; i++) {                                                   \
        int64_t a = starts[i], b = ends[i];                                             \
        if (b - a > 160) b = a + 160;                                                   \
        uint64_t h = 0x243f6a8885a308d3ull, w = 0;                                      \
        unsigned fill = 0;                                                              \
        uint64_t kept = 0;                                                              \
        int64_t j = a;                                                                  \
        /* a word of 8 bytes at a time: without a digit, appended in one step; with    \
         * some, its other bytes packed and appended together */                        \
        for (; b - j >= 8; j += 8) {                                                    \
            uint64_t x;                                                                 \
            memcpy(&x, buf + j, 8);                                                     \
            uint64_t d = digit_bytes(x);                                                \
            if (!d) {                                                                   \
                if (fill == 0) {                                                        \
                    h = mix(h, x);                                                      \
                } else {                                                                \
                    w |= x << (8 * fill);                                               \
                    h = mix(h, w);                                                      \
                    w = x >> (64 - 8 * fill);                                           \
                }                                                                       \
                kept += 8;                                                              \
                continue;                                                               \
            }                                                                           \
            unsigned nk;                                                                \
            uint64_t packed = PACK(x, d, &nk);                                          \
            if (!nk) continue;                                                          \
            w |= packed << (8 * fill);                                                  \
            if (fill + nk >= 8) {                                                       \
                /* (nk < 8: a word with a digit; so 8 - fill < 8) */                    \
                h = mix(h, w);                                                          \
                w = packed >> (8 * (8 - fill));                                         \
                fill = fill + nk - 8;                                                   \
            } else {                                                                    \
                fill += nk;                                                             \
            }                                                                           \
            kept += nk;                                                                 \
        }                                                                               \
        for (; j < b; j++) {                                                            \
            uint8_t c = buf[j];                                                         \
            if ((uint8_t)(c - '0') < 10) continue;                                      \
            w |= (uint64_t)c << (8 * fill);                                             \
            if (++fill == 8) { h = mix(h, w); w = 0; fill = 0; }                        \
            kept++;                                                                     \
        }                                                                               \
        h = mix(h, w);                                                                  \
        h = mix(h, kept);                                                               \
        h ^= h >> 31; h *= 0xd6e8feb86659fd93ull; h ^= h >> 32;                         \
        out[i] = h;                                                                     \
    }

static void kinds_plain(const uint8_t *buf, const int64_t *starts, const int64_t *ends,
                        int64_t n, uint64_t *out) {
    KINDS_BODY(pack_plain)
}

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <tmmintrin.h>
#define DG_SHUFFLE 1
static uint8_t pack_ctl[256][16];  /* per keep mask: the kept bytes' indices, then 0x80 */
static uint8_t pack_n[256];        /* per keep mask: how many bytes it keeps */

/* the kept bytes (bit j of m: byte j kept) of word x packed low, by one byte shuffle */
__attribute__((target("ssse3"))) static inline uint64_t pack_ssse3(uint64_t x, unsigned m) {
    __m128i ctl = _mm_loadu_si128((const __m128i *)(const void *)pack_ctl[m]);
    return (uint64_t)_mm_cvtsi128_si64(_mm_shuffle_epi8(_mm_cvtsi64_si128((long long)x), ctl));
}

/* bit j set when byte j of x is no ASCII digit */
static inline unsigned keep_bits(uint64_t x) {
    uint64_t k = ~digit_bytes(x) & 0x8080808080808080ull;
    return (unsigned)((k * 0x0002040810204081ull) >> 56) & 0xffu;
}

/* KINDS_BODY's hash, computed in two steps (the same words mixed in, so the same hashes:
 * the tests compare them with dg_kinds_plain's): the line's kept bytes are first packed
 * into a buffer, 16 bytes at a time (the digits found with SSE2; each half's kept bytes
 * shuffled together and stored at the write position, which then advances by their
 * number), then hashed 8 at a time. Packing this way has no chain of shifts and no branch
 * per word that depends on the text (KINDS_BODY's were mostly mispredicted on log text):
 * about 2x faster on the real-corpus mix. A line's last bytes (fewer than 8) are read as
 * the 8-byte word that ends the line, shifted down (never a byte past the line). */
/* the hash of a line's packed bytes (row: pos of them, then at least 8 more readable),
 * its first q (a multiple of 8) mixed into h already */
static inline uint64_t kind_hash_from(const uint8_t *row, unsigned pos, unsigned q,
                                      uint64_t h) {
    uint64_t w = 0;
    for (; q + 8 <= pos; q += 8) {
        memcpy(&w, row + q, 8);
        h = mix(h, w);
    }
    w = 0;
    if (q < pos) {
        memcpy(&w, row + q, 8);
        w &= ~(uint64_t)0 >> (8 * (8 - (pos - q)));
    }
    h = mix(h, w);
    h = mix(h, (uint64_t)pos);
    h ^= h >> 31; h *= 0xd6e8feb86659fd93ull; h ^= h >> 32;
    return h;
}

#define KINDS_BATCH 32  /* lines packed before any is hashed */
#define KINDS_ROW 176    /* a line's packed bytes: at most 160, and a word stored past them */

__attribute__((target("ssse3"))) static void kinds_ssse3(const uint8_t *buf,
                                                         const int64_t *starts,
                                                         const int64_t *ends, int64_t n,
                                                         uint64_t *out) {
    /* (the lines of a batch are all packed first: a word hashed right after the stores
     * that packed it would wait for them, as it spans two) */
    uint8_t tmp[KINDS_BATCH][KINDS_ROW];
    unsigned lens[KINDS_BATCH];
    memset(tmp, 0, sizeof tmp);  /* (a word read past the packed bytes is masked) */
    const __m128i zero = _mm_set1_epi8('0'), nine = _mm_set1_epi8(9);
    for (int64_t i0 = 0; i0 < n; i0 += KINDS_BATCH) {
        int64_t m = n - i0 < KINDS_BATCH ? n - i0 : KINDS_BATCH;
        for (int64_t r0 = 0; r0 < m; r0++) {
            uint8_t *row = tmp[r0];
            int64_t a = starts[i0 + r0], b = ends[i0 + r0];
            if (i0 + r0 + 8 < n) {  /* (a line a few on, fetched meanwhile: 1.5x on spam) */
                __builtin_prefetch(buf + starts[i0 + r0 + 8]);
                __builtin_prefetch(buf + starts[i0 + r0 + 8] + 64);
            }
            if (b - a > 160) b = a + 160;
            unsigned pos = 0;
            int64_t j = a;
            for (; b - j >= 16; j += 16) {
                __m128i v = _mm_loadu_si128((const __m128i *)(const void *)(buf + j));
                __m128i d = _mm_sub_epi8(v, zero);
                __m128i digit = _mm_cmpeq_epi8(_mm_min_epu8(d, nine), d);  /* d <= 9 */
                unsigned keep = ~(unsigned)_mm_movemask_epi8(digit) & 0xffffu;
                unsigned m0 = keep & 0xffu, m1 = keep >> 8;
                __m128i c0 = _mm_loadu_si128((const __m128i *)(const void *)pack_ctl[m0]);
                __m128i c1 = _mm_loadu_si128((const __m128i *)(const void *)pack_ctl[m1]);
                uint64_t p0 = (uint64_t)_mm_cvtsi128_si64(_mm_shuffle_epi8(v, c0));
                uint64_t p1 = (uint64_t)_mm_cvtsi128_si64(
                    _mm_shuffle_epi8(_mm_srli_si128(v, 8), c1));
                memcpy(row + pos, &p0, 8);
                pos += pack_n[m0];
                memcpy(row + pos, &p1, 8);
                pos += pack_n[m1];
            }
            if (b - j >= 8) {
                uint64_t x;
                memcpy(&x, buf + j, 8);
                unsigned k = keep_bits(x);
                uint64_t pk = pack_ssse3(x, k);
                memcpy(row + pos, &pk, 8);
                pos += pack_n[k];
                j += 8;
            }
            int64_t r = b - j;
            if (r > 0 && b - a >= 8) {
                uint64_t x;
                memcpy(&x, buf + b - 8, 8);
                x >>= 8 * (8 - r);
                unsigned k = keep_bits(x) & ((1u << r) - 1u);
                uint64_t pk = pack_ssse3(x, k);
                memcpy(row + pos, &pk, 8);
                pos += pack_n[k];
            } else {
                for (; j < b; j++) {
                    uint8_t c = buf[j];
                    if ((uint8_t)(c - '0') >= 10) row[pos++] = c;
                }
            }
            lens[r0] = pos;
        }
        /* two lines' hashes at a time (each is a chain of multiplies: two keep the
         * core busy) */
        int64_t r0 = 0;
        for (; r0 + 1 < m; r0 += 2) {
            const uint8_t *ra = tmp[r0], *rb = tmp[r0 + 1];
            unsigned pa = lens[r0], pb = lens[r0 + 1];
            unsigned both = (pa < pb ? pa : pb) & ~7u;
            uint64_t ha = 0x243f6a8885a308d3ull, hb = ha, wa, wb;
            for (unsigned q = 0; q < both; q += 8) {
                memcpy(&wa, ra + q, 8);
                memcpy(&wb, rb + q, 8);
                ha = mix(ha, wa);
                hb = mix(hb, wb);
            }
            out[i0 + r0] = kind_hash_from(ra, pa, both, ha);
            out[i0 + r0 + 1] = kind_hash_from(rb, pb, both, hb);
        }
        if (r0 < m) out[i0 + r0] = kind_hash_from(tmp[r0], lens[r0], 0, 0x243f6a8885a308d3ull);
    }
}
#endif

/* Kind hashes; the same with either packing (the tests compare them with the kinds'
 * bytes) */
void dg_kinds(const uint8_t *buf, const int64_t *starts, const int64_t *ends, int64_t n,
              uint64_t *out) {
#ifdef DG_SHUFFLE
    static int have = -1;
    if (have < 0) {
        for (int m = 0; m < 256; m++) {
            int k = 0;
            for (int j = 0; j < 8; j++)
                if (m >> j & 1) pack_ctl[m][k++] = (uint8_t)j;
            pack_n[m] = (uint8_t)k;
            while (k < 16) pack_ctl[m][k++] = 0x80;
        }
        __builtin_cpu_init();
        have = __builtin_cpu_supports("ssse3") ? 1 : 0;
    }
    if (have) { kinds_ssse3(buf, starts, ends, n, out); return; }
#endif
    kinds_plain(buf, starts, ends, n, out);
}

/* the portable packing alone (the tests compare it with the one chosen at run time) */
void dg_kinds_plain(const uint8_t *buf, const int64_t *starts, const int64_t *ends, int64_t n,
                    uint64_t *out) {
    kinds_plain(buf, starts, ends, n, out);
}

/* The offsets of the newlines of buf into out (room for n_out); returns how many there
 * are (when more than n_out, only the first n_out were written). With SSE2 (every x86-64)
 * 32 bytes are compared at a time and the newlines read from the bit mask: on short lines
 * a memchr call per line cost more than the scan. flags (may be NULL): bit 0 set when
 * buf may hold a NUL byte, bit 1 when it may hold a byte past ASCII (exact with SSE2; both
 * set without it): the caller skips its NUL count and UTF-8 check on plain ASCII. */
/* Validates the UTF-8 sequences that start in [i, to) of buf (one may run past to, up to
 * size) as Python's strict decoder reads them (no overlong forms, no surrogates, nothing
 * past U+10FFFF): the offset after the last one, or -1 at the first invalid one. */
static int64_t utf8_run(const uint8_t *buf, int64_t i, int64_t to, int64_t size) {
    while (i < to) {
        /* ASCII 8 bytes at a time */
        while (i + 8 <= to) {
            uint64_t w;
            memcpy(&w, buf + i, 8);
            if (w & 0x8080808080808080ull) break;
            i += 8;
        }
        if (i >= to) break;
        uint8_t c = buf[i];
        if (c < 0x80) { i++; continue; }
        if (c >= 0xC2 && c <= 0xDF) {
            if (i + 1 >= size || (buf[i + 1] & 0xC0) != 0x80) return -1;
            i += 2;
        } else if (c >= 0xE0 && c <= 0xEF) {
            if (i + 2 >= size) return -1;
            uint8_t c1 = buf[i + 1], c2 = buf[i + 2];
            if ((c1 & 0xC0) != 0x80 || (c2 & 0xC0) != 0x80) return -1;
            if (c == 0xE0 && c1 < 0xA0) return -1;  /* overlong */
            if (c == 0xED && c1 > 0x9F) return -1;  /* surrogate */
            i += 3;
        } else if (c >= 0xF0 && c <= 0xF4) {
            if (i + 3 >= size) return -1;
            uint8_t c1 = buf[i + 1], c2 = buf[i + 2], c3 = buf[i + 3];
            if ((c1 & 0xC0) != 0x80 || (c2 & 0xC0) != 0x80 || (c3 & 0xC0) != 0x80) return -1;
            if (c == 0xF0 && c1 < 0x90) return -1;  /* overlong */
            if (c == 0xF4 && c1 > 0x8F) return -1;  /* past U+10FFFF */
            i += 4;
        } else {
            return -1;
        }
    }
    return i;
}

/* 1 when buf is valid UTF-8 as Python's strict decoder reads it, else 0. */
int32_t dg_utf8_valid(const uint8_t *buf, int64_t size) {
    return utf8_run(buf, 0, size, size) >= 0;
}

/* The newline offsets of buf (up to n_out written; returns how many there are) and, in
 * *flags (when not NULL): bit 0 set when buf may hold a NUL byte, bit 1 when a byte past
 * ASCII, bit 2 when buf is known to be valid UTF-8 (the 32-byte blocks holding a byte
 * past ASCII are validated in the same pass: a chunk of a real log holds a few, and a
 * second pass over it for them cost more than the newlines' own). */
int64_t dg_newlines_flags(const uint8_t *buf, int64_t size, int64_t *out, int64_t n_out,
                          int32_t *flags) {
    int64_t n = 0, i = 0;
    int32_t f = 3;
#if defined(__SSE2__)
    const __m128i nlv = _mm_set1_epi8('\n');
    const __m128i zero = _mm_setzero_si128();
    __m128i anyz = zero, anyhi = zero;
    int64_t valid = 0;  /* the UTF-8 sequences before this offset are valid (-1: not all) */
    for (; i + 32 <= size; i += 32) {
        __m128i a = _mm_loadu_si128((const __m128i *)(const void *)(buf + i));
        __m128i b = _mm_loadu_si128((const __m128i *)(const void *)(buf + i + 16));
        if (flags) {
            __m128i hi = _mm_or_si128(a, b);
            anyz = _mm_or_si128(anyz, _mm_or_si128(_mm_cmpeq_epi8(a, zero),
                                                   _mm_cmpeq_epi8(b, zero)));
            anyhi = _mm_or_si128(anyhi, hi);
            if (__builtin_expect(_mm_movemask_epi8(hi) != 0, 0) && valid >= 0 && valid < i + 32)
                valid = utf8_run(buf, valid > i ? valid : i, i + 32, size);
        }
        uint32_t m = (uint32_t)_mm_movemask_epi8(_mm_cmpeq_epi8(a, nlv)) |
                     ((uint32_t)_mm_movemask_epi8(_mm_cmpeq_epi8(b, nlv)) << 16);
        while (m) {
            if (n < n_out) out[n] = i + __builtin_ctz(m);
            n++;
            m &= m - 1;
        }
    }
    f = (_mm_movemask_epi8(anyz) ? 1 : 0) | (_mm_movemask_epi8(anyhi) ? 2 : 0);
    for (int64_t j = i; j < size; j++) {
        if (!buf[j]) f |= 1;
        if (buf[j] & 0x80) f |= 2;
    }
    if (flags && valid >= 0 && (valid >= size || utf8_run(buf, valid > i ? valid : i, size, size) >= 0))
        f |= 4;
#endif
    if (flags) *flags = f;
    const uint8_t *p = buf + i, *end = buf + size;
    while (p < end) {
        const uint8_t *q = memchr(p, '\n', (size_t)(end - p));
        if (!q) break;
        if (n < n_out) out[n] = q - buf;
        n++;
        p = q + 1;
    }
    return n;
}

int64_t dg_newlines(const uint8_t *buf, int64_t size, int64_t *out, int64_t n_out) {
    return dg_newlines_flags(buf, size, out, n_out, NULL);
}

/* out[i] = 1 when line [starts[i], ends[i]) holds a byte that Python's bytes.strip() keeps
 * (anything but space, \t, \n, \r, \v, \f), else 0. */
void dg_nonblank(const uint8_t *buf, const int64_t *starts, const int64_t *ends, int64_t n,
                 uint8_t *out) {
    for (int64_t i = 0; i < n; i++) {
        uint8_t r = 0;
        for (int64_t j = starts[i]; j < ends[i]; j++) {
            uint8_t c = buf[j];
            if (!(c == ' ' || (c >= '\t' && c <= '\r'))) { r = 1; break; }
        }
        out[i] = r;
    }
}

/* The first offset of needle (n bytes) in buf, or -1: memchr for its byte at k (the caller
 * picks a rare one), each hit checked whole. Once that byte proved common (FIND_MISSES
 * hits that were not the needle, less than FIND_GAP bytes apart on average: as '(' at the
 * start of every vLLM line), the rest is looked at 32 (AVX2, else 16: SSE2) starts at a
 * time: the starts whose byte at k and at j (the needle's last byte, or its first when k
 * is the last) are the needle's, each checked whole. */
#define FIND_MISSES 32
#define FIND_GAP 512
#if defined(__SSE2__)

/* the first of the starts start + (each set bit of bits) where the whole needle is;
 * -1: none of them */
static inline int64_t pairs_confirmed(unsigned bits, int64_t start, const uint8_t *buf,
                                      const uint8_t *needle, int64_t n) {
    while (bits) {
        int64_t q = start + __builtin_ctz(bits);
        bits &= bits - 1;
        if (memcmp(buf + q, needle, (size_t)n) == 0) return q;
    }
    return -1;
}

/* the starts in [start, ...) checked 32 at a time while the loads stay inside buf (they
 * read up to start + 31 + max(k, j) < size); returns the needle's offset (-1: none there)
 * and leaves *at where it stopped */
__attribute__((target("avx2"))) static int64_t find_pairs32(
        const uint8_t *buf, int64_t size, const uint8_t *needle, int64_t n, int64_t k,
        int64_t j, int64_t *at) {
    const __m256i vk = _mm256_set1_epi8((char)needle[k]), vj = _mm256_set1_epi8((char)needle[j]);
    int64_t start = *at;
    for (; start + 31 + (n - 1) < size; start += 32) {
        __m256i a = _mm256_loadu_si256((const __m256i *)(const void *)(buf + start + k));
        __m256i b = _mm256_loadu_si256((const __m256i *)(const void *)(buf + start + j));
        unsigned bits = (unsigned)_mm256_movemask_epi8(
            _mm256_and_si256(_mm256_cmpeq_epi8(a, vk), _mm256_cmpeq_epi8(b, vj)));
        int64_t q = pairs_confirmed(bits, start, buf, needle, n);
        if (q >= 0) { *at = start; return q; }
    }
    *at = start;
    return -1;
}

static int64_t find_pairs(const uint8_t *buf, int64_t size, const uint8_t *needle, int64_t n,
                          int64_t k, int64_t start) {
    int64_t j = k == n - 1 ? 0 : n - 1;
    if (have_avx2()) {
        int64_t q = find_pairs32(buf, size, needle, n, k, j, &start);
        if (q >= 0) return q;
    }
    const __m128i vk = _mm_set1_epi8((char)needle[k]), vj = _mm_set1_epi8((char)needle[j]);
    /* starts [start, start + 16): the loads read up to start + 15 + max(k, j) < size */
    for (; start + 15 + (n - 1) < size; start += 16) {
        __m128i a = _mm_loadu_si128((const __m128i *)(const void *)(buf + start + k));
        __m128i b = _mm_loadu_si128((const __m128i *)(const void *)(buf + start + j));
        unsigned bits = (unsigned)_mm_movemask_epi8(
            _mm_and_si128(_mm_cmpeq_epi8(a, vk), _mm_cmpeq_epi8(b, vj)));
        int64_t q = pairs_confirmed(bits, start, buf, needle, n);
        if (q >= 0) return q;
    }
    for (; start + n <= size; start++)
        if (buf[start + k] == needle[k] && memcmp(buf + start, needle, (size_t)n) == 0)
            return start;
    return -1;
}
#endif

int64_t dg_find(const uint8_t *buf, int64_t size, const uint8_t *needle, int64_t n, int64_t k) {
    if (n <= 0) return 0;
    if (size < n) return -1;
    if (k < 0 || k >= n) k = 0;
    const uint8_t *p = buf + k, *end = buf + size - (n - 1 - k);
    int64_t misses = 0;
    while (p < end) {
        const uint8_t *q = memchr(p, needle[k], (size_t)(end - p));
        if (!q) return -1;
        if (memcmp(q - k, needle, (size_t)n) == 0) return (q - k) - buf;
        p = q + 1;
#if defined(__SSE2__)
        if (++misses % FIND_MISSES == 0 && n >= 2 && (p - (buf + k)) < misses * FIND_GAP)
            return find_pairs(buf, size, needle, n, k, (p - k) - buf);
#else
        (void)misses;
#endif
    }
    return -1;
}

/* Line forms: a fixed sequence of steps matched at each offset q[r] of buf, as the
 * regex of that sequence matches there (diag/parse/serving.py's _match_form, which this
 * replaces when the library is loaded; the tests compare the two). prog: n_ops ops of 3
 * int32 each: (0, offset in lits, length) a literal; (1, int_max, frac_max) a number
 * [0-9]{1,int_max}(\.[0-9]{1,frac_max})? (no fraction when frac_max is 0); (2, 0, 0) a
 * list of 1 to 64 such numbers (int_max 12, frac_max 8) separated by ", " (its value is
 * how many). out: one column of nq doubles per number or list step. A number of more
 * than 15 digits is NaN in out, and its start offset and length go to big_at / big_len
 * (column * nq + row in big_cell; at most n_big; the caller reads it with float()).
 * Returns the number of such numbers, or -1 at the first row the form does not match
 * (bytes past the end read as NUL; literals hold no NUL). */
static const double POW10[9] = {1e0, 1e1, 1e2, 1e3, 1e4, 1e5, 1e6, 1e7, 1e8};

static inline int is_digit_at(const uint8_t *buf, int64_t size, int64_t p) {
    return p < size && buf[p] >= '0' && buf[p] <= '9';
}

/* the number at p: its length (0: none); *val its value (*big: more than 15 digits) */
static inline int64_t form_number(const uint8_t *buf, int64_t size, int64_t p, int32_t imax,
                                  int32_t fmax, double *val, int *big) {
    uint64_t iv = 0;
    int64_t il = 0;
    while (il < imax && is_digit_at(buf, size, p + il)) { iv = iv * 10 + (uint64_t)(buf[p + il] - '0'); il++; }
    if (!il) return 0;
    int64_t at = p + il;
    if (fmax > 0 && at < size && buf[at] == '.' && is_digit_at(buf, size, at + 1)) {
        uint64_t fv = 0;
        int64_t fl = 0;
        while (fl < fmax && is_digit_at(buf, size, at + 1 + fl)) { fv = fv * 10 + (uint64_t)(buf[at + 1 + fl] - '0'); fl++; }
        *big = il + fl > 15;
        uint64_t mant = iv;
        for (int64_t e = 0; e < fl; e++) mant *= 10;
        mant += fv;
        *val = (double)mant / POW10[fl];
        return il + 1 + fl;
    }
    *big = il > 15;
    *val = (double)iv;
    return il;
}

#define FORM_AHEAD 4     /* rows */
#define FORM_FETCH 320   /* bytes of a row fetched ahead (vLLM's metrics lines) */

int64_t dg_form(const uint8_t *buf, int64_t size, const int64_t *q, int64_t nq,
                const int32_t *prog, int32_t n_ops, const uint8_t *lits, double *out,
                int64_t *big_cell, int64_t *big_at, int64_t *big_len, int64_t n_big) {
    int64_t bigs = 0;
    for (int64_t r = 0; r < nq; r++) {
        int64_t p = q[r];
        int64_t col = 0;
        if (r + FORM_AHEAD < nq) {
            /* (speed) the row FORM_AHEAD rows on fetched meanwhile: the rows are a few
             * per thousand lines of a chunk that is mostly out of the caches */
            int64_t a = q[r + FORM_AHEAD];
            for (int64_t c = 0; c < FORM_FETCH; c += 64)
                if (a >= 0 && a + c < size) __builtin_prefetch(buf + a + c);
        }
        for (int32_t o = 0; o < n_ops; o++) {
            int32_t op = prog[3 * o], a = prog[3 * o + 1], b = prog[3 * o + 2];
            if (op == 0) {
                if (p < 0 || p + b > size || memcmp(buf + p, lits + a, (size_t)b) != 0) return -1;
                p += b;
            } else if (op == 1) {
                double v = 0;
                int big = 0;
                int64_t len = form_number(buf, size, p, a, b, &v, &big);
                if (!len) return -1;
                if (big) {
                    if (bigs < n_big) {
                        big_cell[bigs] = col * nq + r; big_at[bigs] = p; big_len[bigs] = len;
                    }
                    bigs++;
                    v = __builtin_nan("");
                }
                out[col * nq + r] = v;
                col++;
                p += len;
            } else {
                int64_t count = 0;
                int live = 1;
                for (int it = 0; it < 64 && live; it++) {
                    double v = 0;
                    int big = 0;
                    int64_t len = form_number(buf, size, p, 12, 8, &v, &big);
                    if (!len) { live = 0; break; }
                    count++;
                    p += len;
                    live = p + 2 <= size && buf[p] == ',' && buf[p + 1] == ' ' &&
                           is_digit_at(buf, size, p + 2);
                    if (live) p += 2;
                }
                if (!count || live) return -1;
                out[col * nq + r] = (double)count;
                col++;
            }
        }
    }
    return bigs;
}

/* A count per 64-bit key (the repeat cap's kinds, over a whole run): an open-addressing
 * table that doubles when half full (dg_cap counts in it). A slot holds its key and count
 * side by side (one cache line read per look-up: the table of a real log's kinds is larger
 * than the caches); a count of 0 marks a free slot (a key is counted once it has one). */
typedef struct { uint64_t key; int64_t val; } dg_slot;
typedef struct { dg_slot *slots; int64_t cap, n; } dg_counter;

void dg_counter_free(dg_counter *c) {
    if (!c) return;
    free(c->slots); free(c);
}

static int counter_alloc(dg_counter *c, int64_t cap) {
    c->slots = calloc((size_t)cap, sizeof(dg_slot));
    c->cap = cap;
    c->n = 0;
    return c->slots != NULL;
}

dg_counter *dg_counter_new(void) {
    dg_counter *c = calloc(1, sizeof(dg_counter));
    if (!c) return NULL;
    if (!counter_alloc(c, 1024)) { dg_counter_free(c); return NULL; }
    return c;
}

static inline uint64_t slot_of(uint64_t key, int64_t cap) {
    uint64_t h = key * 0x9e3779b97f4a7c15ull;
    return (h ^ (h >> 29)) & (uint64_t)(cap - 1);
}

/* the count of key (a new slot's is 0: the caller counts it at once) */
static int64_t *counter_slot(dg_counter *c, uint64_t key) {
    uint64_t m = (uint64_t)(c->cap - 1);
    for (uint64_t s = slot_of(key, c->cap);; s = (s + 1) & m) {
        dg_slot *sl = &c->slots[s];
        if (!sl->val) {
            sl->key = key;
            c->n++;
            return &sl->val;
        }
        if (sl->key == key) return &sl->val;
    }
}

static int counter_grow(dg_counter *c) {
    dg_counter old = *c;
    if (!counter_alloc(c, old.cap * 2)) {
        *c = old;
        return 0;
    }
    for (int64_t s = 0; s < old.cap; s++)
        if (old.slots[s].val) *counter_slot(c, old.slots[s].key) = old.slots[s].val;
    free(old.slots);
    return 1;
}

/* The repeat cap over n candidate lines [starts[i], ends[i]) in order (the line-by-line
 * loop of diag/parse/pipeline.py's RepeatCap.split_lines, which the tests compare with
 * it): an empty line is kept; an indented one is dropped while the last head line was
 * (unless blank), else kept and parsed; a head of only control white space is kept; any
 * other head is counted under its kind (ids[i], in the counter) and dropped once seen
 * more than the limit (keep, or keep_late once budget lines were parsed). state: skipping,
 * parsed, late (read and updated). drop: one byte per line, set to 1 for a dropped line.
 * Returns 0, or -1 when the counter could not grow. */
static inline int blank_bytes(const uint8_t *buf, int64_t a, int64_t b) {
    for (int64_t j = a; j < b; j++) {
        uint8_t c = buf[j];
        if (!(c == ' ' || (c >= '\t' && c <= '\r'))) return 0;
    }
    return 1;
}

#define CAP_AHEAD 8

int32_t dg_cap(const uint8_t *buf, const int64_t *starts, const int64_t *ends,
               const uint64_t *ids, int64_t n, dg_counter *ctr, int64_t *state, int64_t keep,
               int64_t keep_late, int64_t budget, uint8_t *drop) {
    int64_t skipping = state[0], parsed = state[1], late = state[2];
    int64_t limit = parsed < budget ? keep : keep_late;
    for (int64_t i = 0; i < n; i++) {
        int64_t a = starts[i], b = ends[i];
        drop[i] = 0;
        /* (the first byte of a line a few on, fetched meanwhile: 1.4x) */
        if (i + 16 < n) __builtin_prefetch(buf + starts[i + 16]);
        if (a == b) continue;
        uint8_t c = buf[a];
        if (c == ' ' || c == '\t') {
            if (skipping && !blank_bytes(buf, a, b)) drop[i] = 1;
            else parsed++;
            continue;
        }
        if ((c == 13 || c == 11 || c == 12) && blank_bytes(buf, a, b - a > 160 ? a + 160 : b))
            continue;
        if (2 * (ctr->n + 1) > ctr->cap && !counter_grow(ctr)) {
            state[0] = skipping; state[1] = parsed; state[2] = late;
            return -1;
        }
        if (i + CAP_AHEAD < n)  /* (the slot of a kind a few lines on, fetched meanwhile) */
            __builtin_prefetch(&ctr->slots[slot_of(ids[i + CAP_AHEAD], ctr->cap)]);
        int64_t seen = ++*counter_slot(ctr, ids[i]);
        skipping = seen > limit;
        if (skipping) {
            drop[i] = 1;
            if (seen <= keep) late++;
        } else {
            parsed++;
            if (parsed >= budget) limit = keep_late;
        }
    }
    state[0] = skipping; state[1] = parsed; state[2] = late;
    return 0;
}
