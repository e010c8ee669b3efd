/* trionsq._speedups: optional C versions of per-message loops: the consume path's
 * (issue 19) and TubeMQ's frames and SendMessage runs (issue 36). Each function has
 * a pure-Python twin with the same contract, used when this module is absent (see
 * trionsq/speedups.py), and the tests hold the two equal on the same inputs.
 *
 *   decode_run     - records of a segment buffer into Record objects
 *                    (twin: trionsq.queues.record_codec._decode_run)
 *   hex_id_frames  - NSQ message frames with hex ids for a batch of deliveries
 *                    (twin: trionsq.server.outbound._hex_id_frames_py)
 *   binary_id_frames - the same with Youzan's binary ids (internal id, trace id)
 *                    (twin: trionsq.server.outbound._binary_id_frames_py)
 *   encode_plain   - an MPUB batch (no ext, no delay) into log bytes and Records
 *                    (twin: trionsq.queues.record_codec._encode_plain_py)
 *   tubemq_frames  - TubeMQ's whole one-block frames of a read into Frame tuples
 *                    (twin: trionsq.protocol.tubemq._split_frames_py)
 *   tubemq_send_run - the frames of a run of SendMessage calls: serialNos and bodies
 *                    (twin: trionsq.protocol.tubemq_sends._send_run_py)
 *
 * The record layout is record.py's: size u32, crc32 u32 over everything after it,
 * timestamp i64, internal id u64, trace id u64, flags u8, ext version u8, then
 * deliver-at i64 if flags & DEFERRED, then ext length u16 + ext if ext version,
 * then the body; all big-endian.
 *
 * What encode_plain and encode_ext share (written_batch) is in _speedups_encode.c,
 * keyed publishing's loops (issue 32: key_digests, read_keyed_parts, encode_ext,
 * keyed_chunks) in _speedups_publish.c, a replica's scan_copies (issue 35) in
 * _speedups_replica.c, a plain PUB's one-call append (issue 37: append_record) in
 * _speedups_append.c, an MPUB's bodies on the publish fast path (mpub_bodies) in
 * _speedups_bodies.c, and how every entry makes a Record (new_record, registered by
 * use_record_layout) in _speedups_records.c, all included as sections of this file
 * (one translation unit: they share crc32_of, layout_of and the byte helpers).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <structmember.h>
#include <stdint.h>
#include <string.h>

#define FIXED_SIZE 34   /* a record with an empty body, no ext, no delay */
#define FIELDS_AT 8     /* where the checksummed part starts */
#define MIN_SIZE_FIELD (FIXED_SIZE - 4)
#define DEFERRED 0x01
#define FRAME_TYPE_MESSAGE 2
#define MESSAGE_HEAD 30 /* frame type + timestamp + attempts + 16-byte id */

/* CRC-32 (IEEE 802.3, zlib's), slicing by 8: no zlib headers needed to build. */
static uint32_t crc_table[8][256];

static void crc_init(void)
{
    for (uint32_t i = 0; i < 256; i++) {
        uint32_t c = i;
        for (int k = 0; k < 8; k++)
            c = (c & 1) ? 0xEDB88320u ^ (c >> 1) : c >> 1;
        crc_table[0][i] = c;
    }
    for (uint32_t i = 0; i < 256; i++)
        for (int t = 1; t < 8; t++)
            crc_table[t][i] = (crc_table[t - 1][i] >> 8) ^ crc_table[0][crc_table[t - 1][i] & 0xFF];
}

static uint32_t crc32_of(const unsigned char *p, size_t n)
{
    uint32_t c = 0xFFFFFFFFu;
    while (n >= 8) {
        uint32_t lo = c ^ ((uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 |
                           (uint32_t)p[3] << 24);
        uint32_t hi = (uint32_t)p[4] | (uint32_t)p[5] << 8 | (uint32_t)p[6] << 16 |
                      (uint32_t)p[7] << 24;
        c = crc_table[7][lo & 0xFF] ^ crc_table[6][(lo >> 8) & 0xFF] ^
            crc_table[5][(lo >> 16) & 0xFF] ^ crc_table[4][lo >> 24] ^
            crc_table[3][hi & 0xFF] ^ crc_table[2][(hi >> 8) & 0xFF] ^
            crc_table[1][(hi >> 16) & 0xFF] ^ crc_table[0][hi >> 24];
        p += 8;
        n -= 8;
    }
    while (n--)
        c = crc_table[0][(c ^ *p++) & 0xFF] ^ (c >> 8);
    return c ^ 0xFFFFFFFFu;
}

/* The argument count check of every FASTCALL entry here (no varargs parsing on a
 * hot call): 0 when nargs is wanted, else -1 with the TypeError set. */
static inline int check_nargs(const char *name, Py_ssize_t nargs, Py_ssize_t wanted)
{
    if (nargs == wanted)
        return 0;
    PyErr_Format(PyExc_TypeError, "%s takes %zd arguments", name, wanted);
    return -1;
}

/* After an entry read its number arguments: 1, with an exception set, when one did
 * not convert or out (the list the records go to) is not a list; else 0. */
static inline int read_args_failed(PyObject *out)
{
    if (PyErr_Occurred())
        return 1;
    if (!PyList_Check(out)) {
        PyErr_SetString(PyExc_TypeError, "out must be a list");
        return 1;
    }
    return 0;
}

static inline uint16_t be16(const unsigned char *p) { return (uint16_t)(p[0] << 8 | p[1]); }

static inline uint32_t be32(const unsigned char *p)
{
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

static inline uint64_t be64(const unsigned char *p)
{
    return (uint64_t)be32(p) << 32 | be32(p + 4);
}

/* Where a record's optional parts and body are; 0 if its fields are damaged. */
typedef struct {
    Py_ssize_t at;        /* record start in the buffer */
    Py_ssize_t ext_at;    /* ext bytes start (ext_len 0: none) */
    Py_ssize_t ext_len;
    Py_ssize_t body_at;
    Py_ssize_t stop;
    int64_t deliver_at;
} Layout;

static int layout_of(const unsigned char *b, Py_ssize_t at, Py_ssize_t stop, Layout *out)
{
    if (crc32_of(b + at + FIELDS_AT, (size_t)(stop - at - FIELDS_AT)) != be32(b + at + 4))
        return 0;
    unsigned flags = b[at + 32], ext_version = b[at + 33];
    Py_ssize_t cursor = at + FIXED_SIZE;
    out->at = at;
    out->stop = stop;
    out->deliver_at = 0;
    out->ext_at = cursor;
    out->ext_len = 0;
    if (flags & DEFERRED) {
        if (cursor + 8 > stop)
            return 0;
        out->deliver_at = (int64_t)be64(b + cursor);
        cursor += 8;
    }
    if (ext_version) {
        if (cursor + 2 > stop)
            return 0;
        Py_ssize_t length = be16(b + cursor);
        cursor += 2;
        if (cursor + length > stop)
            return 0;
        out->ext_at = cursor;
        out->ext_len = length;
        cursor += length;
    }
    out->body_at = cursor;
    return 1;
}

#include "_speedups_records.c"

static PyObject *make_record(const unsigned char *b, const Layout *l, long long base,
                             PyObject *make, PyObject *empty)
{
    const unsigned char *r = b + l->at;
    PyObject *args[9] = {NULL};
    PyObject *record = NULL;
    args[0] = PyLong_FromLongLong(base + l->at);
    args[1] = PyLong_FromSsize_t(l->stop - l->at);
    args[2] = PyLong_FromUnsignedLongLong(be64(r + 16));
    args[3] = PyLong_FromLongLong((long long)be64(r + 8));
    args[4] = PyBytes_FromStringAndSize((const char *)b + l->body_at, l->stop - l->body_at);
    args[5] = PyLong_FromUnsignedLongLong(be64(r + 24));
    args[6] = PyLong_FromLong(r[33]);
    if (l->ext_len) {
        args[7] = PyBytes_FromStringAndSize((const char *)b + l->ext_at, l->ext_len);
    } else {
        Py_INCREF(empty);
        args[7] = empty;
    }
    args[8] = PyLong_FromLongLong(l->deliver_at);
    for (int i = 0; i < 9; i++)
        if (args[i] == NULL)
            goto done;
    record = new_record(make, args);
done:
    for (int i = 0; i < 9; i++)
        Py_XDECREF(args[i]);
    return record;
}

PyDoc_STRVAR(decode_run_doc,
"decode_run(buffer, at, base, from_id, wanted, budget, make, out)\n"
"-> (at, wanted, budget, damaged)\n\n"
"Append make(...) for each whole record of buffer from at on whose id is at\n"
"least from_id, until wanted are taken or budget bytes are spent; stop at a\n"
"damaged one (damaged True, at pointing to it). Checksums are verified with the\n"
"GIL released.");

static PyObject *decode_run(PyObject *Py_UNUSED(self), PyObject *const *args, Py_ssize_t nargs)
{
    if (check_nargs("decode_run", nargs, 8) < 0)
        return NULL;
    Py_buffer view;
    if (PyObject_GetBuffer(args[0], &view, PyBUF_SIMPLE) < 0)
        return NULL;
    PyObject *result = NULL;
    Layout *taken = NULL;
    Py_ssize_t at = PyLong_AsSsize_t(args[1]);
    long long base = PyLong_AsLongLong(args[2]);
    int overflow = 0;
    long long from_signed = PyLong_AsLongLongAndOverflow(args[3], &overflow);
    uint64_t from_id = from_signed > 0 ? (uint64_t)from_signed : 0;
    if (overflow > 0)
        from_id = PyLong_AsUnsignedLongLong(args[3]); /* ids of 2**63 and over */
    Py_ssize_t wanted = PyLong_AsSsize_t(args[4]);
    Py_ssize_t budget = PyLong_AsSsize_t(args[5]);
    PyObject *make = args[6], *out = args[7];
    if (read_args_failed(out))
        goto done;
    const unsigned char *b = view.buf;
    Py_ssize_t length = view.len;
    Py_ssize_t most = length / FIXED_SIZE + 1; /* whole records fit at most */
    if (wanted > 0 && wanted < most)
        most = wanted;
    taken = PyMem_Malloc(sizeof(Layout) * (size_t)most);
    if (taken == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    Py_ssize_t count = 0;
    int damaged = 0;
    /* Walk and verify without the GIL: the event loop's thread runs meanwhile. */
    Py_BEGIN_ALLOW_THREADS
    if (at < 0)
        at = length; /* nothing to walk; the caller passed a bad position */
    while (length - at >= FIXED_SIZE) {
        uint32_t size = be32(b + at);
        Py_ssize_t stop = at + (Py_ssize_t)size + 4;
        if (stop > length || size < MIN_SIZE_FIELD)
            break;
        if (be64(b + at + 16) >= from_id) {
            if (!layout_of(b, at, stop, &taken[count])) {
                damaged = 1;
                break;
            }
            count++;
            wanted--;
            budget -= stop - at;
            if (!wanted || budget <= 0) {
                at = stop;
                break;
            }
        }
        at = stop;
    }
    Py_END_ALLOW_THREADS
    PyObject *empty = PyBytes_FromStringAndSize(NULL, 0);
    if (empty == NULL)
        goto done;
    for (Py_ssize_t i = 0; i < count; i++) {
        PyObject *record = make_record(b, &taken[i], base, make, empty);
        if (record == NULL || PyList_Append(out, record) < 0) {
            Py_XDECREF(record);
            Py_DECREF(empty);
            goto done;
        }
        Py_DECREF(record);
    }
    Py_DECREF(empty);
    result = Py_BuildValue("nnnO", at, wanted, budget, damaged ? Py_True : Py_False);
done:
    PyMem_Free(taken);
    PyBuffer_Release(&view);
    return result;
}

PyDoc_STRVAR(hex_id_frames_doc,
"hex_id_frames(deliveries) -> bytes\n\n"
"NSQ message frames (nsqd's 16 hex digit ids) for each delivery's record and\n"
"attempts, joined.");

PyDoc_STRVAR(binary_id_frames_doc,
"binary_id_frames(deliveries) -> bytes\n\n"
"NSQ message frames with Youzan's binary ids (the record's 8-byte internal id and\n"
"8-byte trace id) for each delivery's record and attempts, joined.");

static PyObject *str_record, *str_body, *str_timestamp, *str_attempts, *str_internal_id,
    *str_trace_id;

/* A delivery's fields for its frame; trace_id NULL: not read (hex ids carry none). */
static int delivery_fields(PyObject *delivery, PyObject **body, long long *timestamp,
                           long *attempts, unsigned long long *internal_id,
                           unsigned long long *trace_id)
{
    PyObject *record = PyObject_GetAttr(delivery, str_record);
    if (record == NULL)
        return -1;
    PyObject *value = NULL;
    *body = PyObject_GetAttr(record, str_body);
    if (*body == NULL)
        goto fail;
    if (!PyBytes_Check(*body)) {
        PyErr_SetString(PyExc_TypeError, "a record's body must be bytes");
        goto fail;
    }
    if ((value = PyObject_GetAttr(record, str_timestamp)) == NULL)
        goto fail;
    *timestamp = PyLong_AsLongLong(value);
    Py_DECREF(value);
    if ((value = PyObject_GetAttr(record, str_internal_id)) == NULL)
        goto fail;
    *internal_id = PyLong_AsUnsignedLongLong(value);
    Py_DECREF(value);
    if (trace_id != NULL) {
        if ((value = PyObject_GetAttr(record, str_trace_id)) == NULL)
            goto fail;
        *trace_id = PyLong_AsUnsignedLongLong(value);
        Py_DECREF(value);
        if (PyErr_Occurred())
            goto fail;
    }
    if ((value = PyObject_GetAttr(delivery, str_attempts)) == NULL)
        goto fail;
    *attempts = PyLong_AsLong(value);
    Py_DECREF(value);
    if (PyErr_Occurred())
        goto fail;
    if (*attempts < 0 || *attempts > 0xFFFF) {
        PyErr_SetString(PyExc_OverflowError, "attempts out of range for a frame");
        goto fail;
    }
    Py_DECREF(record);
    return 0;
fail:
    Py_CLEAR(*body);
    Py_DECREF(record);
    return -1;
}

static void put_be32(unsigned char *p, uint32_t v)
{
    p[0] = (unsigned char)(v >> 24);
    p[1] = (unsigned char)(v >> 16);
    p[2] = (unsigned char)(v >> 8);
    p[3] = (unsigned char)v;
}

static void put_be64(unsigned char *p, uint64_t v)
{
    put_be32(p, (uint32_t)(v >> 32));
    put_be32(p + 4, (uint32_t)v);
}

/* The plain frames of a batch: ids as nsqd's 16 hex digits, or (binary) as Youzan's
 * 8-byte internal id and 8-byte trace id. */
static PyObject *id_frames(PyObject *deliveries, int binary)
{
    static const char digits[] = "0123456789abcdef";
    PyObject *seq = PySequence_Fast(deliveries, "deliveries must be a sequence");
    if (seq == NULL)
        return NULL;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
    PyObject **items = PySequence_Fast_ITEMS(seq);
    PyObject *result = NULL;
    typedef struct {
        PyObject *body;
        long long timestamp;
        long attempts;
        unsigned long long id;
        unsigned long long trace;
    } Fields;
    Fields *fields = PyMem_Calloc((size_t)(n ? n : 1), sizeof(Fields));
    if (fields == NULL) {
        Py_DECREF(seq);
        return PyErr_NoMemory();
    }
    Py_ssize_t total = 0, got = 0;
    for (; got < n; got++) {
        Fields *f = &fields[got];
        if (delivery_fields(items[got], &f->body, &f->timestamp, &f->attempts, &f->id,
                            binary ? &f->trace : NULL) < 0)
            goto done;
        Py_ssize_t body_len = PyBytes_GET_SIZE(f->body);
        if (body_len > (Py_ssize_t)UINT32_MAX - MESSAGE_HEAD) {
            PyErr_SetString(PyExc_OverflowError, "body too large for a frame");
            Py_CLEAR(f->body);
            goto done;
        }
        total += 4 + MESSAGE_HEAD + body_len;
    }
    result = PyBytes_FromStringAndSize(NULL, total);
    if (result == NULL)
        goto done;
    unsigned char *p = (unsigned char *)PyBytes_AS_STRING(result);
    for (Py_ssize_t i = 0; i < n; i++) {
        Fields *f = &fields[i];
        Py_ssize_t body_len = PyBytes_GET_SIZE(f->body);
        put_be32(p, (uint32_t)(body_len + MESSAGE_HEAD));
        put_be32(p + 4, FRAME_TYPE_MESSAGE);
        uint64_t ts = (uint64_t)f->timestamp;
        put_be32(p + 8, (uint32_t)(ts >> 32));
        put_be32(p + 12, (uint32_t)ts);
        p[16] = (unsigned char)(f->attempts >> 8);
        p[17] = (unsigned char)f->attempts;
        if (binary) {
            put_be64(p + 18, f->id);
            put_be64(p + 26, f->trace);
        } else {
            for (int k = 0; k < 16; k++)
                p[18 + k] = (unsigned char)digits[(f->id >> (60 - 4 * k)) & 0xF];
        }
        memcpy(p + 34, PyBytes_AS_STRING(f->body), (size_t)body_len);
        p += 34 + body_len;
    }
done:
    for (Py_ssize_t i = 0; i < got; i++)
        Py_XDECREF(fields[i].body);
    PyMem_Free(fields);
    Py_DECREF(seq);
    return result;
}

static PyObject *hex_id_frames(PyObject *Py_UNUSED(self), PyObject *deliveries)
{
    return id_frames(deliveries, 0);
}

static PyObject *binary_id_frames(PyObject *Py_UNUSED(self), PyObject *deliveries)
{
    return id_frames(deliveries, 1);
}

/* One record with no ext and no delay at p: its fixed fields, the body's length bytes
 * and the checksum (FIXED_SIZE + length bytes; no Python object is touched). */
static void put_plain_record(unsigned char *p, const char *body, Py_ssize_t length,
                             long long timestamp, uint64_t internal_id, uint64_t trace_id)
{
    put_be32(p, (uint32_t)(length + FIXED_SIZE - 4));
    put_be64(p + 8, (uint64_t)timestamp);
    put_be64(p + 16, internal_id);
    put_be64(p + 24, trace_id);
    p[32] = 0;
    p[33] = 0;
    memcpy(p + FIXED_SIZE, body, (size_t)length);
    put_be32(p + 4, crc32_of(p + FIELDS_AT, (size_t)(length + FIXED_SIZE - FIELDS_AT)));
}

/* ---- a batch's encoding, keyed publishing (issue 32), a replica's copies (issue 35),
 * a plain PUB's append (issue 37): sections of this file */
#include "_speedups_encode.c"
#include "_speedups_publish.c"
#include "_speedups_replica.c"
#include "_speedups_append.c"
#include "_speedups_bodies.c"

PyDoc_STRVAR(encode_plain_doc,
"encode_plain(bodies, timestamp, first_id, offset, trace_ids, make)\n"
"-> (data, records, offsets) | None\n\n"
"The log bytes of a batch with no ext and no delay, its records (make(...) with\n"
"each body object itself) and the offsets of its records and end; None when a\n"
"body is not exactly bytes (the caller encodes it in Python). Bytes are written\n"
"and checksummed with the GIL released.");

static PyObject *encode_plain(PyObject *Py_UNUSED(self), PyObject *const *args, Py_ssize_t nargs)
{
    if (check_nargs("encode_plain", nargs, 6) < 0)
        return NULL;
    PyObject *seq = PySequence_Fast(args[0], "bodies must be a sequence");
    if (seq == NULL)
        return NULL;
    PyObject *result = NULL, *traces = NULL;
    PyObject **bodies = NULL;
    uint64_t *trace_ids = NULL;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(seq), held = 0;
    long long timestamp = PyLong_AsLongLong(args[1]);
    unsigned long long first_id = PyLong_AsUnsignedLongLong(args[2]);
    long long offset = PyLong_AsLongLong(args[3]);
    PyObject *make = args[5];
    if (PyErr_Occurred())
        goto done;
    bodies = PyMem_Malloc(sizeof(PyObject *) * (size_t)(n ? n : 1));
    trace_ids = PyMem_Calloc((size_t)(n ? n : 1), sizeof(uint64_t));
    if (bodies == NULL || trace_ids == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    Py_ssize_t total = 0;
    for (; held < n; held++) {
        PyObject *body = PySequence_Fast_GET_ITEM(seq, held);
        if (!PyBytes_CheckExact(body)) {
            result = Py_None; /* not bytes: the Python twin handles the batch */
            Py_INCREF(result);
            goto done;
        }
        if (PyBytes_GET_SIZE(body) > (Py_ssize_t)UINT32_MAX - (FIXED_SIZE - 4)) {
            PyErr_SetString(PyExc_OverflowError, "body too large for a record");
            goto done;
        }
        Py_INCREF(body); /* kept alive while the GIL is released */
        bodies[held] = body;
        total += FIXED_SIZE + PyBytes_GET_SIZE(body);
    }
    if (args[4] != Py_None) {
        traces = trace_seq(args[4], n);
        if (traces == NULL)
            goto done;
        for (Py_ssize_t i = 0; i < n; i++) {
            trace_ids[i] = PyLong_AsUnsignedLongLong(PySequence_Fast_GET_ITEM(traces, i));
            if (PyErr_Occurred())
                goto done;
        }
    }
    result = written_batch(total, bodies, NULL, trace_ids, traces, n, timestamp, first_id,
                           offset, 0, make);
done:
    for (Py_ssize_t i = 0; i < held; i++)
        Py_DECREF(bodies[i]);
    PyMem_Free(bodies);
    PyMem_Free(trace_ids);
    Py_XDECREF(traces);
    Py_DECREF(seq);
    return result;
}

/* ---- TubeMQ (issue 36): [token u32][serialNo u32][listSize u32] then [len i32][bytes] */

#define TUBEMQ_BEGIN_TOKEN 0xFF7FF4FEu
#define TUBEMQ_ONE_BLOCK 16

/* A Frame (a NamedTuple: a tuple subtype with no fields of its own) of two items;
 * steals both references. */
static PyObject *tuple_of(PyTypeObject *type, PyObject *first, PyObject *second)
{
    PyObject *made = NULL;
    if (first != NULL && second != NULL)
        made = type->tp_alloc(type, 2);
    if (made == NULL) {
        Py_XDECREF(first);
        Py_XDECREF(second);
        return NULL;
    }
    PyTuple_SET_ITEM(made, 0, first);
    PyTuple_SET_ITEM(made, 1, second);
    return made;
}

static int is_pair_type(PyObject *type)
{
    if (!PyType_Check(type) || !PyType_IsSubtype((PyTypeObject *)type, &PyTuple_Type) ||
        ((PyTypeObject *)type)->tp_basicsize != PyTuple_Type.tp_basicsize) {
        PyErr_SetString(PyExc_TypeError, "make must be a tuple subtype with no fields");
        return 0;
    }
    return 1;
}

PyDoc_STRVAR(tubemq_frames_doc,
"tubemq_frames(buffer, pos, limit, longest, make, out) -> pos\n\n"
"Append make((serialNo, payload)) to the list out, until it holds limit, for\n"
"each frame from buffer[pos:] on that is whole and of one block of at most\n"
"longest bytes; return where they end.");

static PyObject *tubemq_frames(PyObject *Py_UNUSED(self), PyObject *const *args, Py_ssize_t nargs)
{
    if (check_nargs("tubemq_frames", nargs, 6) < 0)
        return NULL;
    Py_ssize_t pos = PyLong_AsSsize_t(args[1]);
    Py_ssize_t limit = PyLong_AsSsize_t(args[2]);
    Py_ssize_t longest = PyLong_AsSsize_t(args[3]);
    PyObject *make = args[4], *out = args[5];
    if (PyErr_Occurred() || !is_pair_type(make))
        return NULL;
    if (!PyBytes_Check(args[0]) || !PyList_Check(out)) {
        PyErr_SetString(PyExc_TypeError, "buffer must be bytes and out a list");
        return NULL;
    }
    const unsigned char *b = (const unsigned char *)PyBytes_AS_STRING(args[0]);
    Py_ssize_t end = PyBytes_GET_SIZE(args[0]);
    if (pos < 0)
        pos = end;
    while (end - pos >= TUBEMQ_ONE_BLOCK && PyList_GET_SIZE(out) < limit) {
        const unsigned char *head = b + pos;
        int32_t length = (int32_t)be32(head + 12);
        Py_ssize_t start = pos + TUBEMQ_ONE_BLOCK;
        if (be32(head) != TUBEMQ_BEGIN_TOKEN || be32(head + 8) != 1 || length < 0 ||
            length > longest || end - start < length)
            break;
        PyObject *frame = tuple_of(
            (PyTypeObject *)make, PyLong_FromUnsignedLong(be32(head + 4)),
            PyBytes_FromStringAndSize((const char *)b + start, length));
        if (frame == NULL || PyList_Append(out, frame) < 0) {
            Py_XDECREF(frame);
            return NULL;
        }
        Py_DECREF(frame);
        pos = start + length;
    }
    return PyLong_FromSsize_t(pos);
}

PyDoc_STRVAR(tubemq_send_run_doc,
"tubemq_send_run(frames, start, make, prefix, method_first, leads, lead_for, tag)\n"
"-> (end, serials, joined)\n\n"
"From frames[start] on (a list), the frames of type make whose payload is prefix,\n"
"then the length prefix of a body filling the rest (leads[room], else\n"
"lead_for(room); None: none fits), then a body starting with method_first: where\n"
"they end, their serialNos, and tag + the rest of each payload, joined.");

/* 1: the payload is one of the run, 0: it is not, -1: an error is set. */
static int in_send_run(PyObject *payload, PyObject *prefix, PyObject *method_first,
                       PyObject *leads, PyObject *lead_for)
{
    Py_ssize_t at = PyBytes_GET_SIZE(prefix), size = PyBytes_GET_SIZE(payload);
    if (size < at)
        return 0;
    PyObject *room = PyLong_FromSsize_t(size - at);
    if (room == NULL)
        return -1;
    PyObject *lead = PyDict_GetItemWithError(leads, room); /* borrowed */
    if (lead != NULL) {
        Py_INCREF(lead);
    } else if (!PyErr_Occurred()) {
        lead = PyObject_CallOneArg(lead_for, room);
    }
    Py_DECREF(room);
    if (lead == NULL)
        return -1;
    int found = 0;
    if (PyBytes_Check(lead)) {
        const char *p = PyBytes_AS_STRING(payload);
        Py_ssize_t lead_size = PyBytes_GET_SIZE(lead);
        Py_ssize_t method_size = PyBytes_GET_SIZE(method_first);
        found = at + lead_size + method_size <= size &&
                memcmp(p, PyBytes_AS_STRING(prefix), (size_t)at) == 0 &&
                memcmp(p + at, PyBytes_AS_STRING(lead), (size_t)lead_size) == 0 &&
                memcmp(p + at + lead_size, PyBytes_AS_STRING(method_first),
                       (size_t)method_size) == 0;
    } else if (lead != Py_None) {
        PyErr_SetString(PyExc_TypeError, "a length prefix must be bytes or None");
        found = -1;
    }
    Py_DECREF(lead);
    return found;
}

static PyObject *tubemq_send_run(PyObject *Py_UNUSED(self), PyObject *const *args,
                                 Py_ssize_t nargs)
{
    if (check_nargs("tubemq_send_run", nargs, 8) < 0)
        return NULL;
    PyObject *frames = args[0], *make = args[2], *prefix = args[3], *method_first = args[4];
    PyObject *leads = args[5], *lead_for = args[6], *tag = args[7];
    Py_ssize_t start = PyLong_AsSsize_t(args[1]);
    if (start == -1 && PyErr_Occurred())
        return NULL;
    if (!PyList_Check(frames) || !PyBytes_Check(prefix) || !PyBytes_Check(method_first) ||
        !PyDict_Check(leads) || !PyBytes_Check(tag)) {
        PyErr_SetString(PyExc_TypeError, "tubemq_send_run: bad argument types");
        return NULL;
    }
    if (start < 0)
        start = 0;
    Py_ssize_t at = PyBytes_GET_SIZE(prefix), tag_size = PyBytes_GET_SIZE(tag);
    Py_ssize_t end = start, total = 0;
    PyObject *serials = PyList_New(0), *joined = NULL, *result = NULL;
    if (serials == NULL)
        return NULL;
    for (; end < PyList_GET_SIZE(frames); end++) {
        PyObject *frame = PyList_GET_ITEM(frames, end);
        if ((PyObject *)Py_TYPE(frame) != make || PyTuple_GET_SIZE(frame) != 2)
            break;
        PyObject *payload = PyTuple_GET_ITEM(frame, 1);
        if (!PyBytes_Check(payload))
            break;
        int found = in_send_run(payload, prefix, method_first, leads, lead_for);
        if (found < 0)
            goto done;
        if (!found || PyList_Append(serials, PyTuple_GET_ITEM(frame, 0)) < 0)
            break;
        total += tag_size + PyBytes_GET_SIZE(payload) - at;
    }
    if (PyErr_Occurred())
        goto done;
    joined = PyBytes_FromStringAndSize(NULL, total);
    if (joined == NULL)
        goto done;
    char *into = PyBytes_AS_STRING(joined);
    for (Py_ssize_t i = start; i < end; i++) { /* frames is not changed meanwhile */
        PyObject *payload = PyTuple_GET_ITEM(PyList_GET_ITEM(frames, i), 1);
        Py_ssize_t rest = PyBytes_GET_SIZE(payload) - at;
        memcpy(into, PyBytes_AS_STRING(tag), (size_t)tag_size);
        memcpy(into + tag_size, PyBytes_AS_STRING(payload) + at, (size_t)rest);
        into += tag_size + rest;
    }
    result = Py_BuildValue("nOO", end, serials, joined);
done:
    Py_DECREF(serials);
    Py_XDECREF(joined);
    return result;
}

static PyObject *crc32_py(PyObject *Py_UNUSED(self), PyObject *arg)
{
    Py_buffer view;
    if (PyObject_GetBuffer(arg, &view, PyBUF_SIMPLE) < 0)
        return NULL;
    uint32_t c = crc32_of(view.buf, (size_t)view.len);
    PyBuffer_Release(&view);
    return PyLong_FromUnsignedLong(c);
}

static PyMethodDef methods[] = {
    /* keyed publishing (issue 32), _speedups_publish.c */
    {"key_digests", key_digests, METH_O, key_digests_doc},
    {"read_keyed_parts", (PyCFunction)(void (*)(void))read_keyed_parts, METH_FASTCALL,
     read_keyed_parts_doc},
    {"encode_ext", (PyCFunction)(void (*)(void))encode_ext, METH_FASTCALL, encode_ext_doc},
    {"keyed_chunks", (PyCFunction)(void (*)(void))keyed_chunks, METH_FASTCALL,
     keyed_chunks_doc},
    {"blake2b", blake2b_py, METH_O, "BLAKE2b-128 of a bytes-like object (for the tests)."},
    /* a replica's copies (issue 35), _speedups_replica.c */
    {"scan_copies", (PyCFunction)(void (*)(void))scan_copies, METH_FASTCALL, scan_copies_doc},
    /* a plain PUB's append (issue 37), _speedups_append.c */
    {"append_record", (PyCFunction)(void (*)(void))append_record, METH_FASTCALL,
     append_record_doc},
    /* an MPUB's bodies on the publish fast path, _speedups_bodies.c */
    {"mpub_bodies", (PyCFunction)(void (*)(void))mpub_bodies, METH_FASTCALL, mpub_bodies_doc},
    /* the consume path's */
    {"decode_run", (PyCFunction)(void (*)(void))decode_run, METH_FASTCALL, decode_run_doc},
    {"hex_id_frames", hex_id_frames, METH_O, hex_id_frames_doc},
    {"binary_id_frames", binary_id_frames, METH_O, binary_id_frames_doc},
    {"encode_plain", (PyCFunction)(void (*)(void))encode_plain, METH_FASTCALL, encode_plain_doc},
    {"tubemq_frames", (PyCFunction)(void (*)(void))tubemq_frames, METH_FASTCALL,
     tubemq_frames_doc},
    {"tubemq_send_run", (PyCFunction)(void (*)(void))tubemq_send_run, METH_FASTCALL,
     tubemq_send_run_doc},
    {"use_record_layout", (PyCFunction)(void (*)(void))use_record_layout, METH_FASTCALL,
     use_record_layout_doc},
    {"crc32", crc32_py, METH_O, "zlib's CRC-32 of a bytes-like object (for the tests)."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "trionsq._speedups",
    "Optional C loops of the consume path and TubeMQ's; see trionsq.speedups.", -1, methods,
    NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__speedups(void)
{
    crc_init();
    if (!(str_record = PyUnicode_InternFromString("record")) ||
        !(str_body = PyUnicode_InternFromString("body")) ||
        !(str_timestamp = PyUnicode_InternFromString("timestamp")) ||
        !(str_attempts = PyUnicode_InternFromString("attempts")) ||
        !(str_internal_id = PyUnicode_InternFromString("internal_id")) ||
        !(str_trace_id = PyUnicode_InternFromString("trace_id")))
        return NULL;
    PyObject *m = PyModule_Create(&module);
    if (m == NULL)
        return NULL;
    if (PyModule_AddIntConstant(m, "FIXED_SIZE", FIXED_SIZE) < 0 ||
        PyModule_AddIntConstant(m, "MESSAGE_HEAD", MESSAGE_HEAD) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
