/* trionsq._speedups, part six: how the entries that make Records (decode_run,
 * encode_plain, encode_ext, append_record) make them, included by _speedups.c before
 * its first use (one translation unit: it shares check_nargs).
 *
 *   use_record_layout - register the Record class: its nine slots' offsets
 *                       (queues/record_codec.py calls it once at import)
 *
 * Records made without a Python call: the nine slots of the class that
 * use_record_layout registered (queues/record_codec.py registers Record, whose attrs
 * __init__ only stores its arguments) filled in place, as that __init__ would; any
 * other make is called. */
static PyTypeObject *record_type;
static Py_ssize_t record_slots[9];

static PyObject *new_record(PyObject *make, PyObject *const *fields)
{
    if (record_type == NULL || make != (PyObject *)record_type)
        return PyObject_Vectorcall(make, fields, 9, NULL);
    PyObject *record = record_type->tp_alloc(record_type, 0);
    if (record == NULL)
        return NULL;
    for (int i = 0; i < 9; i++) {
        Py_INCREF(fields[i]);
        *(PyObject **)((char *)record + record_slots[i]) = fields[i];
    }
    return record;
}

PyDoc_STRVAR(use_record_layout_doc,
"use_record_layout(cls, names) -> None\n\n"
"Make instances of cls (a class with __slots__ whose __init__ only stores its nine\n"
"arguments, in the order of names) by filling those slots in place, instead of\n"
"calling it. TypeError unless each name is a writable object slot of cls.");

static PyObject *use_record_layout(PyObject *Py_UNUSED(self), PyObject *const *args,
                                   Py_ssize_t nargs)
{
    if (check_nargs("use_record_layout", nargs, 2) < 0)
        return NULL;
    if (!PyType_Check(args[0])) {
        PyErr_SetString(PyExc_TypeError, "cls must be a class");
        return NULL;
    }
    PyObject *names = PySequence_Fast(args[1], "names must be a sequence");
    if (names == NULL)
        return NULL;
    Py_ssize_t slots[9];
    if (PySequence_Fast_GET_SIZE(names) != 9) {
        PyErr_SetString(PyExc_TypeError, "names must hold nine names");
        goto fail;
    }
    for (Py_ssize_t i = 0; i < 9; i++) {
        PyObject *descr = PyObject_GetAttr(args[0], PySequence_Fast_GET_ITEM(names, i));
        if (descr == NULL)
            goto fail;
        int usable = Py_IS_TYPE(descr, &PyMemberDescr_Type) &&
                     ((PyMemberDescrObject *)descr)->d_member->type == T_OBJECT_EX &&
                     !(((PyMemberDescrObject *)descr)->d_member->flags & READONLY);
        if (usable)
            slots[i] = ((PyMemberDescrObject *)descr)->d_member->offset;
        Py_DECREF(descr);
        if (!usable) {
            PyErr_Format(PyExc_TypeError, "%R is not a writable slot of the class",
                         PySequence_Fast_GET_ITEM(names, i));
            goto fail;
        }
    }
    Py_DECREF(names);
    Py_XDECREF(record_type);
    Py_INCREF(args[0]);
    record_type = (PyTypeObject *)args[0];
    memcpy(record_slots, slots, sizeof(slots));
    Py_RETURN_NONE;
fail:
    Py_DECREF(names);
    return NULL;
}
