/* trionsq._speedups, the batch encoder's parts: what encode_plain (_speedups.c, an
 * MPUB's batch, issue 19) and encode_ext (_speedups_publish.c, an MPUB_EXT's, issue
 * 32) share, included by _speedups.c before both (one translation unit: it shares
 * crc32_of and the byte helpers).
 *
 *   trace_seq      - their check of the trace ids
 *   plain_write,   - the records of a batch into its log bytes, with no ext or with
 *   ext_write        ext headers (no delay)
 *   written_batch  - their one tail: the bytes allocated and written with the GIL
 *                    released, then encoded_batch's Records and offsets
 */

/* trace_ids (not None) as a fast sequence of at least n items, or NULL with an
 * exception set: encode_plain's and encode_ext's check. */
static PyObject *trace_seq(PyObject *trace_ids, Py_ssize_t n)
{
    PyObject *traces = PySequence_Fast(trace_ids, "trace_ids must be a sequence");
    if (traces != NULL && PySequence_Fast_GET_SIZE(traces) < n) {
        PyErr_SetString(PyExc_ValueError, "trace_ids need one entry per body");
        Py_DECREF(traces);
        return NULL;
    }
    return traces;
}

/* (data, records, offsets) of an encoded batch: its Records (n items) and where each
 * starts and where the last ends (n + 1): make(offset, size, id, timestamp, body,
 * trace id, ext_version, ext, 0) with each body object itself, and each ext (exts
 * NULL: none, the empty bytes). Returns NULL with an exception set on a failure. */
static PyObject *encoded_batch(PyObject *data, PyObject *const *bodies, PyObject *const *exts,
                               PyObject *traces, Py_ssize_t n, long long timestamp,
                               unsigned long long first_id, long long offset, long ext_version,
                               PyObject *make)
{
    PyObject *records = PyList_New(n), *offsets = PyList_New(n + 1);
    PyObject *zero = PyLong_FromLong(0), *empty = PyBytes_FromStringAndSize(NULL, 0);
    PyObject *stamp = PyLong_FromLongLong(timestamp), *version = PyLong_FromLong(ext_version);
    long long at = offset;
    int failed = records == NULL || offsets == NULL || zero == NULL || empty == NULL ||
                 stamp == NULL || version == NULL;
    for (Py_ssize_t i = 0; i < n && !failed; i++) {
        Py_ssize_t size = FIXED_SIZE + PyBytes_GET_SIZE(bodies[i]);
        if (exts != NULL)
            size += 2 + PyBytes_GET_SIZE(exts[i]);
        PyObject *start = PyLong_FromLongLong(at);
        PyObject *call[9] = {
            start,
            PyLong_FromSsize_t(size),
            PyLong_FromUnsignedLongLong(first_id + (unsigned long long)i),
            stamp,
            bodies[i],
            traces == NULL ? zero : PySequence_Fast_GET_ITEM(traces, i),
            version,
            exts == NULL ? empty : exts[i],
            zero,
        };
        PyObject *record = NULL;
        if (call[0] != NULL && call[1] != NULL && call[2] != NULL)
            record = new_record(make, call);
        Py_XDECREF(call[1]);
        Py_XDECREF(call[2]);
        if (record == NULL) {
            Py_XDECREF(start);
            failed = 1;
            break;
        }
        PyList_SET_ITEM(records, i, record);
        PyList_SET_ITEM(offsets, i, start); /* the list takes the reference */
        at += size;
    }
    if (!failed) {
        PyObject *end = PyLong_FromLongLong(at);
        if (end == NULL)
            failed = 1;
        else
            PyList_SET_ITEM(offsets, n, end);
    }
    PyObject *result = failed ? NULL : PyTuple_Pack(3, data, records, offsets);
    Py_XDECREF(records);
    Py_XDECREF(offsets);
    Py_XDECREF(zero);
    Py_XDECREF(empty);
    Py_XDECREF(stamp);
    Py_XDECREF(version);
    return result;
}

/* The records of a batch with no ext (trace_ids[i] for each body). */
static void plain_write(unsigned char *p, PyObject *const *bodies, const uint64_t *trace_ids,
                        Py_ssize_t n, long long timestamp, uint64_t first_id)
{
    for (Py_ssize_t i = 0; i < n; i++) {
        Py_ssize_t length = PyBytes_GET_SIZE(bodies[i]);
        put_plain_record(p, PyBytes_AS_STRING(bodies[i]), length, timestamp,
                         first_id + (uint64_t)i, trace_ids[i]);
        p += FIXED_SIZE + length;
    }
}

/* The records of a batch of ext ones (no delay): exts[i] for each body. */
static void ext_write(unsigned char *p, PyObject *const *bodies, PyObject *const *exts,
                      const uint64_t *trace_ids, Py_ssize_t n, long long timestamp,
                      uint64_t first_id, unsigned ext_version)
{
    for (Py_ssize_t i = 0; i < n; i++) {
        Py_ssize_t body_length = PyBytes_GET_SIZE(bodies[i]);
        Py_ssize_t ext_length = PyBytes_GET_SIZE(exts[i]);
        Py_ssize_t size = FIXED_SIZE + 2 + ext_length + body_length;
        put_be32(p, (uint32_t)(size - 4));
        put_be64(p + 8, (uint64_t)timestamp);
        put_be64(p + 16, first_id + (uint64_t)i);
        put_be64(p + 24, trace_ids[i]);
        p[32] = 0;
        p[33] = (unsigned char)ext_version;
        p[34] = (unsigned char)(ext_length >> 8);
        p[35] = (unsigned char)ext_length;
        memcpy(p + 36, PyBytes_AS_STRING(exts[i]), (size_t)ext_length);
        memcpy(p + 36 + ext_length, PyBytes_AS_STRING(bodies[i]), (size_t)body_length);
        put_be32(p + 4, crc32_of(p + FIELDS_AT, (size_t)(size - FIELDS_AT)));
        p += size;
    }
}

/* The one tail of encode_plain and encode_ext: the total bytes of a batch allocated
 * and written with the GIL released (plain records when exts is NULL, else ext ones),
 * then encoded_batch's (data, records, offsets). NULL with an exception set. */
static PyObject *written_batch(Py_ssize_t total, PyObject *const *bodies,
                               PyObject *const *exts, const uint64_t *trace_ids,
                               PyObject *traces, Py_ssize_t n, long long timestamp,
                               unsigned long long first_id, long long offset,
                               long ext_version, PyObject *make)
{
    PyObject *data = PyBytes_FromStringAndSize(NULL, total);
    if (data == NULL)
        return NULL;
    unsigned char *out = (unsigned char *)PyBytes_AS_STRING(data);
    Py_BEGIN_ALLOW_THREADS
    if (exts == NULL)
        plain_write(out, bodies, trace_ids, n, timestamp, (uint64_t)first_id);
    else
        ext_write(out, bodies, exts, trace_ids, n, timestamp, (uint64_t)first_id,
                  (unsigned)ext_version);
    Py_END_ALLOW_THREADS
    PyObject *result = encoded_batch(data, bodies, exts, traces, n, timestamp, first_id,
                                     offset, ext_version, make);
    Py_DECREF(data);
    return result;
}
