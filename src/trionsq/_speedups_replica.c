/* trionsq._speedups, part three: a replica's check of the records its leader
 * shipped (issue 35), included by _speedups.c (one translation unit: it shares
 * layout_of, crc32_of and the byte helpers). Its pure-Python twin has the same
 * contract, and the tests hold the two equal on the same inputs.
 *
 *   scan_copies - check a RECORDS frame's bytes record by record and give what the
 *                 durable log's bookkeeping needs (offsets, greatest timestamps,
 *                 body bytes) without a Record object per copied message
 *                 (twin: trionsq.queues.record_runs._scan_copies_py)
 */

static PyObject *array_type; /* array.array, imported at the first call */

/* array('q', the n values): one object for a whole frame, not n ints. */
static PyObject *int64_array(const int64_t *values, Py_ssize_t n)
{
    PyObject *raw = PyBytes_FromStringAndSize((const char *)values, n * (Py_ssize_t)sizeof(int64_t));
    if (raw == NULL)
        return NULL;
    PyObject *array = PyObject_CallFunction(array_type, "sO", "q", raw);
    Py_DECREF(raw);
    return array;
}

PyDoc_STRVAR(scan_copies_doc,
"scan_copies(data, offset, first_id) -> (at, body_bytes, offsets, stamps)\n\n"
"Walk the records of data (which starts at virtual offset offset) while each is\n"
"whole, passes its checksum and field checks, and has id first_id + its index;\n"
"at is where the walk stopped (len(data): every byte was such a record).\n"
"offsets: array('q') of each record's offset, then the end of the last;\n"
"stamps: array('q') of the greatest timestamp up to each record; body_bytes:\n"
"the records' body lengths summed. Checked with the GIL released.");

static PyObject *scan_copies(PyObject *Py_UNUSED(self), PyObject *const *args, Py_ssize_t nargs)
{
    if (check_nargs("scan_copies", nargs, 3) < 0)
        return NULL;
    if (array_type == NULL) {
        PyObject *module = PyImport_ImportModule("array");
        if (module == NULL)
            return NULL;
        array_type = PyObject_GetAttrString(module, "array");
        Py_DECREF(module);
        if (array_type == NULL)
            return NULL;
    }
    long long offset = PyLong_AsLongLong(args[1]);
    unsigned long long first_id = PyLong_AsUnsignedLongLong(args[2]);
    if (PyErr_Occurred())
        return NULL;
    Py_buffer view;
    if (PyObject_GetBuffer(args[0], &view, PyBUF_SIMPLE) < 0)
        return NULL;
    PyObject *result = NULL, *offsets = NULL, *stamps = NULL;
    const unsigned char *b = view.buf;
    Py_ssize_t length = view.len;
    Py_ssize_t most = length / FIXED_SIZE + 1; /* records that fit at most, and the end */
    int64_t *starts = PyMem_Malloc(sizeof(int64_t) * (size_t)most);
    int64_t *highs = PyMem_Malloc(sizeof(int64_t) * (size_t)most);
    if (starts == NULL || highs == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    Py_ssize_t at = 0, count = 0;
    long long body = 0;
    Py_BEGIN_ALLOW_THREADS
    int64_t high = 0;
    Layout layout;
    while (length - at >= FIXED_SIZE) {
        uint32_t size = be32(b + at);
        Py_ssize_t stop = at + (Py_ssize_t)size + 4;
        if (stop > length || size < MIN_SIZE_FIELD)
            break;
        if (be64(b + at + 16) != first_id + (unsigned long long)count ||
            !layout_of(b, at, stop, &layout))
            break;
        int64_t timestamp = (int64_t)be64(b + at + 8);
        if (count == 0 || timestamp > high)
            high = timestamp;
        starts[count] = offset + at;
        highs[count] = high;
        body += stop - layout.body_at;
        count++;
        at = stop;
    }
    starts[count] = offset + at;
    Py_END_ALLOW_THREADS
    offsets = int64_array(starts, count + 1);
    stamps = offsets == NULL ? NULL : int64_array(highs, count);
    if (stamps != NULL)
        result = Py_BuildValue("nLOO", at, body, offsets, stamps);
done:
    Py_XDECREF(offsets);
    Py_XDECREF(stamps);
    PyMem_Free(starts);
    PyMem_Free(highs);
    PyBuffer_Release(&view);
    return result;
}
