//! What Python passes, converted once at the boundary: text, integers and state names that the
//! core cannot take are refused here as `InvalidArgument` (never pyo3's `TypeError`,
//! `OverflowError` or `UnicodeEncodeError`), so no Python caller maps them a second time.
//! (pydantic-core and jiter convert the same way: the typed error comes out of the
//! conversion itself.) pyo3 adds a note naming the argument to the exception.

use std::borrow::Cow;
use std::time::Duration;

use pyo3::exceptions::{PyException, PyOverflowError, PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::PyString;

use super::errors::to_py;
use crate::approval::{ApprovalState, Decision};
use crate::error::Error;
use crate::record::EffectState;

fn invalid(py: Python<'_>, message: String) -> PyErr {
    to_py(py, Error::InvalidArgument(message))
}

/// The name of `obj`'s type, for a message.
fn type_name(obj: &Bound<'_, PyAny>) -> String {
    obj.get_type()
        .name()
        .map(|n| n.to_string())
        .unwrap_or_default()
}

/// A short `repr` of `obj` for a message (a number past every range can have 400 digits);
/// its type's name where the `repr` fails (an int past Python's digit limit). An interrupt
/// (anything not an `Exception`) is raised.
fn shown(obj: &Bound<'_, PyAny>) -> PyResult<String> {
    let text = match obj.repr() {
        Ok(r) => r.to_string(),
        Err(e) if e.is_instance_of::<PyException>(obj.py()) => {
            format!("a value of type {}", type_name(obj))
        }
        Err(e) => return Err(e),
    };
    Ok(match text.char_indices().nth(40) {
        Some((at, _)) => format!("{}…", &text[..at]),
        None => text,
    })
}

/// `obj` as text the store can keep: a `str` (or subclass) without lone surrogates. `what`
/// names it in the message.
pub(super) fn text(obj: &Bound<'_, PyAny>, what: &str) -> PyResult<String> {
    let py = obj.py();
    let Ok(s) = obj.cast::<PyString>() else {
        let kind = type_name(obj);
        return Err(invalid(
            py,
            format!("{what} must be a str, got {kind}; nothing was written"),
        ));
    };
    match s.to_cow() {
        Ok(c) => Ok(c.into_owned()),
        Err(e) => {
            // The encoder's error says where; the character itself is read from the string.
            let at: usize = e.value(py).getattr("start")?.extract()?;
            let code = surrogate_at(s, at)?;
            Err(invalid(
                py,
                format!(
                    "{what} holds U+{code:04X} (a lone surrogate) at character {}, which no \
                     store can keep as text; nothing was written",
                    at + 1
                ),
            ))
        }
    }
}

/// The code point at character `at` of `s`, read through `str`'s own methods (the string
/// cannot be had as Rust text, and a subclass's `__getitem__` is the caller's code).
fn surrogate_at(s: &Bound<'_, PyString>, at: usize) -> PyResult<u32> {
    let py = s.py();
    let one = py
        .get_type::<PyString>()
        .call_method1("__getitem__", (s, at))?;
    py.import("builtins")?
        .getattr("ord")?
        .call1((one,))?
        .extract()
}

/// Text from Python (see [`text`]).
pub(super) struct Text(pub String);

impl std::ops::Deref for Text {
    type Target = str;
    fn deref(&self) -> &str {
        &self.0
    }
}

impl FromPyObject<'_, '_> for Text {
    type Error = PyErr;
    fn extract(obj: Borrowed<'_, '_, PyAny>) -> PyResult<Self> {
        text(&obj, "a text argument").map(Text)
    }
}

/// `Option<&Text>` as `Option<&str>`.
pub(super) fn opt(t: &Option<Text>) -> Option<&str> {
    t.as_deref()
}

/// An integer from Python in `T`'s range, else `InvalidArgument` naming the range.
pub(super) struct Int<T>(pub T);

macro_rules! int_from_python {
    ($($t:ty),*) => {$(
        impl FromPyObject<'_, '_> for Int<$t> {
            type Error = PyErr;
            fn extract(obj: Borrowed<'_, '_, PyAny>) -> PyResult<Self> {
                let py = obj.py();
                match obj.extract::<$t>() {
                    Ok(v) => Ok(Int(v)),
                    // Not an int, or out of range; anything else (an interrupt raised by an
                    // `__index__`) is raised as it is.
                    Err(e) if e.is_instance_of::<PyTypeError>(py)
                        || e.is_instance_of::<PyOverflowError>(py)
                        || e.is_instance_of::<PyValueError>(py) => Err(invalid(py, format!(
                        "expected an integer from {} to {}, got {}",
                        <$t>::MIN, <$t>::MAX, shown(&obj)?
                    ))),
                    Err(e) => Err(e),
                }
            }
        }
    )*};
}
int_from_python!(i64, u64, u32);

/// `Option<Int<T>>` as `Option<T>`.
pub(super) fn int<T: Copy>(i: &Option<Int<T>>) -> Option<T> {
    i.as_ref().map(|i| i.0)
}

/// One of `all`, by its name, else `InvalidArgument` listing them.
fn named<T: Copy>(
    obj: Borrowed<'_, '_, PyAny>,
    what: &str,
    all: &[T],
    name: fn(T) -> &'static str,
) -> PyResult<T> {
    let given: Option<String> = obj
        .cast::<PyString>()
        .ok()
        .and_then(|s| s.to_cow().ok().map(Cow::into_owned));
    if let Some(v) = given
        .as_deref()
        .and_then(|g| all.iter().copied().find(|v| name(*v) == g))
    {
        return Ok(v);
    }
    let shown = match given {
        Some(g) => format!("{g:?}"),
        None => shown(&obj)?,
    };
    let names: Vec<_> = all.iter().map(|v| name(*v)).collect();
    Err(invalid(
        obj.py(),
        format!(
            "unknown {what} {shown}; expected one of {}",
            names.join(", ")
        ),
    ))
}

macro_rules! named_from_python {
    ($($t:ty => $what:literal),*) => {$(
        impl FromPyObject<'_, '_> for $t {
            type Error = PyErr;
            fn extract(obj: Borrowed<'_, '_, PyAny>) -> PyResult<Self> {
                named(obj, $what, &<$t>::ALL, <$t>::as_str)
            }
        }
    )*};
}
named_from_python!(EffectState => "effect state", ApprovalState => "approval state", Decision => "decision");

/// The pauses (seconds) between the tries of an outcome write; a pause that is no duration
/// (negative, NaN) is none.
pub(super) fn pauses(pauses: Vec<f64>) -> Vec<Duration> {
    pauses
        .into_iter()
        .map(|s| Duration::try_from_secs_f64(s).unwrap_or(Duration::ZERO))
        .collect()
}
