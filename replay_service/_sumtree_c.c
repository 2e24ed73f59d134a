/*
 * Compiled kernels for replay_service.sumtree.SumMinTree (optional; the NumPy path is the fallback).
 *
 * Plain C against the CPython C API: arrays come in through the buffer protocol (C-contiguous,
 * float64 'd' / int64 'q'|'l'), so building needs only a C compiler and the Python headers (no NumPy
 * headers). Every loop runs with the GIL released.
 *
 * The arithmetic is the NumPy path's, operation for operation, so both backends give bitwise-equal
 * trees and the same leaf for the same query:
 *   - a node's sum is the pairwise sum of its F children over aligned contiguous blocks,
 *         r = x[0::2] + x[1::2], repeated until one value is left;
 *   - a node's min is the min of its children (leaves: 0 = empty reads as +inf); min is exact;
 *   - the top level is searched through its sequential prefix sums (np.cumsum) with
 *     searchsorted(side="right");
 *   - inside an F-ary node the prefix sums are the Hillis-Steele / Kogge-Stone inclusive scan
 *         for s = 1, 2, 4, ..., F/2:  a[t] = a[t] + a[t - s]  (t >= s, old values on the right),
 *     the chosen child is the first whose inclusive prefix sum is > the residual (the last child's
 *     prefix reads as +inf), and the residual loses the previous child's prefix sum.
 * Additions are done in the same order with the same operands; IEEE addition is commutative, so a
 * + b and b + a are the same double. No multiply-add is formed (nothing to contract into an FMA).
 *
 * Tree layout (see sumtree.py): one flat float64 buffer `sums` holding the levels 0 (leaves) ..
 * L-1 (top) back to back; `mins` holds the min levels 1 .. L-1 back to back (level k at
 * off[k] - off[1]). `layout` is an int64 buffer [L, F, off[0..L-1], size[0..L-1]].
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <math.h>
#include <stdint.h>
#include <string.h>

#define MAX_LEVELS 64

typedef struct {
    int64_t L;
    int64_t F;
    int64_t off[MAX_LEVELS];
    int64_t size[MAX_LEVELS];
} Layout;

/* ------------------------------------------------------------------ buffers */

/* Acquire a C-contiguous buffer of 8-byte items of the given kind ('d' float64, 'q' int64). */
static int
get_buf(PyObject *obj, Py_buffer *view, char kind, int writable, const char *name)
{
    int flags = PyBUF_C_CONTIGUOUS | PyBUF_FORMAT | (writable ? PyBUF_WRITABLE : 0);
    if (PyObject_GetBuffer(obj, view, flags) < 0) {
        PyErr_Clear();
        PyErr_Format(PyExc_TypeError, "%s must be a C-contiguous%s %s array", name, writable ? " writable" : "",
                     kind == 'd' ? "float64" : "int64");
        return -1;
    }
    const char *f = view->format ? view->format : "B";
    if (*f == '@' || *f == '=') {
        f++;
    }
#if PY_LITTLE_ENDIAN
    else if (*f == '<') {
        f++;
    }
#else
    else if (*f == '>' || *f == '!') {
        f++;
    }
#endif
    int ok = view->itemsize == 8 && f[0] != '\0' && f[1] == '\0' &&
             (kind == 'd' ? f[0] == 'd' : (f[0] == 'q' || (f[0] == 'l' && sizeof(long) == 8)));
    if (!ok) {
        PyErr_Format(PyExc_TypeError, "%s must be a %s array, got buffer format '%s' (itemsize %zd)", name,
                     kind == 'd' ? "float64" : "int64", view->format ? view->format : "B", view->itemsize);
        PyBuffer_Release(view);
        return -1;
    }
    return 0;
}

static Py_ssize_t
buf_len(const Py_buffer *v)
{
    return v->len / 8;
}

/* Parse and check the layout against the sums (and mins, if given) buffers. */
static int
parse_layout(const Py_buffer *lay, Layout *out, Py_ssize_t n_sums, Py_ssize_t n_mins)
{
    const int64_t *a = (const int64_t *)lay->buf;
    Py_ssize_t n = buf_len(lay);
    if (n < 2) {
        goto bad;
    }
    out->L = a[0];
    out->F = a[1];
    if (out->L < 1 || out->L > MAX_LEVELS || out->F < 2 || (out->F & (out->F - 1)) || n < 2 + 2 * out->L) {
        goto bad;
    }
    for (int64_t k = 0; k < out->L; k++) {
        out->off[k] = a[2 + k];
        out->size[k] = a[2 + out->L + k];
        if (out->off[k] < 0 || out->size[k] < 1 || out->off[k] + out->size[k] > n_sums) {
            goto bad;
        }
        if (k > 0) {
            /* every parent of a level-(k-1) node exists, and the min level fits into mins */
            if (out->size[k - 1] % out->F || out->size[k - 1] / out->F > out->size[k]) {
                goto bad;
            }
            if (n_mins >= 0 && (out->off[k] - out->off[1] < 0 || out->off[k] - out->off[1] + out->size[k] > n_mins)) {
                goto bad;
            }
        }
    }
    return 0;
bad:
    PyErr_SetString(PyExc_ValueError, "inconsistent sum tree layout / buffers");
    return -1;
}

/* ------------------------------------------------------------------ arithmetic */

/* Pairwise sum over aligned contiguous blocks: r = x[0::2] + x[1::2] until one value is left. */
static inline double
pair_sum(const double *x, int64_t F, double *tmp)
{
    int64_t h = F / 2;
    for (int64_t j = 0; j < h; j++) {
        tmp[j] = x[2 * j] + x[2 * j + 1];
    }
    while (h > 1) {
        h /= 2;
        for (int64_t j = 0; j < h; j++) {
            tmp[j] = tmp[2 * j] + tmp[2 * j + 1];
        }
    }
    return tmp[0];
}

static inline double
pair_sum16(const double *x)
{
    double a0 = x[0] + x[1], a1 = x[2] + x[3], a2 = x[4] + x[5], a3 = x[6] + x[7];
    double a4 = x[8] + x[9], a5 = x[10] + x[11], a6 = x[12] + x[13], a7 = x[14] + x[15];
    double b0 = a0 + a1, b1 = a2 + a3, b2 = a4 + a5, b3 = a6 + a7;
    return (b0 + b1) + (b2 + b3);
}

static inline double
node_sum(const double *x, int64_t F, double *tmp)
{
    if (F == 16) {
        return pair_sum16(x);
    }
    if (F == 32) {
        return pair_sum16(x) + pair_sum16(x + 16);
    }
    return pair_sum(x, F, tmp);
}

#if defined(__GNUC__) || defined(__clang__)
#define PREFETCH(p) __builtin_prefetch(p)
static inline int
ctz64(uint64_t m)
{
    return __builtin_ctzll(m);
}
#else
#define PREFETCH(p) ((void)0)
static inline int
ctz64(uint64_t m)
{
    int n = 0;
    while (!(m & 1)) {
        m >>= 1;
        n++;
    }
    return n;
}
#endif

/* Child of a node for residual *u (updated). The children's inclusive prefix sums come from the
 * Kogge-Stone scan (pass s: a[t] = a[t] + a[t - s] for t >= s, on the previous pass's values); the
 * chosen child is the first whose prefix sum is > *u with the last child's prefix read as +inf
 * (numpy: argmax of a boolean row, 0 when none is true), and *u loses the previous prefix sum.
 * F is a compile-time constant where this is inlined with a literal, so the passes unroll. */
static inline int64_t
pick_child(const double *row, const int64_t F, double *u, const int64_t maxch)
{
    /* Column by column: st[p][t] is a[t] after pass p (p = 0: the row itself); column t needs the
     * earlier columns only, so the scan stops at the chosen child. */
    double st[7][64]; /* passes 0 .. log2(64) */
    const double v = *u;
    double prev = 0.0;
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC unroll 64
#endif
    for (int64_t t = 0; t < F; t++) {
        double c = row[t];
        st[0][t] = c;
        int p = 1;
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC unroll 8
#endif
        for (int64_t s = 1; s < F; s *= 2, p++) {
            if (t >= s) {
                c = c + st[p - 1][t - s];
            }
            st[p][t] = c;
        }
        if (t == maxch) {
            /* reached the last child (prefix read as +inf) or the last one that exists: numpy's
             * min(argmax(...), maxch) is maxch, or 0 when no comparison holds (a NaN query) */
            if (v != v) {
                return 0;
            }
        }
        else if (!(c > v)) {
            prev = c;
            continue;
        }
        if (t > 0) {
            *u = v - prev;
        }
        return t;
    }
    return 0; /* not reached */
}

/* Same for any power-of-two F (wide nodes: scratch buffer of 2 * F doubles). */
static int64_t
pick_child_any(const double *row, const int64_t F, double *u, double *scratch, const int64_t maxch)
{
    double *a = scratch, *b = scratch + F;
    memcpy(a, row, (size_t)F * sizeof(double));
    for (int64_t s = 1; s < F; s *= 2) {
        for (int64_t t = 0; t < s; t++) {
            b[t] = a[t];
        }
        for (int64_t t = s; t < F; t++) {
            b[t] = a[t] + a[t - s];
        }
        double *c = a;
        a = b;
        b = c;
    }
    a[F - 1] = INFINITY;
    const double v = *u;
    int64_t ch = 0;
    for (int64_t t = 0; t < F; t++) {
        if (a[t] > v) {
            ch = t;
            break;
        }
    }
    ch = ch < maxch ? ch : maxch;
    if (ch > 0) {
        *u = v - a[ch - 1];
    }
    return ch;
}

/* maxch < F - 1 only in a row that ends in padding nodes without children (their rows do not
 * exist): the choice is clipped to the last child that exists (numpy: np.minimum(ch, maxch)). */
static inline int64_t
child_of(const double *row, const int64_t F, double *u, double *scratch, const int64_t maxch)
{
    switch (F) {
        case 2:
            return pick_child(row, 2, u, maxch);
        case 4:
            return pick_child(row, 4, u, maxch);
        case 8:
            return pick_child(row, 8, u, maxch);
        case 16:
            return pick_child(row, 16, u, maxch);
        case 32:
            return pick_child(row, 32, u, maxch);
        case 64:
            return pick_child(row, 64, u, maxch);
        default:
            return pick_child_any(row, F, u, scratch, maxch);
    }
}

/* searchsorted(cs, u, side="right") for a non-decreasing cs of n >= 1 entries: #{i: cs[i] <= u}. */
static inline Py_ssize_t
upper_bound(const double *cs, Py_ssize_t n, double u)
{
    Py_ssize_t lo = 0, hi = n;
    while (lo < hi) {
        Py_ssize_t mid = lo + (hi - lo) / 2;
        if (cs[mid] <= u) {
            lo = mid + 1;
        }
        else {
            hi = mid;
        }
    }
    return lo;
}

/* The same, given that every cs[i] with i < lo is <= u (queries in increasing order): gallop
 * forward from lo, then bisect. For a non-decreasing cs the answer is unique, so it equals
 * upper_bound(cs, n, u). */
static inline Py_ssize_t
upper_bound_from(const double *cs, Py_ssize_t n, double u, Py_ssize_t lo)
{
    Py_ssize_t hi = lo, step = 1;
    while (hi < n && cs[hi] <= u) {
        lo = hi + 1;
        hi += step;
        step *= 2;
    }
    if (hi > n) {
        hi = n;
    }
    while (lo < hi) {
        Py_ssize_t mid = lo + (hi - lo) / 2;
        if (cs[mid] <= u) {
            lo = mid + 1;
        }
        else {
            hi = mid;
        }
    }
    return lo;
}

static inline void
prefetch_row(const double *row, int64_t F)
{
    for (int64_t t = 0; t < F; t += 8) {
        PREFETCH(row + t);
    }
    PREFETCH(row + F - 1);
}

/* ------------------------------------------------------------------ propagate */

/* Recompute the sum and min of every ancestor of the leaves idx[0..n) from its children (the leaves
 * are already written). Consecutive equal parents are recomputed once; other repeats are harmless
 * (recomputing from the children is idempotent). Runs without the GIL. */
static void
propagate(double *sums, double *mins, const Layout *lay, const int64_t *idx, Py_ssize_t n, int64_t *scratch,
          double *tmp)
{
    const int64_t F = lay->F;
    const int64_t *cur = idx;
    Py_ssize_t m = n;
    for (int64_t k = 1; k < lay->L; k++) {
        const double *child = sums + lay->off[k - 1];
        double *parent = sums + lay->off[k];
        double *pmin = mins + (lay->off[k] - lay->off[1]);
        const double *cmin = k > 1 ? mins + (lay->off[k - 1] - lay->off[1]) : NULL;
        for (Py_ssize_t i = 0; i < m && i < 8; i++) {
            prefetch_row(child + (cur[i] / F) * F, F);
        }
        Py_ssize_t w = 0;
        int64_t last = -1;
        for (Py_ssize_t i = 0; i < m; i++) {
            if (i + 8 < m) {
                int64_t q = cur[i + 8] / F;
                prefetch_row(child + q * F, F);
                if (cmin) {
                    prefetch_row(cmin + q * F, F);
                }
            }
            int64_t p = cur[i] / F;
            if (p == last) {
                continue;
            }
            last = p;
            scratch[w++] = p; /* w <= i: writing over cur == scratch in place is safe */
            const double *c = child + p * F;
            parent[p] = node_sum(c, F, tmp);
            double mn = INFINITY;
            if (cmin) {
                const double *cm = cmin + p * F;
                for (int64_t t = 0; t < F; t++) {
                    mn = cm[t] < mn ? cm[t] : mn;
                }
            }
            else {
                for (int64_t t = 0; t < F; t++) {
                    double v = c[t] > 0.0 ? c[t] : INFINITY;
                    mn = v < mn ? v : mn;
                }
            }
            pmin[p] = mn;
        }
        cur = scratch;
        m = w;
    }
}

/* ------------------------------------------------------------------ set_leaves */

PyDoc_STRVAR(set_leaves_doc,
             "set_leaves(sums, mins, layout, idx, values)\n\n"
             "Write leaves idx (int64, in [0, size[0]); sorted for speed, repeats allowed: the last value\n"
             "wins) and recompute every ancestor sum and min from its children.");

static PyObject *
set_leaves(PyObject *self, PyObject *args)
{
    PyObject *o_sums, *o_mins, *o_lay, *o_idx, *o_val;
    if (!PyArg_ParseTuple(args, "OOOOO:set_leaves", &o_sums, &o_mins, &o_lay, &o_idx, &o_val)) {
        return NULL;
    }
    Py_buffer b_sums, b_mins, b_lay, b_idx, b_val;
    int got = 0;
    PyObject *ret = NULL;
    int64_t *scratch = NULL;
    double *tmp = NULL;
    if (get_buf(o_sums, &b_sums, 'd', 1, "sums") < 0) {
        goto done;
    }
    got = 1;
    if (get_buf(o_mins, &b_mins, 'd', 1, "mins") < 0) {
        goto done;
    }
    got = 2;
    if (get_buf(o_lay, &b_lay, 'q', 0, "layout") < 0) {
        goto done;
    }
    got = 3;
    if (get_buf(o_idx, &b_idx, 'q', 0, "idx") < 0) {
        goto done;
    }
    got = 4;
    if (get_buf(o_val, &b_val, 'd', 0, "values") < 0) {
        goto done;
    }
    got = 5;
    Layout lay;
    if (parse_layout(&b_lay, &lay, buf_len(&b_sums), buf_len(&b_mins)) < 0) {
        goto done;
    }
    Py_ssize_t n = buf_len(&b_idx);
    if (buf_len(&b_val) != n) {
        PyErr_SetString(PyExc_ValueError, "idx and values must have the same length");
        goto done;
    }
    const int64_t *idx = (const int64_t *)b_idx.buf;
    const double *val = (const double *)b_val.buf;
    for (Py_ssize_t i = 0; i < n; i++) {
        if (idx[i] < 0 || idx[i] >= lay.size[0]) {
            PyErr_Format(PyExc_IndexError, "leaf index %lld out of range [0, %lld)", (long long)idx[i],
                         (long long)lay.size[0]);
            goto done;
        }
    }
    if (n > 0) {
        scratch = (int64_t *)PyMem_RawMalloc((size_t)n * sizeof(int64_t));
        tmp = (double *)PyMem_RawMalloc((size_t)lay.F * sizeof(double));
        if (!scratch || !tmp) {
            PyErr_NoMemory();
            goto done;
        }
    }
    double *sums = (double *)b_sums.buf;
    double *mins = (double *)b_mins.buf;
    Py_BEGIN_ALLOW_THREADS;
    double *leaves = sums + lay.off[0];
    for (Py_ssize_t i = 0; i < n; i++) {
        leaves[idx[i]] = val[i];
    }
    propagate(sums, mins, &lay, idx, n, scratch, tmp);
    Py_END_ALLOW_THREADS;

    ret = Py_None;
    Py_INCREF(ret);
done:
    PyMem_RawFree(scratch);
    PyMem_RawFree(tmp);
    if (got >= 5) {
        PyBuffer_Release(&b_val);
    }
    if (got >= 4) {
        PyBuffer_Release(&b_idx);
    }
    if (got >= 3) {
        PyBuffer_Release(&b_lay);
    }
    if (got >= 2) {
        PyBuffer_Release(&b_mins);
    }
    if (got >= 1) {
        PyBuffer_Release(&b_sums);
    }
    return ret;
}

/* ------------------------------------------------------------------ descend */

PyDoc_STRVAR(descend_doc,
             "descend(sums, layout, top_cs, x, stratified, out_idx, out_vals) -> int\n\n"
             "Leaf index and value for each query. top_cs is np.cumsum of the top level (its last entry is\n"
             "the total). With stratified false x holds the prefix sums u; with stratified true x holds\n"
             "uniform draws r and u[i] = (i + r[i]) * (total / len(x)). Each u is clipped to\n"
             "nextafter(total, 0). Returns how many queries ended on a leaf <= 0 (empty).");

static PyObject *
descend(PyObject *self, PyObject *args)
{
    PyObject *o_sums, *o_lay, *o_cs, *o_x, *o_idx, *o_val;
    int stratified;
    if (!PyArg_ParseTuple(args, "OOOOpOO:descend", &o_sums, &o_lay, &o_cs, &o_x, &stratified, &o_idx, &o_val)) {
        return NULL;
    }
    Py_buffer b_sums, b_lay, b_cs, b_x, b_idx, b_val;
    int got = 0;
    PyObject *ret = NULL;
    double *scan = NULL;
    if (get_buf(o_sums, &b_sums, 'd', 0, "sums") < 0) {
        goto done;
    }
    got = 1;
    if (get_buf(o_lay, &b_lay, 'q', 0, "layout") < 0) {
        goto done;
    }
    got = 2;
    if (get_buf(o_cs, &b_cs, 'd', 0, "top_cs") < 0) {
        goto done;
    }
    got = 3;
    if (get_buf(o_x, &b_x, 'd', 0, "x") < 0) {
        goto done;
    }
    got = 4;
    if (get_buf(o_idx, &b_idx, 'q', 1, "out_idx") < 0) {
        goto done;
    }
    got = 5;
    if (get_buf(o_val, &b_val, 'd', 1, "out_vals") < 0) {
        goto done;
    }
    got = 6;
    Layout lay;
    if (parse_layout(&b_lay, &lay, buf_len(&b_sums), -1) < 0) {
        goto done;
    }
    const Py_ssize_t n = buf_len(&b_x);
    const Py_ssize_t ntop = buf_len(&b_cs);
    if (buf_len(&b_idx) != n || buf_len(&b_val) != n) {
        PyErr_SetString(PyExc_ValueError, "x, out_idx and out_vals must have the same length");
        goto done;
    }
    if (ntop != lay.size[lay.L - 1]) {
        PyErr_SetString(PyExc_ValueError, "top_cs must have one entry per top-level node");
        goto done;
    }
    scan = (double *)PyMem_RawMalloc(((size_t)lay.F * 2 + (size_t)n + 1) * sizeof(double));
    if (!scan) {
        PyErr_NoMemory();
        goto done;
    }
    const double *sums = (const double *)b_sums.buf;
    const double *cs = (const double *)b_cs.buf;
    const double *x = (const double *)b_x.buf;
    int64_t *out_idx = (int64_t *)b_idx.buf;
    double *out_val = (double *)b_val.buf;
    const int64_t F = lay.F;
    Py_ssize_t n_bad = 0;
    double *ubuf = scan + 2 * lay.F;

    Py_BEGIN_ALLOW_THREADS;
    const double total = cs[ntop - 1];
    const double u_max = nextafter(total, 0.0);
    const double scale = n > 0 ? total / (double)n : 0.0;
    /* Level by level over the whole batch (as the NumPy path does), prefetching each query's next
     * row one level ahead, so that the cache misses of different queries overlap. */
    Py_ssize_t prev = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        double u = stratified ? ((double)i + x[i]) * scale : x[i];
        u = u_max < u ? u_max : u; /* np.minimum */
        /* stratified queries increase with i (u_max clips monotonically): search forward */
        Py_ssize_t jt = stratified ? upper_bound_from(cs, ntop, u, prev) : upper_bound(cs, ntop, u);
        prev = jt;
        int64_t j = jt < ntop ? jt : ntop - 1;
        if (j > 0) {
            u = u - cs[j - 1];
        }
        ubuf[i] = u;
        out_idx[i] = j;
        if (lay.L > 1) {
            prefetch_row(sums + lay.off[lay.L - 2] + j * F, F);
        }
    }
    for (int64_t k = lay.L - 2; k >= 0; k--) {
        const double *level = sums + lay.off[k];
        const double *below = k > 0 ? sums + lay.off[k - 1] : NULL;
        /* the last level-k node that has a row of children at level k - 1 */
        const int64_t last_node = k > 0 ? lay.size[k - 1] / F - 1 : lay.size[0] - 1;
        for (Py_ssize_t i = 0; i < n; i++) {
            int64_t j = out_idx[i];
            int64_t maxch = last_node - j * F;
            maxch = maxch < F - 1 ? maxch : F - 1;
            j = j * F + child_of(level + j * F, F, &ubuf[i], scan, maxch);
            out_idx[i] = j;
            if (below) {
                prefetch_row(below + j * F, F);
            }
            else {
                PREFETCH(level + j);
            }
        }
    }
    const double *leaves = sums + lay.off[0];
    for (Py_ssize_t i = 0; i < n; i++) {
        double v = leaves[out_idx[i]];
        out_val[i] = v;
        if (!(v > 0.0)) {
            n_bad++;
        }
    }
    Py_END_ALLOW_THREADS;

    ret = PyLong_FromSsize_t(n_bad);
done:
    PyMem_RawFree(scan);
    if (got >= 6) {
        PyBuffer_Release(&b_val);
    }
    if (got >= 5) {
        PyBuffer_Release(&b_idx);
    }
    if (got >= 4) {
        PyBuffer_Release(&b_x);
    }
    if (got >= 3) {
        PyBuffer_Release(&b_cs);
    }
    if (got >= 2) {
        PyBuffer_Release(&b_lay);
    }
    if (got >= 1) {
        PyBuffer_Release(&b_sums);
    }
    return ret;
}

/* ------------------------------------------------------------------ top_stats */

PyDoc_STRVAR(top_stats_doc,
             "top_stats(top, top_mins, cs_out) -> float\n\n"
             "cs_out[:] = np.cumsum(top) (sequential); returns min(top_mins) (+inf when empty).");

static PyObject *
top_stats(PyObject *self, PyObject *args)
{
    PyObject *o_top, *o_mins, *o_cs;
    if (!PyArg_ParseTuple(args, "OOO:top_stats", &o_top, &o_mins, &o_cs)) {
        return NULL;
    }
    Py_buffer b_top, b_mins, b_cs;
    int got = 0;
    PyObject *ret = NULL;
    if (get_buf(o_top, &b_top, 'd', 0, "top") < 0) {
        goto done;
    }
    got = 1;
    if (get_buf(o_mins, &b_mins, 'd', 0, "top_mins") < 0) {
        goto done;
    }
    got = 2;
    if (get_buf(o_cs, &b_cs, 'd', 1, "cs_out") < 0) {
        goto done;
    }
    got = 3;
    Py_ssize_t n = buf_len(&b_top);
    if (buf_len(&b_cs) != n) {
        PyErr_SetString(PyExc_ValueError, "top and cs_out must have the same length");
        goto done;
    }
    const double *top = (const double *)b_top.buf;
    const double *tm = (const double *)b_mins.buf;
    double *cs = (double *)b_cs.buf;
    Py_ssize_t nm = buf_len(&b_mins);
    double mn = INFINITY;
    Py_BEGIN_ALLOW_THREADS;
    if (n > 0) {
        double acc = top[0];
        cs[0] = acc;
        for (Py_ssize_t i = 1; i < n; i++) {
            acc = acc + top[i];
            cs[i] = acc;
        }
    }
    /* 4 independent chains; min is exact, so the order does not matter */
    double m0 = INFINITY, m1 = INFINITY, m2 = INFINITY, m3 = INFINITY;
    Py_ssize_t i = 0;
    for (; i + 4 <= nm; i += 4) {
        m0 = tm[i] < m0 ? tm[i] : m0;
        m1 = tm[i + 1] < m1 ? tm[i + 1] : m1;
        m2 = tm[i + 2] < m2 ? tm[i + 2] : m2;
        m3 = tm[i + 3] < m3 ? tm[i + 3] : m3;
    }
    for (; i < nm; i++) {
        m0 = tm[i] < m0 ? tm[i] : m0;
    }
    m0 = m1 < m0 ? m1 : m0;
    m2 = m3 < m2 ? m3 : m2;
    mn = m2 < m0 ? m2 : m0;
    Py_END_ALLOW_THREADS;
    ret = PyFloat_FromDouble(mn);
done:
    if (got >= 3) {
        PyBuffer_Release(&b_cs);
    }
    if (got >= 2) {
        PyBuffer_Release(&b_mins);
    }
    if (got >= 1) {
        PyBuffer_Release(&b_top);
    }
    return ret;
}

/* ------------------------------------------------------------------ update_slots */

PyDoc_STRVAR(check_update_doc,
             "check_update(ids, p) -> int\n\n"
             "0 if every id is >= 0 and every priority finite and >= 0; else 1 (a negative id) or 2 (a bad\n"
             "priority). Lets the caller skip NumPy validation on the fast path.");

static PyObject *
check_update(PyObject *self, PyObject *args)
{
    PyObject *o_ids, *o_p;
    if (!PyArg_ParseTuple(args, "OO:check_update", &o_ids, &o_p)) {
        return NULL;
    }
    Py_buffer b_ids, b_p;
    if (get_buf(o_ids, &b_ids, 'q', 0, "ids") < 0) {
        return NULL;
    }
    if (get_buf(o_p, &b_p, 'd', 0, "p") < 0) {
        PyBuffer_Release(&b_ids);
        return NULL;
    }
    const int64_t *ids = (const int64_t *)b_ids.buf;
    const double *p = (const double *)b_p.buf;
    Py_ssize_t n = buf_len(&b_ids), np_ = buf_len(&b_p);
    long code = 0;
    Py_BEGIN_ALLOW_THREADS;
    int64_t neg = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        neg |= ids[i] < 0;
    }
    int bad = 0;
    for (Py_ssize_t i = 0; i < np_; i++) {
        bad |= !(p[i] >= 0.0 && p[i] < INFINITY); /* NaN fails both */
    }
    code = neg ? 1 : (bad ? 2 : 0);
    Py_END_ALLOW_THREADS;
    PyBuffer_Release(&b_p);
    PyBuffer_Release(&b_ids);
    return PyLong_FromLong(code);
}

PyDoc_STRVAR(update_slots_doc,
             "update_slots(sums, mins, layout, slot_ids, raw, ids, p, leaf) -> (n_live, n_unique, max_p)\n\n"
             "Replay priority update: for each ids[i] >= 0 whose slot ids[i] % len(slot_ids) still holds it,\n"
             "raw[slot] = p[i] and leaf[slot] = leaf[i], the last occurrence of a slot winning; then every\n"
             "ancestor is recomputed. n_live counts the live entries (repeats included), n_unique the\n"
             "distinct slots written, max_p is the largest live p (-1.0 when none is live).");

static PyObject *
update_slots(PyObject *self, PyObject *args)
{
    PyObject *o_sums, *o_mins, *o_lay, *o_sid, *o_raw, *o_ids, *o_p, *o_leaf;
    if (!PyArg_ParseTuple(args, "OOOOOOOO:update_slots", &o_sums, &o_mins, &o_lay, &o_sid, &o_raw, &o_ids, &o_p,
                          &o_leaf)) {
        return NULL;
    }
    Py_buffer bufs[8];
    PyObject *objs[8] = {o_sums, o_mins, o_lay, o_sid, o_raw, o_ids, o_p, o_leaf};
    const char kinds[8] = {'d', 'd', 'q', 'q', 'd', 'q', 'd', 'd'};
    const int wr[8] = {1, 1, 0, 0, 1, 0, 0, 0};
    const char *names[8] = {"sums", "mins", "layout", "slot_ids", "raw", "ids", "p", "leaf"};
    int got = 0;
    PyObject *ret = NULL;
    int64_t *scratch = NULL;
    int64_t *table = NULL;
    double *tmp = NULL;
    for (; got < 8; got++) {
        if (get_buf(objs[got], &bufs[got], kinds[got], wr[got], names[got]) < 0) {
            goto done;
        }
    }
    Layout lay;
    if (parse_layout(&bufs[2], &lay, buf_len(&bufs[0]), buf_len(&bufs[1])) < 0) {
        goto done;
    }
    const Py_ssize_t cap = buf_len(&bufs[3]);
    const Py_ssize_t n = buf_len(&bufs[5]);
    if (cap < 1 || cap > lay.size[0] || buf_len(&bufs[4]) != cap || buf_len(&bufs[6]) != n ||
        buf_len(&bufs[7]) != n) {
        PyErr_SetString(PyExc_ValueError, "update_slots: inconsistent array lengths");
        goto done;
    }
    double *sums = (double *)bufs[0].buf;
    double *mins = (double *)bufs[1].buf;
    const int64_t *slot_ids = (const int64_t *)bufs[3].buf;
    double *raw = (double *)bufs[4].buf;
    const int64_t *ids = (const int64_t *)bufs[5].buf;
    const double *p = (const double *)bufs[6].buf;
    const double *leaf = (const double *)bufs[7].buf;
    for (Py_ssize_t i = 0; i < n; i++) {
        if (ids[i] < 0) {
            PyErr_SetString(PyExc_ValueError, "ids must be >= 0");
            goto done;
        }
    }
    Py_ssize_t tsize = 16;
    while (tsize < 2 * n) {
        tsize *= 2;
    }
    scratch = (int64_t *)PyMem_RawMalloc((size_t)(n + 1) * sizeof(int64_t));
    table = (int64_t *)PyMem_RawMalloc((size_t)tsize * sizeof(int64_t));
    tmp = (double *)PyMem_RawMalloc((size_t)lay.F * sizeof(double));
    if (!scratch || !table || !tmp) {
        PyErr_NoMemory();
        goto done;
    }
    Py_ssize_t n_live = 0, n_unique = 0;
    double max_p = -1.0;
    Py_BEGIN_ALLOW_THREADS;
    for (Py_ssize_t i = 0; i < tsize; i++) {
        table[i] = -1;
    }
    double *leaves = sums + lay.off[0];
    const uint64_t mask = (uint64_t)tsize - 1;
    /* last occurrence wins: walk backwards and skip slots already written */
    for (Py_ssize_t i = n - 1; i >= 0; i--) {
        const int64_t id = ids[i];
        const int64_t s = id % cap;
        if (slot_ids[s] != id) {
            continue;
        }
        n_live++;
        max_p = p[i] > max_p ? p[i] : max_p;
        uint64_t h = ((uint64_t)s * 0x9E3779B97F4A7C15ull) >> 20;
        for (;;) {
            h &= mask;
            if (table[h] == s) {
                break;
            }
            if (table[h] < 0) {
                table[h] = s;
                raw[s] = p[i];
                leaves[s] = leaf[i];
                scratch[n_unique++] = s;
                break;
            }
            h++;
        }
    }
    propagate(sums, mins, &lay, scratch, n_unique, scratch, tmp);
    Py_END_ALLOW_THREADS;
    ret = Py_BuildValue("nnd", n_live, n_unique, max_p);
done:
    PyMem_RawFree(scratch);
    PyMem_RawFree(table);
    PyMem_RawFree(tmp);
    while (got > 0) {
        PyBuffer_Release(&bufs[--got]);
    }
    return ret;
}

/* ------------------------------------------------------------------ take_items */

PyDoc_STRVAR(gather_doc,
             "gather(items, slot_ids, slots, out_ids) -> list\n\n"
             "out_ids[i] = slot_ids[slots[i]]; returns [items[s] for s in slots] (items a list).");

static PyObject *
gather(PyObject *self, PyObject *args)
{
    PyObject *items, *o_sid, *o_slots, *o_out;
    if (!PyArg_ParseTuple(args, "O!OOO:gather", &PyList_Type, &items, &o_sid, &o_slots, &o_out)) {
        return NULL;
    }
    Py_buffer b_sid, b_slots, b_out;
    if (get_buf(o_sid, &b_sid, 'q', 0, "slot_ids") < 0) {
        return NULL;
    }
    if (get_buf(o_slots, &b_slots, 'q', 0, "slots") < 0) {
        PyBuffer_Release(&b_sid);
        return NULL;
    }
    if (get_buf(o_out, &b_out, 'q', 1, "out_ids") < 0) {
        PyBuffer_Release(&b_slots);
        PyBuffer_Release(&b_sid);
        return NULL;
    }
    const int64_t *sid = (const int64_t *)b_sid.buf;
    const int64_t *slots = (const int64_t *)b_slots.buf;
    int64_t *out_ids = (int64_t *)b_out.buf;
    const Py_ssize_t n = buf_len(&b_slots), len = PyList_GET_SIZE(items), nsid = buf_len(&b_sid);
    PyObject *out = NULL;
    if (buf_len(&b_out) != n) {
        PyErr_SetString(PyExc_ValueError, "gather: slots and out_ids lengths differ");
        goto done;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        if (slots[i] < 0 || slots[i] >= len || slots[i] >= nsid) {
            PyErr_SetString(PyExc_IndexError, "gather: slot out of range");
            goto done;
        }
    }
    PyObject **src = ((PyListObject *)items)->ob_item;
    for (Py_ssize_t i = 0; i < n; i++) { /* random reads: issue them all before using any */
        PREFETCH(src + slots[i]);
        PREFETCH(sid + slots[i]);
    }
    out = PyList_New(n);
    if (!out) {
        goto done;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        out_ids[i] = sid[slots[i]];
        PyObject *o = src[slots[i]];
        Py_INCREF(o);
        PyList_SET_ITEM(out, i, o);
    }
done:
    PyBuffer_Release(&b_out);
    PyBuffer_Release(&b_slots);
    PyBuffer_Release(&b_sid);
    return out;
}

/* ------------------------------------------------------------------ module */

static PyMethodDef methods[] = {
    {"set_leaves", set_leaves, METH_VARARGS, set_leaves_doc},
    {"descend", descend, METH_VARARGS, descend_doc},
    {"top_stats", top_stats, METH_VARARGS, top_stats_doc},
    {"check_update", check_update, METH_VARARGS, check_update_doc},
    {"update_slots", update_slots, METH_VARARGS, update_slots_doc},
    {"gather", gather, METH_VARARGS, gather_doc},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT,
    "_sumtree_c",
    "Compiled kernels of replay_service.sumtree (batch leaf update, batch stratified descent).",
    -1,
    methods,
    NULL,
    NULL,
    NULL,
    NULL,
};

PyMODINIT_FUNC
PyInit__sumtree_c(void)
{
    return PyModule_Create(&module);
}
