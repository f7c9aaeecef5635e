/* toml.c - strict recursive-descent parser for the TOML subset in toml.h.
 * (~1000 lines: one grammar, whose lexer, value parser and table rules
 * call each other recursively; fuzzed as one unit.)
 *
 * The input is checked as UTF-8 first (NUL bytes and malformed sequences are
 * errors with their position), then parsed line by line: a line is empty, a
 * comment, a [table] header or a key = value pair. Values nest through
 * arrays and inline tables up to TOML_MAX_DEPTH levels, which bounds the
 * recursion on hostile input (the parser is fuzzed, tests/fuzz).
 *
 * Table rules (TOML 1.0): a table is defined once, by a header or by dotted
 * keys; headers may pass through tables created implicitly on the way;
 * inline tables and arrays are sealed once written. */
#include "toml.h"

#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util.h"

#define TOML_MAX_DEPTH 64
#define TOML_MAX_FILE (1u << 20)

typedef struct parser {
    const char *s;
    size_t len, pos;
    int line, col;
    const char *name;
    char *err;
    size_t errlen;
    bool failed;
    bool too_large; /* the error is a number out of range (toml_parse_value keeps it) */
    int depth;
} parser;

static bool perr(parser *p, const char *fmt, ...) SL_PRINTF(2, 3);
static bool perr(parser *p, const char *fmt, ...)
{
    if (p->failed)
        return false;
    p->failed = true;
    if (p->err && p->errlen) {
        int n = snprintf(p->err, p->errlen, "%s:%d:%d: ", p->name, p->line, p->col);
        if (n < 0 || (size_t)n >= p->errlen)
            return false;
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(p->err + n, p->errlen - (size_t)n, fmt, ap);
        va_end(ap);
    }
    return false;
}

static int peek(const parser *p) { return p->pos < p->len ? (unsigned char)p->s[p->pos] : -1; }
static int peek_at(const parser *p, size_t k) { return p->pos + k < p->len ? (unsigned char)p->s[p->pos + k] : -1; }

static void adv(parser *p)
{
    if (p->pos >= p->len)
        return;
    if (p->s[p->pos] == '\n') {
        p->line++;
        p->col = 1;
    } else {
        p->col++;
    }
    p->pos++;
}

static void skip_ws(parser *p)
{
    while (peek(p) == ' ' || peek(p) == '\t')
        adv(p);
}

static void skip_comment(parser *p)
{
    if (peek(p) != '#')
        return;
    while (peek(p) != -1 && peek(p) != '\n' && peek(p) != '\r') {
        int c = peek(p);
        if ((c < 0x20 && c != '\t') || c == 0x7f) {
            perr(p, "control character 0x%02x in a comment", c);
            return;
        }
        adv(p);
    }
}

/* Consumes a newline (LF or CRLF); false if none is there. */
static bool eat_newline(parser *p)
{
    if (peek(p) == '\n') {
        adv(p);
        return true;
    }
    if (peek(p) == '\r' && peek_at(p, 1) == '\n') {
        adv(p);
        adv(p);
        return true;
    }
    return false;
}

/* Whitespace, comments and newlines inside arrays. */
static void skip_ws_nl(parser *p)
{
    for (;;) {
        skip_ws(p);
        skip_comment(p);
        if (p->failed || !eat_newline(p))
            return;
    }
}

/* ---- values and tables ---- */

static struct toml_value *val_new(parser *p, enum toml_type t, int line, int col)
{
    struct toml_value *v = calloc(1, sizeof *v);
    if (!v) {
        perr(p, "out of memory");
        return NULL;
    }
    v->type = t;
    v->line = line;
    v->col = col;
    return v;
}

void toml_free(struct toml_value *v)
{
    if (!v)
        return;
    switch (v->type) {
    case TOML_STRING:
        free(v->u.s);
        break;
    case TOML_TABLE:
        for (size_t i = 0; i < v->u.tab.n; i++) {
            free(v->u.tab.kv[i].key);
            toml_free(v->u.tab.kv[i].val);
        }
        free(v->u.tab.kv);
        break;
    case TOML_ARRAY:
        for (size_t i = 0; i < v->u.arr.n; i++)
            toml_free(v->u.arr.v[i]);
        free(v->u.arr.v);
        break;
    default:
        break;
    }
    free(v);
}

const struct toml_value *toml_get(const struct toml_value *tab, const char *key)
{
    if (!tab || tab->type != TOML_TABLE)
        return NULL;
    for (size_t i = 0; i < tab->u.tab.n; i++)
        if (!strcmp(tab->u.tab.kv[i].key, key))
            return tab->u.tab.kv[i].val;
    return NULL;
}

const struct toml_value *toml_get_path(const struct toml_value *root, const char *path)
{
    char part[256];
    const struct toml_value *v = root;
    while (v && *path) {
        const char *dot = strchr(path, '.');
        size_t n = dot ? (size_t)(dot - path) : strlen(path);
        if (n >= sizeof part)
            return NULL;
        memcpy(part, path, n);
        part[n] = '\0';
        v = toml_get(v, part);
        path += n + (dot ? 1 : 0);
    }
    return v;
}

const char *toml_type_name(enum toml_type t)
{
    switch (t) {
    case TOML_TABLE: return "table";
    case TOML_ARRAY: return "array";
    case TOML_STRING: return "string";
    case TOML_INT: return "integer";
    case TOML_FLOAT: return "float";
    case TOML_BOOL: return "boolean";
    }
    return "?";
}

/* Adds key -> val to table; the key is taken over (freed on failure). */
static bool tab_put(parser *p, struct toml_value *tab, char *key, struct toml_value *val)
{
    if (tab->u.tab.n == tab->u.tab.cap) {
        size_t cap = tab->u.tab.cap ? tab->u.tab.cap * 2 : 8;
        struct toml_kv *kv = realloc(tab->u.tab.kv, cap * sizeof *kv);
        if (!kv) {
            free(key);
            return perr(p, "out of memory");
        }
        tab->u.tab.kv = kv;
        tab->u.tab.cap = cap;
    }
    tab->u.tab.kv[tab->u.tab.n].key = key;
    tab->u.tab.kv[tab->u.tab.n].val = val;
    tab->u.tab.n++;
    return true;
}

static bool arr_push(parser *p, struct toml_value *arr, struct toml_value *v)
{
    if (arr->u.arr.n == arr->u.arr.cap) {
        size_t cap = arr->u.arr.cap ? arr->u.arr.cap * 2 : 8;
        struct toml_value **nv = realloc(arr->u.arr.v, cap * sizeof *nv);
        if (!nv)
            return perr(p, "out of memory");
        arr->u.arr.v = nv;
        arr->u.arr.cap = cap;
    }
    arr->u.arr.v[arr->u.arr.n++] = v;
    return true;
}

static struct toml_value *tab_find(struct toml_value *tab, const char *key)
{
    for (size_t i = 0; i < tab->u.tab.n; i++)
        if (!strcmp(tab->u.tab.kv[i].key, key))
            return tab->u.tab.kv[i].val;
    return NULL;
}

/* ---- strings ---- */

typedef struct sbuf {
    char *b;
    size_t n, cap;
} sbuf;

static bool sb_put(parser *p, sbuf *sb, const char *s, size_t n)
{
    if (sb->n + n + 1 > sb->cap) {
        size_t cap = sb->cap ? sb->cap : 32;
        while (cap < sb->n + n + 1)
            cap *= 2;
        char *b = realloc(sb->b, cap);
        if (!b)
            return perr(p, "out of memory");
        sb->b = b;
        sb->cap = cap;
    }
    memcpy(sb->b + sb->n, s, n);
    sb->n += n;
    sb->b[sb->n] = '\0';
    return true;
}

static bool sb_utf8(parser *p, sbuf *sb, uint32_t cp)
{
    char o[4];
    size_t n;
    if (cp < 0x80) {
        o[0] = (char)cp;
        n = 1;
    } else if (cp < 0x800) {
        o[0] = (char)(0xc0 | (cp >> 6));
        o[1] = (char)(0x80 | (cp & 0x3f));
        n = 2;
    } else if (cp < 0x10000) {
        o[0] = (char)(0xe0 | (cp >> 12));
        o[1] = (char)(0x80 | ((cp >> 6) & 0x3f));
        o[2] = (char)(0x80 | (cp & 0x3f));
        n = 3;
    } else {
        o[0] = (char)(0xf0 | (cp >> 18));
        o[1] = (char)(0x80 | ((cp >> 12) & 0x3f));
        o[2] = (char)(0x80 | ((cp >> 6) & 0x3f));
        o[3] = (char)(0x80 | (cp & 0x3f));
        n = 4;
    }
    return sb_put(p, sb, o, n);
}

/* Parses a basic ("...") or literal ('...') single-line string at the
 * cursor. Returns a malloc'd NUL-terminated string or NULL on error. */
static char *parse_string(parser *p)
{
    int q = peek(p);
    if (peek_at(p, 1) == q && peek_at(p, 2) == q) {
        perr(p, "multi-line strings are not supported; write the value on one line");
        return NULL;
    }
    adv(p);
    sbuf sb = {0};
    if (!sb_put(p, &sb, "", 0))
        return NULL;
    for (;;) {
        int c = peek(p);
        if (c == -1 || c == '\n' || c == '\r') {
            perr(p, "unterminated string; close it with %c on the same line", q);
            goto fail;
        }
        if (c == q) {
            adv(p);
            return sb.b;
        }
        if ((c < 0x20 && c != '\t') || c == 0x7f) {
            perr(p, "control character 0x%02x in a string; write it as an escape", c);
            goto fail;
        }
        if (c == '\\' && q == '"') {
            int eline = p->line, ecol = p->col;
            adv(p);
            int e = peek(p);
            const char *rep = NULL;
            switch (e) {
            case 'b': rep = "\b"; break;
            case 't': rep = "\t"; break;
            case 'n': rep = "\n"; break;
            case 'f': rep = "\f"; break;
            case 'r': rep = "\r"; break;
            case '"': rep = "\""; break;
            case '\\': rep = "\\"; break;
            case 'u':
            case 'U': {
                int nd = e == 'u' ? 4 : 8;
                uint32_t cp = 0;
                adv(p);
                for (int i = 0; i < nd; i++) {
                    int h = peek(p);
                    int d = (h >= '0' && h <= '9') ? h - '0'
                          : (h >= 'a' && h <= 'f') ? h - 'a' + 10
                          : (h >= 'A' && h <= 'F') ? h - 'A' + 10 : -1;
                    if (d < 0) {
                        p->line = eline, p->col = ecol;
                        perr(p, "\\%c escape needs %d hex digits", e, nd);
                        goto fail;
                    }
                    cp = cp * 16 + (uint32_t)d;
                    adv(p);
                }
                if (cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff)) {
                    p->line = eline, p->col = ecol;
                    perr(p, "escape \\%c%0*X is not a Unicode scalar value", e, nd, cp);
                    goto fail;
                }
                if (!sb_utf8(p, &sb, cp))
                    goto fail;
                continue;
            }
            default:
                p->line = eline, p->col = ecol;
                perr(p, "invalid escape '\\%c' in a string (use \\\\ for a backslash)", e > 0x20 && e < 0x7f ? e : '?');
                goto fail;
            }
            if (!sb_put(p, &sb, rep, 1))
                goto fail;
            adv(p);
            continue;
        }
        char ch = (char)c;
        if (!sb_put(p, &sb, &ch, 1))
            goto fail;
        adv(p);
    }
fail:
    free(sb.b);
    return NULL;
}

static bool is_bare(int c)
{
    return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_' || c == '-';
}

/* One simple key (bare or quoted). */
static char *parse_simple_key(parser *p)
{
    int c = peek(p);
    if (c == '"' || c == '\'')
        return parse_string(p);
    size_t start = p->pos;
    while (is_bare(peek(p)))
        adv(p);
    if (p->pos == start) {
        if (c == -1 || c == '\n' || c == '\r')
            perr(p, "expected a key");
        else
            perr(p, "unexpected character '%c' where a key was expected", c >= 0x20 && c < 0x7f ? c : '?');
        return NULL;
    }
    char *k = malloc(p->pos - start + 1);
    if (!k) {
        perr(p, "out of memory");
        return NULL;
    }
    memcpy(k, p->s + start, p->pos - start);
    k[p->pos - start] = '\0';
    return k;
}

/* A dotted key: parts[0..*n). Caller frees the parts. */
#define TOML_MAX_KEY_PARTS 16
static bool parse_key(parser *p, char **parts, int *n, int *lines, int *cols)
{
    *n = 0;
    for (;;) {
        skip_ws(p);
        if (*n == TOML_MAX_KEY_PARTS)
            return perr(p, "key has more than %d dotted parts", TOML_MAX_KEY_PARTS);
        lines[*n] = p->line;
        cols[*n] = p->col;
        char *k = parse_simple_key(p);
        if (!k)
            return false;
        parts[(*n)++] = k;
        skip_ws(p);
        if (peek(p) != '.')
            return true;
        adv(p);
    }
}

static void free_parts(char **parts, int n)
{
    for (int i = 0; i < n; i++)
        free(parts[i]);
}

/* ---- numbers, booleans ---- */

static bool digits_ok(const char *s, size_t n, int base)
{
    if (n == 0)
        return false;
    for (size_t i = 0; i < n; i++) {
        int c = (unsigned char)s[i];
        if (c == '_') {
            if (i == 0 || i == n - 1 || s[i - 1] == '_')
                return false;
            continue;
        }
        int d = (c >= '0' && c <= '9') ? c - '0'
              : (c >= 'a' && c <= 'f') ? c - 'a' + 10
              : (c >= 'A' && c <= 'F') ? c - 'A' + 10 : 99;
        if (d >= base)
            return false;
    }
    return true;
}

/* Reports a malformed number at the token's start. */
#define numerr(p, l, c, ...) ((p)->line = (l), (p)->col = (c), perr((p), __VA_ARGS__))

static struct toml_value *parse_number(parser *p, int line, int col)
{
    size_t start = p->pos;
    for (;;) {
        int c = peek(p);
        if (is_bare(c) || c == '+' || c == '.' || c == ':')
            adv(p);
        else
            break;
    }
    const char *t = p->s + start;
    size_t n = p->pos - start;
    char tok[128];
    if (n == 0 || n >= sizeof tok) {
        numerr(p, line, col, n ? "number is too long" : "expected a value");
        return NULL;
    }
    memcpy(tok, t, n);
    tok[n] = '\0';
    if (memchr(tok, ':', n) || (n >= 5 && tok[4] == '-' && tok[0] >= '0' && tok[0] <= '9')) {
        numerr(p, line, col, "dates and times are not supported; quote the value as a string");
        return NULL;
    }
    const char *u = tok;
    bool neg = false, sign = false;
    if (*u == '+' || *u == '-') {
        neg = *u == '-';
        sign = true;
        u++;
    }
    if (!strcmp(u, "inf") || !strcmp(u, "nan")) {
        struct toml_value *v = val_new(p, TOML_FLOAT, line, col);
        if (v)
            v->u.f = (u[0] == 'i' ? INFINITY : NAN) * (neg ? -1.0 : 1.0);
        return v;
    }
    if (u[0] == '0' && (u[1] == 'x' || u[1] == 'o' || u[1] == 'b')) {
        int base = u[1] == 'x' ? 16 : u[1] == 'o' ? 8 : 2;
        if (sign || !digits_ok(u + 2, strlen(u + 2), base)) {
            numerr(p, line, col, "malformed %s integer '%s'", base == 16 ? "hexadecimal" : base == 8 ? "octal" : "binary", tok);
            return NULL;
        }
        uint64_t x = 0;
        for (const char *q = u + 2; *q; q++) {
            if (*q == '_')
                continue;
            int d = (*q >= '0' && *q <= '9') ? *q - '0' : (*q | 0x20) - 'a' + 10;
            if (x > (uint64_t)INT64_MAX / (uint64_t)base ||
                x * (uint64_t)base > (uint64_t)INT64_MAX - (uint64_t)d) {
                numerr(p, line, col, "integer '%s' is too large: it does not fit in 64 bits (at most %" PRId64 ")",
                       tok, INT64_MAX);
                p->too_large = true;
                return NULL;
            }
            x = x * (uint64_t)base + (uint64_t)d;
        }
        struct toml_value *v = val_new(p, TOML_INT, line, col);
        if (v)
            v->u.i = (int64_t)x;
        return v;
    }
    /* decimal integer or float: intpart [. frac] [e exp] */
    const char *q = u;
    size_t il = strspn(q, "0123456789_");
    if (!digits_ok(q, il, 10) || (q[0] == '0' && il > 1)) {
        numerr(p, line, col, il > 1 && q[0] == '0' ? "leading zeros are not allowed in '%s'" : "malformed number '%s'", tok);
        return NULL;
    }
    q += il;
    bool is_float = false;
    if (*q == '.') {
        is_float = true;
        q++;
        size_t fl = strspn(q, "0123456789_");
        if (!digits_ok(q, fl, 10)) {
            numerr(p, line, col, "malformed float '%s' (digits must follow the point)", tok);
            return NULL;
        }
        q += fl;
    }
    if (*q == 'e' || *q == 'E') {
        is_float = true;
        q++;
        if (*q == '+' || *q == '-')
            q++;
        size_t el = strspn(q, "0123456789_");
        if (!digits_ok(q, el, 10)) {
            numerr(p, line, col, "malformed exponent in '%s'", tok);
            return NULL;
        }
        q += el;
    }
    if (*q) {
        numerr(p, line, col, "malformed value '%s' (strings need quotes)", tok);
        return NULL;
    }
    char clean[128];
    size_t k = 0;
    for (const char *r = tok; *r; r++)
        if (*r != '_')
            clean[k++] = *r;
    clean[k] = '\0';
    errno = 0;
    if (is_float) {
        double d = strtod(clean, NULL);
        if (errno == ERANGE && isinf(d)) {
            numerr(p, line, col, "float '%s' is too large: out of the range of a double", tok);
            p->too_large = true;
            return NULL;
        }
        struct toml_value *v = val_new(p, TOML_FLOAT, line, col);
        if (v)
            v->u.f = d;
        return v;
    }
    long long x = strtoll(clean, NULL, 10);
    if (errno == ERANGE) {
        numerr(p, line, col, "integer '%s' is too large%s: it does not fit in 64 bits (%" PRId64 " .. %" PRId64 ")",
               tok, neg ? " in magnitude" : "", INT64_MIN, INT64_MAX);
        p->too_large = true;
        return NULL;
    }
    struct toml_value *v = val_new(p, TOML_INT, line, col);
    if (v)
        v->u.i = x;
    return v;
}

static struct toml_value *parse_value(parser *p);

static bool seal(struct toml_value *v)
{
    if (v->type == TOML_TABLE) {
        v->inline_closed = true;
        v->defined = true;
        for (size_t i = 0; i < v->u.tab.n; i++)
            seal(v->u.tab.kv[i].val);
    } else if (v->type == TOML_ARRAY) {
        v->inline_closed = true;
        for (size_t i = 0; i < v->u.arr.n; i++)
            seal(v->u.arr.v[i]);
    }
    return true;
}

/* Inserts `val` under the dotted key parts into tab, creating intermediate
 * tables (marked defined: dotted keys define them). Takes over parts and val. */
static bool put_dotted(parser *p, struct toml_value *tab, char **parts, int n, const int *lines, const int *cols,
                       struct toml_value *val)
{
    for (int i = 0; i < n - 1; i++) {
        struct toml_value *sub = tab_find(tab, parts[i]);
        if (sub) {
            if (sub->type != TOML_TABLE || sub->inline_closed) {
                p->line = lines[i], p->col = cols[i];
                perr(p, "key '%s' is already a %s (line %d); it cannot hold keys", parts[i],
                     sub->type == TOML_TABLE ? "sealed inline table" : toml_type_name(sub->type), sub->line);
                goto fail;
            }
            free(parts[i]);
            parts[i] = NULL;
        } else {
            sub = val_new(p, TOML_TABLE, lines[i], cols[i]);
            if (!sub)
                goto fail;
            sub->defined = true;
            char *k = parts[i];
            parts[i] = NULL;
            if (!tab_put(p, tab, k, sub)) {
                toml_free(sub);
                goto fail;
            }
        }
        tab = sub;
    }
    struct toml_value *old = tab_find(tab, parts[n - 1]);
    if (old) {
        p->line = lines[n - 1], p->col = cols[n - 1];
        perr(p, "duplicate key '%s' (first defined at line %d)", parts[n - 1], old->line);
        goto fail;
    }
    char *k = parts[n - 1];
    parts[n - 1] = NULL;
    if (!tab_put(p, tab, k, val))
        goto fail_noparts;
    return true;
fail:
    free_parts(parts, n);
fail_noparts:
    toml_free(val);
    return false;
}

static struct toml_value *parse_inline_table(parser *p, int line, int col)
{
    struct toml_value *t = val_new(p, TOML_TABLE, line, col);
    if (!t)
        return NULL;
    adv(p); /* { */
    skip_ws(p);
    if (peek(p) == '}') {
        adv(p);
        seal(t);
        return t;
    }
    for (;;) {
        char *parts[TOML_MAX_KEY_PARTS];
        int lines[TOML_MAX_KEY_PARTS], cols[TOML_MAX_KEY_PARTS], n;
        if (!parse_key(p, parts, &n, lines, cols)) {
            free_parts(parts, n);
            goto fail;
        }
        if (peek(p) != '=') {
            perr(p, "expected '=' after the key in an inline table");
            free_parts(parts, n);
            goto fail;
        }
        adv(p);
        skip_ws(p);
        struct toml_value *v = parse_value(p);
        if (!v) {
            free_parts(parts, n);
            goto fail;
        }
        if (!put_dotted(p, t, parts, n, lines, cols, v))
            goto fail;
        skip_ws(p);
        if (peek(p) == ',') {
            adv(p);
            skip_ws(p);
            if (peek(p) == '}') {
                perr(p, "trailing comma is not allowed in an inline table");
                goto fail;
            }
            continue;
        }
        if (peek(p) == '}') {
            adv(p);
            seal(t);
            return t;
        }
        perr(p, "expected ',' or '}' in an inline table (inline tables must fit on one line)");
        goto fail;
    }
fail:
    toml_free(t);
    return NULL;
}

static struct toml_value *parse_array(parser *p, int line, int col)
{
    struct toml_value *a = val_new(p, TOML_ARRAY, line, col);
    if (!a)
        return NULL;
    adv(p); /* [ */
    for (;;) {
        skip_ws_nl(p);
        if (p->failed)
            goto fail;
        if (peek(p) == ']') {
            adv(p);
            seal(a);
            return a;
        }
        struct toml_value *v = parse_value(p);
        if (!v)
            goto fail;
        if (!arr_push(p, a, v)) {
            toml_free(v);
            goto fail;
        }
        skip_ws_nl(p);
        if (p->failed)
            goto fail;
        if (peek(p) == ',') {
            adv(p);
            continue;
        }
        if (peek(p) == ']') {
            adv(p);
            seal(a);
            return a;
        }
        if (peek(p) == -1)
            perr(p, "unterminated array; close it with ']'");
        else
            perr(p, "expected ',' or ']' in an array");
        goto fail;
    }
fail:
    toml_free(a);
    return NULL;
}

static struct toml_value *parse_value(parser *p)
{
    int line = p->line, col = p->col;
    int c = peek(p);
    if (++p->depth > TOML_MAX_DEPTH) {
        perr(p, "values nest deeper than %d levels", TOML_MAX_DEPTH);
        return NULL;
    }
    struct toml_value *v = NULL;
    if (c == '"' || c == '\'') {
        char *s = parse_string(p);
        if (s) {
            v = val_new(p, TOML_STRING, line, col);
            if (v)
                v->u.s = s;
            else
                free(s);
        }
    } else if (c == '[') {
        v = parse_array(p, line, col);
    } else if (c == '{') {
        v = parse_inline_table(p, line, col);
    } else if (c == 't' || c == 'f') {
        const char *w = c == 't' ? "true" : "false";
        size_t wl = strlen(w);
        if (p->len - p->pos >= wl && !memcmp(p->s + p->pos, w, wl) && !is_bare(peek_at(p, wl))) {
            for (size_t i = 0; i < wl; i++)
                adv(p);
            v = val_new(p, TOML_BOOL, line, col);
            if (v)
                v->u.b = c == 't';
        } else {
            perr(p, "unknown value; strings need quotes (\"...\"), booleans are true or false");
        }
    } else if (c == -1 || c == '\n' || c == '\r' || c == '#') {
        perr(p, "expected a value after '='");
    } else if ((c >= '0' && c <= '9') || c == '+' || c == '-' || c == 'i' || c == 'n') {
        v = parse_number(p, line, col);
    } else {
        perr(p, "unknown value starting with '%c'; strings need quotes", c >= 0x20 && c < 0x7f ? c : '?');
    }
    p->depth--;
    return v;
}

/* ---- document ---- */

static bool utf8_check(parser *p)
{
    const unsigned char *s = (const unsigned char *)p->s;
    size_t i = 0;
    int line = 1, col = 1;
    while (i < p->len) {
        unsigned char c = s[i];
        size_t n = c < 0x80 ? 1 : (c & 0xe0) == 0xc0 ? 2 : (c & 0xf0) == 0xe0 ? 3 : (c & 0xf8) == 0xf0 ? 4 : 0;
        bool ok = n != 0 && i + n <= p->len && c != 0;
        uint32_t cp = n == 1 ? c : n == 2 ? (c & 0x1fu) : n == 3 ? (c & 0x0fu) : (c & 0x07u);
        for (size_t k = 1; ok && k < n; k++) {
            if ((s[i + k] & 0xc0) != 0x80)
                ok = false;
            cp = (cp << 6) | (s[i + k] & 0x3fu);
        }
        if (ok && ((n == 2 && cp < 0x80) || (n == 3 && cp < 0x800) || (n == 4 && (cp < 0x10000 || cp > 0x10ffff)) ||
                   (cp >= 0xd800 && cp <= 0xdfff)))
            ok = false;
        if (!ok) {
            p->line = line;
            p->col = col;
            return perr(p, c == 0 ? "NUL byte in the file" : "invalid UTF-8 byte 0x%02x", c);
        }
        if (c == '\n') {
            line++;
            col = 1;
        } else {
            col++;
        }
        i += n;
    }
    return true;
}

static bool end_of_line(parser *p)
{
    skip_ws(p);
    skip_comment(p);
    if (p->failed)
        return false;
    if (peek(p) == -1 || eat_newline(p))
        return true;
    if (peek(p) == '\r')
        return perr(p, "carriage return without a line feed");
    return perr(p, "expected the end of the line after the value (one key = value per line)");
}

static bool parse_header(parser *p, struct toml_value *root, struct toml_value **cur)
{
    int hline = p->line, hcol = p->col;
    adv(p); /* [ */
    if (peek(p) == '[')
        return perr(p, "arrays of tables ([[...]]) are not supported");
    char *parts[TOML_MAX_KEY_PARTS];
    int lines[TOML_MAX_KEY_PARTS], cols[TOML_MAX_KEY_PARTS], n;
    if (!parse_key(p, parts, &n, lines, cols)) {
        free_parts(parts, n);
        return false;
    }
    if (peek(p) != ']') {
        free_parts(parts, n);
        return perr(p, "expected ']' to close the table header");
    }
    adv(p);
    struct toml_value *t = root;
    bool ok = true;
    for (int i = 0; i < n && ok; i++) {
        struct toml_value *sub = tab_find(t, parts[i]);
        if (!sub) {
            sub = val_new(p, TOML_TABLE, i == n - 1 ? hline : lines[i], i == n - 1 ? hcol : cols[i]);
            if (!sub) {
                ok = false;
                break;
            }
            char *k = parts[i];
            parts[i] = NULL;
            if (!tab_put(p, t, k, sub)) {
                toml_free(sub);
                ok = false;
                break;
            }
        } else if (sub->type != TOML_TABLE || sub->inline_closed) {
            p->line = lines[i], p->col = cols[i];
            ok = perr(p, "'%s' is already a %s (line %d), not a table", parts[i],
                      sub->type == TOML_TABLE ? "sealed inline table" : toml_type_name(sub->type), sub->line);
            break;
        } else if (i == n - 1 && sub->defined) {
            p->line = hline, p->col = hcol;
            ok = perr(p, "table [%s] is defined twice (first at line %d)", parts[i], sub->line);
            break;
        }
        if (i == n - 1) {
            sub->defined = true;
            sub->line = hline;
            sub->col = hcol;
        }
        t = sub;
    }
    free_parts(parts, n);
    if (!ok)
        return false;
    *cur = t;
    return end_of_line(p);
}

struct toml_value *toml_parse(const char *text, size_t len, const char *name, char *err, size_t errlen)
{
    if (len >= 3 && !memcmp(text, "\xef\xbb\xbf", 3)) { /* a UTF-8 byte order mark, as some editors write */
        text += 3;
        len -= 3;
    }
    parser p = {.s = text, .len = len, .line = 1, .col = 1, .name = name ? name : "<string>", .err = err,
                .errlen = errlen};
    if (err && errlen)
        err[0] = '\0';
    if (!utf8_check(&p))
        return NULL;
    p.line = 1, p.col = 1;
    struct toml_value *root = val_new(&p, TOML_TABLE, 1, 1);
    if (!root)
        return NULL;
    root->defined = true;
    struct toml_value *cur = root;
    while (!p.failed && p.pos < p.len) {
        skip_ws(&p);
        int c = peek(&p);
        if (c == '#' || c == '\n' || c == '\r' || c == -1) {
            end_of_line(&p);
            continue;
        }
        if (c == '[') {
            parse_header(&p, root, &cur);
            continue;
        }
        char *parts[TOML_MAX_KEY_PARTS];
        int lines[TOML_MAX_KEY_PARTS], cols[TOML_MAX_KEY_PARTS], n;
        if (!parse_key(&p, parts, &n, lines, cols)) {
            free_parts(parts, n);
            break;
        }
        if (peek(&p) != '=') {
            free_parts(parts, n);
            perr(&p, "expected '=' after the key");
            break;
        }
        adv(&p);
        skip_ws(&p);
        struct toml_value *v = parse_value(&p);
        if (!v) {
            free_parts(parts, n);
            break;
        }
        if (!put_dotted(&p, cur, parts, n, lines, cols, v))
            break;
        end_of_line(&p);
    }
    if (p.failed) {
        toml_free(root);
        return NULL;
    }
    return root;
}

struct toml_value *toml_parse_file(const char *path, char *err, size_t errlen)
{
    char *buf;
    size_t len;
    if (sl_read_file(path, TOML_MAX_FILE, &buf, &len, err, errlen) < 0)
        return NULL;
    struct toml_value *v = toml_parse(buf, len, path, err, errlen);
    free(buf);
    return v;
}

struct toml_value *toml_parse_value(const char *text, char *err, size_t errlen)
{
    size_t len = strlen(text);
    parser p = {.s = text, .len = len, .line = 1, .col = 1, .name = "value", .err = err, .errlen = errlen};
    if (!utf8_check(&p))
        return NULL;
    p.line = 1, p.col = 1;
    skip_ws(&p);
    int c = peek(&p);
    struct toml_value *v = parse_value(&p);
    if (v) {
        skip_ws(&p);
        if (p.pos == p.len)
            return v;
        toml_free(v);
        v = NULL;
        p.failed = false;
        perr(&p, "unexpected text after the value");
    } else if (p.too_large) {
        return NULL; /* a number out of range is no bare word: say so, not "a string" */
    }
    /* A bare word that is no TOML value is a string; text that starts like a
     * structured or quoted value keeps its error. */
    if (c == '[' || c == '{' || c == '"' || c == '\'' || len == 0)
        return NULL;
    for (const char *q = text; *q; q++)
        if ((unsigned char)*q < 0x20 || *q == '"' || *q == '\'' || *q == '#' || *q == '=')
            return NULL;
    v = calloc(1, sizeof *v);
    if (!v)
        return NULL;
    v->type = TOML_STRING;
    v->line = v->col = 1;
    v->u.s = strdup(text);
    if (!v->u.s) {
        free(v);
        return NULL;
    }
    if (err && errlen)
        err[0] = '\0';
    return v;
}

/* ---- metadata files ---- */

static int missing_key(const char *path, const char *tname, const char *key, const char *hint, char *err,
                       size_t errlen)
{
    return sl_errf(err, errlen, -EINVAL, "%s: %s%s%s is missing; %s", path, tname ? tname : "", tname ? "." : "", key,
                   hint);
}

int toml_need_uint(const struct toml_value *tab, const char *path, const char *tname, const char *key,
                   const char *hint, uint64_t *out, char *err, size_t errlen)
{
    const struct toml_value *v = toml_get(tab, key);
    if (!v)
        return missing_key(path, tname, key, hint, err, errlen);
    if (v->type != TOML_INT || v->u.i < 0)
        return sl_errf(err, errlen, -EINVAL, "%s:%d:%d: %s%s%s must be a non-negative integer", path, v->line, v->col,
                       tname ? tname : "", tname ? "." : "", key);
    *out = (uint64_t)v->u.i;
    return 0;
}

int toml_need_str(const struct toml_value *tab, const char *path, const char *tname, const char *key,
                  const char *hint, const char **out, char *err, size_t errlen)
{
    const struct toml_value *v = toml_get(tab, key);
    if (!v)
        return missing_key(path, tname, key, hint, err, errlen);
    if (v->type != TOML_STRING)
        return sl_errf(err, errlen, -EINVAL, "%s:%d:%d: %s%s%s must be a string", path, v->line, v->col,
                       tname ? tname : "", tname ? "." : "", key);
    *out = v->u.s;
    return 0;
}

void toml_write_string(FILE *f, const char *s)
{
    fputc('"', f);
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\')
            fprintf(f, "\\%c", c);
        else if (c < 0x20 || c == 0x7f)
            fprintf(f, "\\u%04x", c);
        else
            fputc(c, f);
    }
    fputc('"', f);
}
