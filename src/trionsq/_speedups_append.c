/* trionsq._speedups, part four: a plain PUB's record encoded and written to the
 * active segment in one call (issue 37), included by _speedups.c (one translation
 * unit: it shares crc32_of and the byte helpers). Its pure-Python twin has the same
 * contract, and the tests hold the two equal on the same inputs.
 *
 *   append_record - one record with no trace id, ext or delay: its bytes built on
 *                   the stack, written whole to the segment's descriptor, and its
 *                   Record made (twin: trionsq.queues.record_codec._append_record_py)
 */
#include <errno.h>
#include <unistd.h>

#define APPEND_STACK 1024 /* records up to this size are built without a heap buffer */

/* All of buf to fd, again after a short write (os.write's contract, looped as
 * segment_writer's write_whole does); -1 with the Python error set. */
static int write_whole(int fd, const unsigned char *buf, Py_ssize_t size)
{
    Py_ssize_t written = 0;
    while (written < size) {
        ssize_t step = write(fd, buf + written, (size_t)(size - written));
        if (step < 0) {
            if (errno == EINTR) {
                if (PyErr_CheckSignals() < 0)
                    return -1;
                continue;
            }
            PyErr_SetFromErrno(PyExc_OSError);
            return -1;
        }
        if (step == 0) {
            PyErr_SetString(PyExc_OSError, "os.write wrote nothing");
            return -1;
        }
        written += step;
    }
    return 0;
}

PyDoc_STRVAR(append_record_doc,
"append_record(fd, body, timestamp, internal_id, offset, make) -> record\n\n"
"Write the log bytes of one record (body exactly bytes; no trace id, ext or delay)\n"
"to fd, whole, and return make(offset, raw_size, internal_id, timestamp, body,\n"
"0, 0, b'', 0). Raises OSError as os.write does; a short write may have put part\n"
"of the record in the file (the caller truncates it off). The GIL is held: the\n"
"write of a few hundred bytes to the page cache costs less than handing it over.");

static PyObject *append_record(PyObject *Py_UNUSED(self), PyObject *const *args,
                               Py_ssize_t nargs)
{
    if (check_nargs("append_record", nargs, 6) < 0)
        return NULL;
    long fd = PyLong_AsLong(args[0]);
    PyObject *body = args[1];
    long long timestamp = PyLong_AsLongLong(args[2]);
    unsigned long long internal_id = PyLong_AsUnsignedLongLong(args[3]);
    long long offset = PyLong_AsLongLong(args[4]);
    if (PyErr_Occurred())
        return NULL;
    if (fd < 0 || fd > INT32_MAX) {
        PyErr_SetString(PyExc_ValueError, "fd out of range");
        return NULL;
    }
    if (!PyBytes_CheckExact(body)) {
        PyErr_SetString(PyExc_TypeError, "body must be bytes");
        return NULL;
    }
    Py_ssize_t length = PyBytes_GET_SIZE(body);
    if (length > (Py_ssize_t)UINT32_MAX - (FIXED_SIZE - 4)) {
        PyErr_SetString(PyExc_OverflowError, "body too large for a record");
        return NULL;
    }
    Py_ssize_t size = FIXED_SIZE + length;
    unsigned char stack[APPEND_STACK];
    unsigned char *p = size <= APPEND_STACK ? stack : PyMem_Malloc((size_t)size);
    if (p == NULL)
        return PyErr_NoMemory();
    put_plain_record(p, PyBytes_AS_STRING(body), length, timestamp, internal_id, 0);
    int failed = write_whole((int)fd, p, size);
    if (p != stack)
        PyMem_Free(p);
    if (failed)
        return NULL;
    PyObject *zero = PyLong_FromLong(0), *empty = PyBytes_FromStringAndSize(NULL, 0);
    PyObject *call[9] = {
        PyLong_FromLongLong(offset), PyLong_FromSsize_t(size),
        PyLong_FromUnsignedLongLong(internal_id), PyLong_FromLongLong(timestamp),
        body, zero, zero, empty, zero,
    };
    PyObject *record = NULL;
    if (call[0] != NULL && call[1] != NULL && call[2] != NULL && call[3] != NULL &&
        zero != NULL && empty != NULL)
        record = new_record(args[5], call);
    Py_XDECREF(call[0]);
    Py_XDECREF(call[1]);
    Py_XDECREF(call[2]);
    Py_XDECREF(call[3]);
    Py_XDECREF(zero);
    Py_XDECREF(empty);
    return record;
}
