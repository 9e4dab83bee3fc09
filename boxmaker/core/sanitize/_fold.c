/*
 * The flag rules' fixed pass in one loop: fold a text and find which words of a
 * vocabulary are among its words. Pure computation over memory Python owns;
 * no I/O. The Python reference is boxmaker/core/sanitize/fast_fold.py, and
 * tests/core/test_fast_fold.py holds this module to it.
 *
 *   vocabulary(words)       words: a tuple of non-empty bytes of a-z, each at most
 *                           WORD_MAX long; returns a capsule holding their table
 *   folding(ascii, table)   ascii: 128 bytes, what each ASCII character folds to
 *                           (ASCII, none dropped); table: dict of non-ASCII code
 *                           point to None (dropped) or a one-character ASCII str;
 *                           returns a capsule holding both
 *   fold_words(text, folding, vocabulary)
 *                           text: str; returns
 *                           (folded, indexes, ascii): `text` with each character folded
 *                           and each run of spaces made one (fold's rules), and
 *                           the index in `words` of each vocabulary word that is
 *                           a maximal run of a-z in the folded text, each once,
 *                           in the order first met; and `folded` as bytes, one a
 *                           character, each ASCII one as itself and any other as
 *                           0x80 (so an ASCII string is found at the same place in
 *                           both)
 *
 * Bounds: the outputs are never longer than the text (a character folds to at
 * most one); a run of letters is compared only while it fits WORD_MAX; every
 * table read is checked. A value the contract does not allow raises ValueError
 * and nothing is returned.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

#define WORD_MAX 64
#define CAPSULE "boxmaker.core.sanitize._fold.vocabulary"
#define FOLDING "boxmaker.core.sanitize._fold.folding"
#define BMP 0x10000

typedef struct {
    uint64_t hash;
    Py_ssize_t index; /* -1: empty slot */
    Py_ssize_t offset;
    Py_ssize_t length;
} Slot;

typedef struct {
    Py_ssize_t mask; /* slots - 1, slots a power of two */
    Slot *slots;
    char *blob;
    Py_ssize_t words;
} Vocabulary;

static uint64_t fnv_step(uint64_t hash, unsigned char byte) {
    return (hash ^ byte) * 1099511628211ULL;
}

#define FNV_START 14695981039346656037ULL

static void vocabulary_free(PyObject *capsule) {
    Vocabulary *v = PyCapsule_GetPointer(capsule, CAPSULE);
    if (v != NULL) {
        PyMem_Free(v->slots);
        PyMem_Free(v->blob);
        PyMem_Free(v);
    }
}

static PyObject *vocabulary(PyObject *self, PyObject *words) {
    (void)self;
    if (!PyTuple_Check(words)) {
        PyErr_SetString(PyExc_TypeError, "vocabulary: give a tuple of bytes");
        return NULL;
    }
    Py_ssize_t count = PyTuple_GET_SIZE(words);
    Py_ssize_t total = 0;
    for (Py_ssize_t i = 0; i < count; i++) {
        PyObject *word = PyTuple_GET_ITEM(words, i);
        if (!PyBytes_Check(word)) {
            PyErr_SetString(PyExc_TypeError, "vocabulary: every word is bytes");
            return NULL;
        }
        Py_ssize_t length = PyBytes_GET_SIZE(word);
        const char *data = PyBytes_AS_STRING(word);
        if (length < 1 || length > WORD_MAX) {
            PyErr_SetString(PyExc_ValueError, "vocabulary: a word of 1 to 64 letters");
            return NULL;
        }
        for (Py_ssize_t j = 0; j < length; j++) {
            if (data[j] < 'a' || data[j] > 'z') {
                PyErr_SetString(PyExc_ValueError, "vocabulary: a word of a-z only");
                return NULL;
            }
        }
        total += length;
    }
    Py_ssize_t size = 8;
    while (size < 2 * count + 8) {
        size *= 2;
    }
    Vocabulary *v = PyMem_Calloc(1, sizeof(Vocabulary));
    if (v == NULL) {
        return PyErr_NoMemory();
    }
    v->slots = PyMem_Calloc((size_t)size, sizeof(Slot));
    v->blob = PyMem_Malloc((size_t)(total > 0 ? total : 1));
    if (v->slots == NULL || v->blob == NULL) {
        PyMem_Free(v->slots);
        PyMem_Free(v->blob);
        PyMem_Free(v);
        return PyErr_NoMemory();
    }
    v->mask = size - 1;
    v->words = count;
    for (Py_ssize_t s = 0; s < size; s++) {
        v->slots[s].index = -1;
    }
    Py_ssize_t offset = 0;
    for (Py_ssize_t i = 0; i < count; i++) {
        PyObject *word = PyTuple_GET_ITEM(words, i);
        Py_ssize_t length = PyBytes_GET_SIZE(word);
        const unsigned char *data = (const unsigned char *)PyBytes_AS_STRING(word);
        uint64_t hash = FNV_START;
        for (Py_ssize_t j = 0; j < length; j++) {
            hash = fnv_step(hash, data[j]);
        }
        Py_ssize_t s = (Py_ssize_t)(hash & (uint64_t)v->mask);
        int duplicate = 0;
        while (v->slots[s].index >= 0) {
            Slot *slot = &v->slots[s];
            if (slot->hash == hash && slot->length == length &&
                memcmp(v->blob + slot->offset, data, (size_t)length) == 0) {
                duplicate = 1;
                break;
            }
            s = (s + 1) & v->mask;
        }
        if (duplicate) {
            continue; /* the first index stands */
        }
        memcpy(v->blob + offset, data, (size_t)length);
        v->slots[s] = (Slot){hash, i, offset, length};
        offset += length;
    }
    PyObject *capsule = PyCapsule_New(v, CAPSULE, vocabulary_free);
    if (capsule == NULL) {
        PyMem_Free(v->slots);
        PyMem_Free(v->blob);
        PyMem_Free(v);
    }
    return capsule;
}


typedef struct {
    unsigned char ascii[128];
    unsigned char bmp[BMP / 8]; /* a bit for each BMP code point the table holds */
    Py_ssize_t count;
    Py_UCS4 *codes;       /* sorted */
    unsigned char *folds; /* 0: dropped; else the ASCII character */
} Folding;

static void folding_free(PyObject *capsule) {
    Folding *f = PyCapsule_GetPointer(capsule, FOLDING);
    if (f != NULL) {
        PyMem_Free(f->codes);
        PyMem_Free(f->folds);
        PyMem_Free(f);
    }
}

static int by_code(const void *a, const void *b) {
    Py_UCS4 x = ((const Py_UCS4 *)a)[0], y = ((const Py_UCS4 *)b)[0];
    return (x > y) - (x < y);
}

static PyObject *folding(PyObject *self, PyObject *args) {
    (void)self;
    PyObject *ascii, *table;
    if (!PyArg_ParseTuple(args, "O!O!:folding", &PyBytes_Type, &ascii, &PyDict_Type, &table)) {
        return NULL;
    }
    if (PyBytes_GET_SIZE(ascii) != 128) {
        PyErr_SetString(PyExc_ValueError, "folding: the ASCII table is 128 bytes");
        return NULL;
    }
    const unsigned char *to = (const unsigned char *)PyBytes_AS_STRING(ascii);
    for (int c = 0; c < 128; c++) {
        if (to[c] >= 128) {
            PyErr_SetString(PyExc_ValueError, "folding: ASCII folds to ASCII");
            return NULL;
        }
    }
    Py_ssize_t count = PyDict_GET_SIZE(table);
    Folding *f = PyMem_Calloc(1, sizeof(Folding));
    Py_UCS4 *pairs = PyMem_Calloc((size_t)(count > 0 ? count : 1), 2 * sizeof(Py_UCS4));
    if (f == NULL || pairs == NULL) {
        PyMem_Free(f);
        PyMem_Free(pairs);
        return PyErr_NoMemory();
    }
    memcpy(f->ascii, to, 128);
    Py_ssize_t at = 0, n = 0;
    PyObject *key, *value;
    while (PyDict_Next(table, &at, &key, &value)) {
        unsigned long code = PyLong_Check(key) ? PyLong_AsUnsignedLong(key) : 0;
        if (code == (unsigned long)-1 && PyErr_Occurred()) {
            PyErr_Clear();
            code = 0;
        }
        Py_UCS4 fold = 0;
        if (value != Py_None) {
            if (!PyUnicode_Check(value) || PyUnicode_GET_LENGTH(value) != 1 ||
                PyUnicode_READ_CHAR(value, 0) == 0 || PyUnicode_READ_CHAR(value, 0) >= 128) {
                code = 0; /* refused below */
            } else {
                fold = PyUnicode_READ_CHAR(value, 0);
            }
        }
        if (code < 128 || code > 0x10FFFF) {
            PyErr_SetString(PyExc_ValueError,
                            "folding: the table maps a non-ASCII code point to None or one "
                            "ASCII character");
            PyMem_Free(f);
            PyMem_Free(pairs);
            return NULL;
        }
        pairs[2 * n] = (Py_UCS4)code;
        pairs[2 * n + 1] = fold;
        n++;
    }
    qsort(pairs, (size_t)n, 2 * sizeof(Py_UCS4), by_code);
    f->count = n;
    f->codes = PyMem_Malloc((size_t)(n > 0 ? n : 1) * sizeof(Py_UCS4));
    f->folds = PyMem_Malloc((size_t)(n > 0 ? n : 1));
    if (f->codes == NULL || f->folds == NULL) {
        PyMem_Free(f->codes);
        PyMem_Free(f->folds);
        PyMem_Free(f);
        PyMem_Free(pairs);
        return PyErr_NoMemory();
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        Py_UCS4 code = pairs[2 * i];
        f->codes[i] = code;
        f->folds[i] = (unsigned char)pairs[2 * i + 1];
        if (code < BMP) {
            f->bmp[code >> 3] |= (unsigned char)(1u << (code & 7));
        }
    }
    PyMem_Free(pairs);
    PyObject *capsule = PyCapsule_New(f, FOLDING, folding_free);
    if (capsule == NULL) {
        PyMem_Free(f->codes);
        PyMem_Free(f->folds);
        PyMem_Free(f);
    }
    return capsule;
}

/* The table's entry for non-ASCII `c`: its index, or -1 if it has none. */
static Py_ssize_t find(const Folding *f, Py_UCS4 c) {
    if (c < BMP && !(f->bmp[c >> 3] & (1u << (c & 7)))) {
        return -1;
    }
    Py_ssize_t low = 0, high = f->count;
    while (low < high) {
        Py_ssize_t middle = low + (high - low) / 2;
        if (f->codes[middle] < c) {
            low = middle + 1;
        } else {
            high = middle;
        }
    }
    return low < f->count && f->codes[low] == c ? low : -1;
}

/* The index of the word run[0:length] (hash `hash`), or -1. */
static Py_ssize_t lookup(const Vocabulary *v, uint64_t hash, const char *run, Py_ssize_t length) {
    Py_ssize_t s = (Py_ssize_t)(hash & (uint64_t)v->mask);
    while (v->slots[s].index >= 0) {
        const Slot *slot = &v->slots[s];
        if (slot->hash == hash && slot->length == length &&
            memcmp(v->blob + slot->offset, run, (size_t)length) == 0) {
            return slot->index;
        }
        s = (s + 1) & v->mask;
    }
    return -1;
}

/* End the current run: note its word if the vocabulary has it (once). */
static int end_run(const Vocabulary *v, uint64_t hash, const char *run, Py_ssize_t length,
                   unsigned char *seen, PyObject *indexes) {
    if (length == 0 || length > WORD_MAX) {
        return 0;
    }
    Py_ssize_t index = lookup(v, hash, run, length);
    if (index < 0 || seen[index]) {
        return 0;
    }
    seen[index] = 1;
    PyObject *number = PyLong_FromSsize_t(index);
    if (number == NULL) {
        return -1;
    }
    int failed = PyList_Append(indexes, number);
    Py_DECREF(number);
    return failed;
}

static PyObject *fold_words(PyObject *self, PyObject *args) {
    (void)self;
    PyObject *text, *folding_capsule, *vocabulary_capsule;
    if (!PyArg_ParseTuple(args, "UOO:fold_words", &text, &folding_capsule, &vocabulary_capsule)) {
        return NULL;
    }
    const Folding *f = PyCapsule_GetPointer(folding_capsule, FOLDING);
    if (f == NULL) {
        return NULL;
    }
    const Vocabulary *v = PyCapsule_GetPointer(vocabulary_capsule, CAPSULE);
    if (v == NULL) {
        return NULL;
    }
#if PY_VERSION_HEX < 0x030C0000
    if (PyUnicode_READY(text) < 0) { /* a legacy string's canonical form (3.11) */
        return NULL;
    }
#endif
    int kind = PyUnicode_KIND(text);
    const void *data = PyUnicode_DATA(text);
    Py_ssize_t length = PyUnicode_GET_LENGTH(text);

    void *out = PyMem_Malloc((size_t)(length > 0 ? length : 1) * (size_t)kind);
    char *shadow = PyMem_Malloc((size_t)(length > 0 ? length : 1));
    unsigned char *seen = PyMem_Calloc((size_t)(v->words > 0 ? v->words : 1), 1);
    PyObject *indexes = PyList_New(0);
    PyObject *folded, *ascii;
    if (out == NULL || shadow == NULL || seen == NULL || indexes == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    Py_ssize_t written = 0;
    Py_UCS4 last = 0; /* the last character written; 0: none yet */
    char run[WORD_MAX];
    Py_ssize_t run_length = 0;
    uint64_t hash = FNV_START;
    for (Py_ssize_t i = 0; i < length; i++) {
        Py_UCS4 c = PyUnicode_READ(kind, data, i);
        if (c < 128) {
            c = f->ascii[c];
        } else {
            Py_ssize_t entry = find(f, c);
            if (entry >= 0) {
                if (f->folds[entry] == 0) {
                    continue; /* dropped */
                }
                c = f->folds[entry];
            }
        }
        if (c == ' ' && last == ' ') {
            continue; /* a run of spaces is one */
        }
        PyUnicode_WRITE(kind, out, written, c);
        shadow[written] = c < 128 ? (char)c : (char)0x80;
        written++;
        last = c;
        if (c >= 'a' && c <= 'z') {
            if (run_length < WORD_MAX) {
                run[run_length] = (char)c;
            }
            run_length++;
            hash = fnv_step(hash, (unsigned char)c);
        } else if (run_length > 0) {
            if (end_run(v, hash, run, run_length, seen, indexes) < 0) {
                goto fail;
            }
            run_length = 0;
            hash = FNV_START;
        }
    }
    if (end_run(v, hash, run, run_length, seen, indexes) < 0) {
        goto fail;
    }
    folded = PyUnicode_FromKindAndData(kind, out, written);
    if (folded == NULL) {
        goto fail;
    }
    ascii = PyBytes_FromStringAndSize(shadow, written);
    if (ascii == NULL) {
        Py_DECREF(folded);
        goto fail;
    }
    PyObject *result = PyTuple_Pack(3, folded, indexes, ascii);
    Py_DECREF(folded);
    Py_DECREF(ascii);
    Py_DECREF(indexes);
    PyMem_Free(out);
    PyMem_Free(shadow);
    PyMem_Free(seen);
    return result;
fail:
done:
    Py_XDECREF(indexes);
    PyMem_Free(out);
    PyMem_Free(shadow);
    PyMem_Free(seen);
    return NULL;
}

static PyMethodDef methods[] = {
    {"folding", folding, METH_VARARGS, "The folding table of (ASCII bytes, dict)."},
    {"vocabulary", vocabulary, METH_O, "The table of a tuple of words (bytes of a-z)."},
    {"fold_words", fold_words, METH_VARARGS,
     "(folded text, indexes of the vocabulary's words among its words)."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_fold", "The flag rules' fold and word pass in C.", -1, methods,
    NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__fold(void) {
    return PyModule_Create(&module);
}
