/* trionsq._speedups, part two: the loops of keyed publishing (issue 32), included
 * by _speedups.c (one translation unit: it shares crc32_of and the byte helpers).
 * Each function has a pure-Python twin with the same contract, and the tests hold
 * the two equal on the same inputs.
 *
 *   key_digests        - BLAKE2b-128 of idempotency keys
 *                        (twin: trionsq.broker.idempotence._key_digests_py)
 *   read_keyed_parts   - MPUB_EXT parts whose header is only an idempotency key
 *                        (twin: trionsq.protocol.keyed_parts._read_keyed_parts_py)
 *   encode_ext         - a batch of ext records (no delay) into log bytes and Records
 *                        (twin: trionsq.queues.record_codec._encode_general)
 *   keyed_chunks       - the Spark sink's MPUB_EXT parts for a column of bodies
 *                        (twin: trionsq.spark.keyed_chunks._keyed_chunks_py)
 *
 * BLAKE2b is written here from RFC 7693 (unkeyed, 16-byte digest: what hashlib's
 * blake2b(data, digest_size=16) gives), so the digests the broker journals and the
 * keys the sink derives stay those of the pure-Python path.
 */

/* ---- BLAKE2b (RFC 7693) */

static const uint64_t blake2b_iv[8] = {
    0x6A09E667F3BCC908ULL, 0xBB67AE8584CAA73BULL, 0x3C6EF372FE94F82BULL,
    0xA54FF53A5F1D36F1ULL, 0x510E527FADE682D1ULL, 0x9B05688C2B3E6C1FULL,
    0x1F83D9ABFB41BD6BULL, 0x5BE0CD19137E2179ULL,
};

/* The message schedule: round r uses row r % 10 (RFC 7693 lists rounds 10 and 11 as
 * rows 0 and 1 again). The rounds are unrolled with constant numbers, so the modulo
 * is folded at compile time and costs nothing. */
static const uint8_t blake2b_sigma[10][16] = {
    {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15},
    {14, 10, 4, 8, 9, 15, 13, 6, 1, 12, 0, 2, 11, 7, 5, 3},
    {11, 8, 12, 0, 5, 2, 15, 13, 10, 14, 3, 6, 7, 1, 9, 4},
    {7, 9, 3, 1, 13, 12, 11, 14, 2, 6, 5, 10, 4, 0, 15, 8},
    {9, 0, 5, 7, 2, 4, 10, 15, 14, 1, 11, 12, 6, 8, 3, 13},
    {2, 12, 6, 10, 0, 11, 8, 3, 4, 13, 7, 5, 15, 14, 1, 9},
    {12, 5, 1, 15, 14, 13, 4, 10, 0, 7, 6, 3, 9, 2, 8, 11},
    {13, 11, 7, 14, 12, 1, 3, 9, 5, 0, 15, 4, 8, 6, 2, 10},
    {6, 15, 14, 9, 11, 3, 0, 8, 12, 2, 13, 7, 1, 4, 10, 5},
    {10, 2, 8, 4, 7, 6, 1, 5, 15, 11, 9, 14, 3, 12, 13, 0},
};

typedef struct {
    uint64_t h[8];
    uint64_t counter; /* bytes compressed so far (inputs stay far below 2**64) */
    unsigned char block[128];
    size_t filled;
} Blake2b;

static inline uint64_t rotr64(uint64_t x, unsigned n) { return (x >> n) | (x << (64 - n)); }

static inline uint64_t le64(const unsigned char *p)
{
    return (uint64_t)p[0] | (uint64_t)p[1] << 8 | (uint64_t)p[2] << 16 | (uint64_t)p[3] << 24 |
           (uint64_t)p[4] << 32 | (uint64_t)p[5] << 40 | (uint64_t)p[6] << 48 |
           (uint64_t)p[7] << 56;
}

#define B2_G(a, b, c, d, x, y)                                                                  \
    do {                                                                                       \
        a = a + b + (x);                                                                       \
        d = rotr64(d ^ a, 32);                                                                 \
        c = c + d;                                                                             \
        b = rotr64(b ^ c, 24);                                                                 \
        a = a + b + (y);                                                                       \
        d = rotr64(d ^ a, 16);                                                                 \
        c = c + d;                                                                             \
        b = rotr64(b ^ c, 63);                                                                 \
    } while (0)

static void blake2b_compress(Blake2b *s, int last)
{
    uint64_t m[16], v[16];
    for (int i = 0; i < 16; i++)
        m[i] = le64(s->block + 8 * i);
    for (int i = 0; i < 8; i++) {
        v[i] = s->h[i];
        v[i + 8] = blake2b_iv[i];
    }
    v[12] ^= s->counter;
    if (last)
        v[14] = ~v[14];
    /* Unrolled with constant round numbers, so the schedule's indexes are folded
     * in and v stays in registers (3x faster than a loop over the rounds). */
#define B2_ROUND(r)                                                                             \
    do {                                                                                       \
        const uint8_t *z = blake2b_sigma[(r) % 10];                                            \
        B2_G(v[0], v[4], v[8], v[12], m[z[0]], m[z[1]]);                                       \
        B2_G(v[1], v[5], v[9], v[13], m[z[2]], m[z[3]]);                                       \
        B2_G(v[2], v[6], v[10], v[14], m[z[4]], m[z[5]]);                                      \
        B2_G(v[3], v[7], v[11], v[15], m[z[6]], m[z[7]]);                                      \
        B2_G(v[0], v[5], v[10], v[15], m[z[8]], m[z[9]]);                                      \
        B2_G(v[1], v[6], v[11], v[12], m[z[10]], m[z[11]]);                                    \
        B2_G(v[2], v[7], v[8], v[13], m[z[12]], m[z[13]]);                                     \
        B2_G(v[3], v[4], v[9], v[14], m[z[14]], m[z[15]]);                                     \
    } while (0)
    B2_ROUND(0);
    B2_ROUND(1);
    B2_ROUND(2);
    B2_ROUND(3);
    B2_ROUND(4);
    B2_ROUND(5);
    B2_ROUND(6);
    B2_ROUND(7);
    B2_ROUND(8);
    B2_ROUND(9);
    B2_ROUND(10);
    B2_ROUND(11);
#undef B2_ROUND
    for (int i = 0; i < 8; i++)
        s->h[i] ^= v[i] ^ v[i + 8];
}

#define DIGEST_SIZE 16

static void blake2b_init(Blake2b *s)
{
    memcpy(s->h, blake2b_iv, sizeof(s->h));
    s->h[0] ^= 0x01010000ULL ^ DIGEST_SIZE; /* fanout 1, depth 1, no key */
    s->counter = 0;
    s->filled = 0;
}

static void blake2b_update(Blake2b *s, const unsigned char *p, size_t n)
{
    while (n) {
        if (s->filled == 128) { /* a full block is compressed once more input comes */
            s->counter += 128;
            blake2b_compress(s, 0);
            s->filled = 0;
        }
        size_t take = 128 - s->filled;
        if (take > n)
            take = n;
        memcpy(s->block + s->filled, p, take);
        s->filled += take;
        p += take;
        n -= take;
    }
}

static void blake2b_final(Blake2b *s, unsigned char out[DIGEST_SIZE])
{
    s->counter += s->filled;
    memset(s->block + s->filled, 0, 128 - s->filled);
    blake2b_compress(s, 1);
    for (int i = 0; i < DIGEST_SIZE; i++)
        out[i] = (unsigned char)(s->h[i / 8] >> (8 * (i % 8)));
}

static void blake2b_of(const unsigned char *p, size_t n, unsigned char out[DIGEST_SIZE])
{
    Blake2b s;
    blake2b_init(&s);
    blake2b_update(&s, p, n);
    blake2b_final(&s, out);
}

static PyObject *blake2b_py(PyObject *Py_UNUSED(self), PyObject *arg)
{
    Py_buffer view;
    unsigned char digest[DIGEST_SIZE];
    if (PyObject_GetBuffer(arg, &view, PyBUF_SIMPLE) < 0)
        return NULL;
    blake2b_of(view.buf, (size_t)view.len, digest);
    PyBuffer_Release(&view);
    return PyBytes_FromStringAndSize((const char *)digest, DIGEST_SIZE);
}

/* ---- key_digests */

PyDoc_STRVAR(key_digests_doc,
"key_digests(keys) -> list[bytes | None] | None\n\n"
"BLAKE2b-128 of each key's UTF-8 (None for None); None when a key is not a str\n"
"that encodes to UTF-8 (a lone surrogate: the caller's twin handles the batch).");

static PyObject *key_digests(PyObject *Py_UNUSED(self), PyObject *keys)
{
    PyObject *seq = PySequence_Fast(keys, "keys must be a sequence");
    if (seq == NULL)
        return NULL;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
    PyObject *out = PyList_New(n);
    if (out == NULL) {
        Py_DECREF(seq);
        return NULL;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *key = PySequence_Fast_GET_ITEM(seq, i), *digest;
        if (key == Py_None) {
            Py_INCREF(Py_None);
            digest = Py_None;
        } else {
            Py_ssize_t length;
            const char *text = PyUnicode_Check(key) ? PyUnicode_AsUTF8AndSize(key, &length) : NULL;
            if (text == NULL) {
                PyErr_Clear();
                Py_DECREF(out);
                Py_DECREF(seq);
                Py_RETURN_NONE;
            }
            unsigned char raw[DIGEST_SIZE];
            blake2b_of((const unsigned char *)text, (size_t)length, raw);
            digest = PyBytes_FromStringAndSize((const char *)raw, DIGEST_SIZE);
            if (digest == NULL) {
                Py_DECREF(out);
                Py_DECREF(seq);
                return NULL;
            }
        }
        PyList_SET_ITEM(out, i, digest);
    }
    Py_DECREF(seq);
    return out;
}

/* ---- read_keyed_parts */

static const char KEY_ONLY_START[] = "{\"##idempotency_key\":\"";
#define KEY_ONLY_START_LEN ((Py_ssize_t)sizeof(KEY_ONLY_START) - 1)
#define MAX_KEY_BYTES 256

/* A JSON string that is its own text: printable ASCII but the quote and backslash. */
static inline int plain_key_byte(unsigned char c)
{
    return c >= 0x20 && c <= 0x7E && c != '"' && c != '\\';
}

/* The key of a header that is only {"##idempotency_key":"<plain key>"}, or -1. */
static Py_ssize_t key_only_length(const unsigned char *h, Py_ssize_t length)
{
    Py_ssize_t key_length = length - KEY_ONLY_START_LEN - 2;
    if (key_length < 1 || key_length > MAX_KEY_BYTES)
        return -1;
    if (memcmp(h, KEY_ONLY_START, (size_t)KEY_ONLY_START_LEN) != 0 || h[length - 2] != '"' ||
        h[length - 1] != '}')
        return -1;
    const unsigned char *key = h + KEY_ONLY_START_LEN;
    for (Py_ssize_t i = 0; i < key_length; i++)
        if (!plain_key_byte(key[i]))
            return -1;
    return key_length;
}

static inline int32_t be32s(const unsigned char *p) { return (int32_t)be32(p); }

/* One part's message: make(header, body, None, None, key). */
static PyObject *keyed_message(const unsigned char *header, Py_ssize_t header_length,
                               Py_ssize_t key_length, const unsigned char *body,
                               Py_ssize_t body_length, PyObject *make)
{
    PyObject *args[5] = {NULL, NULL, Py_None, Py_None, NULL}, *message = NULL;
    args[0] = PyBytes_FromStringAndSize((const char *)header, header_length);
    args[1] = PyBytes_FromStringAndSize((const char *)body, body_length);
    args[4] = PyUnicode_DecodeASCII((const char *)header + KEY_ONLY_START_LEN, key_length, NULL);
    if (args[0] != NULL && args[1] != NULL && args[4] != NULL)
        message = PyObject_Vectorcall(make, args, 5, NULL);
    Py_XDECREF(args[0]);
    Py_XDECREF(args[1]);
    Py_XDECREF(args[4]);
    return message;
}

PyDoc_STRVAR(read_keyed_parts_doc,
"read_keyed_parts(data, at, count, budget, max_msg, make, out)\n"
"-> (at, taken, budget, unusual)\n\n"
"Append make(header, body, None, None, key) to out for each whole MPUB_EXT part of\n"
"data from at on whose header is only {\"##idempotency_key\":\"<printable ASCII>\"},\n"
"at most count, each within budget (the body bytes left) and max_msg. Stops at the\n"
"first part that is not whole (unusual False: more data is needed) or that the\n"
"exact reader must see (unusual True: a size out of bounds, or another header).");

static PyObject *read_keyed_parts(PyObject *Py_UNUSED(self), PyObject *const *args,
                                  Py_ssize_t nargs)
{
    if (check_nargs("read_keyed_parts", nargs, 7) < 0)
        return NULL;
    Py_buffer view;
    if (PyObject_GetBuffer(args[0], &view, PyBUF_SIMPLE) < 0)
        return NULL;
    PyObject *result = NULL;
    Py_ssize_t at = PyLong_AsSsize_t(args[1]);
    Py_ssize_t count = PyLong_AsSsize_t(args[2]);
    long long budget = PyLong_AsLongLong(args[3]);
    long long max_msg = PyLong_AsLongLong(args[4]);
    PyObject *make = args[5], *out = args[6];
    if (read_args_failed(out))
        goto done;
    const unsigned char *b = view.buf;
    Py_ssize_t length = view.len, taken = 0;
    int unusual = 0;
    if (at < 0 || at > length) {
        PyErr_SetString(PyExc_ValueError, "at is outside data");
        goto done;
    }
    while (taken < count && length - at >= 4) {
        long long size = be32s(b + at);
        if (size <= 2 || size > max_msg || size + 4 > budget) {
            unusual = 1;
            break;
        }
        if (length - at < 6)
            break;
        Py_ssize_t header_length = be16(b + at + 4);
        if (2 + header_length >= size) {
            unusual = 1;
            break;
        }
        if (length - at - 4 < size)
            break;
        const unsigned char *header = b + at + 6;
        Py_ssize_t key_length = key_only_length(header, header_length);
        if (key_length < 0) {
            unusual = 1;
            break;
        }
        PyObject *message = keyed_message(header, header_length, key_length,
                                          header + header_length,
                                          (Py_ssize_t)size - 2 - header_length, make);
        if (message == NULL)
            goto done;
        int failed = PyList_Append(out, message);
        Py_DECREF(message);
        if (failed < 0)
            goto done;
        at += 4 + (Py_ssize_t)size;
        budget -= size + 4;
        taken++;
    }
    result = Py_BuildValue("nnLO", at, taken, budget, unusual ? Py_True : Py_False);
done:
    PyBuffer_Release(&view);
    return result;
}

/* ---- encode_ext */

PyDoc_STRVAR(encode_ext_doc,
"encode_ext(bodies, exts, ext_version, timestamp, first_id, offset, trace_ids, make)\n"
"-> (data, records, offsets) | None\n\n"
"encode_plain for records with an ext header each (no delay); None when a body or\n"
"an ext is not exactly bytes, or an ext is longer than its 2-byte length allows\n"
"(the caller encodes the batch in Python, which tells which).");

/* Hold each part's body and ext (new references, alive while the GIL is released)
 * and read its trace id; 0: done, 1: a part for the Python twin, -1: an error. */
static int ext_parts(PyObject *body_seq, PyObject *ext_seq, PyObject *traces, Py_ssize_t n,
                     PyObject **bodies, PyObject **exts, uint64_t *trace_ids, Py_ssize_t *held,
                     Py_ssize_t *total)
{
    for (; *held < n; (*held)++) {
        Py_ssize_t i = *held;
        PyObject *body = PySequence_Fast_GET_ITEM(body_seq, i);
        PyObject *ext = PySequence_Fast_GET_ITEM(ext_seq, i);
        if (!PyBytes_CheckExact(body) || !PyBytes_CheckExact(ext) ||
            PyBytes_GET_SIZE(ext) > 0xFFFF - 1)
            return 1;
        if (PyBytes_GET_SIZE(body) > (Py_ssize_t)UINT32_MAX - FIXED_SIZE - 2 - 0xFFFF) {
            PyErr_SetString(PyExc_OverflowError, "body too large for a record");
            return -1;
        }
        trace_ids[i] = 0;
        if (traces != NULL) {
            trace_ids[i] = PyLong_AsUnsignedLongLong(PySequence_Fast_GET_ITEM(traces, i));
            if (PyErr_Occurred())
                return -1;
        }
        Py_INCREF(body);
        Py_INCREF(ext);
        bodies[i] = body;
        exts[i] = ext;
        *total += FIXED_SIZE + 2 + PyBytes_GET_SIZE(ext) + PyBytes_GET_SIZE(body);
    }
    return 0;
}

static PyObject *encode_ext(PyObject *Py_UNUSED(self), PyObject *const *args, Py_ssize_t nargs)
{
    if (check_nargs("encode_ext", nargs, 8) < 0)
        return NULL;
    PyObject *body_seq = PySequence_Fast(args[0], "bodies must be a sequence");
    PyObject *ext_seq =
        body_seq == NULL ? NULL : PySequence_Fast(args[1], "exts must be a sequence");
    PyObject *traces = NULL, *result = NULL;
    PyObject **bodies = NULL, **exts = NULL;
    uint64_t *trace_ids = NULL;
    Py_ssize_t n = 0, held = 0, total = 0;
    if (ext_seq == NULL)
        goto done;
    n = PySequence_Fast_GET_SIZE(body_seq);
    long ext_version = PyLong_AsLong(args[2]);
    long long timestamp = PyLong_AsLongLong(args[3]);
    unsigned long long first_id = PyLong_AsUnsignedLongLong(args[4]);
    long long offset = PyLong_AsLongLong(args[5]);
    if (PyErr_Occurred())
        goto done;
    if (ext_version < 1 || ext_version > 255) {
        PyErr_SetString(PyExc_ValueError, "ext_version must be 1..255");
        goto done;
    }
    if (PySequence_Fast_GET_SIZE(ext_seq) < n) {
        PyErr_SetString(PyExc_ValueError, "exts need one entry per body");
        goto done;
    }
    if (args[6] != Py_None && (traces = trace_seq(args[6], n)) == NULL)
        goto done;
    bodies = PyMem_Malloc(sizeof(PyObject *) * (size_t)(n ? n : 1));
    exts = PyMem_Malloc(sizeof(PyObject *) * (size_t)(n ? n : 1));
    trace_ids = PyMem_Malloc(sizeof(uint64_t) * (size_t)(n ? n : 1));
    if (bodies == NULL || exts == NULL || trace_ids == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    int taken = ext_parts(body_seq, ext_seq, traces, n, bodies, exts, trace_ids, &held, &total);
    if (taken != 0) {
        if (taken > 0) {
            result = Py_None; /* the Python twin handles the batch (and says why) */
            Py_INCREF(result);
        }
        goto done;
    }
    result = written_batch(total, bodies, exts, trace_ids, traces, n, timestamp, first_id,
                           offset, ext_version, args[7]);
done:
    for (Py_ssize_t i = 0; i < held; i++) {
        Py_DECREF(bodies[i]);
        Py_DECREF(exts[i]);
    }
    PyMem_Free(bodies);
    PyMem_Free(exts);
    PyMem_Free(trace_ids);
    Py_XDECREF(traces);
    Py_XDECREF(ext_seq);
    Py_XDECREF(body_seq);
    return result;
}

/* ---- keyed_chunks */

#define KEY_TEXT_MAX 56 /* 32 hex digits, a dot, a decimal count */

typedef struct {
    Py_ssize_t start, stop; /* the body in the data buffer */
    uint32_t partition;
    unsigned char key_length;
    char key[KEY_TEXT_MAX];
} KeyedRow;

/* The row's fingerprint's count so far in ``seen`` (fingerprint -> rows), plus one. */
static long long seen_before(PyObject *seen, const unsigned char *fingerprint)
{
    PyObject *name = PyBytes_FromStringAndSize((const char *)fingerprint, DIGEST_SIZE);
    if (name == NULL)
        return -1;
    long long before = 0;
    PyObject *found = PyDict_GetItemWithError(seen, name); /* borrowed */
    if (found != NULL)
        before = PyLong_AsLongLong(found);
    PyObject *next = PyErr_Occurred() ? NULL : PyLong_FromLongLong(before + 1);
    int failed = next == NULL || PyDict_SetItem(seen, name, next) < 0;
    Py_XDECREF(next);
    Py_DECREF(name);
    return failed ? -1 : before;
}

static int keyed_row(KeyedRow *row, const unsigned char *data, const unsigned char *prefix,
                     Py_ssize_t prefix_length, const unsigned char *extra,
                     Py_ssize_t extra_length, PyObject *seen, uint32_t partitions)
{
    static const char digits[] = "0123456789abcdef";
    unsigned char fingerprint[DIGEST_SIZE];
    Blake2b s;
    blake2b_init(&s);
    blake2b_update(&s, prefix, (size_t)prefix_length);
    blake2b_update(&s, data + row->start, (size_t)(row->stop - row->start));
    blake2b_update(&s, extra, (size_t)extra_length);
    blake2b_final(&s, fingerprint);
    long long before = seen_before(seen, fingerprint);
    if (before < 0)
        return -1;
    for (int i = 0; i < DIGEST_SIZE; i++) {
        row->key[2 * i] = digits[fingerprint[i] >> 4];
        row->key[2 * i + 1] = digits[fingerprint[i] & 0xF];
    }
    int length = 2 * DIGEST_SIZE;
    if (before)
        length += snprintf(row->key + length, KEY_TEXT_MAX - (size_t)length, ".%lld", before);
    row->key_length = (unsigned char)length;
    row->partition = be32(fingerprint) % partitions;
    return 0;
}

static Py_ssize_t keyed_part_size(const KeyedRow *row)
{
    return 6 + KEY_ONLY_START_LEN + row->key_length + 2 + (row->stop - row->start);
}

static unsigned char *write_keyed_part(unsigned char *p, const KeyedRow *row,
                                       const unsigned char *data)
{
    Py_ssize_t header = KEY_ONLY_START_LEN + row->key_length + 2;
    Py_ssize_t body = row->stop - row->start;
    put_be32(p, (uint32_t)(2 + header + body));
    p[4] = (unsigned char)(header >> 8);
    p[5] = (unsigned char)header;
    p += 6;
    memcpy(p, KEY_ONLY_START, (size_t)KEY_ONLY_START_LEN);
    p += KEY_ONLY_START_LEN;
    memcpy(p, row->key, row->key_length);
    p += row->key_length;
    *p++ = '"';
    *p++ = '}';
    memcpy(p, data + row->start, (size_t)body);
    return p + body;
}

/* Every partition's rows, in order, as (partition, count, parts) of batch_size rows. */
static PyObject *keyed_chunk_list(const KeyedRow *rows, Py_ssize_t n, uint32_t partitions,
                                  Py_ssize_t batch_size, const unsigned char *data)
{
    PyObject *chunks = PyList_New(0);
    Py_ssize_t *members = PyMem_Malloc(sizeof(Py_ssize_t) * (size_t)(n ? n : 1));
    if (chunks == NULL || members == NULL) {
        PyMem_Free(members);
        Py_XDECREF(chunks);
        return PyErr_NoMemory();
    }
    for (uint32_t partition = 0; partition < partitions; partition++) {
        Py_ssize_t found = 0;
        for (Py_ssize_t i = 0; i < n; i++)
            if (rows[i].partition == partition)
                members[found++] = i;
        for (Py_ssize_t from = 0; from < found; from += batch_size) {
            Py_ssize_t to = from + batch_size < found ? from + batch_size : found, total = 0;
            for (Py_ssize_t k = from; k < to; k++)
                total += keyed_part_size(&rows[members[k]]);
            PyObject *parts = PyBytes_FromStringAndSize(NULL, total);
            PyObject *chunk = parts == NULL ? NULL
                                            : Py_BuildValue("(InN)", partition, to - from, parts);
            if (chunk == NULL || PyList_Append(chunks, chunk) < 0) {
                Py_XDECREF(chunk);
                PyMem_Free(members);
                Py_DECREF(chunks);
                return NULL;
            }
            Py_DECREF(chunk);
            unsigned char *p = (unsigned char *)PyBytes_AS_STRING(parts);
            for (Py_ssize_t k = from; k < to; k++)
                p = write_keyed_part(p, &rows[members[k]], data);
        }
    }
    PyMem_Free(members);
    return chunks;
}

PyDoc_STRVAR(keyed_chunks_doc,
"keyed_chunks(offsets, data, first, count, wide, prefix, extra, seen, partitions,\n"
"             batch_size) -> list[tuple[int, int, bytes]]\n\n"
"The Spark sink's MPUB_EXT parts for count bodies of an Arrow binary or string\n"
"column (its offsets buffer, int64 when wide, else int32, from index first, and\n"
"its data buffer): each body's idempotency key is the hex BLAKE2b-128 of\n"
"prefix + body + extra, with '.<n>' for its n-th repeat (seen counts them and is\n"
"updated), and its partition the key's first 4 bytes modulo partitions. Returns\n"
"(partition, messages, parts) of at most batch_size messages, partition by\n"
"partition, rows in order.");

static PyObject *keyed_chunks(PyObject *Py_UNUSED(self), PyObject *const *args, Py_ssize_t nargs)
{
    if (check_nargs("keyed_chunks", nargs, 10) < 0)
        return NULL;
    static const int buffer_args[4] = {0, 1, 5, 6}; /* offsets, data, prefix, extra */
    Py_buffer views[4];
    const Py_buffer *offsets = &views[0], *data = &views[1], *prefix = &views[2],
                    *extra = &views[3];
    int got = 0; /* views held: released in reverse on the way out */
    PyObject *result = NULL;
    KeyedRow *rows = NULL;
    for (; got < 4; got++)
        if (PyObject_GetBuffer(args[buffer_args[got]], &views[got], PyBUF_SIMPLE) < 0)
            goto done;
    Py_ssize_t first = PyLong_AsSsize_t(args[2]), n = PyLong_AsSsize_t(args[3]);
    int wide = PyObject_IsTrue(args[4]);
    PyObject *seen = args[7];
    long partitions = PyLong_AsLong(args[8]);
    Py_ssize_t batch_size = PyLong_AsSsize_t(args[9]);
    if (PyErr_Occurred() || wide < 0)
        goto done;
    Py_ssize_t width = wide ? 8 : 4;
    if (!PyDict_Check(seen) || partitions < 1 || batch_size < 1 || first < 0 || n < 0 ||
        (first + n + 1) * width > offsets->len) {
        PyErr_SetString(PyExc_ValueError, "keyed_chunks: bad arguments");
        goto done;
    }
    rows = PyMem_Malloc(sizeof(KeyedRow) * (size_t)(n ? n : 1));
    if (rows == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    const unsigned char *ends = (const unsigned char *)offsets->buf + first * width;
    for (Py_ssize_t i = 0; i < n; i++) {
        long long start, stop;
        if (wide) {
            int64_t pair[2];
            memcpy(pair, ends + 8 * i, sizeof(pair));
            start = pair[0], stop = pair[1];
        } else {
            int32_t pair[2];
            memcpy(pair, ends + 4 * i, sizeof(pair));
            start = pair[0], stop = pair[1];
        }
        if (start < 0 || stop < start || stop > data->len) {
            PyErr_SetString(PyExc_ValueError, "keyed_chunks: offsets outside the data");
            goto done;
        }
        rows[i].start = (Py_ssize_t)start;
        rows[i].stop = (Py_ssize_t)stop;
        if (keyed_row(&rows[i], data->buf, prefix->buf, prefix->len, extra->buf, extra->len,
                      seen, (uint32_t)partitions) < 0)
            goto done;
    }
    result = keyed_chunk_list(rows, n, (uint32_t)partitions, batch_size, data->buf);
done:
    PyMem_Free(rows);
    while (got > 0)
        PyBuffer_Release(&views[--got]);
    return result;
}
