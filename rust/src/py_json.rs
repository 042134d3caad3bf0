//! [`objects`]: [`crate::decode`] building Python objects, for the documents it decodes
//! faster than orjson, and only those (`py`'s `loads_text` is its Python face).
//!
//! A string the cursor found to be plain ASCII (escapes decoded or not) is made with
//! `PyUnicode_New` and one copy; CPython would otherwise scan it again to learn its kind.
//! That is where the speed is: 64 KiB of ASCII text decodes about 6x faster than with
//! orjson. Elsewhere orjson is faster (many small values, long non-ASCII text, which
//! CPython's own UTF-8 decoder must convert, escape-dense text), so the builder declines
//! a document as soon as it shows one of those: a string whose first KiB looks
//! escape-dense or mostly not ASCII ([`orjson_ground`], before the string is scanned), a
//! non-ASCII string of [`LONG_NON_ASCII`] bytes or more (before it is decoded), or more
//! values than [`value_budget`] allows for its size. Declining costs the work until then;
//! the caller then decodes with orjson.

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::{PyBool, PyDict, PyFloat, PyInt, PyList, PyString};

use crate::decode::{decode, Builder};
use crate::json::{JsonError, Text};

/// A non-ASCII string at least this long makes the builder decline.
const LONG_NON_ASCII: usize = 1024;

/// How many values a document of `len` bytes may hold before the builder declines: a
/// few dozen, plus one per KiB (a long text's envelope has about ten).
fn value_budget(len: usize) -> usize {
    32 + len / 1024
}

struct Objects<'py> {
    py: Python<'py>,
    /// Values the document may still hold (see [`value_budget`]).
    budget: usize,
}

impl<'py> Objects<'py> {
    fn counted(&mut self) -> Result<(), Failed> {
        self.budget = self.budget.checked_sub(1).ok_or(Failed::Declined)?;
        Ok(())
    }

    /// The policy first (from the body's length and kind, before any decoding), then the
    /// string.
    fn text(&mut self, text: Text<'_>) -> Result<Bound<'py, PyAny>, Failed> {
        self.counted()?;
        if !text.ascii && text.body.len() >= LONG_NON_ASCII {
            return Err(Failed::Declined);
        }
        let (s, ascii) = text.decode()?;
        if ascii {
            Ok(ascii_string(self.py, &s)?)
        } else {
            Ok(PyString::new(self.py, &s).into_any())
        }
    }
}

/// Whether the first bytes of a string (and what follows it, when it is short) show
/// dense escapes (JSON carried as a string escapes a quote every few bytes) or text that
/// is mostly not ASCII: orjson decodes either faster, so a document showing one is
/// declined before its string is scanned.
fn orjson_ground(upcoming: &[u8]) -> bool {
    if upcoming.len() < 256 {
        return false;
    }
    let escapes = memchr::memchr_iter(b'\\', upcoming).count();
    let non_ascii = upcoming.iter().filter(|&&b| b >= 0x80).count();
    escapes * 32 > upcoming.len() || non_ascii * 16 > upcoming.len()
}

/// A `str` of ASCII `s`, copied once into a new compact string.
fn ascii_string<'py>(py: Python<'py>, s: &str) -> PyResult<Bound<'py, PyAny>> {
    debug_assert!(s.is_ascii());
    let len = pyo3::ffi::Py_ssize_t::try_from(s.len()).map_err(|_| PyValueError::new_err("string too long"))?;
    // SAFETY: `PyUnicode_New(len, 127)` returns a new, owned, compact ASCII string of `len`
    // characters (one byte each) whose data no one has read, or NULL with an exception
    // set; `s` is exactly `len` ASCII bytes, so copying them in makes the string valid.
    unsafe {
        let obj = Bound::from_owned_ptr_or_err(py, pyo3::ffi::PyUnicode_New(len, 127))?;
        std::ptr::copy_nonoverlapping(s.as_ptr(), pyo3::ffi::PyUnicode_DATA(obj.as_ptr()).cast::<u8>(), s.len());
        Ok(obj)
    }
}

/// Why a decode stopped: the input is not valid JSON, Python failed, or the builder
/// declined the document.
pub enum Failed {
    Json(JsonError),
    Python(PyErr),
    Declined,
}

impl From<JsonError> for Failed {
    fn from(e: JsonError) -> Self {
        Failed::Json(e)
    }
}

impl From<PyErr> for Failed {
    fn from(e: PyErr) -> Self {
        Failed::Python(e)
    }
}

impl<'py> Builder for Objects<'py> {
    type Value = Bound<'py, PyAny>;
    type List = Bound<'py, PyList>;
    type Dict = Bound<'py, PyDict>;
    type Error = Failed;

    fn null(&mut self) -> Result<Self::Value, Failed> {
        self.counted()?;
        Ok(self.py.None().into_bound(self.py))
    }
    fn boolean(&mut self, value: bool) -> Result<Self::Value, Failed> {
        self.counted()?;
        Ok(PyBool::new(self.py, value).to_owned().into_any())
    }
    fn int(&mut self, value: i64) -> Result<Self::Value, Failed> {
        self.counted()?;
        Ok(PyInt::new(self.py, value).into_any())
    }
    fn big_int(&mut self, digits: &str) -> Result<Self::Value, Failed> {
        self.counted()?;
        Ok(self.py.get_type::<PyInt>().call1((digits,))?)
    }
    fn float(&mut self, value: f64) -> Result<Self::Value, Failed> {
        self.counted()?;
        Ok(PyFloat::new(self.py, value).into_any())
    }
    fn looks_ahead(&mut self, upcoming: &[u8]) -> Result<(), Failed> {
        if orjson_ground(upcoming) {
            return Err(Failed::Declined);
        }
        Ok(())
    }
    fn string(&mut self, text: Text<'_>) -> Result<Self::Value, Failed> {
        self.text(text)
    }
    fn key(&mut self, text: Text<'_>) -> Result<Self::Value, Failed> {
        self.text(text)
    }
    fn list(&mut self) -> Result<Self::List, Failed> {
        self.counted()?;
        Ok(PyList::empty(self.py))
    }
    fn push(&mut self, list: &mut Self::List, item: Self::Value) -> Result<(), Failed> {
        Ok(list.append(item)?)
    }
    fn end_list(&mut self, list: Self::List) -> Result<Self::Value, Failed> {
        Ok(list.into_any())
    }
    fn dict(&mut self) -> Result<Self::Dict, Failed> {
        self.counted()?;
        Ok(PyDict::new(self.py))
    }
    fn insert(&mut self, dict: &mut Self::Dict, key: Self::Value, value: Self::Value) -> Result<(), Failed> {
        Ok(dict.set_item(key, value)?)
    }
    fn end_dict(&mut self, dict: Self::Dict) -> Result<Self::Value, Failed> {
        Ok(dict.into_any())
    }
}

/// The one JSON value in `data` as Python objects, checked strictly, or why not.
pub fn objects<'py>(py: Python<'py>, data: &[u8]) -> Result<Bound<'py, PyAny>, Failed> {
    decode(data, &mut Objects { py, budget: value_budget(data.len()) })
}
