/* trionsq._speedups, part five: an MPUB's bodies cut out of the read that holds it
 * (the publish fast path, protocol/whole_publishes.py), included by _speedups.c (one
 * translation unit: it shares be32 and check_nargs). Its pure-Python twin has the
 * same contract, and the tests hold the two equal on the same inputs.
 *
 *   mpub_bodies - walk an MPUB body's count-prefixed parts, each a 4-byte signed size
 *                 and that many bytes, checking nsqd's limits as it goes
 *                 (twin: trionsq.protocol.whole_publishes._mpub_bodies_py)
 */

#define BODIES_INVALID (-1)    /* not for the fast path: the body reader answers it */
#define BODIES_INCOMPLETE (-2) /* valid so far, not all come yet */

PyDoc_STRVAR(mpub_bodies_doc,
"mpub_bodies(data, cursor, count, stop, end, max_msg) -> (bodies, cursor) | int\n\n"
"The count parts of an MPUB body from data[cursor:], each a 4-byte big-endian\n"
"signed size and that many bytes, within the body's stop and what has come (end):\n"
"the list of bodies and where the last ended; -1 when a part is not 1..max_msg\n"
"bytes or overruns stop (the body reader answers it); -2 when valid so far but not\n"
"all of it has come.");

static PyObject *mpub_bodies(PyObject *Py_UNUSED(self), PyObject *const *args, Py_ssize_t nargs)
{
    if (check_nargs("mpub_bodies", nargs, 6) < 0)
        return NULL;
    PyObject *data = args[0];
    if (!PyBytes_Check(data)) {
        PyErr_SetString(PyExc_TypeError, "data must be bytes");
        return NULL;
    }
    Py_ssize_t cursor = PyLong_AsSsize_t(args[1]);
    Py_ssize_t count = PyLong_AsSsize_t(args[2]);
    Py_ssize_t stop = PyLong_AsSsize_t(args[3]);
    Py_ssize_t end = PyLong_AsSsize_t(args[4]);
    long long max_msg = PyLong_AsLongLong(args[5]);
    if (PyErr_Occurred())
        return NULL;
    Py_ssize_t length = PyBytes_GET_SIZE(data);
    if (cursor < 0 || count < 0 || end > length || end < cursor) {
        PyErr_SetString(PyExc_ValueError, "cursor, count or end out of range");
        return NULL;
    }
    const unsigned char *b = (const unsigned char *)PyBytes_AS_STRING(data);
    Py_ssize_t within = stop < end ? stop : end;
    Py_ssize_t at = cursor;
    for (Py_ssize_t i = 0; i < count; i++) { /* checked first: no list for a bad body */
        if (within - at < 4)
            return PyLong_FromLong(stop > end ? BODIES_INCOMPLETE : BODIES_INVALID);
        int32_t part = (int32_t)be32(b + at);
        at += 4;
        if (part <= 0 || part > max_msg || stop - at < part)
            return PyLong_FromLong(BODIES_INVALID);
        if (end - at < part)
            return PyLong_FromLong(BODIES_INCOMPLETE);
        at += part;
    }
    PyObject *bodies = PyList_New(count);
    if (bodies == NULL)
        return NULL;
    for (Py_ssize_t i = 0; i < count; i++) {
        Py_ssize_t part = (Py_ssize_t)be32(b + cursor);
        PyObject *body = PyBytes_FromStringAndSize((const char *)b + cursor + 4, part);
        if (body == NULL) {
            Py_DECREF(bodies);
            return NULL;
        }
        PyList_SET_ITEM(bodies, i, body);
        cursor += 4 + part;
    }
    return Py_BuildValue("Nn", bodies, cursor);
}
