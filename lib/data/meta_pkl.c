/* nanoGPT's meta.pkl: the vocabulary of a tokens:DIR corpus.
 *
 * nanoGPT's character-level prepare.py writes DIR/meta.pkl, a pickled
 * dict {'vocab_size': N, 'itos': {...}, 'stoi': {...}}, next to
 * train.bin and val.bin, and its train.py sizes the model from
 * meta['vocab_size']. Without it cdl would take GPT-2's 50257 for a corpus
 * of 65 symbols (a 50257-row embedding, a loss starting at ln 50257).
 *
 * The pickle is walked, never executed: each opcode's argument is skipped
 * by its length, so bytes inside strings are never read as opcodes, and
 * the entry is a string 'vocab_size' followed (past memo opcodes) by an
 * integer, which is how a dict's item is pickled by every protocol (0..5).
 * An opcode this walk does not know ends it with an error, and the caller
 * asks for --vocab-size.
 *
 * Its 'itos' entry, the string of each id ({0: '\n', 1: ' ', ...}), is
 * what nanoGPT's sample.py decodes with (and encodes with its inverse,
 * stoi): it is pickled as the key 'itos', an empty dict, then (integer,
 * string) pairs between MARK/SETITEMS or SETITEM opcodes, which the walk
 * collects. A table that is not every id 0..vocab_size-1 once, as plain
 * strings, is left out (the model still trains; cdl-generate prints ids). */
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cdl/cdl.h>

#include "lib/ckpt/json.h"
#include "lib/data/internal.h"

#define KEY "vocab_size"

typedef struct walk {
    const uint8_t *p, *end;
    int cut;   /* an argument ran past the end */
} walk;

/* An argument that runs past the end: -1, and the walk ends (the caller
 * tells a cut file from an unknown opcode). */
static int cut(walk *w)
{
    w->p = w->end;
    w->cut = 1;
    return -1;
}

/* Little-endian unsigned of n bytes at w->p (advanced). */
static int take_le(walk *w, int n, uint64_t *v)
{
    if (w->end - w->p < n)
        return cut(w);
    *v = 0;
    for (int k = n - 1; k >= 0; k--)
        *v = *v << 8 | w->p[k];
    w->p += n;
    return 0;
}

/* A protocol-0 argument: the bytes up to '\n' (s, n), w->p past it. */
static int take_line(walk *w, const uint8_t **s, size_t *n)
{
    const uint8_t *nl = memchr(w->p, '\n', (size_t)(w->end - w->p));
    if (!nl)
        return cut(w);
    *s = w->p;
    *n = (size_t)(nl - w->p);
    w->p = nl + 1;
    return 0;
}

/* Skips a counted argument: a length of lenbytes, then that many bytes
 * (returned in s, n). */
static int take_counted(walk *w, int lenbytes, const uint8_t **s, size_t *n)
{
    uint64_t len;
    if (take_le(w, lenbytes, &len) != 0 || len > (uint64_t)(w->end - w->p))
        return cut(w);
    *s = w->p;
    *n = (size_t)len;
    w->p += len;
    return 0;
}

enum { OTHER, STRING, INTEGER, MEMO, BAD };

/* One opcode at w->p: what it pushed (STRING with s/n, INTEGER with v), a
 * memo store (MEMO, which leaves the stack as it is), OTHER, or BAD (an
 * unknown opcode or a cut argument). *stop is set at STOP. */
static int step(walk *w, const uint8_t **s, size_t *n, long *v, int *stop)
{
    uint64_t u;
    const uint8_t *line;
    size_t len;
    char num[32];
    uint8_t op = *w->p++;
    switch (op) {
    case '.': *stop = 1; return OTHER;
    /* No argument. */
    case '(': case '}': case ']': case ')': case 's': case 'u': case 'a': case 'e':
    case 't': case 0x85: case 0x86: case 0x87: case '0': case '1': case '2': case 'N':
    case 0x88: case 0x89: case 'd': case 'l': case 'R': case 'b': case 0x81: case 0x92:
    case 0x93: case 0x8f: case 0x90: case 0x91: case 'Q': case 0x97: case 0x98:
        return OTHER;
    case 0x94: return MEMO;                           /* MEMOIZE */
    /* Fixed-size arguments. */
    case 0x80: case 'h': case 0x82: return take_le(w, 1, &u) ? BAD : OTHER;
    case 0x83: return take_le(w, 2, &u) ? BAD : OTHER;
    case 'j': case 0x84: return take_le(w, 4, &u) ? BAD : OTHER;
    case 0x95: case 'G': return take_le(w, 8, &u) ? BAD : OTHER;
    case 'q': return take_le(w, 1, &u) ? BAD : MEMO;  /* BINPUT */
    case 'r': return take_le(w, 4, &u) ? BAD : MEMO;  /* LONG_BINPUT */
    case 'K': if (take_le(w, 1, &u)) return BAD; *v = (long)u; return INTEGER;
    case 'M': if (take_le(w, 2, &u)) return BAD; *v = (long)u; return INTEGER;
    case 'J':
        if (take_le(w, 4, &u))
            return BAD;
        *v = (long)(int32_t)(uint32_t)u;
        return INTEGER;
    /* Counted arguments: strings (unicode ones may be the key), bytes, longs. */
    case 0x8c: return take_counted(w, 1, s, n) ? BAD : STRING;
    case 'X': return take_counted(w, 4, s, n) ? BAD : STRING;
    case 0x8d: return take_counted(w, 8, s, n) ? BAD : STRING;
    case 'U': case 'C': return take_counted(w, 1, &line, &len) ? BAD : OTHER;
    case 'T': case 'B': return take_counted(w, 4, &line, &len) ? BAD : OTHER;
    case 0x8e: case 0x96: return take_counted(w, 8, &line, &len) ? BAD : OTHER;
    case 0x8a:                                        /* LONG1: little-endian two's complement */
        if (take_counted(w, 1, &line, &len))
            return BAD;
        if (len == 0 || len > 4)
            return OTHER;                             /* 0, or too large for a vocabulary */
        u = 0;
        for (size_t k = len; k-- > 0;)
            u = u << 8 | line[k];
        if (line[len - 1] & 0x80)
            return OTHER;                             /* negative */
        *v = (long)u;
        return INTEGER;
    case 0x8b: return take_counted(w, 4, &line, &len) ? BAD : OTHER;
    /* Protocol 0: arguments end at a line break. */
    case 'V': return take_line(w, s, n) ? BAD : STRING;
    case 'p': return take_line(w, &line, &len) ? BAD : MEMO;
    case 'S': case 'F': case 'g': case 'P': return take_line(w, &line, &len) ? BAD : OTHER;
    case 'c': case 'i':
        return take_line(w, &line, &len) || take_line(w, &line, &len) ? BAD : OTHER;
    case 'I': case 'L': {
        if (take_line(w, &line, &len))
            return BAD;
        if (len && line[len - 1] == 'L')
            len--;
        if (len == 0 || len >= sizeof num)
            return OTHER;
        memcpy(num, line, len);
        num[len] = '\0';
        char *endp;
        long x = strtol(num, &endp, 10);
        if (*endp || (len == 2 && (!strcmp(num, "00") || !strcmp(num, "01"))))
            return OTHER;                             /* not a number, or False/True */
        *v = x;
        return INTEGER;
    }
    default: return BAD;
    }
}

/* The itos pairs the walk found: id -> string (UTF-8, owned). */
typedef struct itos_pairs {
    long *id;
    char **str;
    size_t n, cap;
} itos_pairs;

static void pairs_free(itos_pairs *t)
{
    for (size_t i = 0; i < t->n; i++)
        free(t->str[i]);
    free(t->id);
    free(t->str);
}

/* The string s (n bytes) of opcode op as UTF-8 (malloc'd), or NULL.
 * Protocol 0's 'V' is raw-unicode-escape: bytes are Latin-1 code points,
 * \uXXXX and \UXXXXXXXX escapes the others (and '\n', '\\'); the binary
 * protocols' strings are UTF-8 already. */
static char *pickle_string(uint8_t op, const uint8_t *s, size_t n)
{
    char *out = malloc(4 * n + 1);
    if (!out)
        return NULL;
    size_t o = 0;
    for (size_t i = 0; i < n; i++) {
        if (op != 'V') {
            out[o++] = (char)s[i];
            continue;
        }
        int digits = 0;
        if (s[i] == '\\' && i + 1 < n)
            digits = s[i + 1] == 'u' ? 4 : s[i + 1] == 'U' ? 8 : 0;
        unsigned long c = s[i], u = 0;
        int ok = digits && i + 2 + (size_t)digits <= n;
        for (int k = 0; ok && k < digits; k++) {
            int h = s[i + 2 + k];
            ok = isxdigit(h);
            u = u << 4 | (unsigned long)(h <= '9' ? h - '0' : (h | 0x20) - 'a' + 10);
        }
        if (ok && u <= 0x10ffff && !(u >= 0xd800 && u < 0xe000)) {
            c = u;
            i += 1 + (size_t)digits;
        }
        utf8_put(out, &o, (uint32_t)c);
    }
    out[o] = '\0';
    return out;
}

static int pairs_add(itos_pairs *t, long id, char *str)
{
    if (t->n == t->cap) {
        size_t cap = t->cap ? 2 * t->cap : 64;
        long *id2 = realloc(t->id, cap * sizeof *id2);
        if (id2)
            t->id = id2;
        char **s2 = id2 ? realloc(t->str, cap * sizeof *s2) : NULL;
        if (!s2) {
            free(str);
            return -1;
        }
        t->str = s2;
        t->cap = cap;
    }
    t->id[t->n] = id;
    t->str[t->n++] = str;
    return 0;
}

/* The table of ids 0..vocab-1 (cdl_malloc'd array of the pairs' strings,
 * which move into it), or NULL when the pairs are not exactly those ids. */
static char **pairs_table(itos_pairs *t, long vocab)
{
    if (vocab < 1 || t->n != (size_t)vocab)
        return NULL;
    char **table = cdl_calloc((size_t)vocab, sizeof *table);
    if (!table)
        return NULL;
    for (size_t i = 0; i < t->n; i++) {
        /* An empty string (or one cut at a NUL) could neither be typed in
         * a prompt nor told apart in the output. */
        if (t->id[i] < 0 || t->id[i] >= vocab || table[t->id[i]] || !t->str[i][0]) {
            cdl_free(table);
            return NULL;
        }
        table[t->id[i]] = t->str[i];
    }
    t->n = 0;   /* the strings are the table's now */
    return table;
}

/* Opcodes that build itos's dict around its pairs (EMPTY_DICT, MARK,
 * SETITEMS, SETITEM, DICT): they leave the walk inside it. */
static int dict_op(uint8_t op)
{
    return op == '}' || op == '(' || op == 'u' || op == 's' || op == 'd';
}

void tokens_itos_free(char **itos, long vocab)
{
    for (long i = 0; itos && i < vocab; i++)
        free(itos[i]);
    cdl_free(itos);
}

int tokens_meta_vocab(const uint8_t *buf, size_t len, const char *name, long *vocab,
                      char ***itos)
{
    walk w = {buf, buf + len, 0};
    int after_key = 0, found = 0, stop = 0;
    /* In itos: 0 no, 1 yes (a key expected), 2 yes (its string expected). */
    int in_itos = 0, seen_itos = 0;
    long key = 0;
    itos_pairs t = {0};
    if (itos)
        *itos = NULL;
    while (!stop && w.p < w.end) {
        const uint8_t *s = NULL;
        size_t n = 0;
        long v = 0;
        size_t at = (size_t)(w.p - buf);
        int kind = step(&w, &s, &n, &v, &stop);
        if (kind == BAD && w.cut)
            break;                                    /* an argument cut short */
        if (kind == BAD) {
            pairs_free(&t);
            return cdl_error("%s: byte %zu (opcode 0x%02x) is not part of a pickle this reader "
                             "follows", name, at, buf[at]);
        }
        if (kind == MEMO)
            continue;                                 /* stores the key; the value follows */
        if (in_itos && kind == INTEGER && in_itos == 1) {
            key = v;
            in_itos = 2;
            continue;
        }
        if (in_itos == 2 && kind == STRING && t.n < 65536) {
            char *str = pickle_string(buf[at], s, n);
            if (!str || pairs_add(&t, key, str) != 0) {
                pairs_free(&t);
                return cdl_error("%s: out of memory reading its itos table", name);
            }
            in_itos = 1;
            continue;
        }
        if (in_itos == 1 && kind == OTHER && dict_op(buf[at]))
            continue;
        in_itos = 0;                                  /* past the table */
        if (after_key && kind == INTEGER) {
            if (found && v != *vocab) {
                pairs_free(&t);
                return cdl_error("%s: two vocab_size entries (%ld and %ld)", name, *vocab, v);
            }
            *vocab = v;
            found = 1;
        } else if (after_key) {
            pairs_free(&t);
            return cdl_error("%s: its vocab_size is not a plain integer (a numpy integer?)",
                             name);
        }
        after_key = kind == STRING && n == strlen(KEY) && !memcmp(s, KEY, n);
        if (kind == STRING && n == 4 && !memcmp(s, "itos", 4) && !seen_itos)
            in_itos = seen_itos = 1;
    }
    if (!stop) {
        pairs_free(&t);
        return cdl_error("%s: the pickle ends before its STOP opcode: the file is cut short",
                         name);
    }
    if (itos && found)
        *itos = pairs_table(&t, *vocab);
    pairs_free(&t);
    return found;
}
