/* unicode_regex.c: a small backtracking regex engine over code points, for
 * pre-tokenizer patterns. The pattern is parsed into a tree, then compiled
 * into a graph of nodes where every node knows its continuation, so
 * alternation and backtracking are plain recursion on "what comes next".
 * A repeat of one character (\p{L}+, \s*, [^\r\n]?) counts its matches in a
 * loop and backtracks over the count, so a long run of letters costs no
 * stack; only repeats of groups recurse per iteration (bounded, see
 * MAX_DEPTH). */
#include <stdio.h>
#include <string.h>

#include "llm/unicode.h"
#include "llm/unicode_regex.h"

#define MAX_NODES 65536   /* compiled nodes (bounded repeats are unrolled) */
#define MAX_REPEAT 1000   /* largest {n,m} bound */
#define MAX_LOOPS 64      /* unbounded repeats of groups */
#define MAX_DEPTH 2000    /* recursion of the matcher */
#define MAX_NEST 200      /* group nesting in the pattern */
#define MAX_PATTERN 65536 /* bytes */

/* ---- the compiled form --------------------------------------------------- */

typedef struct {
    uint8_t range; /* 1: lo..hi; 0: a property mask */
    uint8_t neg;   /* properties: \P{..}, \S, \D, \W */
    uint32_t lo, hi, mask;
} rx_item;

typedef struct {
    int n, cap;
    int neg;
    rx_item *items;
} rx_class;

enum {
    P_MATCH, /* the end of the pattern (or of a lookahead body) */
    P_CHAR,
    P_CLASS,
    P_ANY,   /* any but \n */
    P_BOL,   /* ^: start, or after \n */
    P_EOL,   /* $: end, or before \n */
    P_BOS,   /* \A */
    P_EOS,   /* \z */
    P_EOSNL, /* \Z: end, or before a final \n */
    P_ALT,   /* try x, then y */
    P_REP,   /* x (one character) repeated min..max times */
    P_LOOP,  /* x (a group) repeated any number of times; x continues here */
    P_LOOK,  /* lookahead on x; neg: negative */
};

typedef struct {
    uint8_t op, icase, greedy, poss, neg;
    uint32_t cp;  /* P_CHAR (folded when icase) */
    int cls;      /* P_CLASS */
    int min, max; /* P_REP; max -1: no limit */
    int id;       /* P_LOOP */
    int next, x, y;
} rx_node;

struct kiln_regex {
    rx_node *nodes;
    int n_nodes, cap_nodes, entry, n_loops;
    rx_class *classes;
    int n_classes, cap_classes;
};

/* ---- the tree the parser builds ---------------------------------------- */

enum { A_EMPTY, A_ATOM, A_CAT, A_ALT, A_REP, A_LOOK };

typedef struct {
    int type;
    rx_node atom; /* A_ATOM: a single-position node (char, class, any, anchor) */
    int a, b;     /* children */
    int min, max, greedy, poss, neg;
} ast;

typedef struct {
    const uint32_t *p;
    size_t n, i;
    const char *pattern;
    size_t pattern_len;
    int icase, nest;
    ast *t;
    int n_t, cap_t;
    kiln_regex *re;
    kiln_status err;
} parser;

static kiln_status perr(parser *ps, kiln_status st, const char *what) {
    if (!ps->err)
        ps->err = kiln_error(st, "regex '%.*s': %s at character %zu",
                             (int)(ps->pattern_len > 300 ? 300 : ps->pattern_len), ps->pattern,
                             what, ps->i);
    return ps->err;
}

static int new_ast(parser *ps, int type) {
    if (ps->err) return -1;
    if (ps->n_t == ps->cap_t) {
        int cap = ps->cap_t ? ps->cap_t * 2 : 64;
        ast *t = kiln_realloc(ps->t, sizeof *t * (size_t)cap);
        if (!t) {
            perr(ps, KILN_ERR_NOMEM, "out of memory");
            return -1;
        }
        ps->t = t;
        ps->cap_t = cap;
    }
    ast *a = &ps->t[ps->n_t];
    memset(a, 0, sizeof *a);
    a->type = type;
    a->a = a->b = -1;
    return ps->n_t++;
}

static int new_class(parser *ps) {
    kiln_regex *re = ps->re;
    if (re->n_classes == re->cap_classes) {
        int cap = re->cap_classes ? re->cap_classes * 2 : 8;
        rx_class *c = kiln_realloc(re->classes, sizeof *c * (size_t)cap);
        if (!c) {
            perr(ps, KILN_ERR_NOMEM, "out of memory");
            return -1;
        }
        re->classes = c;
        re->cap_classes = cap;
    }
    memset(&re->classes[re->n_classes], 0, sizeof(rx_class));
    return re->n_classes++;
}

static void class_add(parser *ps, int cls, int range, int neg, uint32_t lo, uint32_t hi,
                      uint32_t mask) {
    if (ps->err) return;
    rx_class *c = &ps->re->classes[cls];
    if (c->n == c->cap) {
        int cap = c->cap ? c->cap * 2 : 4;
        rx_item *it = kiln_realloc(c->items, sizeof *it * (size_t)cap);
        if (!it) {
            perr(ps, KILN_ERR_NOMEM, "out of memory");
            return;
        }
        c->items = it;
        c->cap = cap;
    }
    c->items[c->n++] = (rx_item){(uint8_t)range, (uint8_t)neg, lo, hi, mask};
}

static int at_end(const parser *ps) {
    return ps->i >= ps->n;
}
static uint32_t peek(const parser *ps) {
    return ps->i < ps->n ? ps->p[ps->i] : 0;
}

/* The mask of a \p{name}; 0 when unknown. */
static uint32_t prop_mask(const uint32_t *name, size_t len) {
    static const struct {
        const char *name;
        uint32_t mask;
    } props[] = {
        {"L", KILN_UC_L},
        {"Letter", KILN_UC_L},
        {"Lu", KILN_UC_BIT(KILN_UC_Lu)},
        {"Ll", KILN_UC_BIT(KILN_UC_Ll)},
        {"Lt", KILN_UC_BIT(KILN_UC_Lt)},
        {"Lm", KILN_UC_BIT(KILN_UC_Lm)},
        {"Lo", KILN_UC_BIT(KILN_UC_Lo)},
        {"M", KILN_UC_M},
        {"Mark", KILN_UC_M},
        {"Mn", KILN_UC_BIT(KILN_UC_Mn)},
        {"Mc", KILN_UC_BIT(KILN_UC_Mc)},
        {"Me", KILN_UC_BIT(KILN_UC_Me)},
        {"N", KILN_UC_N},
        {"Number", KILN_UC_N},
        {"Nd", KILN_UC_BIT(KILN_UC_Nd)},
        {"Nl", KILN_UC_BIT(KILN_UC_Nl)},
        {"No", KILN_UC_BIT(KILN_UC_No)},
        {"P", KILN_UC_BIT(KILN_UC_Pc) | KILN_UC_BIT(KILN_UC_Pd) | KILN_UC_BIT(KILN_UC_Ps) |
                  KILN_UC_BIT(KILN_UC_Pe) | KILN_UC_BIT(KILN_UC_Pi) | KILN_UC_BIT(KILN_UC_Pf) |
                  KILN_UC_BIT(KILN_UC_Po)},
        {"Punctuation", KILN_UC_BIT(KILN_UC_Pc) | KILN_UC_BIT(KILN_UC_Pd) |
                            KILN_UC_BIT(KILN_UC_Ps) | KILN_UC_BIT(KILN_UC_Pe) |
                            KILN_UC_BIT(KILN_UC_Pi) | KILN_UC_BIT(KILN_UC_Pf) |
                            KILN_UC_BIT(KILN_UC_Po)},
        {"Pc", KILN_UC_BIT(KILN_UC_Pc)},
        {"Pd", KILN_UC_BIT(KILN_UC_Pd)},
        {"Ps", KILN_UC_BIT(KILN_UC_Ps)},
        {"Pe", KILN_UC_BIT(KILN_UC_Pe)},
        {"Pi", KILN_UC_BIT(KILN_UC_Pi)},
        {"Pf", KILN_UC_BIT(KILN_UC_Pf)},
        {"Po", KILN_UC_BIT(KILN_UC_Po)},
        {"S", KILN_UC_BIT(KILN_UC_Sm) | KILN_UC_BIT(KILN_UC_Sc) | KILN_UC_BIT(KILN_UC_Sk) |
                  KILN_UC_BIT(KILN_UC_So)},
        {"Symbol", KILN_UC_BIT(KILN_UC_Sm) | KILN_UC_BIT(KILN_UC_Sc) | KILN_UC_BIT(KILN_UC_Sk) |
                       KILN_UC_BIT(KILN_UC_So)},
        {"Sm", KILN_UC_BIT(KILN_UC_Sm)},
        {"Sc", KILN_UC_BIT(KILN_UC_Sc)},
        {"Sk", KILN_UC_BIT(KILN_UC_Sk)},
        {"So", KILN_UC_BIT(KILN_UC_So)},
        {"Z", KILN_UC_BIT(KILN_UC_Zs) | KILN_UC_BIT(KILN_UC_Zl) | KILN_UC_BIT(KILN_UC_Zp)},
        {"Separator", KILN_UC_BIT(KILN_UC_Zs) | KILN_UC_BIT(KILN_UC_Zl) | KILN_UC_BIT(KILN_UC_Zp)},
        {"Zs", KILN_UC_BIT(KILN_UC_Zs)},
        {"Zl", KILN_UC_BIT(KILN_UC_Zl)},
        {"Zp", KILN_UC_BIT(KILN_UC_Zp)},
        {"C", KILN_UC_BIT(KILN_UC_Cc) | KILN_UC_BIT(KILN_UC_Cf) | KILN_UC_BIT(KILN_UC_Cs) |
                  KILN_UC_BIT(KILN_UC_Co) | KILN_UC_BIT(KILN_UC_Cn)},
        {"Other", KILN_UC_BIT(KILN_UC_Cc) | KILN_UC_BIT(KILN_UC_Cf) | KILN_UC_BIT(KILN_UC_Cs) |
                      KILN_UC_BIT(KILN_UC_Co) | KILN_UC_BIT(KILN_UC_Cn)},
        {"Cc", KILN_UC_BIT(KILN_UC_Cc)},
        {"Cf", KILN_UC_BIT(KILN_UC_Cf)},
        {"Cs", KILN_UC_BIT(KILN_UC_Cs)},
        {"Co", KILN_UC_BIT(KILN_UC_Co)},
        {"Cn", KILN_UC_BIT(KILN_UC_Cn)},
    };
    for (size_t k = 0; k < sizeof props / sizeof *props; k++) {
        const char *s = props[k].name;
        size_t j = 0;
        while (j < len && s[j] && (uint32_t)(unsigned char)s[j] == name[j])
            j++;
        if (j == len && !s[j]) return props[k].mask;
    }
    return 0;
}

static int hexval(uint32_t c) {
    if (c >= '0' && c <= '9') return (int)(c - '0');
    if (c >= 'a' && c <= 'f') return (int)(c - 'a' + 10);
    if (c >= 'A' && c <= 'F') return (int)(c - 'A' + 10);
    return -1;
}

/* Reads up to `max` hex digits (at least one). */
static int read_hex(parser *ps, int max, uint32_t *out) {
    uint32_t v = 0;
    int k = 0;
    while (k < max && !at_end(ps) && hexval(peek(ps)) >= 0) {
        v = v * 16 + (uint32_t)hexval(peek(ps));
        ps->i++;
        k++;
        if (v > 0x10FFFF) return -1;
    }
    *out = v;
    return k ? 0 : -1;
}

/* An escape after the backslash (ps->i at the letter). Either a character
 * (*cp, returns 1) or a property item (*mask, *neg; returns 2); 0 on error.
 * Anchors are handled by the caller before this. */
static int parse_escape(parser *ps, uint32_t *cp, uint32_t *mask, int *neg) {
    if (at_end(ps)) {
        perr(ps, KILN_ERR_FORMAT, "a pattern that ends in a backslash");
        return 0;
    }
    uint32_t c = ps->p[ps->i++];
    *neg = 0;
    switch (c) {
    case 'r':
        *cp = '\r';
        return 1;
    case 'n':
        *cp = '\n';
        return 1;
    case 't':
        *cp = '\t';
        return 1;
    case 'f':
        *cp = '\f';
        return 1;
    case 'v':
        *cp = '\v';
        return 1;
    case 'e':
        *cp = 0x1B;
        return 1;
    case 'a':
        *cp = 0x07;
        return 1;
    case '0':
        *cp = 0;
        return 1;
    case 's':
    case 'S':
        *mask = KILN_UC_SPACE;
        *neg = c == 'S';
        return 2;
    case 'd':
    case 'D':
        *mask = KILN_UC_BIT(KILN_UC_Nd);
        *neg = c == 'D';
        return 2;
    case 'w':
    case 'W':
        *mask = KILN_UC_L | KILN_UC_M | KILN_UC_BIT(KILN_UC_Nd) | KILN_UC_BIT(KILN_UC_Pc);
        *neg = c == 'W';
        return 2;
    case 'p':
    case 'P': {
        *neg = c == 'P';
        const uint32_t *name = ps->p + ps->i;
        size_t len = 1;
        if (peek(ps) == '{') {
            size_t j = ps->i + 1;
            while (j < ps->n && ps->p[j] != '}')
                j++;
            if (j >= ps->n) {
                perr(ps, KILN_ERR_FORMAT, "\\p{ without a closing }");
                return 0;
            }
            name = ps->p + ps->i + 1;
            len = j - ps->i - 1;
            if (len && name[0] == '^') { /* \p{^L} is \P{L} */
                *neg = !*neg;
                name++;
                len--;
            }
            ps->i = j + 1;
        } else if (at_end(ps)) {
            perr(ps, KILN_ERR_FORMAT, "\\p without a property");
            return 0;
        } else {
            ps->i++;
        }
        *mask = prop_mask(name, len);
        if (!*mask) {
            perr(ps, KILN_ERR_UNSUPPORTED, "a Unicode property other than a general category");
            return 0;
        }
        return 2;
    }
    case 'x':
        if (peek(ps) == '{') {
            ps->i++;
            if (read_hex(ps, 8, cp) || peek(ps) != '}') {
                perr(ps, KILN_ERR_FORMAT, "a bad \\x{...} escape");
                return 0;
            }
            ps->i++;
            return 1;
        }
        if (read_hex(ps, 2, cp)) {
            perr(ps, KILN_ERR_FORMAT, "a bad \\x escape");
            return 0;
        }
        return 1;
    case 'u':
        if (read_hex(ps, 4, cp)) {
            perr(ps, KILN_ERR_FORMAT, "a bad \\u escape");
            return 0;
        }
        return 1;
    }
    if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '1' && c <= '9')) {
        ps->i--;
        perr(ps, KILN_ERR_UNSUPPORTED, "an escape this engine does not implement");
        return 0;
    }
    *cp = c; /* escaped punctuation or any other character stands for itself */
    return 1;
}

/* [...] after the '['; returns the class index. */
static int parse_class(parser *ps) {
    int cls = new_class(ps);
    if (cls < 0) return -1;
    if (peek(ps) == '^') {
        ps->re->classes[cls].neg = 1;
        ps->i++;
    }
    int first = 1;
    for (;;) {
        if (at_end(ps)) {
            perr(ps, KILN_ERR_FORMAT, "a [ without its ]");
            return -1;
        }
        uint32_t c = ps->p[ps->i];
        if (c == ']' && !first) {
            ps->i++;
            break;
        }
        first = 0;
        if (c == '[') {
            perr(ps, KILN_ERR_UNSUPPORTED, "a nested class or [:name:]");
            return -1;
        }
        if (c == '&' && ps->i + 1 < ps->n && ps->p[ps->i + 1] == '&') {
            perr(ps, KILN_ERR_UNSUPPORTED, "a class intersection (&&)");
            return -1;
        }
        uint32_t lo;
        ps->i++;
        if (c == '\\') {
            uint32_t mask;
            int neg, k = parse_escape(ps, &lo, &mask, &neg);
            if (!k) return -1;
            if (k == 2) {
                class_add(ps, cls, 0, neg, 0, 0, mask);
                continue;
            }
        } else {
            lo = c;
        }
        uint32_t hi = lo;
        if (peek(ps) == '-' && ps->i + 1 < ps->n && ps->p[ps->i + 1] != ']') {
            ps->i++;
            uint32_t d = ps->p[ps->i++];
            if (d == '\\') {
                uint32_t mask;
                int neg, k = parse_escape(ps, &d, &mask, &neg);
                if (!k) return -1;
                if (k == 2) {
                    perr(ps, KILN_ERR_FORMAT, "a range that ends in a property");
                    return -1;
                }
            }
            if (d < lo) {
                perr(ps, KILN_ERR_FORMAT, "a range whose end comes before its start");
                return -1;
            }
            hi = d;
        }
        class_add(ps, cls, 1, 0, lo, hi, 0);
    }
    return ps->err ? -1 : cls;
}

static int atom(parser *ps, int op) {
    int a = new_ast(ps, A_ATOM);
    if (a < 0) return -1;
    ps->t[a].atom.op = (uint8_t)op;
    ps->t[a].atom.icase = (uint8_t)ps->icase;
    return a;
}

static int parse_alt(parser *ps);

/* A group after the '('. */
static int parse_group(parser *ps) {
    int look = -1, saved_icase = ps->icase;
    if (peek(ps) == '?') {
        ps->i++;
        uint32_t c = peek(ps);
        if (c == ':') {
            ps->i++;
        } else if (c == '=' || c == '!') {
            look = c == '!';
            ps->i++;
        } else if (c == '<' && ps->i + 1 < ps->n &&
                   (ps->p[ps->i + 1] == '=' || ps->p[ps->i + 1] == '!')) {
            perr(ps, KILN_ERR_UNSUPPORTED, "lookbehind");
            return -1;
        } else if (c == '<' || c == 'P' || c == '\'') { /* a named group: a plain group here */
            if (c == 'P') ps->i++;
            uint32_t close = peek(ps) == '\'' ? '\'' : '>';
            while (!at_end(ps) && peek(ps) != close)
                ps->i++;
            if (at_end(ps)) {
                perr(ps, KILN_ERR_FORMAT, "a group name without its end");
                return -1;
            }
            ps->i++;
        } else {
            /* Flags: (?i) (?-i) (?i:...) (?-i:...) */
            int on = 1, any = 0;
            while (!at_end(ps) && (peek(ps) == 'i' || peek(ps) == '-')) {
                if (peek(ps) == '-')
                    on = 0;
                else
                    ps->icase = on;
                ps->i++;
                any = 1;
            }
            if (any && peek(ps) == ')') { /* (?i): to the end of the enclosing group */
                ps->i++;
                return new_ast(ps, A_EMPTY);
            }
            if (!any || peek(ps) != ':') {
                perr(ps, KILN_ERR_UNSUPPORTED,
                     "a group kind or flag other than (?:, (?=, (?!, (?i");
                return -1;
            }
            ps->i++;
        }
    }
    if (++ps->nest > MAX_NEST) {
        perr(ps, KILN_ERR_UNSUPPORTED, "groups nested too deeply");
        return -1;
    }
    int body = parse_alt(ps);
    ps->nest--;
    if (body < 0) return -1;
    if (peek(ps) != ')') {
        perr(ps, KILN_ERR_FORMAT, "a ( without its )");
        return -1;
    }
    ps->i++;
    ps->icase = saved_icase;
    if (look < 0) return body;
    int a = new_ast(ps, A_LOOK);
    if (a < 0) return -1;
    ps->t[a].a = body;
    ps->t[a].neg = look;
    return a;
}

static int parse_atom(parser *ps) {
    uint32_t c = ps->p[ps->i++];
    switch (c) {
    case '(':
        return parse_group(ps);
    case '[': {
        int cls = parse_class(ps);
        if (cls < 0) return -1;
        int a = atom(ps, P_CLASS);
        if (a >= 0) ps->t[a].atom.cls = cls;
        return a;
    }
    case '.':
        return atom(ps, P_ANY);
    case '^':
        return atom(ps, P_BOL);
    case '$':
        return atom(ps, P_EOL);
    case '*':
    case '+':
    case '?':
        ps->i--;
        perr(ps, KILN_ERR_FORMAT, "a quantifier with nothing to repeat");
        return -1;
    case '\\': {
        uint32_t e = peek(ps);
        if (e == 'A' || e == 'z' || e == 'Z') {
            ps->i++;
            return atom(ps, e == 'A' ? P_BOS : e == 'z' ? P_EOS : P_EOSNL);
        }
        uint32_t cp, mask;
        int neg, k = parse_escape(ps, &cp, &mask, &neg);
        if (!k) return -1;
        if (k == 2) {
            int cls = new_class(ps);
            if (cls < 0) return -1;
            class_add(ps, cls, 0, neg, 0, 0, mask);
            int a = atom(ps, P_CLASS);
            if (a >= 0) ps->t[a].atom.cls = cls;
            return a;
        }
        c = cp;
        break;
    }
    }
    int a = atom(ps, P_CHAR);
    if (a >= 0) ps->t[a].atom.cp = ps->icase ? kiln_uc_fold(c) : c;
    return a;
}

/* {n}, {n,}, {n,m} at ps->i (on the '{'); 0 when it is not a quantifier
 * (then '{' is a literal, as in Oniguruma). */
static int parse_braces(parser *ps, int *min, int *max) {
    size_t j = ps->i + 1;
    long a = 0, b;
    int digits = 0;
    while (j < ps->n && ps->p[j] >= '0' && ps->p[j] <= '9') {
        a = a * 10 + (long)(ps->p[j++] - '0');
        if (a > 100000) a = 100000;
        digits++;
    }
    if (!digits) return 0;
    b = a;
    if (j < ps->n && ps->p[j] == ',') {
        j++;
        b = -1;
        if (j < ps->n && ps->p[j] >= '0' && ps->p[j] <= '9') {
            b = 0;
            while (j < ps->n && ps->p[j] >= '0' && ps->p[j] <= '9') {
                b = b * 10 + (long)(ps->p[j++] - '0');
                if (b > 100000) b = 100000;
            }
        }
    }
    if (j >= ps->n || ps->p[j] != '}') return 0;
    ps->i = j + 1;
    *min = (int)a;
    *max = (int)b;
    return 1;
}

static int parse_repeat(parser *ps) {
    int a = parse_atom(ps);
    if (a < 0) return -1;
    for (;;) {
        int min, max;
        uint32_t c = peek(ps);
        if (at_end(ps)) break;
        if (c == '?')
            min = 0, max = 1, ps->i++;
        else if (c == '*')
            min = 0, max = -1, ps->i++;
        else if (c == '+')
            min = 1, max = -1, ps->i++;
        else if (c == '{' && parse_braces(ps, &min, &max)) {
            if (min > MAX_REPEAT || max > MAX_REPEAT || (max >= 0 && max < min)) {
                perr(ps, KILN_ERR_UNSUPPORTED, "a repeat count over 1000 or a {n,m} with m < n");
                return -1;
            }
        } else
            break;
        int greedy = 1, poss = 0;
        if (peek(ps) == '?')
            greedy = 0, ps->i++;
        else if (peek(ps) == '+')
            poss = 1, ps->i++;
        if (ps->t[a].type == A_LOOK || (ps->t[a].type == A_ATOM && ps->t[a].atom.op >= P_BOL)) {
            perr(ps, KILN_ERR_UNSUPPORTED, "a repeated anchor or lookahead");
            return -1;
        }
        int r = new_ast(ps, A_REP);
        if (r < 0) return -1;
        ps->t[r].a = a;
        ps->t[r].min = min;
        ps->t[r].max = max;
        ps->t[r].greedy = greedy;
        ps->t[r].poss = poss;
        a = r;
    }
    return a;
}

/* Appends item a to the right-nested chain (CAT or ALT) rooted at *root,
 * whose last inner node is *last: x (y (z ...)). */
static int chain(parser *ps, int type, int *root, int *last, int a) {
    if (*root < 0) {
        *root = a;
        return 0;
    }
    int c = new_ast(ps, type);
    if (c < 0) return -1;
    if (*last < 0) {
        ps->t[c].a = *root;
        *root = c;
    } else {
        ps->t[c].a = ps->t[*last].b;
        ps->t[*last].b = c;
    }
    ps->t[c].b = a;
    *last = c;
    return 0;
}

static int parse_cat(parser *ps) {
    int root = -1, last = -1;
    while (!at_end(ps) && peek(ps) != '|' && peek(ps) != ')') {
        int a = parse_repeat(ps);
        if (a < 0 || chain(ps, A_CAT, &root, &last, a)) return -1;
    }
    return root >= 0 ? root : new_ast(ps, A_EMPTY);
}

static int parse_alt(parser *ps) {
    int root = -1, last = -1;
    for (;;) {
        int b = parse_cat(ps);
        if (b < 0 || chain(ps, A_ALT, &root, &last, b)) return -1;
        if (at_end(ps) || peek(ps) != '|') return root;
        ps->i++;
    }
}

/* ---- tree -> node graph --------------------------------------------------- */

static int new_node(parser *ps, const rx_node *proto) {
    kiln_regex *re = ps->re;
    if (ps->err) return -1;
    if (re->n_nodes == MAX_NODES) {
        perr(ps, KILN_ERR_UNSUPPORTED, "a pattern that unrolls to too many nodes");
        return -1;
    }
    if (re->n_nodes == re->cap_nodes) {
        int cap = re->cap_nodes ? re->cap_nodes * 2 : 64;
        rx_node *nn = kiln_realloc(re->nodes, sizeof *nn * (size_t)cap);
        if (!nn) {
            perr(ps, KILN_ERR_NOMEM, "out of memory");
            return -1;
        }
        re->nodes = nn;
        re->cap_nodes = cap;
    }
    re->nodes[re->n_nodes] = *proto;
    return re->n_nodes++;
}

/* Compiles tree node a to run before `next`; returns its entry node. */
static int compile(parser *ps, int a, int next) {
    if (ps->err) return -1;
    const ast *t = &ps->t[a];
    rx_node nd;
    memset(&nd, 0, sizeof nd);
    switch (t->type) {
    case A_EMPTY:
        return next;
    case A_ATOM:
        nd = t->atom;
        nd.next = next;
        return new_node(ps, &nd);
    case A_CAT:
    case A_ALT: {
        /* A chain x (y (z ...)) of one kind, compiled from its end without
         * recursing once per element (a pattern may have thousands). */
        int type = t->type, n = 0, k = a;
        while (ps->t[k].type == type)
            n++, k = ps->t[k].b;
        int *items = kiln_malloc(sizeof(int) * ((size_t)n + 1));
        if (!items) {
            perr(ps, KILN_ERR_NOMEM, "out of memory");
            return -1;
        }
        n = 0;
        for (k = a; ps->t[k].type == type; k = ps->t[k].b)
            items[n++] = ps->t[k].a;
        items[n++] = k;
        int entry = type == A_CAT ? next : compile(ps, items[n - 1], next);
        for (int i = type == A_CAT ? n - 1 : n - 2; i >= 0 && entry >= 0; i--) {
            int x = compile(ps, items[i], type == A_CAT ? entry : next);
            if (x < 0 || type == A_CAT) {
                entry = x;
                continue;
            }
            memset(&nd, 0, sizeof nd);
            nd.op = P_ALT;
            nd.x = x;
            nd.y = entry;
            entry = new_node(ps, &nd);
        }
        kiln_free(items);
        return entry;
    }
    case A_LOOK: {
        int body = compile(ps, t->a, 0); /* node 0 is P_MATCH */
        if (body < 0) return -1;
        nd.op = P_LOOK;
        nd.neg = (uint8_t)t->neg;
        nd.x = body;
        nd.next = next;
        return new_node(ps, &nd);
    }
    case A_REP: {
        const ast *c = &ps->t[t->a];
        if (c->type == A_ATOM && c->atom.op <= P_ANY) { /* one character: counted, not recursed */
            int body = compile(ps, t->a, -1);
            if (body < 0) return -1;
            nd.op = P_REP;
            nd.x = body;
            nd.min = t->min;
            nd.max = t->max;
            nd.greedy = (uint8_t)t->greedy;
            nd.poss = (uint8_t)t->poss;
            nd.next = next;
            return new_node(ps, &nd);
        }
        if (t->poss) {
            perr(ps, KILN_ERR_UNSUPPORTED, "a possessive repeat of a group");
            return -1;
        }
        int tail = next;
        if (t->max < 0) {
            if (ps->re->n_loops == MAX_LOOPS) {
                perr(ps, KILN_ERR_UNSUPPORTED, "more than 64 unbounded repeats of groups");
                return -1;
            }
            nd.op = P_LOOP;
            nd.greedy = (uint8_t)t->greedy;
            nd.id = ps->re->n_loops++;
            nd.next = next;
            int loop = new_node(ps, &nd);
            if (loop < 0) return -1;
            int body = compile(ps, t->a, loop);
            if (body < 0) return -1;
            ps->re->nodes[loop].x = body;
            tail = loop;
        } else {
            for (int k = 0; k < t->max - t->min; k++) { /* (X(X(X)?)?)? */
                int body = compile(ps, t->a, tail);
                if (body < 0) return -1;
                memset(&nd, 0, sizeof nd);
                nd.op = P_ALT;
                nd.x = t->greedy ? body : tail;
                nd.y = t->greedy ? tail : body;
                if ((tail = new_node(ps, &nd)) < 0) return -1;
            }
        }
        for (int k = 0; k < t->min; k++)
            if ((tail = compile(ps, t->a, tail)) < 0) return -1;
        return tail;
    }
    }
    return -1;
}

void kiln_regex_free(kiln_regex *re) {
    if (!re) return;
    for (int i = 0; i < re->n_classes; i++)
        kiln_free(re->classes[i].items);
    kiln_free(re->classes);
    kiln_free(re->nodes);
    kiln_free(re);
}

kiln_status kiln_regex_compile(const char *pattern, size_t len, kiln_regex **out) {
    *out = NULL;
    if (len > MAX_PATTERN)
        return kiln_error(KILN_ERR_UNSUPPORTED, "regex of %zu bytes (at most %d)", len,
                          MAX_PATTERN);
    parser ps;
    memset(&ps, 0, sizeof ps);
    ps.pattern = pattern;
    ps.pattern_len = len;
    uint32_t *cps = kiln_malloc(sizeof(uint32_t) * (len + 1));
    ps.re = kiln_calloc(1, sizeof *ps.re);
    if (!cps || !ps.re) {
        kiln_free(cps);
        kiln_free(ps.re);
        return kiln_error(KILN_ERR_NOMEM, "out of memory");
    }
    for (size_t i = 0, used; i < len; i += used) {
        uint32_t c = kiln_utf8_decode((const uint8_t *)pattern + i, len - i, &used);
        if (c >= KILN_UC_RAW) {
            ps.i = ps.n;
            perr(&ps, KILN_ERR_FORMAT, "not valid UTF-8");
            break;
        }
        cps[ps.n++] = c;
    }
    ps.p = cps;
    if (!ps.err) {
        rx_node match;
        memset(&match, 0, sizeof match);
        match.op = P_MATCH;
        new_node(&ps, &match); /* node 0 */
        ps.i = 0;
        int root = parse_alt(&ps);
        if (root >= 0 && !at_end(&ps)) perr(&ps, KILN_ERR_FORMAT, "an unmatched )");
        if (root >= 0 && !ps.err) ps.re->entry = compile(&ps, root, 0);
    }
    kiln_free(cps);
    kiln_free(ps.t);
    if (ps.err) {
        kiln_regex_free(ps.re);
        return ps.err;
    }
    *out = ps.re;
    return KILN_OK;
}

/* ---- matching -------------------------------------------------------------- */

typedef struct {
    const kiln_regex *re;
    const uint32_t *s;
    size_t n;
    size_t loop_pos[MAX_LOOPS];
    int depth;
    long steps, max_steps;
} mstate;

static int class_has(const rx_class *c, uint32_t cp) {
    uint32_t props = 0;
    int got = 0, hit = 0;
    for (int i = 0; i < c->n && !hit; i++) {
        const rx_item *it = &c->items[i];
        if (it->range) {
            hit = cp >= it->lo && cp <= it->hi;
        } else {
            if (!got) props = kiln_uc_props(cp), got = 1;
            hit = ((props & it->mask) != 0) != it->neg;
        }
    }
    return hit != c->neg;
}

typedef struct {
    const rx_class *c;
    int hit;
} fold_probe;

static void probe(uint32_t cp, void *user) {
    fold_probe *p = user;
    if (!p->hit && class_has(p->c, cp)) p->hit = 1;
}

/* Does the one-character node p match c? */
static int one(const kiln_regex *re, const rx_node *p, uint32_t c) {
    switch (p->op) {
    case P_CHAR:
        return p->icase ? kiln_uc_fold(c) == p->cp : c == p->cp;
    case P_ANY:
        return c != '\n';
    case P_CLASS: {
        const rx_class *cls = &re->classes[p->cls];
        if (class_has(cls, c)) return 1;
        if (!p->icase) return 0;
        fold_probe pr = {cls, 0};
        kiln_uc_fold_each(kiln_uc_fold(c), probe, &pr);
        return pr.hit;
    }
    }
    return 0;
}

#define FAIL (-1)
#define ERR (-2)

/* Matches from `node` at `pos`: the end of the match, FAIL, or ERR. */
static long m(mstate *st, int node, size_t pos) {
    const kiln_regex *re = st->re;
    if (++st->depth > MAX_DEPTH) return ERR;
    long r = FAIL;
    for (;;) {
        if (++st->steps > st->max_steps) {
            r = ERR;
            break;
        }
        const rx_node *p = &re->nodes[node];
        switch (p->op) {
        case P_MATCH:
            r = (long)pos;
            goto out;
        case P_CHAR:
        case P_CLASS:
        case P_ANY:
            if (pos >= st->n || !one(re, p, st->s[pos])) goto out;
            pos++;
            node = p->next;
            continue;
        case P_BOL:
            if (pos != 0 && st->s[pos - 1] != '\n') goto out;
            node = p->next;
            continue;
        case P_EOL:
            if (pos != st->n && st->s[pos] != '\n') goto out;
            node = p->next;
            continue;
        case P_BOS:
            if (pos != 0) goto out;
            node = p->next;
            continue;
        case P_EOS:
            if (pos != st->n) goto out;
            node = p->next;
            continue;
        case P_EOSNL:
            if (pos != st->n && !(pos + 1 == st->n && st->s[pos] == '\n')) goto out;
            node = p->next;
            continue;
        case P_ALT:
            r = m(st, p->x, pos);
            if (r != FAIL) goto out;
            node = p->y;
            continue;
        case P_LOOK: {
            long k = m(st, p->x, pos);
            if (k == ERR) {
                r = ERR;
                goto out;
            }
            if ((k >= 0) == p->neg) goto out;
            node = p->next;
            continue;
        }
        case P_REP: {
            const rx_node *body = &re->nodes[p->x];
            size_t max = p->max < 0 ? st->n - pos : (size_t)p->max, k = 0;
            if (p->greedy || p->poss) {
                while (k < max && pos + k < st->n && one(re, body, st->s[pos + k]))
                    k++;
                if (k < (size_t)p->min) goto out;
                if (p->poss) {
                    pos += k;
                    node = p->next;
                    continue;
                }
                for (size_t j = k + 1; j-- > (size_t)p->min;) {
                    r = m(st, p->next, pos + j);
                    if (r != FAIL) goto out;
                }
                goto out;
            }
            /* Lazy: the fewest first. */
            while (k < (size_t)p->min) {
                if (pos + k >= st->n || !one(re, body, st->s[pos + k])) goto out;
                k++;
            }
            for (;;) {
                r = m(st, p->next, pos + k);
                if (r != FAIL || k >= max || pos + k >= st->n || !one(re, body, st->s[pos + k]))
                    goto out;
                k++;
            }
        }
        case P_LOOP: {
            size_t saved = st->loop_pos[p->id];
            if (saved == pos) { /* an iteration that matched nothing: stop repeating */
                node = p->next;
                continue;
            }
            if (!p->greedy) {
                r = m(st, p->next, pos);
                if (r != FAIL) goto out;
            }
            st->loop_pos[p->id] = pos;
            r = m(st, p->x, pos);
            st->loop_pos[p->id] = saved;
            if (r != FAIL || !p->greedy) goto out;
            node = p->next;
            continue;
        }
        }
        goto out;
    }
out:
    st->depth--;
    return r;
}

int kiln_regex_find(const kiln_regex *re, const uint32_t *s, size_t n, size_t from, size_t *begin,
                    size_t *end) {
    mstate st;
    st.re = re;
    st.s = s;
    st.n = n;
    st.depth = 0;
    st.steps = 0;
    /* Generous for any sane pattern (a few steps per character per start
     * position), and a bound for a pathological one. */
    st.max_steps = 1000000 + 2000 * (long)(n - from);
    for (size_t i = 0; i < MAX_LOOPS; i++)
        st.loop_pos[i] = (size_t)-1;
    for (size_t start = from; start <= n; start++) {
        long r = m(&st, re->entry, start);
        if (r == ERR)
            return kiln_error(
                KILN_ERR_UNSUPPORTED,
                "regex: matching at character %zu of %zu needs more backtracking than allowed",
                start, n);
        if (r >= 0) {
            *begin = start;
            *end = (size_t)r;
            return 1;
        }
    }
    return 0;
}
