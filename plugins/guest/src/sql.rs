//! SQL on the connections the manifest grants (`grants.sql`): the raw interface, and
//! conversions that make statements short to write.
//!
//! ```ignore
//! use jobrelay_guest::sql::{self, Statement};
//! let statement = Statement::with("UPDATE jobs SET phase = ? WHERE uid = ?", jobrelay_guest::params![phase, uid]);
//! sql::execute("jobs", &statement)?;
//! ```

pub use crate::bindings::jobrelay::plugin::sql::*;

/// Parameters of a statement, each converted to a [`Value`]: `params![1, "a", None::<i64>]`.
#[macro_export]
macro_rules! params {
    ($($value:expr),* $(,)?) => {
        vec![$($crate::sql::Value::from($value)),*]
    };
}

impl Statement {
    /// A statement without parameters.
    pub fn new(sql: impl Into<String>) -> Statement {
        Statement {
            sql: sql.into(),
            params: Vec::new(),
        }
    }

    /// A statement with its `?` parameters.
    pub fn with(sql: impl Into<String>, params: Vec<Value>) -> Statement {
        Statement {
            sql: sql.into(),
            params,
        }
    }
}

impl From<i64> for Value {
    fn from(value: i64) -> Value {
        Value::Int(value)
    }
}

impl From<i32> for Value {
    fn from(value: i32) -> Value {
        Value::Int(i64::from(value))
    }
}

impl From<u32> for Value {
    fn from(value: u32) -> Value {
        Value::Int(i64::from(value))
    }
}

impl From<bool> for Value {
    fn from(value: bool) -> Value {
        Value::Int(i64::from(value))
    }
}

impl From<f64> for Value {
    fn from(value: f64) -> Value {
        Value::Float(value)
    }
}

impl From<&str> for Value {
    fn from(value: &str) -> Value {
        Value::Text(value.to_string())
    }
}

impl From<String> for Value {
    fn from(value: String) -> Value {
        Value::Text(value)
    }
}

impl From<&String> for Value {
    fn from(value: &String) -> Value {
        Value::Text(value.clone())
    }
}

impl From<Vec<u8>> for Value {
    fn from(value: Vec<u8>) -> Value {
        Value::Blob(value)
    }
}

/// `None` is SQL `NULL`.
impl<T: Into<Value>> From<Option<T>> for Value {
    fn from(value: Option<T>) -> Value {
        value.map_or(Value::Null, Into::into)
    }
}

impl Value {
    /// The value as an integer, if it is one.
    pub fn as_int(&self) -> Option<i64> {
        match self {
            Value::Int(v) => Some(*v),
            _ => None,
        }
    }

    /// The value as text, if it is text.
    pub fn as_text(&self) -> Option<&str> {
        match self {
            Value::Text(v) => Some(v),
            _ => None,
        }
    }
}
